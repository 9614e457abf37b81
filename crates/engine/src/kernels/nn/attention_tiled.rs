//! Scaled dot-product attention for small heads on AVX-512 register tiles:
//! every key of a query row in one pass, no online softmax. This file is
//! the forward and the tiles; `attention_tiled_backward.rs` the backward.
//!
//! Where the head dims are at most [`MAX_HEAD_DIM`] and a row of scores
//! (at most [`MAX_KEYS`] keys) stays in L1, a block of [`ROWS`] query rows
//! gets its whole score rows at once: `Q Kᵀ` as tiles of the rows against
//! 16-key vectors (the keys transposed once per task, the head dim as the
//! sum's loop), then per row the scale and the mask in one pass with the
//! maximum, `exp` at vector width with the sum in the next, then `P V` as
//! tiles of the rows against 16-lane vectors of the value dims, and the
//! division by the sum on the way out. The flash kernel (`attention.rs`)
//! walks 64 x 64 blocks through `gemm` calls, rescaling its running output
//! at each; on 128 keys of dim 32 the calls' overhead and the rescaling cost
//! more than the products (ARCHITECTURE.md, PERF: "Small attention heads").
//!
//! The `scaled_dot_product_attention` op calls this forward (with the
//! per-row logsumexp, [`forward_with_lse`]) and its backward wherever
//! [`applies`] holds, and the flash kernel elsewhere: the backward
//! recomputes the scores with the same tiles as the forward, so a
//! forward and its backward always come from the same kernel (the choice
//! depends on the geometry and dtype alone). A fully masked row gives 0,
//! as the op does. Each task is one head's block of query rows, every
//! element summed in an order fixed by the geometry, so the bits do not
//! depend on the thread count.

use std::any::TypeId;
use std::mem::MaybeUninit;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use rayon::prelude::*;

use super::attention::{Geometry, MaskView, Rows};
use crate::tensor::{Element, Filled};

/// Largest query/key and value head dim this kernel takes.
pub const MAX_HEAD_DIM: usize = 64;
/// Largest key count: a block's score rows (`ROWS` x 1024 f32, 32 KiB)
/// and the transposed keys (at most 256 KiB) stay in L1 and L2.
pub const MAX_KEYS: usize = 1024;
/// f32 lanes in an AVX-512 vector.
pub(super) const LANES: usize = 16;
/// Query rows in a block (and in each register tile).
pub(super) const ROWS: usize = 8;
/// Key vectors in a `Q Kᵀ` tile: 8 x 3 accumulators, with registers left
/// for the three key loads and a broadcast query element.
const KEY_VECTORS: usize = 3;
/// Value vectors in a `P V` tile: 8 x 2 accumulators.
const VALUE_VECTORS: usize = 2;
/// Query rows per task: one head's rows for MiniLM-sized heads, more tasks
/// for long sequences with few heads.
const ROWS_PER_TASK: usize = 128;

/// Whether [`forward`] takes this call: f32 on a CPU with AVX-512F, head
/// dims `1..=MAX_HEAD_DIM`, `1..=MAX_KEYS` keys, no dropout.
pub fn applies<T: Element>(g: &Geometry) -> bool {
    TypeId::of::<T>() == TypeId::of::<f32>()
        && (1..=MAX_HEAD_DIM).contains(&g.e)
        && (1..=MAX_HEAD_DIM).contains(&g.ev)
        && (1..=MAX_KEYS).contains(&g.s)
        && g.dropout.is_none()
        && crate::kernels::simd::has_avx512()
}

/// `softmax(Q Kᵀ · scale + mask) V` into `out` (`[batch, L, Ev]`,
/// row-major), every element written; `q` is `[batch, L, E]`, `k`
/// `[batch, S, E]`, `v` `[batch, S, Ev]`. Panics unless [`applies`] holds
/// and the operands cover the geometry.
pub fn forward<'o, T: Element>(
    g: &Geometry,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&MaskView<'_, T>>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert!(
        applies::<T>(g),
        "attention_tiled::forward outside its domain"
    );
    let ops = F32Operands::of(q, k, v, mask);
    forward_f32(g, ops.view(), as_f32_out(out), None);
    // SAFETY: `forward_f32` writes every element of `out` (its doc; the
    // length is asserted there).
    unsafe { Filled::assume(out) }
}

