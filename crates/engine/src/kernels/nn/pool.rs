//! 2-d pooling over the planes of an `[N, C, H, W]` value (each of the
//! `N * C` planes `H * W` contiguous elements): max pooling with its argmax
//! indices, the scatter and gather at those indices (its backward and its
//! tangent), and average pooling (fixed or adaptive windows) with its
//! adjoint.
//!
//! A [`Plan2d`] lists, per output row and column, the input positions a
//! window reads ([`Taps`]): padding, dilation, `ceil_mode` and adaptive
//! windows are all resolved when the plan is made, so every kernel is one
//! loop nest over planes. Planes are independent: large inputs are split
//! among threads by whole planes, each computed by the same code, so the
//! results never depend on the thread count. Non-overlapping 2x2 windows
//! with stride 2 (the common CNN case) take a fast path that reads two rows
//! at a time and gives the same bits as the general loop.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::lanes::init;
use crate::kernels::parallel::{for_each_part, should_parallelize, CHUNK};
use crate::tensor::{Element, Filled};

/// The argmax index of a window with no input position in it (possible
/// only with dilation reaching past the padding); its output is `-inf`, and
/// it routes no gradient.
pub const NO_INDEX: u32 = u32::MAX;

/// The input positions one window reads along one axis: `start`,
/// `start + step`, ... below `end` (all inside the input; `start >= end`
/// is an empty window), and `count`, this axis' factor of the window's
/// divisor for average pooling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Taps {
    /// First input position read.
    pub start: usize,
    /// One past the last input position that may be read.
    pub end: usize,
    /// The divisor factor along this axis (average pooling).
    pub count: usize,
}

/// The windows along one axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axis {
    /// The input length.
    pub len: usize,
    /// The step between taps of a window (the dilation).
    pub step: usize,
    /// One window per output position.
    pub taps: Vec<Taps>,
}

impl Axis {
    /// PyTorch's sliding windows: output `o` covers padded positions
    /// `o * stride + k * dilation` for `k < kernel`, of which those inside
    /// the input are read. `count` is the window's length clipped to the
    /// padded input (`count_include_pad`), or the number of input positions
    /// it reads. `out` is the output length (from `Window::output_len`).
    pub fn sliding(
        len: usize,
        kernel: usize,
        stride: usize,
        pad: usize,
        dilation: usize,
        out: usize,
        count_include_pad: bool,
    ) -> Axis {
        let span = dilation * (kernel.max(1) - 1) + 1;
        let taps = (0..out)
            .map(|o| {
                let s = o.saturating_mul(stride);
                let end = s.saturating_add(span).saturating_sub(pad).min(len);
                let first = if s >= pad {
                    s
                } else {
                    s + (pad - s).div_ceil(dilation) * dilation
                };
                let start = (first - pad).min(end);
                let count = if count_include_pad {
                    s.saturating_add(kernel).min(len + 2 * pad) - s
                } else {
                    (end - start).div_ceil(dilation)
                };
                Taps { start, end, count }
            })
            .collect();
        Axis {
            len,
            step: dilation,
            taps,
        }
    }

    /// PyTorch's adaptive windows: output `o` of `out` reads
    /// `floor(o * len / out) .. ceil((o + 1) * len / out)`.
    pub fn adaptive(len: usize, out: usize) -> Axis {
        let (l, n) = (len as u128, out as u128);
        let taps = (0..out as u128)
            .map(|o| {
                let start = (o * l / n) as usize;
                let end = ((o + 1) * l).div_ceil(n) as usize;
                Taps {
                    start,
                    end,
                    count: end - start,
                }
            })
            .collect();
        Axis { len, step: 1, taps }
    }

    /// Whether the windows are `[2o, 2o + 2)`, each read in full.
    fn pairs(&self) -> bool {
        self.step == 1
            && self
                .taps
                .iter()
                .enumerate()
                .all(|(o, t)| t.start == 2 * o && t.end == 2 * o + 2 && t.count == 2)
    }
}

