//! The machinery behind every reduction over a set of axes that is not a
//! plain sum: a [`Reducer`] keeps one accumulator per output element and is
//! fed the input in memory order, whatever axes are reduced.
//!
//! Dimensions are coalesced into alternating runs of kept and reduced axes
//! (size-1 axes dropped), so the innermost loop is always a contiguous run:
//! either one accumulator fed a lane of reduced elements, or a row of
//! accumulators fed one element each (column reductions stay cache-friendly
//! and vectorisable). Large inputs split the outermost run across rayon:
//! independent outputs when it is kept, per-thread partial accumulators
//! merged in order when it is reduced.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::parallel::{ordered_reduce, should_parallelize, CHUNK};
use crate::tensor::Element;

/// A reduction with one accumulator per output element.
pub(crate) trait Reducer<T: Copy + Send + Sync>: Sync {
    /// The accumulator.
    type Acc: Copy + Send + Sync;
    /// The starting accumulator of output element `out` (it may carry
    /// per-output data, such as the shift of a log-sum-exp).
    fn init(&self, out: usize) -> Self::Acc;
    /// Feeds element `v`, the `r`-th of its output's reduced elements
    /// (row-major over the reduced axes).
    fn push(&self, acc: &mut Self::Acc, v: T, r: usize);
    /// Feeds a contiguous run of elements numbered `r0, r0 + 1, ...`.
    #[inline(always)]
    fn push_run(&self, acc: &mut Self::Acc, run: &[T], r0: usize) {
        for (j, &v) in run.iter().enumerate() {
            self.push(acc, v, r0 + j);
        }
    }
    /// Combines two accumulators of one output; `a` saw earlier elements.
    fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc;
}

/// A run of adjacent axes that are all reduced or all kept.
#[derive(Clone, Copy, Debug)]
struct Run {
    size: usize,
    reduced: bool,
    /// Input elements per step.
    in_stride: usize,
    /// Output elements per step (0 for reduced runs).
    out_stride: usize,
    /// Reduced-element number per step (0 for kept runs).
    red_stride: usize,
}

/// The iteration plan of a reduction of `shape` over sorted, unique `axes`.
#[derive(Clone, Debug)]
pub(crate) struct Lanes {
    runs: Vec<Run>,
    /// Output elements.
    pub(crate) out_len: usize,
    /// Input elements reduced into each output element.
    pub(crate) red_len: usize,
}

impl Lanes {
    pub(crate) fn new(shape: &[usize], axes: &[usize]) -> Self {
        let raw = super::reduce::merged_runs(shape, axes);
        let mut runs = Vec::with_capacity(raw.len());
        let (mut in_stride, mut out_stride, mut red_stride) = (1usize, 1usize, 1usize);
        for &(size, reduced) in raw.iter().rev() {
            runs.push(Run {
                size,
                reduced,
                in_stride,
                out_stride: if reduced { 0 } else { out_stride },
                red_stride: if reduced { red_stride } else { 0 },
            });
            in_stride *= size;
            if reduced {
                red_stride *= size;
            } else {
                out_stride *= size;
            }
        }
        runs.reverse();
        let red_len = axes.iter().map(|&a| shape[a]).product();
        let out_len = shape
            .iter()
            .enumerate()
            .filter(|(i, _)| !axes.contains(i))
            .map(|(_, &d)| d)
            .product();
        Lanes {
            runs,
            out_len,
            red_len,
        }
    }
}

/// Runs `reducer` over `x` (laid out as `lanes` describes) and returns the
/// accumulators, one per output element.
pub(crate) fn reduce<T: Copy + Send + Sync, R: Reducer<T>>(
    x: &[T],
    lanes: &Lanes,
    reducer: &R,
) -> Vec<R::Acc> {
    let fresh = || {
        (0..lanes.out_len)
            .map(|o| reducer.init(o))
            .collect::<Vec<_>>()
    };
    let mut accs = fresh();
    if x.is_empty() || lanes.out_len == 0 {
        return accs;
    }
    let Some((first, rest)) = lanes.runs.split_first() else {
        reducer.push(&mut accs[0], x[0], 0);
        return accs;
    };
    if !should_parallelize(x.len()) || first.size == 1 {
        walk(x, &lanes.runs, &mut accs, 0, reducer);
    } else if !first.reduced {
        // Independent outputs: each task owns a block of them.
        let per_task = (CHUNK / first.in_stride).max(1);
        accs.par_chunks_mut(per_task * first.out_stride)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (k, out) in chunk.chunks_mut(first.out_stride).enumerate() {
                    let i = t * per_task + k;
                    walk(&x[i * first.in_stride..], rest, out, 0, reducer);
                }
            });
    } else {
        // Every task sees all outputs: one partial set per thread, merged in order.
        let tasks = first.size.min(rayon::current_num_threads());
        let per_task = first.size.div_ceil(tasks);
        let merged = ordered_reduce(
            tasks,
            |t| {
                let mut part = fresh();
                let (lo, hi) = (t * per_task, ((t + 1) * per_task).min(first.size));
                if rest.is_empty() {
                    // One contiguous lane (a reduction of everything): keep it a run.
                    reducer.push_run(&mut part[0], &x[lo..hi], lo);
                } else {
                    for i in lo..hi {
                        let r = i * first.red_stride;
                        walk(&x[i * first.in_stride..], rest, &mut part, r, reducer);
                    }
                }
                part
            },
            |mut a, b| {
                for (x, y) in a.iter_mut().zip(b) {
                    *x = reducer.merge(*x, y);
                }
                a
            },
        );
        if let Some(m) = merged {
            accs = m;
        }
    }
    accs
}