/// [`forward`], also writing `lse` (`[batch, L]`), the per-row logsumexp
/// of the scaled, masked scores (`-inf` for a fully masked row), which
/// [`backward`](super::attention_tiled_backward::backward) reads.
pub fn forward_with_lse<'o, 'l, T: Element>(
    g: &Geometry,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&MaskView<'_, T>>,
    out: &'o mut [MaybeUninit<T>],
    lse: &'l mut [MaybeUninit<T>],
) -> (Filled<'o>, Filled<'l>) {
    assert!(
        applies::<T>(g),
        "attention_tiled::forward_with_lse outside its domain"
    );
    let ops = F32Operands::of(q, k, v, mask);
    forward_f32(g, ops.view(), as_f32_out(out), Some(as_f32_out(lse)));
    // SAFETY: `forward_f32` writes every element of `out` and of `lse`
    // when given (its doc; the lengths are asserted there).
    unsafe { (Filled::assume(out), Filled::assume(lse)) }
}

/// The operands of one call as f32 views (what the public entry points
/// turn their `T` operands into; `T` is f32 wherever [`applies`] holds).
pub(super) struct F32Operands<'a> {
    q: Rows<'a, f32>,
    k: Rows<'a, f32>,
    v: Rows<'a, f32>,
    mask: Option<MaskView<'a, f32>>,
}

impl<'a> F32Operands<'a> {
    pub(super) fn of<T: Element>(
        q: &Rows<'a, T>,
        k: &Rows<'a, T>,
        v: &Rows<'a, T>,
        mask: Option<&MaskView<'a, T>>,
    ) -> Self {
        F32Operands {
            q: as_f32_rows(q),
            k: as_f32_rows(k),
            v: as_f32_rows(v),
            mask: mask.map(as_f32_mask),
        }
    }

    pub(super) fn view(&self) -> Operands<'_, 'a> {
        Operands {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            mask: self.mask.as_ref(),
        }
    }
}

/// The f32 operands of one call: queries, keys, values and the mask.
#[derive(Clone, Copy)]
pub(super) struct Operands<'r, 'a> {
    pub q: &'r Rows<'a, f32>,
    pub k: &'r Rows<'a, f32>,
    pub v: &'r Rows<'a, f32>,
    pub mask: Option<&'r MaskView<'a, f32>>,
}

impl Operands<'_, '_> {
    /// Checks that the operands cover the geometry: the kernels then read
    /// them through raw pointers.
    pub(super) fn check(&self, g: &Geometry) {
        check_rows(self.q, g.batch, g.l, g.e);
        check_rows(self.k, g.batch, g.s, g.e);
        check_rows(self.v, g.batch, g.s, g.ev);
        if let Some(m) = self.mask {
            assert_eq!(m.offsets.len(), g.batch, "one mask offset per head");
            if g.l > 0 && g.s > 0 {
                for &o in &m.offsets {
                    assert!(o + (g.l - 1) * m.row_stride + (g.s - 1) * m.col_stride < m.data.len());
                }
            }
        }
    }

    /// Where the mask row of query `i` of head `b` starts: in place when
    /// its keys are contiguous, else gathered into `gathered` (`S` long).
    ///
    /// # Safety
    /// The mask covers the geometry ([`Operands::check`]).
    pub(super) unsafe fn mask_row(
        &self,
        b: usize,
        i: usize,
        gathered: &mut [f32],
    ) -> Option<*const f32> {
        self.mask.map(|m| {
            let start = m.offsets[b] + i * m.row_stride;
            if m.col_stride == 1 {
                // SAFETY: checked by `Operands::check` (the caller's contract).
                unsafe { m.data.as_ptr().add(start) }
            } else {
                for (j, x) in gathered.iter_mut().enumerate() {
                    *x = m.data[start + j * m.col_stride];
                }
                gathered.as_ptr()
            }
        })
    }
}

pub(super) fn as_f32_rows<'a, T: Element>(r: &Rows<'a, T>) -> Rows<'a, f32> {
    Rows {
        data: as_f32(r.data),
        heads: r.heads.clone(),
        row_stride: r.row_stride,
    }
}

