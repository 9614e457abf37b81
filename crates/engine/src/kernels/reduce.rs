//! Sum reductions: over everything (`sum_all`), over a set of axes
//! (`sum_axes`, and `mean_axes`), and back to a broadcast operand's shape
//! (`sum_to_shape`).
//!
//! Accuracy: `sum_all` is pairwise over blocks summed with 16 independent
//! accumulators (which also lets the compiler vectorise it), so the error of
//! an f32 sum of a million elements grows with log(n), not n. Axis reductions
//! accumulate in f64 and round once at the end.

use rayon::prelude::*;
use smallvec::SmallVec;

use super::parallel::{ordered_reduce, should_parallelize};
use crate::base::error::{Error, Result};
use crate::tensor::shape::{checked_numel, normalize_axes, reduced_shape, Dims};
use crate::tensor::{Element, Tensor};

/// Elements summed by one block of the pairwise scheme.
const BLOCK: usize = 2048;
const LANES: usize = 16;

/// Sum of every element of `x`, in x's dtype, as a 0-d tensor.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.5], &[3])?;
/// assert_eq!(kernels::sum_all(&x)?.try_item()?, 6.5);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn sum_all(x: &Tensor) -> Result<Tensor> {
    Ok(
        crate::with_dtype!("sum_all", x.dtype(), T => Tensor::scalar(sum_slice(x.as_slice_of::<T>()))),
    )
}

/// Pairwise sum of a slice (parallel for large slices).
pub fn sum_slice<T: Element>(x: &[T]) -> T {
    if x.len() <= BLOCK {
        return sum_block(x);
    }
    let (l, r) = x.split_at(x.len() / 2);
    if should_parallelize(x.len()) {
        let (a, b) = rayon::join(|| sum_slice(l), || sum_slice(r));
        a + b
    } else {
        sum_slice(l) + sum_slice(r)
    }
}

#[inline]
fn sum_block<T: Element>(x: &[T]) -> T {
    let mut acc = [T::zero(); LANES];
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v;
        }
    }
    for (a, &v) in acc.iter_mut().zip(rest) {
        *a += v;
    }
    // Pairwise combination of the lanes.
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            let upper = acc[i + width];
            acc[i] += upper;
        }
    }
    acc[0]
}

/// Sums `x` over `axes` (negative axes count from the end). With `keepdim`
/// the reduced axes stay as size 1.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!(kernels::sum_axes("sum", &x, &[0], false)?.to_f64_vec(), vec![5.0, 7.0, 9.0]);
/// assert_eq!(kernels::sum_axes("sum", &x, &[-1], true)?.shape(), &[2, 1]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn sum_axes(op: &'static str, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    // Reducing an empty axis of a zero-sized input can leave a huge result.
    checked_numel(op, &reduced_shape(x.shape(), &axes, keepdim))?;
    sum_normalized_axes(x, &axes, keepdim)
}

/// Sums over already-normalised (sorted, unique, in-range) axes.
pub fn sum_normalized_axes(x: &Tensor, axes: &[usize], keepdim: bool) -> Result<Tensor> {
    x.expect_float("sum")?;
    let out_shape = reduced_shape(x.shape(), axes, keepdim);
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if axes.len() == x.rank() {
        let s = sum_all(x)?;
        return Ok(if out_shape.is_empty() {
            s
        } else {
            s.reshape(&out_shape).expect("one element")
        });
    }
    Ok(crate::with_dtype!("sum_normalized_axes", x.dtype(), T => {
        sum_groups(x.as_slice_of::<T>(), &groups_of(x.shape(), axes), |acc| {
            Tensor::from_exact_iter(out_shape, acc.iter().map(|&v| T::from_f64(v)))
        })
    }))
}

/// Means of `x` over `axes` (negative axes count from the end; an empty
/// list reduces nothing): the sums are divided in f64 before rounding once.
/// An empty reduction gives NaN, as in PyTorch.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!(kernels::mean_axes("mean", &x, &[0], false)?.to_vec::<f32>()?, vec![2.5, 3.5, 4.5]);
/// assert_eq!(kernels::mean_axes("mean", &x, &[-1], true)?.to_f64_vec(), vec![2.0, 5.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn mean_axes(op: &'static str, x: &Tensor, axes: &[isize], keepdim: bool) -> Result<Tensor> {
    let axes = normalize_axes(op, axes, x.rank())?;
    if axes.is_empty() {
        return Ok(x.clone());
    }
    let out_shape = reduced_shape(x.shape(), &axes, keepdim);
    checked_numel(op, &out_shape)?;
    let n = axes.iter().map(|&a| x.shape()[a] as f64).product::<f64>();
    if axes.len() == x.rank() {
        let mean = Tensor::scalar_of(sum_all(x)?.try_item()? / n, x.dtype());
        return mean.reshape(&out_shape);
    }
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        sum_groups(x.as_slice_of::<T>(), &groups_of(x.shape(), &axes), |acc| {
            Tensor::from_exact_iter(out_shape, acc.iter().map(|&v| T::from_f64(v / n)))
        })
    }))
}