/// The windows of a 2-d pooling: rows (`H`) and columns (`W`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan2d {
    /// Along `H`.
    pub rows: Axis,
    /// Along `W`.
    pub cols: Axis,
}

impl Plan2d {
    /// Elements of one input plane.
    pub fn in_plane(&self) -> usize {
        self.rows.len * self.cols.len
    }

    /// Elements of one output plane.
    pub fn out_plane(&self) -> usize {
        self.rows.taps.len() * self.cols.taps.len()
    }

    /// Non-overlapping 2x2 windows with stride 2, all inside the input.
    fn pairs(&self) -> bool {
        self.rows.pairs() && self.cols.pairs()
    }
}

/// How an average is divided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Divisor {
    /// By the product of the two axes' counts (`avg_pool2d`).
    Window,
    /// By a fixed number (`divisor_override`).
    Fixed(usize),
    /// By the row count, then by the column count (`adaptive_avg_pool2d`,
    /// as PyTorch computes it).
    PerAxis,
}

impl Divisor {
    #[inline(always)]
    fn apply<T: Element>(self, v: T, r: &Taps, c: &Taps) -> T {
        match self {
            Divisor::Window => v / T::from_f64((r.count * c.count) as f64),
            Divisor::Fixed(d) => v / T::from_f64(d as f64),
            Divisor::PerAxis => v / T::from_f64(r.count as f64) / T::from_f64(c.count as f64),
        }
    }
}

/// Planes per parallel task: about [`CHUNK`] input elements.
fn planes_per_task(in_plane: usize) -> usize {
    (CHUNK / in_plane.max(1)).max(1)
}

/// Runs `f(plane, out_plane_slice)` for each of the `planes` planes of
/// `out` (`per_plane` elements each), split among threads by whole planes
/// when `work` (elements read) is large.
fn for_planes<O: Send>(
    out: &mut [O],
    planes: usize,
    per_plane: usize,
    in_plane: usize,
    work: usize,
    f: impl Fn(usize, &mut [O]) + Sync + Send,
) {
    assert_eq!(out.len(), planes * per_plane, "pool: output length");
    if out.is_empty() {
        return;
    }
    let run = |first: usize, part: &mut [O]| {
        for (k, plane) in part.chunks_mut(per_plane).enumerate() {
            f(first + k, plane);
        }
    };
    let per = planes_per_task(in_plane);
    for_each_part(out, per, per_plane, should_parallelize(work), run);
}

/// Whether `v` replaces the running maximum `best`: larger, or NaN
/// (PyTorch's rule, so a NaN propagates).
#[inline(always)]
fn beats<T: Element>(v: T, best: T) -> bool {
    v > best || v.is_nan()
}

/// [`max_plane`] for non-overlapping 2x2 windows with stride 2, a row of
/// outputs at a time: each window is a two-round tournament of selects (no
/// data-dependent branches; the same winner as [`max_plane`]'s scan: the
/// first maximum, or the last NaN), written straight into the row.
fn max_plane_pairs<T: Element>(
    x: &[T],
    plan: &Plan2d,
    out: &mut [MaybeUninit<T>],
    idx: &mut [u32],
) {
    let w = plan.cols.len;
    let ow = plan.cols.taps.len();
    for (oh, (out_row, idx_row)) in out
        .chunks_exact_mut(ow)
        .zip(idx.chunks_exact_mut(ow))
        .enumerate()
    {
        let top = &x[2 * oh * w..][..2 * ow];
        let bottom = &x[(2 * oh + 1) * w..][..2 * ow];
        let base = (2 * oh * w) as u32;
        for (o, (slot, at)) in out_row.iter_mut().zip(idx_row.iter_mut()).enumerate() {
            let (a, b) = (top[2 * o], top[2 * o + 1]);
            let (c, d) = (bottom[2 * o], bottom[2 * o + 1]);
            let right = beats(b, a);
            let (m1, i1) = if right { (b, 1) } else { (a, 0) };
            let right = beats(d, c);
            let (m2, i2) = if right {
                (d, w as u32 + 1)
            } else {
                (c, w as u32)
            };
            let lower = beats(m2, m1);
            slot.write(if lower { m2 } else { m1 });
            *at = base + 2 * o as u32 + if lower { i2 } else { i1 };
        }
    }
}