pub(super) fn as_f32_mask<'a, T: Element>(m: &MaskView<'a, T>) -> MaskView<'a, f32> {
    MaskView {
        data: as_f32(m.data),
        offsets: m.offsets.clone(),
        row_stride: m.row_stride,
        col_stride: m.col_stride,
    }
}

pub(super) fn as_f32<T: Element>(s: &[T]) -> &[f32] {
    assert_eq!(TypeId::of::<T>(), TypeId::of::<f32>());
    // SAFETY: `T` is `f32` (asserted just above).
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast(), s.len()) }
}

pub(super) fn as_f32_out<T: Element>(s: &mut [MaybeUninit<T>]) -> &mut [MaybeUninit<f32>] {
    assert_eq!(TypeId::of::<T>(), TypeId::of::<f32>());
    // SAFETY: `T` is `f32` (asserted just above).
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast(), s.len()) }
}

/// Checks that rows `0..rows` of every head of `x`, `width` wide, lie in
/// its data: the kernels then read them through raw pointers.
fn check_rows(x: &Rows<'_, f32>, batch: usize, rows: usize, width: usize) {
    assert_eq!(x.heads.len(), batch, "one offset per head");
    if rows == 0 {
        return;
    }
    for &h in &x.heads {
        assert!(
            h + (rows - 1) * x.row_stride + width <= x.data.len(),
            "rows out of bounds"
        );
    }
}

/// [`forward`] on f32: writes every element of `out`, and of `lse` when
/// given.
fn forward_f32(
    g: &Geometry,
    ops: Operands<'_, '_>,
    out: &mut [MaybeUninit<f32>],
    lse: Option<&mut [MaybeUninit<f32>]>,
) {
    let (l, ev) = (g.l, g.ev);
    assert_eq!(out.len(), g.batch * l * ev);
    if let Some(ls) = &lse {
        assert_eq!(ls.len(), g.batch * l);
    }
    if l == 0 || g.batch == 0 {
        return;
    }
    ops.check(g);
    // Each head's (then each task's) share of `lse`, or none.
    let lse_heads: Vec<Option<&mut [MaybeUninit<f32>]>> = match lse {
        Some(ls) => ls.chunks_mut(l).map(Some).collect(),
        None => (0..g.batch).map(|_| None).collect(),
    };
    let tasks = l.div_ceil(ROWS_PER_TASK);
    out.par_chunks_mut(l * ev)
        .zip(lse_heads)
        .enumerate()
        .for_each(|(b, (o_head, lse_head))| {
            let lse_tasks: Vec<Option<&mut [MaybeUninit<f32>]>> = match lse_head {
                Some(ls) => ls.chunks_mut(ROWS_PER_TASK).map(Some).collect(),
                None => (0..tasks).map(|_| None).collect(),
            };
            o_head
                .par_chunks_mut(ROWS_PER_TASK * ev)
                .zip(lse_tasks)
                .enumerate()
                .for_each(|(t, (o, ls))| {
                    // SAFETY: `applies` checked AVX-512F; the operands'
                    // extents were checked above.
                    #[cfg(target_arch = "x86_64")]
                    unsafe {
                        head_rows(g, b, t * ROWS_PER_TASK, ops, o, ls)
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    unreachable!(
                        "`applies` is false off x86-64: {b} {t} {}",
                        o.len() + ls.map_or(0, |l| l.len())
                    )
                });
        });
}

/// One task: query rows `i0..i0 + out.len() / ev` of head `b`, and their
/// logsumexps into `lse` when given.
///
/// # Safety
/// The CPU has AVX-512F; the operands cover the geometry (checked by
/// [`forward_f32`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn head_rows(
    g: &Geometry,
    b: usize,
    i0: usize,
    ops: Operands<'_, '_>,
    out: &mut [MaybeUninit<f32>],
    mut lse: Option<&mut [MaybeUninit<f32>]>,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let Operands { q, k, v, .. } = ops;
        let (e, ev) = (g.e, g.ev);
        let rows = out.len() / ev;
        let i_end = i0 + rows;
        // Keys any row of this task sees.
        let keys = if g.causal { g.s.min(i_end) } else { g.s };
        let width = keys.div_ceil(LANES) * LANES;
        // The keys transposed: kt[d * width + j] = K[j][d], zero past `keys`.
        let mut kt = vec![0.0f32; e * width];
        transpose_keys(
            k.data.as_ptr().add(k.heads[b]),
            k.row_stride,
            keys,
            e,
            &mut kt,
            width,
        );
        let mut scores = vec![0.0f32; ROWS * width];
        let mut gathered = vec![0.0f32; if ops.mask.is_some() { g.s } else { 0 }];
        let mut inv = [0.0f32; ROWS];
        let scale = g.scale as f32;
        let q_head = q.data.as_ptr().add(q.heads[b]);
        let v_head = v.data.as_ptr().add(v.heads[b]);
        for r0 in (i0..i_end).step_by(ROWS) {
            let br = ROWS.min(i_end - r0);
            // Keys the block sees; a tile past the last row repeats it.
            let block_keys = if g.causal { g.s.min(r0 + br) } else { g.s };
            let qrows: [*const f32; ROWS] =
                std::array::from_fn(|r| q_head.add((r0 + r.min(br - 1)) * q.row_stride));
            let sp = scores.as_mut_ptr();
            scores_tiles(&qrows, e, &kt, width, block_keys, sp, width);
            for r in 0..ROWS {
                let row = &mut scores[r * width..][..block_keys.div_ceil(LANES) * LANES];
                if r >= br {
                    // A repeated row: its probabilities are never stored, but
                    // the `P V` tile reads them.
                    row.fill(0.0);
                    inv[r] = 0.0;
                    continue;
                }
                let i = r0 + r;
                let seen = if g.causal { g.s.min(i + 1) } else { g.s };
                let mask_row = ops.mask_row(b, i, &mut gathered);
                let (row_inv, row_lse) = softmax_row(row, seen, scale, mask_row);
                inv[r] = row_inv;
                if let Some(ls) = lse.as_deref_mut() {
                    ls[i - i0].write(row_lse);
                }
            }
            let o = out.as_mut_ptr().add((r0 - i0) * ev).cast::<f32>();
            let sum = Sum::rows(sp, width, block_keys);
            let by = Matrix {
                data: v_head,
                stride: v.row_stride,
                cols: ev,
            };
            rows_times::<false>(
                sum,
                by,
                &inv,
                Matrix {
                    data: o,
                    stride: ev,
                    cols: ev,
                },
                br,
            );
        }
    }
}