/// Reduces `x` (which must have been broadcast from `shape`) back to `shape`
/// by summing the broadcast dimensions: the backward of broadcasting.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let g = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// assert_eq!(kernels::sum_to_shape("sum_to_size", &g, &[3])?.to_f64_vec(), vec![5.0, 7.0, 9.0]);
/// assert_eq!(kernels::sum_to_shape("sum_to_size", &g, &[2, 1])?.to_f64_vec(), vec![6.0, 15.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn sum_to_shape(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<Tensor> {
    if x.shape() == shape {
        return Ok(x.clone());
    }
    if !crate::tensor::shape::broadcastable_to(shape, x.shape()) {
        return Err(Error::shape_mismatch(op, x.shape(), shape));
    }
    let lead = x.rank() - shape.len();
    let axes: Dims = (0..x.rank())
        .filter(|&i| i < lead || (shape[i - lead] == 1 && x.shape()[i] != 1))
        .collect();
    // Built in `shape` itself, not reshaped after: no second header.
    let out = Dims::from_slice(shape);
    if axes.len() == x.rank() && !shape.is_empty() {
        let total = sum_all(x)?;
        return Ok(crate::with_dtype!(op, x.dtype(), T => {
            Tensor::from_exact_iter(out, [*total.as_slice_of::<T>().first().expect("one element")])
        }));
    }
    if axes.is_empty() || axes.len() == x.rank() {
        return sum_normalized_axes(x, &axes, true)?.reshape(shape);
    }
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        sum_groups(x.as_slice_of::<T>(), &groups_of(x.shape(), &axes), |acc| {
            Tensor::from_exact_iter(out, acc.iter().map(|&v| T::from_f64(v)))
        })
    }))
}

/// A run of adjacent dimensions that are all reduced or all kept.
#[derive(Clone, Copy, Debug)]
struct Group {
    size: usize,
    reduced: bool,
    /// Input elements per step of this group.
    in_stride: usize,
    /// Output elements per step (0 for reduced groups).
    out_stride: usize,
}

/// The dimensions of `shape` as runs `(size, reduced)`: size-1 dimensions
/// dropped, neighbours both reduced (in `axes`) or both kept merged.
pub(crate) fn merged_runs(shape: &[usize], axes: &[usize]) -> SmallVec<[(usize, bool); 6]> {
    let mut raw: SmallVec<[(usize, bool); 6]> = SmallVec::new();
    for (i, &d) in shape.iter().enumerate() {
        if d == 1 {
            continue;
        }
        let reduced = axes.contains(&i);
        match raw.last_mut() {
            Some(last) if last.1 == reduced => last.0 *= d,
            _ => raw.push((d, reduced)),
        }
    }
    raw
}

fn groups_of(shape: &[usize], axes: &[usize]) -> SmallVec<[Group; 6]> {
    let raw = merged_runs(shape, axes);
    let mut groups = SmallVec::with_capacity(raw.len());
    let (mut in_stride, mut out_stride) = (1usize, 1usize);
    for &(size, reduced) in raw.iter().rev() {
        groups.push(Group {
            size,
            reduced,
            in_stride,
            out_stride: if reduced { 0 } else { out_stride },
        });
        in_stride *= size;
        if !reduced {
            out_stride *= size;
        }
    }
    groups.reverse();
    groups
}