/// Max pooling of one plane: values and argmax indices (flat in the plane;
/// the first maximum in row-major window order wins a tie).
#[inline(always)]
fn max_plane<T: Element>(x: &[T], plan: &Plan2d, mut put: impl FnMut(usize, T, u32)) {
    let w = plan.cols.len;
    if plan.pairs() {
        let ow = plan.cols.taps.len();
        for oh in 0..plan.rows.taps.len() {
            let top = &x[2 * oh * w..2 * oh * w + w];
            let bottom = &x[(2 * oh + 1) * w..(2 * oh + 2) * w];
            for o in 0..ow {
                let base = 2 * oh * w + 2 * o;
                let (mut best, mut at) = (T::neg_infinity(), base);
                for (v, i) in [
                    (top[2 * o], base),
                    (top[2 * o + 1], base + 1),
                    (bottom[2 * o], base + w),
                    (bottom[2 * o + 1], base + w + 1),
                ] {
                    if beats(v, best) {
                        best = v;
                        at = i;
                    }
                }
                put(oh * ow + o, best, at as u32);
            }
        }
        return;
    }
    let mut o = 0;
    for r in &plan.rows.taps {
        for c in &plan.cols.taps {
            let mut best = T::neg_infinity();
            let mut at = if r.start < r.end && c.start < c.end {
                (r.start * w + c.start) as u32
            } else {
                NO_INDEX
            };
            for ih in (r.start..r.end).step_by(plan.rows.step) {
                let row = &x[ih * w..ih * w + w];
                for iw in (c.start..c.end).step_by(plan.cols.step) {
                    let v = row[iw];
                    if beats(v, best) {
                        best = v;
                        at = (ih * w + iw) as u32;
                    }
                }
            }
            put(o, best, at);
            o += 1;
        }
    }
}

/// Max pooling of `planes` planes of `x`: writes every element of `out`
/// and `indices` (`planes * plan.out_plane()` each): the window maxima and
/// their positions in the plane ([`NO_INDEX`] for an empty window). Panics
/// if a length does not match the plan, or if a plane has `u32::MAX` or more
/// elements.
pub fn max_pool2d<'o, T: Element>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    out: &'o mut [MaybeUninit<T>],
    indices: &mut [u32],
) -> Filled<'o> {
    max_pool2d_into(x, planes, plan, out, indices);
    // SAFETY: `max_pool2d_into` writes every element of `out` (the doc above).
    unsafe { Filled::assume(out) }
}

/// [`max_pool2d`]'s body.
fn max_pool2d_into<T: Element>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    out: &mut [MaybeUninit<T>],
    indices: &mut [u32],
) {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(x.len(), planes * ip, "max_pool2d: input length");
    assert!(ip < NO_INDEX as usize, "max_pool2d: plane too large");
    assert_eq!(out.len(), planes * op, "max_pool2d: output length");
    assert_eq!(indices.len(), planes * op, "max_pool2d: index length");
    if out.is_empty() {
        return;
    }
    let pairs = plan.pairs();
    let run = |first: usize, out: &mut [MaybeUninit<T>], idx: &mut [u32]| {
        for (k, (o, i)) in out.chunks_mut(op).zip(idx.chunks_mut(op)).enumerate() {
            let p = first + k;
            let plane = &x[p * ip..(p + 1) * ip];
            if pairs {
                max_plane_pairs(plane, plan, o, i);
                continue;
            }
            max_plane(plane, plan, |j, v, at| {
                o[j].write(v);
                i[j] = at;
            });
        }
    };
    let per = planes_per_task(ip);
    if should_parallelize(x.len()) {
        out.par_chunks_mut(per * op)
            .zip(indices.par_chunks_mut(per * op))
            .enumerate()
            .for_each(|(t, (o, i))| run(t * per, o, i));
    } else {
        run(0, out, indices);
    }
}