/// `S = Q Kᵀ` for the [`ROWS`] query rows `q` (`e` wide) against the
/// first `keys` transposed keys at `kt` (row stride `kt_stride`), as tiles
/// of [`KEY_VECTORS`] vectors; into `s` (row stride `s_stride`, whole
/// vectors: up to `keys` rounded up to 16).
///
/// # Safety
/// AVX-512F; as [`qk_tile`] for every tile.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scores_tiles(
    q: &[*const f32; ROWS],
    e: usize,
    kt: &[f32],
    kt_stride: usize,
    keys: usize,
    s: *mut f32,
    s_stride: usize,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let vectors = keys.div_ceil(LANES);
        let kt = kt.as_ptr();
        let mut c = 0;
        while c + KEY_VECTORS <= vectors {
            qk_tile::<KEY_VECTORS>(
                q,
                e,
                kt.add(c * LANES),
                kt_stride,
                s.add(c * LANES),
                s_stride,
            );
            c += KEY_VECTORS;
        }
        match vectors - c {
            2 => qk_tile::<2>(
                q,
                e,
                kt.add(c * LANES),
                kt_stride,
                s.add(c * LANES),
                s_stride,
            ),
            1 => qk_tile::<1>(
                q,
                e,
                kt.add(c * LANES),
                kt_stride,
                s.add(c * LANES),
                s_stride,
            ),
            _ => {}
        }
    }
}