/// Feeds `x` (starting at the runs' origin) into `accs`, numbering reduced
/// elements from `r0`.
fn walk<T: Copy + Send + Sync, R: Reducer<T>>(
    x: &[T],
    runs: &[Run],
    accs: &mut [R::Acc],
    r0: usize,
    reducer: &R,
) {
    match runs {
        [] => reducer.push(&mut accs[0], x[0], r0),
        // The innermost reduced run has red_stride 1; the innermost kept run out_stride 1.
        [last] if last.reduced => reducer.push_run(&mut accs[0], &x[..last.size], r0),
        [last] => {
            for (acc, &v) in accs[..last.size].iter_mut().zip(&x[..last.size]) {
                reducer.push(acc, v, r0);
            }
        }
        [run, rest @ ..] => {
            for i in 0..run.size {
                walk(
                    &x[i * run.in_stride..],
                    rest,
                    &mut accs[i * run.out_stride..],
                    r0 + i * run.red_stride,
                    reducer,
                );
            }
        }
    }
}

/// Writes `out[i] = f(x[i], o)` for every input element, `o` being the output
/// element it reduces into (an input-shaped pass, such as spreading a
/// gradient over the reduced elements). Writes every element of `out`.
///
/// # Panics
///
/// Unless `x` and `out` both have the element count of the shape `lanes`
/// was made for.
pub(crate) fn map_with_output<T: Element>(
    x: &[T],
    lanes: &Lanes,
    out: &mut [MaybeUninit<T>],
    f: impl Fn(T, usize) -> T + Sync,
) {
    // With these lengths the walk below covers `out`: each level writes
    // `size` blocks of `in_stride` elements, `size * in_stride` being the
    // level's whole block (the product of the remaining runs).
    assert!(x.len() == out.len() && (x.is_empty() || x.len() == lanes.out_len * lanes.red_len));
    if x.is_empty() {
        return;
    }
    let Some((first, rest)) = lanes.runs.split_first() else {
        out[0].write(f(x[0], 0));
        return;
    };
    if should_parallelize(x.len()) && first.size > 1 {
        let per_task = (CHUNK / first.in_stride).max(1);
        out.par_chunks_mut(per_task * first.in_stride)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (k, block) in chunk.chunks_mut(first.in_stride).enumerate() {
                    let i = t * per_task + k;
                    let src = &x[i * first.in_stride..(i + 1) * first.in_stride];
                    map_walk(src, rest, block, i * first.out_stride, &f);
                }
            });
    } else {
        map_walk(x, &lanes.runs, out, 0, &f);
    }
}

fn map_walk<T: Element>(
    x: &[T],
    runs: &[Run],
    out: &mut [MaybeUninit<T>],
    o0: usize,
    f: &(impl Fn(T, usize) -> T + Sync),
) {
    match runs {
        [] => {
            out[0].write(f(x[0], o0));
        }
        [run, rest @ ..] => {
            if rest.is_empty() {
                let n = run.size;
                for (j, (o, &v)) in out[..n].iter_mut().zip(&x[..n]).enumerate() {
                    o.write(f(v, o0 + j * run.out_stride));
                }
                return;
            }
            for i in 0..run.size {
                let at = i * run.in_stride;
                map_walk(
                    &x[at..at + run.in_stride],
                    rest,
                    &mut out[at..at + run.in_stride],
                    o0 + i * run.out_stride,
                    f,
                );
            }
        }
    }
}

/// Sum in f64 (the first pass of a mean or variance).
pub(crate) struct SumF64;