/// [`max_pool2d`]'s values without the argmax indices, for a forward
/// that no backward will follow (nothing requires grad): the same bits,
/// and the 2x2 stride-2 windows vectorised ([`max_row_pairs`]). Writes
/// every element of `out` (`planes * plan.out_plane()`); panics if a
/// length does not match the plan.
pub fn max_pool2d_values<'o, T: Element>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(x.len(), planes * ip, "max_pool2d: input length");
    for_planes(out, planes, op, ip, x.len(), |p, o| {
        let plane = &x[p * ip..(p + 1) * ip];
        if plan.pairs() {
            let (w, ow) = (plan.cols.len, plan.cols.taps.len());
            crate::kernels::simd::wide(
                #[inline(always)]
                || {
                    for (oh, row) in o.chunks_exact_mut(ow).enumerate() {
                        let top = &plane[2 * oh * w..][..2 * ow];
                        let bottom = &plane[(2 * oh + 1) * w..][..2 * ow];
                        max_row_pairs(top, bottom, row);
                    }
                },
            );
        } else {
            max_plane(plane, plan, |j, v, _| {
                o[j].write(v);
            });
        }
    });
    // SAFETY: every plane's slice of `out` is written above, each of its
    // elements once (`max_row_pairs` writes every slot of its row,
    // `max_plane` puts every output position).
    unsafe { Filled::assume(out) }
}

/// One output row of 2x2 stride-2 windows over the input rows `top` and
/// `bottom` (`2 * row.len()` elements each): [`max_plane_pairs`]'s
/// tournament of selects without the indices, a loop over lanes that
/// LLVM vectorises (ARCHITECTURE.md, PERF).
#[inline(always)]
pub(super) fn max_row_pairs<T: Element>(top: &[T], bottom: &[T], row: &mut [MaybeUninit<T>]) {
    let n = row.len();
    let (top, bottom) = (&top[..2 * n], &bottom[..2 * n]);
    for (o, slot) in row.iter_mut().enumerate() {
        let (a, b) = (top[2 * o], top[2 * o + 1]);
        let (c, d) = (bottom[2 * o], bottom[2 * o + 1]);
        let m1 = if beats(b, a) { b } else { a };
        let m2 = if beats(d, c) { d } else { c };
        slot.write(if beats(m2, m1) { m2 } else { m1 });
    }
}

/// The argmax indices of [`max_pool2d`] alone (recomputed from the input).
pub fn max_pool2d_indices<T: Element>(x: &[T], planes: usize, plan: &Plan2d) -> Vec<u32> {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(x.len(), planes * ip, "max_pool2d: input length");
    assert!(ip < NO_INDEX as usize, "max_pool2d: plane too large");
    let mut indices = vec![NO_INDEX; planes * op];
    for_planes(&mut indices, planes, op, ip, x.len(), |p, idx| {
        max_plane(&x[p * ip..(p + 1) * ip], plan, |j, _, at| idx[j] = at);
    });
    indices
}

/// `out[p, o] = t[p, indices[p, o]]` (zero for [`NO_INDEX`]): the values of
/// `t` (input-shaped) at the argmax positions. Writes every element of
/// `out` (`planes * plan.out_plane()`); panics on a length mismatch or an
/// index outside the plane.
pub fn gather<'o, T: Element>(
    t: &[T],
    indices: &[u32],
    planes: usize,
    plan: &Plan2d,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    gather_into(t, indices, planes, plan, out);
    // SAFETY: `gather_into` writes every element of `out` (the doc above).
    unsafe { Filled::assume(out) }
}