/// `kt[d * width + j] = K[j][d]` for the `keys` rows of `k` (row stride
/// `stride`, `e` wide): 16 keys' element `d` gathered into one vector and
/// stored whole (a scalar transpose spent its time in the stores).
///
/// # Safety
/// AVX-512F; `k` holds `keys` rows of `e`; `kt` has `e` rows of `width >=
/// keys` (a multiple of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn transpose_keys(
    k: *const f32,
    stride: usize,
    keys: usize,
    e: usize,
    kt: &mut [f32],
    width: usize,
) {
    // SAFETY: the caller upholds the contract in the doc above; a gather
    // reads only the lanes its mask sets.
    unsafe {
        assert!(stride * LANES <= i32::MAX as usize && kt.len() >= e * width);
        let index = _mm512_mullo_epi32(
            _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
            _mm512_set1_epi32(stride as i32),
        );
        let dst = kt.as_mut_ptr();
        for j0 in (0..keys).step_by(LANES) {
            let m = lane_mask((keys - j0).min(LANES));
            let base = k.add(j0 * stride);
            for d in 0..e {
                let x = _mm512_mask_i32gather_ps::<4>(_mm512_setzero_ps(), m, index, base.add(d));
                _mm512_storeu_ps(dst.add(d * width + j0), x);
            }
        }
    }
}

/// `S[r][j] = Σ_d Q[r][d] Kᵀ[d][j]` for the [`ROWS`] query rows `q` and
/// the `C` key vectors at `kt` (row stride `kt_stride`), into `s` (row
/// stride `s_stride`). A function of its own so that its accumulators stay
/// in registers (ARCHITECTURE.md, PERF: the direct convolution's tiles).
///
/// # Safety
/// AVX-512F; each `q[r]` has `e` elements, `kt` holds `e` rows of `C`
/// vectors, `s` [`ROWS`] rows of `C` vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn qk_tile<const C: usize>(
    q: &[*const f32; ROWS],
    e: usize,
    kt: *const f32,
    kt_stride: usize,
    s: *mut f32,
    s_stride: usize,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); C]; ROWS];
        for d in 0..e {
            let mut kv = [_mm512_setzero_ps(); C];
            for (c, x) in kv.iter_mut().enumerate() {
                *x = _mm512_loadu_ps(kt.add(d * kt_stride + c * LANES));
            }
            for r in 0..ROWS {
                let qd = _mm512_set1_ps(*q[r].add(d));
                for c in 0..C {
                    acc[r][c] = _mm512_fmadd_ps(qd, kv[c], acc[r][c]);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate() {
            for (c, &a) in acc_r.iter().enumerate() {
                _mm512_storeu_ps(s.add(r * s_stride + c * LANES), a);
            }
        }
    }
}

/// The left operand of a tile product: [`ROWS`] rows whose element
/// `(r, j)` lies at `a + r * a_row + j * a_step`, summed over `j < n`.
/// `a_step` 1 reads rows of a row-major matrix; `a_row` 1 reads its
/// columns (the transposed product).
#[derive(Clone, Copy)]
pub(super) struct Sum {
    pub a: *const f32,
    pub a_row: usize,
    pub a_step: usize,
    pub n: usize,
}

impl Sum {
    /// The rows of a row-major matrix at `a` (row stride `stride`), `n` long.
    pub(super) fn rows(a: *const f32, stride: usize, n: usize) -> Self {
        Sum {
            a,
            a_row: stride,
            a_step: 1,
            n,
        }
    }

    /// The columns of a row-major matrix at `a` (row stride `stride`), `n` long.
    pub(super) fn columns(a: *const f32, stride: usize, n: usize) -> Self {
        Sum {
            a,
            a_row: 1,
            a_step: stride,
            n,
        }
    }
}

/// A row-major matrix at `data` (row stride `stride`, `cols` columns): a
/// tile product's right operand (`*const`) or its output (`*mut`).
#[derive(Clone, Copy)]
pub(super) struct Matrix<P> {
    pub data: P,
    pub stride: usize,
    pub cols: usize,
}

/// `O[r][c] = f[r] Σ_j A[r][j] B[j][c]` (or `+=` when `ADD`) for the first
/// `rows` rows of `O`, in tiles of the [`ROWS`] rows against up to 32
/// columns. Rows of `A` past `rows` are read (they must be readable) but
/// not stored.
///
/// # Safety
/// AVX-512F; `a` holds [`ROWS`] rows of `n` elements at its steps, `b` `n`
/// rows of `cols`, `o` `rows` rows of `cols`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn rows_times<const ADD: bool>(
    a: Sum,
    b: Matrix<*const f32>,
    f: &[f32; ROWS],
    o: Matrix<*mut f32>,
    rows: usize,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let mut c = 0;
        while c < b.cols {
            let lanes = (b.cols - c).min(VALUE_VECTORS * LANES);
            let (bc, oc) = (b.data.add(c), o.data.add(c));
            if lanes > LANES {
                row_tile::<2, ADD>(a, bc, b.stride, lanes, f, oc, o.stride, rows);
            } else {
                row_tile::<1, ADD>(a, bc, b.stride, lanes, f, oc, o.stride, rows);
            }
            c += lanes;
        }
    }
}