/// Sums `x` over the reduced groups into f64 accumulators (one per output element).
fn sum_groups<T: Element, R>(x: &[T], groups: &[Group], then: impl FnOnce(&[f64]) -> R) -> R {
    thread_local! {
        /// The accumulators, kept: a reduction allocates nothing once warm
        /// (a compiled step's replay counts on it).
        static ACC: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let out_len: usize = groups
        .iter()
        .filter(|g| !g.reduced)
        .map(|g| g.size)
        .product();
    ACC.with(|kept| match kept.try_borrow_mut() {
        Ok(mut acc) => {
            acc.clear();
            acc.resize(out_len, 0.0);
            sum_groups_into(x, groups, &mut acc);
            then(&acc)
        }
        // Reentered (a reduction inside `then`): accumulators of its own.
        Err(_) => {
            let mut acc = vec![0.0f64; out_len];
            sum_groups_into(x, groups, &mut acc);
            then(&acc)
        }
    })
}

/// Sums `x` over `groups` into `acc` (zeros of the output's length).
fn sum_groups_into<T: Element>(x: &[T], groups: &[Group], acc: &mut Vec<f64>) {
    let out_len = acc.len();
    if x.is_empty() {
        return;
    }
    let Some((first, rest)) = groups.split_first() else {
        acc[0] = sum_slice(x).to_f64();
        return;
    };
    if should_parallelize(x.len()) && first.size > 1 {
        if first.reduced {
            // One partial sum per task over a fixed range, merged in order:
            // the same bits on every run (see `ordered_reduce`).
            let tasks = first.size.min(rayon::current_num_threads());
            let per_task = first.size.div_ceil(tasks);
            let partial = ordered_reduce(
                tasks,
                |t| {
                    let mut part = vec![0.0f64; out_len];
                    for i in t * per_task..((t + 1) * per_task).min(first.size) {
                        accumulate(&x[i * first.in_stride..], rest, &mut part);
                    }
                    part
                },
                |mut a, b| {
                    a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                    a
                },
            );
            if let Some(p) = partial {
                *acc = p;
            }
        } else {
            acc.par_chunks_mut(first.out_stride)
                .enumerate()
                .for_each(|(i, out)| accumulate(&x[i * first.in_stride..], rest, out));
        }
    } else {
        accumulate(x, groups, acc);
    }
}

/// Adds the sums of `x` over `groups` into `out` (recursing group by group).
fn accumulate<T: Element>(x: &[T], groups: &[Group], out: &mut [f64]) {
    match groups {
        [] => out[0] += x[0].to_f64(),
        [last] if last.reduced => out[0] += sum_slice(&x[..last.size]).to_f64(),
        [last] => {
            for (o, &v) in out[..last.size].iter_mut().zip(&x[..last.size]) {
                *o += v.to_f64();
            }
        }
        [g, rest @ ..] => {
            for i in 0..g.size {
                let o = i * g.out_stride;
                accumulate(&x[i * g.in_stride..], rest, &mut out[o..]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f32_sum_of_a_million_is_accurate() {
        let n = 1_000_000;
        let x = Tensor::from_vec(vec![0.1f32; n], &[n]).unwrap();
        let s = sum_all(&x).unwrap().item();
        let exact = 0.1f32 as f64 * n as f64;
        assert!((s - exact).abs() / exact < 1e-6, "{s} vs {exact}");
        let col = x.reshape(&[n, 1]).unwrap();
        let s0 = sum_axes("sum", &col, &[0], false).unwrap().item();
        assert!((s0 - exact).abs() / exact < 1e-6);
        let m0 = mean_axes("mean", &col, &[0], false).unwrap().item();
        assert!((m0 - 0.1f32 as f64).abs() < 1e-7, "{m0}");
        let m1 = mean_axes("mean", &x.reshape(&[1000, 1000]).unwrap(), &[1], false).unwrap();
        assert!(m1
            .to_f64_vec()
            .iter()
            .all(|m| (m - 0.1f32 as f64).abs() < 1e-7));
    }

    #[test]
    fn middle_axis_and_multiple_axes() {
        let v: Vec<f64> = (0..24).map(f64::from).collect();
        let x = Tensor::from_vec(v.clone(), &[2, 3, 4]).unwrap();
        let s = sum_axes("sum", &x, &[1], false).unwrap();
        assert_eq!(s.shape(), &[2, 4]);
        let mut expect = vec![0.0; 8];
        for a in 0..2 {
            for b in 0..3 {
                for c in 0..4 {
                    expect[a * 4 + c] += v[a * 12 + b * 4 + c];
                }
            }
        }
        assert_eq!(s.to_f64_vec(), expect);
        let s02 = sum_axes("sum", &x, &[0, 2], true).unwrap();
        assert_eq!(s02.shape(), &[1, 3, 1]);
        // sum over a, c of (12a + 4b + c) = 60 + 32b
        assert_eq!(s02.to_f64_vec(), vec![60.0, 92.0, 124.0]);
        assert!(sum_axes("sum", &x, &[3], false).is_err());
    }

    #[test]
    fn parallel_paths_match() {
        let rows = 512;
        let cols = 300;
        let v: Vec<f64> = (0..rows * cols).map(|i| (i % 7) as f64).collect();
        let x = Tensor::from_vec(v.clone(), &[rows, cols]).unwrap();
        let by_col = sum_axes("sum", &x, &[0], false).unwrap().to_f64_vec();
        let by_row = sum_axes("sum", &x, &[1], false).unwrap().to_f64_vec();
        for c in [0, 299] {
            let e: f64 = (0..rows).map(|r| v[r * cols + c]).sum();
            assert_eq!(by_col[c], e);
        }
        for r in [0, 511] {
            let e: f64 = (0..cols).map(|c| v[r * cols + c]).sum();
            assert_eq!(by_row[r], e);
        }
    }

    #[test]
    fn empty_reductions_are_zero() {
        let x = Tensor::zeros(&[0, 3], crate::DType::F32).unwrap();
        assert_eq!(
            sum_axes("sum", &x, &[0], false).unwrap().to_f64_vec(),
            vec![0.0; 3]
        );
        assert_eq!(sum_all(&x).unwrap().item(), 0.0);
        let means = mean_axes("mean", &x, &[0], false).unwrap().to_f64_vec();
        assert!(means.len() == 3 && means.iter().all(|m| m.is_nan()));
    }
}