/// [`gather`]'s body.
fn gather_into<T: Element>(
    t: &[T],
    indices: &[u32],
    planes: usize,
    plan: &Plan2d,
    out: &mut [MaybeUninit<T>],
) {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(t.len(), planes * ip, "max_pool2d gather: input length");
    assert_eq!(
        indices.len(),
        planes * op,
        "max_pool2d gather: index length"
    );
    for_planes(out, planes, op, ip, out.len(), |p, o| {
        let (src, idx) = (&t[p * ip..(p + 1) * ip], &indices[p * op..(p + 1) * op]);
        for (slot, &i) in o.iter_mut().zip(idx) {
            slot.write(if i == NO_INDEX {
                T::zero()
            } else {
                src[i as usize]
            });
        }
    });
}

/// `out[p, indices[p, o]] += g[p, o]` into zero planes of `plan.in_plane()`
/// elements, in output order: the gradient of max pooling. Writes every
/// element of `out` (zeroed first); panics on a length mismatch or an
/// index outside the plane.
pub fn scatter<'o, T: Element>(
    g: &[T],
    indices: &[u32],
    planes: usize,
    plan: &Plan2d,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    scatter_into(g, indices, planes, plan, out);
    // SAFETY: `scatter_into` writes every element of `out` (the doc above).
    unsafe { Filled::assume(out) }
}

/// [`scatter`]'s body.
fn scatter_into<T: Element>(
    g: &[T],
    indices: &[u32],
    planes: usize,
    plan: &Plan2d,
    out: &mut [MaybeUninit<T>],
) {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(g.len(), planes * op, "max_pool2d scatter: gradient length");
    assert_eq!(
        indices.len(),
        planes * op,
        "max_pool2d scatter: index length"
    );
    for_planes(out, planes, ip, ip, out.len(), |p, plane| {
        let plane = init(plane);
        let (src, idx) = (&g[p * op..(p + 1) * op], &indices[p * op..(p + 1) * op]);
        for (&v, &i) in src.iter().zip(idx) {
            if i != NO_INDEX {
                plane[i as usize] += v;
            }
        }
    });
}

/// Average pooling of `planes` planes of `x`: each window's sum (in
/// row-major order, from zero) divided as `divisor` says; an empty window
/// gives zero. Writes every element of `out` (`planes * plan.out_plane()`);
/// panics on a length mismatch.
pub fn avg_pool2d<'o, T: Element>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    divisor: Divisor,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    avg_pool2d_into(x, planes, plan, divisor, out);
    // SAFETY: `avg_pool2d_into` writes every element of `out` (the doc above).
    unsafe { Filled::assume(out) }
}

/// [`avg_pool2d`]'s body.
fn avg_pool2d_into<T: Element>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    divisor: Divisor,
    out: &mut [MaybeUninit<T>],
) {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(x.len(), planes * ip, "avg_pool2d: input length");
    let w = plan.cols.len;
    let pairs = plan.pairs();
    for_planes(out, planes, op, ip, x.len(), |p, o| {
        let x = &x[p * ip..(p + 1) * ip];
        if pairs {
            let (r, c) = (&plan.rows.taps[0], &plan.cols.taps[0]);
            let ow = plan.cols.taps.len();
            for oh in 0..plan.rows.taps.len() {
                let top = &x[2 * oh * w..2 * oh * w + w];
                let bottom = &x[(2 * oh + 1) * w..(2 * oh + 2) * w];
                for j in 0..ow {
                    let s =
                        T::zero() + top[2 * j] + top[2 * j + 1] + bottom[2 * j] + bottom[2 * j + 1];
                    o[oh * ow + j].write(divisor.apply(s, r, c));
                }
            }
            return;
        }
        let mut k = 0;
        for r in &plan.rows.taps {
            for c in &plan.cols.taps {
                let v = if r.start < r.end && c.start < c.end {
                    let mut s = T::zero();
                    for ih in r.start..r.end {
                        for &v in &x[ih * w + c.start..ih * w + c.end] {
                            s += v;
                        }
                    }
                    divisor.apply(s, r, c)
                } else {
                    T::zero()
                };
                o[k].write(v);
                k += 1;
            }
        }
    });
}