/// One tile of [`rows_times`]: the `lanes` columns at `b` (at most `C`
/// vectors), stored to the first `rows` rows of `o`.
///
/// # Safety
/// As [`rows_times`], `lanes <= C * 16`.
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline(never)]
unsafe fn row_tile<const C: usize, const ADD: bool>(
    a: Sum,
    b: *const f32,
    b_stride: usize,
    lanes: usize,
    f: &[f32; ROWS],
    o: *mut f32,
    o_stride: usize,
    rows: usize,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let masks: [__mmask16; C] =
            std::array::from_fn(|c| lane_mask(lanes.saturating_sub(c * LANES).min(LANES)));
        let mut acc = [[_mm512_setzero_ps(); C]; ROWS];
        for j in 0..a.n {
            let mut bv = [_mm512_setzero_ps(); C];
            for (c, x) in bv.iter_mut().enumerate() {
                *x = _mm512_maskz_loadu_ps(masks[c], b.add(j * b_stride + c * LANES));
            }
            let aj = a.a.add(j * a.a_step);
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*aj.add(r * a.a_row));
                for (s, &y) in acc_r.iter_mut().zip(&bv) {
                    *s = _mm512_fmadd_ps(x, y, *s);
                }
            }
        }
        for (r, acc_r) in acc.iter().enumerate().take(rows) {
            let fr = _mm512_set1_ps(f[r]);
            for (c, &s) in acc_r.iter().enumerate() {
                let at = o.add(r * o_stride + c * LANES);
                let x = if ADD {
                    _mm512_fmadd_ps(s, fr, _mm512_maskz_loadu_ps(masks[c], at))
                } else {
                    _mm512_mul_ps(s, fr)
                };
                _mm512_mask_storeu_ps(at, masks[c], x);
            }
        }
    }
}

/// The first `n` bits set.
#[cfg(target_arch = "x86_64")]
pub(super) fn lane_mask(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

/// One row of scores (`row`, whole vectors) to unnormalised probabilities:
/// the first `seen` are `exp(x - max)` with `x = score · scale + mask`,
/// the rest 0. Returns `1 / Σ` and the logsumexp `max + ln Σ`, or 0 and
/// `-inf` for a fully masked row (every `x` `-inf`), whose probabilities
/// are then all 0: its output is 0.
///
/// # Safety
/// AVX-512F; `seen <= row.len()`, `row.len()` a multiple of 16, and
/// `mask` (if any) has `seen` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn softmax_row(
    row: &mut [f32],
    seen: usize,
    scale: f32,
    mask: Option<*const f32>,
) -> (f32, f32) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let p = row.as_mut_ptr();
        let vectors = seen.div_ceil(LANES);
        let sc = _mm512_set1_ps(scale);
        let mut top = _mm512_set1_ps(f32::NEG_INFINITY);
        for c in 0..vectors {
            let m = lane_mask((seen - c * LANES).min(LANES));
            let s = _mm512_loadu_ps(p.add(c * LANES));
            let x = match mask {
                Some(a) => _mm512_fmadd_ps(s, sc, _mm512_maskz_loadu_ps(m, a.add(c * LANES))),
                None => _mm512_mul_ps(s, sc),
            };
            _mm512_storeu_ps(p.add(c * LANES), x);
            top = _mm512_mask_max_ps(top, m, top, x);
        }
        let top = _mm512_reduce_max_ps(top);
        if top == f32::NEG_INFINITY {
            row.fill(0.0);
            return (0.0, f32::NEG_INFINITY);
        }
        let shift = _mm512_set1_ps(top);
        let mut sum = _mm512_setzero_ps();
        for c in 0..vectors {
            let m = lane_mask((seen - c * LANES).min(LANES));
            let x = _mm512_sub_ps(_mm512_loadu_ps(p.add(c * LANES)), shift);
            let e = _mm512_maskz_mov_ps(m, exp_ps(x));
            _mm512_storeu_ps(p.add(c * LANES), e);
            sum = _mm512_add_ps(sum, e);
        }
        row[vectors * LANES..].fill(0.0);
        let total = _mm512_reduce_add_ps(sum);
        (1.0 / total, top + total.ln())
    }
}