impl<T: Element> Reducer<T> for SumF64 {
    type Acc = f64;
    #[inline(always)]
    fn init(&self, _out: usize) -> f64 {
        0.0
    }
    #[inline(always)]
    fn push(&self, acc: &mut f64, v: T, _r: usize) {
        *acc += v.to_f64();
    }
    #[inline(always)]
    fn push_run(&self, acc: &mut f64, run: &[T], _r0: usize) {
        // Independent partial sums: vectorisable, and no long dependency chain.
        let mut lanes = [0.0f64; 8];
        let chunks = run.chunks_exact(8);
        let tail = chunks.remainder();
        for c in chunks {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v.to_f64();
            }
        }
        for (l, &v) in lanes.iter_mut().zip(tail) {
            *l += v.to_f64();
        }
        *acc += lanes.iter().sum::<f64>();
    }
    #[inline(always)]
    fn merge(&self, a: f64, b: f64) -> f64 {
        a + b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element's (output, reduced number), by explicit index arithmetic.
    fn reference(shape: &[usize], axes: &[usize]) -> Vec<(usize, usize)> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|flat| {
                let mut rem = flat;
                let mut idx = vec![0; shape.len()];
                for i in (0..shape.len()).rev() {
                    idx[i] = rem % shape[i];
                    rem /= shape[i];
                }
                let (mut o, mut r) = (0, 0);
                for (i, &d) in shape.iter().enumerate() {
                    if axes.contains(&i) {
                        r = r * d + idx[i];
                    } else {
                        o = o * d + idx[i];
                    }
                }
                (o, r)
            })
            .collect()
    }

    /// Records, per output, the reduced numbers it was fed (as a checksum).
    struct Trace;
    impl Reducer<f64> for Trace {
        type Acc = (f64, f64, usize);
        fn init(&self, _out: usize) -> Self::Acc {
            (0.0, 0.0, 0)
        }
        fn push(&self, acc: &mut Self::Acc, v: f64, r: usize) {
            acc.0 += v;
            acc.1 += v * r as f64;
            acc.2 += 1;
        }
        fn merge(&self, a: Self::Acc, b: Self::Acc) -> Self::Acc {
            (a.0 + b.0, a.1 + b.1, a.2 + b.2)
        }
    }

    fn check(shape: &[usize], axes: &[usize]) {
        let n: usize = shape.iter().product();
        let x: Vec<f64> = (0..n).map(|i| (i % 97) as f64 + 1.0).collect();
        let lanes = Lanes::new(shape, axes);
        let got = reduce(&x, &lanes, &Trace);
        let mut expect = vec![(0.0, 0.0, 0usize); lanes.out_len];
        for (flat, (o, r)) in reference(shape, axes).into_iter().enumerate() {
            expect[o].0 += x[flat];
            expect[o].1 += x[flat] * r as f64;
            expect[o].2 += 1;
        }
        assert_eq!(got, expect, "{shape:?} over {axes:?}");
        let mut out = vec![MaybeUninit::uninit(); n];
        map_with_output(&x, &lanes, &mut out, |v, o| v + 1000.0 * o as f64);
        for (flat, (o, _)) in reference(shape, axes).into_iter().enumerate() {
            assert_eq!(
                // SAFETY: `map_with_output` writes every element of its output.
                unsafe { out[flat].assume_init() },
                x[flat] + 1000.0 * o as f64
            );
        }
    }

    #[test]
    fn every_axis_pattern_matches_index_arithmetic() {
        check(&[2, 3, 4], &[1]);
        check(&[2, 3, 4], &[0, 2]);
        check(&[2, 3, 4], &[0, 1]);
        check(&[2, 3, 4], &[2]);
        check(&[2, 3, 4], &[0, 1, 2]);
        check(&[2, 3, 4], &[]);
        check(&[2, 1, 3, 1, 2], &[1, 2, 4]);
        check(&[5], &[0]);
    }

    #[test]
    fn parallel_splits_match_index_arithmetic() {
        check(&[300, 400], &[0]); // first run reduced: per-thread partials
        check(&[300, 400], &[1]); // first run kept: independent outputs
        check(&[40, 50, 60], &[0, 2]);
        check(&[70_000], &[0]);
    }

    #[test]
    fn empty_inputs_leave_initial_accumulators() {
        let lanes = Lanes::new(&[0, 3], &[0]);
        assert_eq!(lanes.out_len, 3);
        assert_eq!(lanes.red_len, 0);
        assert_eq!(
            reduce(&[] as &[f64], &lanes, &Trace),
            vec![(0.0, 0.0, 0); 3]
        );
    }
}