/// The adjoint of [`avg_pool2d`]: each output gradient, divided as the
/// forward divides, added to every input position of its window (windows
/// in output order). Writes every element of `out` (`planes *
/// plan.in_plane()`, zeroed first); panics on a length mismatch.
pub fn avg_pool2d_backward<'o, T: Element>(
    g: &[T],
    planes: usize,
    plan: &Plan2d,
    divisor: Divisor,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    avg_pool2d_backward_into(g, planes, plan, divisor, out);
    // SAFETY: `avg_pool2d_backward_into` writes every element of `out` (the doc above).
    unsafe { Filled::assume(out) }
}

/// [`avg_pool2d_backward`]'s body.
fn avg_pool2d_backward_into<T: Element>(
    g: &[T],
    planes: usize,
    plan: &Plan2d,
    divisor: Divisor,
    out: &mut [MaybeUninit<T>],
) {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(g.len(), planes * op, "avg_pool2d_backward: gradient length");
    let w = plan.cols.len;
    let pairs = plan.pairs();
    for_planes(out, planes, ip, ip, out.len(), |p, plane| {
        let plane = init(plane);
        let g = &g[p * op..(p + 1) * op];
        if pairs {
            // Each input position is in at most one window: `0 + d`, as below.
            let (r, c) = (&plan.rows.taps[0], &plan.cols.taps[0]);
            let ow = plan.cols.taps.len();
            for (oh, g) in g.chunks_exact(ow).enumerate() {
                let (top, bottom) = plane[2 * oh * w..(2 * oh + 2) * w].split_at_mut(w);
                for (j, &v) in g.iter().enumerate() {
                    let d = divisor.apply(v, r, c);
                    top[2 * j] += d;
                    top[2 * j + 1] += d;
                    bottom[2 * j] += d;
                    bottom[2 * j + 1] += d;
                }
            }
            return;
        }
        let mut k = 0;
        for r in &plan.rows.taps {
            for c in &plan.cols.taps {
                if r.start < r.end && c.start < c.end {
                    let d = divisor.apply(g[k], r, c);
                    for ih in r.start..r.end {
                        for v in &mut plane[ih * w + c.start..ih * w + c.end] {
                            *v += d;
                        }
                    }
                }
                k += 1;
            }
        }
    });
}

/// A pooling's reduction of one window to one value, for
/// [`reduce_windows`]: the whole of a new pooling's forward kernel.
pub trait WindowReduction: Sync {
    /// The value of one window from the input values it reads (row-major,
    /// none for an empty window) and its taps along rows and columns
    /// (whose `count`s give PyTorch's divisor).
    fn reduce<T: Element>(&self, values: impl Iterator<Item = T>, rows: &Taps, cols: &Taps) -> T;
}