/// `e^x` on 16 lanes for `x <= 0` (a shifted score), Cephes' polynomial
/// (the constants of `tensor::math::exp_f32`) with fused multiply-adds;
/// `2^n` by `scalef`, which rounds results below the normal range once.
#[allow(clippy::excessive_precision)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(super) fn exp_ps(x: __m512) -> __m512 {
    // max(-105, x) keeps a NaN `x` (the second operand wins when either is
    // NaN); below -105 the result is 0 anyway.
    let x = _mm512_max_ps(_mm512_set1_ps(-105.0), x);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_359_4), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.121_944_4e-4), r);
    let mut y = _mm512_set1_ps(1.987_569_1e-4);
    for c in [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5.000_000_1e-1,
    ] {
        y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(c));
    }
    let y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), r);
    _mm512_scalef_ps(_mm512_add_ps(y, _mm512_set1_ps(1.0)), n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::{attention_heads, attention_sweep, hard_mask, values};

    /// `softmax(Q Kᵀ · scale + mask) V` of head `b` in f64, 0 for a fully
    /// masked row.
    fn reference(
        g: &Geometry,
        q: &Rows<'_, f32>,
        k: &Rows<'_, f32>,
        v: &Rows<'_, f32>,
        mask: Option<&MaskView<'_, f32>>,
    ) -> Vec<f64> {
        let mut out = vec![0.0; g.batch * g.l * g.ev];
        for b in 0..g.batch {
            for i in 0..g.l {
                let x: Vec<f64> = (0..g.s)
                    .map(|j| {
                        if g.causal && j > i {
                            return f64::NEG_INFINITY;
                        }
                        let (qi, kj) = (q.row(b, i, g.e), k.row(b, j, g.e));
                        let dot: f64 = qi.iter().zip(kj).map(|(&a, &c)| a as f64 * c as f64).sum();
                        let m = mask.map_or(0.0, |m| {
                            m.data[m.offsets[b] + i * m.row_stride + j * m.col_stride] as f64
                        });
                        dot * g.scale + m
                    })
                    .collect();
                let top = x.iter().fold(f64::NEG_INFINITY, |a, &c| a.max(c));
                if top == f64::NEG_INFINITY {
                    continue;
                }
                let p: Vec<f64> = x.iter().map(|&c| (c - top).exp()).collect();
                let total: f64 = p.iter().sum();
                for (j, &pj) in p.iter().enumerate() {
                    let vj = v.row(b, j, g.ev);
                    for c in 0..g.ev {
                        out[(b * g.l + i) * g.ev + c] += pj / total * vj[c] as f64;
                    }
                }
            }
        }
        out
    }

    /// Runs the kernel on `batch` heads read at a row stride wider than
    /// the rows (as heads split off a `[B, T, H, D]` projection) and
    /// compares with the f64 reference.
    fn check(l: usize, s: usize, e: usize, ev: usize, causal: bool, masked: bool) {
        let batch = 3;
        let g = attention_heads(batch, [l, s, e, ev], causal);
        if !applies::<f32>(&g) {
            eprintln!("no AVX-512F: the tiled attention is not checked here");
            return;
        }
        let strided = |rows: usize, width: usize, seed: u64, data: &mut Vec<f32>| {
            let stride = width + 5;
            *data = values(batch * rows * stride + width, seed, 2.0);
            (0..batch)
                .map(|b| b * rows * stride + 3)
                .collect::<Vec<_>>()
        };
        let (mut qd, mut kd, mut vd) = (Vec::new(), Vec::new(), Vec::new());
        let qh = strided(l, e, 1, &mut qd);
        let kh = strided(s, e, 2, &mut kd);
        let vh = strided(s, ev, 3, &mut vd);
        let q = Rows {
            data: &qd,
            heads: qh,
            row_stride: e + 5,
        };
        let k = Rows {
            data: &kd,
            heads: kh,
            row_stride: e + 5,
        };
        let v = Rows {
            data: &vd,
            heads: vh,
            row_stride: ev + 5,
        };
        // One mask for every head.
        let md = hard_mask(l, s, 4);
        let mv = MaskView {
            data: &md,
            offsets: vec![0; batch],
            row_stride: s,
            col_stride: 1,
        };
        let mask = masked.then_some(&mv);
        let mut out = vec![MaybeUninit::new(f32::NAN); batch * l * ev];
        let _ = forward(&g, &q, &k, &v, mask, &mut out);
        let want = reference(&g, &q, &k, &v, mask);
        for (n, (o, w)) in out.iter().zip(&want).enumerate() {
            // SAFETY: the kernel wrote every element (its contract).
            let o = unsafe { o.assume_init() } as f64;
            assert!(
                (o - w).abs() <= 2e-5 * (1.0 + w.abs()),
                "l {l} s {s} e {e} ev {ev} causal {causal} masked {masked}: element {n}: {o} against {w}"
            );
        }
    }

    #[test]
    fn matches_an_f64_reference_on_odd_sizes() {
        attention_sweep(&[8, 17, 32, 64], &[1, 5, 127, 129, 300], check);
        // Value dims apart from the key dims, one and several vectors.
        check(20, 33, 32, 17, false, true);
        check(9, 70, 8, 48, true, false);
        check(130, 128, 32, 32, false, true);
    }

    #[test]
    fn reads_a_mask_broadcast_along_keys_or_rows() {
        let (batch, l, s, e) = (2, 11, 40, 16);
        let g = Geometry {
            batch,
            l,
            s,
            e,
            ev: e,
            scale: 0.3,
            causal: false,
            dropout: None,
        };
        if !applies::<f32>(&g) {
            return;
        }
        let (qd, kd, vd) = (
            values(batch * l * e, 5, 1.0),
            values(batch * s * e, 6, 1.0),
            values(batch * s * e, 7, 1.0),
        );
        let (q, k, v) = (
            Rows::packed(&qd[..], batch, l, e),
            Rows::packed(&kd[..], batch, s, e),
            Rows::packed(&vd[..], batch, s, e),
        );
        let md = values(batch * s.max(l), 8, 4.0);
        // Per row (keys broadcast), then per key (rows broadcast), per head.
        let by_row = MaskView {
            data: &md,
            offsets: vec![0, l],
            row_stride: 1,
            col_stride: 0,
        };
        let by_key = MaskView {
            data: &md,
            offsets: vec![0, s],
            row_stride: 0,
            col_stride: 1,
        };
        for m in [&by_row, &by_key] {
            let mut out = vec![MaybeUninit::new(f32::NAN); batch * l * e];
            let _ = forward(&g, &q, &k, &v, Some(m), &mut out);
            let want = reference(&g, &q, &k, &v, Some(m));
            for (o, w) in out.iter().zip(&want) {
                // SAFETY: the kernel wrote every element.
                let o = unsafe { o.assume_init() } as f64;
                assert!((o - w).abs() <= 2e-5 * (1.0 + w.abs()), "{o} against {w}");
            }
        }
    }

    #[test]
    fn declines_what_it_does_not_take() {
        let g = Geometry {
            batch: 1,
            l: 4,
            s: 4,
            e: 65,
            ev: 8,
            scale: 1.0,
            causal: false,
            dropout: None,
        };
        assert!(!applies::<f32>(&g));
        assert!(!applies::<f32>(&Geometry {
            e: 8,
            s: MAX_KEYS + 1,
            ..g
        }));
        assert!(!applies::<f32>(&Geometry {
            e: 8,
            dropout: Some((0.1, 1)),
            ..g
        }));
        assert!(!applies::<f64>(&Geometry { e: 8, ..g }));
    }
}