/// Each window of `planes` planes of `x` reduced by `reduction`. Writes
/// every element of `out` (`planes * plan.out_plane()`); panics on a
/// length mismatch.
pub fn reduce_windows<'o, T: Element, R: WindowReduction>(
    x: &[T],
    planes: usize,
    plan: &Plan2d,
    reduction: &R,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    let (ip, op) = (plan.in_plane(), plan.out_plane());
    assert_eq!(x.len(), planes * ip, "pool: input length");
    let w = plan.cols.len;
    for_planes(out, planes, op, ip, x.len(), |p, o| {
        let x = &x[p * ip..(p + 1) * ip];
        let windows = plan
            .rows
            .taps
            .iter()
            .flat_map(|r| plan.cols.taps.iter().map(move |c| (r, c)));
        for (slot, (r, c)) in o.iter_mut().zip(windows) {
            let rows = (r.start..r.end).step_by(plan.rows.step);
            let values = rows.flat_map(|ih| {
                (c.start..c.end)
                    .step_by(plan.cols.step)
                    .map(move |iw| x[ih * w + iw])
            });
            slot.write(reduction.reduce(values, r, c));
        }
    });
    // SAFETY: `for_planes` hands every element of `out` to exactly one
    // plane's closure, which writes each of its `op` elements (one per window).
    unsafe { Filled::assume(out) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::assume_filled as collect;

    fn uninit<T>(n: usize) -> Vec<MaybeUninit<T>> {
        (0..n).map(|_| MaybeUninit::uninit()).collect()
    }

    fn plan(h: usize, w: usize, k: usize, s: usize, p: usize, d: usize, out: [usize; 2]) -> Plan2d {
        Plan2d {
            rows: Axis::sliding(h, k, s, p, d, out[0], true),
            cols: Axis::sliding(w, k, s, p, d, out[1], true),
        }
    }

    #[test]
    fn sliding_windows_clip_padding_and_dilation() {
        // len 5, kernel 3, stride 2, pad 1: windows [-1, 2), [1, 4), [3, 6).
        let a = Axis::sliding(5, 3, 2, 1, 1, 3, true);
        let t: Vec<_> = a.taps.iter().map(|t| (t.start, t.end, t.count)).collect();
        assert_eq!(t, vec![(0, 2, 3), (1, 4, 3), (3, 5, 3)]);
        let a = Axis::sliding(5, 3, 2, 1, 1, 3, false);
        assert_eq!(a.taps[0].count, 2);
        // Dilation 2, pad 1: taps at -1, 1, 3 -> first valid 1.
        let a = Axis::sliding(4, 3, 1, 1, 2, 2, false);
        assert_eq!((a.taps[0].start, a.taps[0].end, a.taps[0].count), (1, 4, 2));
        // A window entirely in the padding is empty.
        let a = Axis::sliding(2, 2, 1, 1, 3, 1, false);
        assert!(a.taps[0].start >= a.taps[0].end);
        let ad = Axis::adaptive(5, 3);
        let t: Vec<_> = ad.taps.iter().map(|t| (t.start, t.end)).collect();
        assert_eq!(t, vec![(0, 2), (1, 4), (3, 5)]);
    }

    #[test]
    fn fast_pairs_match_the_general_loop() {
        let (h, w) = (6, 8);
        let x: Vec<f64> = (0..2 * h * w)
            .map(|i| ((i * 37) % 23) as f64 * 0.7 - 7.0 + (i as f64 * 0.3).sin())
            .collect();
        let fast = plan(h, w, 2, 2, 0, 1, [3, 4]);
        assert!(fast.pairs());
        // The same windows with a count the fast path does not accept: the
        // general loop (max ignores counts; the average divides by 4 fixed).
        let mut general = fast.clone();
        general.rows.taps.iter_mut().for_each(|t| t.count = 3);
        assert!(!general.pairs());
        let run = |p: &Plan2d| {
            let mut out = uninit::<f64>(24);
            let mut idx = vec![0u32; 24];
            max_pool2d_into(&x, 2, p, &mut out, &mut idx);
            let mut avg = uninit::<f64>(24);
            avg_pool2d_into(&x, 2, p, Divisor::Fixed(4), &mut avg);
            let mut back = uninit::<f64>(x.len());
            avg_pool2d_backward_into(&x[..24], 2, p, Divisor::Fixed(4), &mut back);
            (collect(out), idx, collect(avg), collect(back))
        };
        let (v, i, a, b) = run(&fast);
        assert_eq!((v.clone(), i.clone(), a.clone(), b), run(&general));
        // Against brute force.
        for p in 0..2 {
            for oh in 0..3 {
                for ow in 0..4 {
                    let (mut best, mut at, mut sum) = (f64::NEG_INFINITY, 0, 0.0);
                    for dh in 0..2 {
                        for dw in 0..2 {
                            let j = (2 * oh + dh) * w + 2 * ow + dw;
                            sum += x[p * h * w + j];
                            if x[p * h * w + j] > best {
                                best = x[p * h * w + j];
                                at = j;
                            }
                        }
                    }
                    let o = p * 12 + oh * 4 + ow;
                    assert_eq!((v[o], i[o] as usize), (best, at));
                    assert_eq!(a[o], sum / 4.0);
                }
            }
        }
    }

    #[test]
    fn ties_take_the_first_and_nan_propagates() {
        let p = plan(2, 2, 2, 2, 0, 1, [1, 1]);
        let mut out = uninit::<f32>(1);
        let mut idx = vec![0u32; 1];
        max_pool2d_into(&[1.0f32, 3.0, 3.0, 2.0], 1, &p, &mut out, &mut idx);
        assert_eq!((collect(out)[0], idx[0]), (3.0, 1));
        let mut out = uninit::<f32>(1);
        max_pool2d_into(&[1.0f32, f32::NAN, 3.0, 2.0], 1, &p, &mut out, &mut idx);
        assert!(collect(out)[0].is_nan());
        assert_eq!(idx[0], 1);
    }

    #[test]
    fn scatter_and_gather_are_adjoint_and_parallel_is_deterministic() {
        // Large enough to go parallel: 64 planes of 40x40, kernel 3 stride 2 pad 1.
        let (planes, h, w) = (64, 40, 40);
        let o = Window::len(40, 3, 2, 1);
        let p = plan(h, w, 3, 2, 1, 1, [o, o]);
        let x: Vec<f64> = (0..planes * h * w)
            .map(|i| ((i as f64) * 0.37).sin())
            .collect();
        let idx = max_pool2d_indices(&x, planes, &p);
        let mut out = uninit::<f64>(planes * o * o);
        let mut idx2 = vec![0u32; planes * o * o];
        max_pool2d_into(&x, planes, &p, &mut out, &mut idx2);
        assert_eq!(idx, idx2);
        let g: Vec<f64> = (0..planes * o * o)
            .map(|i| (i as f64 * 0.11).cos())
            .collect();
        let mut s = uninit::<f64>(x.len());
        scatter_into(&g, &idx, planes, &p, &mut s);
        let s = collect(s);
        let mut gt = uninit::<f64>(g.len());
        gather_into(&x, &idx, planes, &p, &mut gt);
        let gt = collect(gt);
        let lhs: f64 = s.iter().zip(&x).map(|(a, b)| a * b).sum();
        let rhs: f64 = gt.iter().zip(&g).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-9 * lhs.abs().max(1.0));
        // Average pooling and its adjoint.
        let mut a = uninit::<f64>(g.len());
        avg_pool2d_into(&x, planes, &p, Divisor::Window, &mut a);
        let a = collect(a);
        let mut b = uninit::<f64>(x.len());
        avg_pool2d_backward_into(&g, planes, &p, Divisor::Window, &mut b);
        let b = collect(b);
        let lhs: f64 = a.iter().zip(&g).map(|(a, b)| a * b).sum();
        let rhs: f64 = b.iter().zip(&x).map(|(a, b)| a * b).sum();
        assert!((lhs - rhs).abs() < 1e-9 * lhs.abs().max(1.0));
        // Single-threaded gives the same bits.
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let b1 = pool.install(|| {
            let mut b = uninit::<f64>(x.len());
            avg_pool2d_backward_into(&g, planes, &p, Divisor::Window, &mut b);
            collect(b)
        });
        assert_eq!(b, b1);
    }

    /// Output length of a sliding window without ceil mode.
    struct Window;
    impl Window {
        fn len(n: usize, k: usize, s: usize, p: usize) -> usize {
            (n + 2 * p - k) / s + 1
        }
    }
}
