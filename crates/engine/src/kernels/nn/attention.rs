//! Fused scaled dot-product attention in the style of flash attention: the
//! `L × S` score matrix of a head is never held whole. The forward walks
//! blocks of [`BLOCK_ROWS`] query rows against blocks of [`BLOCK_COLS`]
//! keys with an online softmax (a running maximum and sum per row), and
//! keeps only the output and the per-row logsumexp. The backward recomputes
//! the probabilities block by block from that logsumexp and forms
//! `dQ`, `dK`, `dV` with `D = rowsum(dO ⊙ O)` (`dS = P ⊙ (dP − D)`).
//!
//! Scratch per task: a few `BLOCK_ROWS × BLOCK_COLS` blocks, whatever the
//! sequence length, plus (backward) one head's `dQ`, `dK`, `dV`
//! accumulators: memory grows with `L + S` per head, never `L · S`.
//! Products of blocks go through `gemm` on views (`gemm_overwrite`,
//! `gemm_accumulate`), single-threaded inside a task. On a causal diagonal
//! block only each row's visible keys are exponentiated (`exp(-inf)` costs
//! far more than `exp` of a finite number on this path).
//!
//! Parallelism and determinism: the forward runs one task per (head, block
//! of query rows); a row's result does not depend on how rows are grouped.
//! The backward runs one task per head (so a single head runs on one
//! thread): `dK`/`dV` of a key block sum over
//! query blocks in increasing order, and `dQ` over key blocks in increasing
//! order, so every run gives the same bits whatever the thread count.
//!
//! Fully masked rows (every score `-inf`) give an output of 0 and no
//! gradient, as PyTorch's math backend (`_safe_softmax`) does.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::sparse::keeps;
use super::NnFloat;
use crate::kernels::matmul::{gemm_accumulate, gemm_overwrite, MatView};
use crate::kernels::simd::wide;
use crate::tensor::Filled;

/// Query rows per block (and per forward task).
pub const BLOCK_ROWS: usize = 64;
/// Keys per block.
pub const BLOCK_COLS: usize = 64;

/// The sizes and settings of one attention call: `batch` heads (all leading
/// dims flattened), `l` queries, `s` keys, head dims `e` (queries and keys)
/// and `ev` (values).
#[derive(Clone, Copy, Debug)]
pub struct Geometry {
    /// Leading (batch × head) count.
    pub batch: usize,
    /// Query length `L`.
    pub l: usize,
    /// Key length `S`.
    pub s: usize,
    /// Query/key head dim `E`.
    pub e: usize,
    /// Value head dim `Ev`.
    pub ev: usize,
    /// The factor of `Q Kᵀ`.
    pub scale: f64,
    /// PyTorch's `is_causal`: query `i` sees keys `j <= i` (top-left aligned).
    pub causal: bool,
    /// Dropout of the probabilities: `(p, seed)`, `p` in `(0, 1)`. Element
    /// `(b, i, j)` is kept iff `sparse::keeps(seed, p, (b L + i) S + j)`, the
    /// mask `dropout` would draw on the `[batch, L, S]` weights.
    pub dropout: Option<(f64, u64)>,
}

/// An additive mask broadcast to `[batch, L, S]`: element `(b, i, j)` is
/// `data[offsets[b] + i * row_stride + j * col_stride]`.
#[derive(Clone, Debug)]
pub struct MaskView<'a, T> {
    /// The mask's elements.
    pub data: &'a [T],
    /// Offset of each head's `[L, S]` view.
    pub offsets: Vec<usize>,
    /// Stride between query rows (0 when broadcast).
    pub row_stride: usize,
    /// Stride between keys (0 when broadcast).
    pub col_stride: usize,
}

/// A `[batch, rows, width]` operand read in place: row `i` of head `b` is
/// the `width` contiguous elements from `data[heads[b] + i * row_stride]`.
/// A strided view qualifies when its last dimension has stride 1, such as
/// the heads split off a `[B, T, H, D]` projection by a permute, which then
/// reach the kernel without a copy.
#[derive(Clone, Debug)]
pub struct Rows<'a, T> {
    /// The elements.
    pub data: &'a [T],
    /// Where each head's first row starts.
    pub heads: Vec<usize>,
    /// Distance between consecutive rows of a head.
    pub row_stride: usize,
}

impl<'a, T: Copy> Rows<'a, T> {
    /// `data` as `batch` row-major `[rows, width]` blocks, one after another.
    pub fn packed(data: &'a [T], batch: usize, rows: usize, width: usize) -> Self {
        Rows {
            data,
            heads: (0..batch).map(|b| b * rows * width).collect(),
            row_stride: width,
        }
    }

    /// Head `b` from its first row on (a gemm view reads it with `row_stride`).
    fn head(&self, b: usize) -> &'a [T] {
        &self.data[self.heads[b]..]
    }

    /// Row `i` of head `b` (`width` elements).
    pub(super) fn row(&self, b: usize, i: usize, width: usize) -> &'a [T] {
        &self.data[self.heads[b] + i * self.row_stride..][..width]
    }
}

impl<'a, T: NnFloat> Rows<'a, T> {
    /// Rows `i0..i1` of head `b`, each scaled by `scale`, packed row-major:
    /// whole-row copies, then one scaling pass (ARCHITECTURE.md, PERF).
    fn scaled(&self, b: usize, i0: usize, i1: usize, width: usize, scale: T) -> Vec<T> {
        let mut out = Vec::with_capacity((i1 - i0) * width);
        for i in i0..i1 {
            out.extend_from_slice(self.row(b, i, width));
        }
        if scale != T::one() {
            wide(
                #[inline(always)]
                || out.iter_mut().for_each(|x| *x *= scale),
            );
        }
        out
    }

    /// The `rows` rows of head `b` as one row-major block: borrowed when
    /// they already are one, else copied.
    fn packed_head(&self, b: usize, rows: usize, width: usize) -> std::borrow::Cow<'a, [T]> {
        if self.row_stride == width || rows <= 1 {
            std::borrow::Cow::Borrowed(&self.head(b)[..rows * width])
        } else {
            std::borrow::Cow::Owned(self.scaled(b, 0, rows, width, T::one()))
        }
    }
}

/// The maximum of `init` and `row`, in eight lanes (vectorises; max is
/// exact, so the grouping does not change the result).
#[inline(always)]
fn row_max<T: NnFloat>(row: &[T], init: T) -> T {
    let mut acc = [init; 8];
    let chunks = row.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        for j in 0..8 {
            acc[j] = acc[j].max(c[j]);
        }
    }
    let m = tail.iter().fold(init, |a, &x| a.max(x));
    acc.iter().fold(m, |a, &x| a.max(x))
}

/// `Σ a[i] b[i]` in eight fixed lanes (vectorises; a fixed order, so the
/// same bits on every run).
#[inline(always)]
pub(super) fn dot<T: NnFloat>(a: &[T], b: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ta, tb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for j in 0..8 {
            acc[j] += x[j] * y[j];
        }
    }
    let t = ta.iter().zip(tb).fold(T::zero(), |s, (&x, &y)| s + x * y);
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t
}

/// `Σ a[i]` in eight fixed lanes.
#[inline(always)]
fn sum<T: NnFloat>(a: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let ca = a.chunks_exact(8);
    let ta = ca.remainder();
    for x in ca {
        for j in 0..8 {
            acc[j] += x[j];
        }
    }
    let t = ta.iter().fold(T::zero(), |s, &x| s + x);
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + t
}

/// `s` cut into `count` chunks of `size` (`count` empty slices when `size`
/// is 0, where `chunks_mut` would panic).
fn chunks_of<T>(s: &mut [T], size: usize, count: usize) -> Vec<&mut [T]> {
    if size == 0 {
        (0..count).map(|_| <&mut [T]>::default()).collect()
    } else {
        s.chunks_mut(size).collect()
    }
}

/// Writes `src` into `dst` (equal lengths).
fn write_all<T: Copy>(dst: &mut [MaybeUninit<T>], src: &[T]) {
    assert_eq!(dst.len(), src.len());
    for (d, &x) in dst.iter_mut().zip(src) {
        d.write(x);
    }
}

impl Geometry {
    /// The key range query rows `i0..i1` can see.
    fn key_end(&self, i1: usize) -> usize {
        if self.causal {
            self.s.min(i1)
        } else {
            self.s
        }
    }

    fn keep_scale(&self) -> f64 {
        self.dropout.map_or(1.0, |(p, _)| 1.0 / (1.0 - p))
    }
}

/// One block of the score matrix of head `b`: query rows `i0..i0 + br`
/// against keys `j0..j0 + bc`, what the blocked forward and backward walk.
#[derive(Clone, Copy)]
struct Tile {
    b: usize,
    i0: usize,
    br: usize,
    j0: usize,
    bc: usize,
}

/// Scores of the tile's query rows (already scaled, `qs`) against its keys
/// into `sblk` (`br × bc`), with the mask added and causal positions set to
/// `-inf`.
#[inline(always)]
fn scores<T: NnFloat>(
    g: &Geometry,
    tile: Tile,
    qs: &[T],
    k: &Rows<'_, T>,
    mask: Option<&MaskView<'_, T>>,
    sblk: &mut [T],
) {
    let Tile { b, i0, br, j0, bc } = tile;
    let e = g.e;
    gemm_overwrite(
        sblk,
        MatView::rows(br, bc, bc),
        qs,
        MatView::rows(br, e, e),
        &k.head(b)[j0 * k.row_stride..],
        MatView::rows(bc, e, k.row_stride).t(),
        false,
    );
    if let Some(m) = mask {
        let base = m.offsets[b];
        for r in 0..br {
            let row = &mut sblk[r * bc..(r + 1) * bc];
            let start = base + (i0 + r) * m.row_stride + j0 * m.col_stride;
            if m.col_stride == 1 {
                row.iter_mut()
                    .zip(&m.data[start..start + bc])
                    .for_each(|(s, &a)| *s += a);
            } else {
                for (c, s) in row.iter_mut().enumerate() {
                    *s += m.data[start + c * m.col_stride];
                }
            }
        }
    }
    if g.causal {
        for r in 0..br {
            let i = i0 + r;
            // Keys j > i are hidden.
            let first_hidden = (i + 1).saturating_sub(j0).min(bc);
            sblk[r * bc + first_hidden..(r + 1) * bc].fill(T::neg_infinity());
        }
    }
}

/// `e^x` over a block of scores. Causal blocks on the diagonal exponentiate
/// only each row's visible keys and write 0 for the rest: `exp` of `-inf`
/// is far slower than of a finite number here, and half of such a block is
/// hidden.
fn exp_block<T: NnFloat>(g: &Geometry, tile: Tile, blk: &mut [T]) {
    let Tile { i0, br, j0, bc, .. } = tile;
    if !g.causal || j0 + bc <= i0 + 1 {
        T::exp_in_place(blk);
        return;
    }
    for r in 0..br {
        let visible = (i0 + r + 1).saturating_sub(j0).min(bc);
        let row = &mut blk[r * bc..(r + 1) * bc];
        T::exp_in_place(&mut row[..visible]);
        row[visible..].fill(T::zero());
    }
}

/// Multiplies a block of probabilities of head `b` by its dropout mask
/// scaled by `1 / (1 - p)`.
fn apply_dropout<T: NnFloat>(g: &Geometry, tile: Tile, blk: &mut [T]) {
    let Tile { b, i0, br, j0, bc } = tile;
    let Some((p, seed)) = g.dropout else { return };
    let inv = T::from_f64(g.keep_scale());
    for r in 0..br {
        let base = ((b * g.l + i0 + r) * g.s + j0) as u64;
        for (c, v) in blk[r * bc..(r + 1) * bc].iter_mut().enumerate() {
            *v = if keeps(seed, p, base + c as u64) {
                *v * inv
            } else {
                T::zero()
            };
        }
    }
}

/// The forward: writes every element of `out` (`[batch, L, Ev]`,
/// row-major) and of `lse`, the per-row logsumexp of the scores
/// (`[batch, L]`; `-inf` for a fully masked row). `q` is `[batch, L, E]`,
/// `k` `[batch, S, E]`, `v` `[batch, S, Ev]`.
#[allow(clippy::too_many_arguments)]
pub fn forward<'o, 'l, T: NnFloat>(
    g: &Geometry,
    q: &Rows<'_, T>,
    k: &Rows<'_, T>,
    v: &Rows<'_, T>,
    mask: Option<&MaskView<'_, T>>,
    out: &'o mut [MaybeUninit<T>],
    lse: &'l mut [MaybeUninit<T>],
) -> (Filled<'o>, Filled<'l>) {
    forward_into(g, Inputs { q, k, v, mask }, out, lse);
    // SAFETY: `forward_into` writes every element of both outputs (the doc
    // above; their lengths are asserted).
    unsafe { (Filled::assume(out), Filled::assume(lse)) }
}

/// The operands both passes read: queries, keys, values and the mask.
struct Inputs<'r, 'a, T> {
    q: &'r Rows<'a, T>,
    k: &'r Rows<'a, T>,
    v: &'r Rows<'a, T>,
    mask: Option<&'r MaskView<'a, T>>,
}

// By hand: a derive would ask `T: Copy` of the references' targets.
impl<T> Clone for Inputs<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for Inputs<'_, '_, T> {}

/// [`forward`]'s body.
fn forward_into<T: NnFloat>(
    g: &Geometry,
    ins: Inputs<'_, '_, T>,
    out: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    let (l, ev) = (g.l, g.ev);
    for x in [ins.q, ins.k, ins.v] {
        assert_eq!(x.heads.len(), g.batch, "one offset per head");
    }
    assert!(out.len() == g.batch * l * ev && lse.len() == g.batch * l);
    if l == 0 {
        return;
    }
    let blocks = l.div_ceil(BLOCK_ROWS);
    chunks_of(out, l * ev, g.batch)
        .into_par_iter()
        .zip(lse.par_chunks_mut(l))
        .enumerate()
        .for_each(|(b, (o_head, lse_head))| {
            chunks_of(o_head, BLOCK_ROWS * ev, blocks)
                .into_par_iter()
                .zip(lse_head.par_chunks_mut(BLOCK_ROWS))
                .enumerate()
                .for_each(|(blk, (o, ls))| forward_block(g, b, blk * BLOCK_ROWS, ins, o, ls));
        });
}

/// One task of the forward: query rows `i0..` of head `b`. Its per-row
/// passes (mask, maximum, shift, sums, rescaling) run inside `wide`, at
/// the CPU's vector width (ARCHITECTURE.md, PERF).
fn forward_block<T: NnFloat>(
    g: &Geometry,
    b: usize,
    i0: usize,
    ins: Inputs<'_, '_, T>,
    out: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    wide(
        #[inline(always)]
        || forward_block_body(g, b, i0, ins, out, lse),
    )
}

#[inline(always)]
fn forward_block_body<T: NnFloat>(
    g: &Geometry,
    b: usize,
    i0: usize,
    ins: Inputs<'_, '_, T>,
    out: &mut [MaybeUninit<T>],
    lse: &mut [MaybeUninit<T>],
) {
    let Inputs { q, k, v, mask } = ins;
    let (l, ev) = (g.l, g.ev);
    let i1 = (i0 + BLOCK_ROWS).min(l);
    let br = i1 - i0;
    let qs = q.scaled(b, i0, i1, g.e, T::from_f64(g.scale));
    let v_head = v.head(b);
    let mut m = vec![T::neg_infinity(); br];
    let mut total = vec![T::zero(); br];
    let mut alpha = vec![T::zero(); br];
    let mut acc = vec![T::zero(); br * ev];
    let mut sblk = vec![T::zero(); br * BLOCK_COLS];
    let end = g.key_end(i1);
    for j0 in (0..end).step_by(BLOCK_COLS) {
        let bc = BLOCK_COLS.min(end - j0);
        let tile = Tile { b, i0, br, j0, bc };
        let blk = &mut sblk[..br * bc];
        scores(g, tile, &qs, k, mask, blk);
        for r in 0..br {
            let row = &mut blk[r * bc..(r + 1) * bc];
            let top = row_max(row, m[r]);
            let shift = if top == T::neg_infinity() {
                T::zero()
            } else {
                top
            };
            row.iter_mut().for_each(|x| *x -= shift);
            alpha[r] = m[r] - shift;
            m[r] = top;
        }
        exp_block(g, tile, blk);
        // The rescaling of what came before; 0 on a row's first block
        // (m was -inf), without calling exp on -inf.
        for a in alpha.iter_mut() {
            *a = if *a == T::neg_infinity() {
                T::zero()
            } else {
                a.exp()
            };
        }
        for r in 0..br {
            let row = &blk[r * bc..(r + 1) * bc];
            total[r] = total[r] * alpha[r] + sum(row);
            acc[r * ev..(r + 1) * ev]
                .iter_mut()
                .for_each(|o| *o *= alpha[r]);
        }
        apply_dropout(g, tile, blk);
        gemm_accumulate(
            &mut acc,
            MatView::rows(br, ev, ev),
            blk,
            MatView::rows(br, bc, bc),
            &v_head[j0 * v.row_stride..],
            MatView::rows(bc, ev, v.row_stride),
            false,
        );
    }
    for r in 0..br {
        let o = &mut acc[r * ev..(r + 1) * ev];
        if total[r] > T::zero() {
            let inv = T::one() / total[r];
            o.iter_mut().for_each(|x| *x *= inv);
            lse[r].write(m[r] + total[r].ln());
        } else {
            o.fill(T::zero());
            lse[r].write(T::neg_infinity());
        }
    }
    write_all(out, &acc);
}

/// What a backward reads: the forward's operands, its output `o`
/// (row-major `[batch, L, Ev]`), the output's gradient `d_o` (`[batch, L,
/// Ev]`) and the forward's logsumexp `lse` (`[batch, L]`). Both backwards
/// take it, this flash one and the register tiles'
/// (`attention_tiled_backward.rs`).
pub struct BackwardInputs<'r, 'a, T> {
    /// Queries, `[batch, L, E]`.
    pub q: &'r Rows<'a, T>,
    /// Keys, `[batch, S, E]`.
    pub k: &'r Rows<'a, T>,
    /// Values, `[batch, S, Ev]`.
    pub v: &'r Rows<'a, T>,
    /// The additive mask, if any.
    pub mask: Option<&'r MaskView<'a, T>>,
    /// The forward's output, row-major `[batch, L, Ev]`.
    pub o: &'r [T],
    /// The output's gradient, `[batch, L, Ev]`.
    pub d_o: &'r Rows<'a, T>,
    /// The forward's per-row logsumexp, `[batch, L]`.
    pub lse: &'r [T],
}

/// The gradients a backward writes, each row-major: `dQ` (`[batch, L,
/// E]`), `dK` (`[batch, S, E]`), `dV` (`[batch, S, Ev]`).
pub(super) type Grads<'g, T> = [&'g mut [MaybeUninit<T>]; 3];

/// One head's rows of what a backward reads beside the operands: the
/// forward's output and logsumexp, and the output's gradient.
pub(super) struct HeadRows<'r, 'a, T> {
    pub o: &'r [T],
    pub lse: &'r [T],
    pub d_o: &'r Rows<'a, T>,
}

// By hand: a derive would ask `T: Copy` of the references' targets.
impl<T> Clone for HeadRows<'_, '_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for HeadRows<'_, '_, T> {}

impl<'r, 'a, T: Send + Sync> BackwardInputs<'r, 'a, T> {
    /// Panics unless `o`, `lse` and `grads` have the lengths of `g` and
    /// every operand one offset per head.
    pub(super) fn check(&self, g: &Geometry, grads: &Grads<'_, T>) {
        let (l, s, e, ev) = (g.l, g.s, g.e, g.ev);
        assert!(self.o.len() == g.batch * l * ev && self.lse.len() == g.batch * l);
        for x in [self.q, self.k, self.v, self.d_o] {
            assert_eq!(x.heads.len(), g.batch, "one offset per head");
        }
        let [dq, dk, dv] = grads;
        assert!(
            dq.len() == g.batch * l * e
                && dk.len() == g.batch * s * e
                && dv.len() == g.batch * s * ev
        );
    }

    /// Runs `head(b, rows, grads)` for every head `b`, with its rows and
    /// its gradients, one rayon task a head.
    pub(super) fn for_each_head(
        &self,
        g: &Geometry,
        [dq, dk, dv]: Grads<'_, T>,
        head: impl Fn(usize, HeadRows<'r, 'a, T>, Grads<'_, T>) + Send + Sync,
    ) {
        let (l, s, e, ev) = (g.l, g.s, g.e, g.ev);
        chunks_of(dq, l * e, g.batch)
            .into_par_iter()
            .zip(chunks_of(dk, s * e, g.batch))
            .zip(chunks_of(dv, s * ev, g.batch))
            .enumerate()
            .for_each(|(b, ((dq, dk), dv))| {
                let rows = HeadRows {
                    o: &self.o[b * l * ev..(b + 1) * l * ev],
                    lse: &self.lse[b * l..(b + 1) * l],
                    d_o: self.d_o,
                };
                head(b, rows, [dq, dk, dv])
            });
    }
}

/// The gradients `dQ`, `dK`, `dV` (written to `dq`, `dk`, `dv`) given what
/// the forward read and wrote (`ins`).
pub fn backward<'q, 'k, 'v, T: NnFloat>(
    g: &Geometry,
    ins: &BackwardInputs<'_, '_, T>,
    dq: &'q mut [MaybeUninit<T>],
    dk: &'k mut [MaybeUninit<T>],
    dv: &'v mut [MaybeUninit<T>],
) -> (Filled<'q>, Filled<'k>, Filled<'v>) {
    backward_into(g, ins, [&mut *dq, &mut *dk, &mut *dv]);
    // SAFETY: `backward_into` writes every element of its three outputs
    // (the doc above).
    unsafe { (Filled::assume(dq), Filled::assume(dk), Filled::assume(dv)) }
}

/// [`backward`]'s body.
fn backward_into<T: NnFloat>(g: &Geometry, ins: &BackwardInputs<'_, '_, T>, grads: Grads<'_, T>) {
    ins.check(g, &grads);
    let fwd = Inputs {
        q: ins.q,
        k: ins.k,
        v: ins.v,
        mask: ins.mask,
    };
    ins.for_each_head(g, grads, |b, rows, grads| {
        backward_head(g, b, fwd, rows, grads)
    });
}

fn backward_head<T: NnFloat>(
    g: &Geometry,
    b: usize,
    ins: Inputs<'_, '_, T>,
    rows: HeadRows<'_, '_, T>,
    [dq_out, dk_out, dv_out]: Grads<'_, T>,
) {
    let Inputs { q, k, v, mask } = ins;
    let (l, s, e, ev) = (g.l, g.s, g.e, g.ev);
    let scale = T::from_f64(g.scale);
    let qs = q.scaled(b, 0, l, e, scale);
    let (k_head, v_head) = (k.head(b), v.head(b));
    let HeadRows {
        o: o_head,
        lse: lse_head,
        d_o,
    } = rows;
    let do_head = d_o.packed_head(b, l, ev);
    // D = rowsum(dO ⊙ O).
    let dsum: Vec<T> = (0..l)
        .map(|i| {
            dot(
                &do_head[i * ev..(i + 1) * ev],
                &o_head[i * ev..(i + 1) * ev],
            )
        })
        .collect();
    let mut dq = vec![T::zero(); l * e];
    let mut dk = vec![T::zero(); s * e];
    let mut dv = vec![T::zero(); s * ev];
    let mut pblk = [T::zero(); BLOCK_ROWS * BLOCK_COLS];
    let mut dblk = [T::zero(); BLOCK_ROWS * BLOCK_COLS];
    let mut pdrop = if g.dropout.is_some() {
        vec![T::zero(); BLOCK_ROWS * BLOCK_COLS]
    } else {
        Vec::new()
    };
    for j0 in (0..s).step_by(BLOCK_COLS) {
        let bc = BLOCK_COLS.min(s - j0);
        let k_blk = &k_head[j0 * k.row_stride..];
        let v_blk = &v_head[j0 * v.row_stride..];
        // Causal: query rows below j0 see none of these keys.
        let first = if g.causal { j0 / BLOCK_ROWS } else { 0 };
        for i0 in (first * BLOCK_ROWS..l).step_by(BLOCK_ROWS) {
            let i1 = (i0 + BLOCK_ROWS).min(l);
            let br = i1 - i0;
            let tile = Tile { b, i0, br, j0, bc };
            let p = &mut pblk[..br * bc];
            scores(g, tile, &qs[i0 * e..i1 * e], k, mask, p);
            for r in 0..br {
                let ls = lse_head[i0 + r];
                let row = &mut p[r * bc..(r + 1) * bc];
                if ls == T::neg_infinity() {
                    row.fill(T::neg_infinity());
                } else {
                    row.iter_mut().for_each(|x| *x -= ls);
                }
            }
            exp_block(g, tile, p);
            let do_blk = &do_head[i0 * ev..i1 * ev];
            // dV_j += P'ᵀ dO_i, P' the dropped-out probabilities.
            let pd: &[T] = if g.dropout.is_some() {
                let pd = &mut pdrop[..br * bc];
                pd.copy_from_slice(p);
                apply_dropout(g, tile, pd);
                pd
            } else {
                p
            };
            gemm_accumulate(
                &mut dv[j0 * ev..(j0 + bc) * ev],
                MatView::rows(bc, ev, ev),
                pd,
                MatView::rows(br, bc, bc).t(),
                do_blk,
                MatView::rows(br, ev, ev),
                false,
            );
            // dP = dO_i V_jᵀ (through the dropout mask), dS = P ⊙ (dP − D).
            let ds = &mut dblk[..br * bc];
            gemm_overwrite(
                ds,
                MatView::rows(br, bc, bc),
                do_blk,
                MatView::rows(br, ev, ev),
                v_blk,
                MatView::rows(bc, ev, v.row_stride).t(),
                false,
            );
            apply_dropout(g, tile, ds);
            let p = &pblk[..br * bc];
            for r in 0..br {
                let dr = dsum[i0 + r];
                for (d, &pp) in ds[r * bc..(r + 1) * bc]
                    .iter_mut()
                    .zip(&p[r * bc..(r + 1) * bc])
                {
                    *d = pp * (*d - dr);
                }
            }
            // dQ_i += dS K_j (scaled at the end); dK_j += dSᵀ (scale Q_i).
            gemm_accumulate(
                &mut dq[i0 * e..i1 * e],
                MatView::rows(br, e, e),
                ds,
                MatView::rows(br, bc, bc),
                k_blk,
                MatView::rows(bc, e, k.row_stride),
                false,
            );
            gemm_accumulate(
                &mut dk[j0 * e..(j0 + bc) * e],
                MatView::rows(bc, e, e),
                ds,
                MatView::rows(br, bc, bc).t(),
                &qs[i0 * e..i1 * e],
                MatView::rows(br, e, e),
                false,
            );
        }
    }
    dq.iter_mut().for_each(|x| *x *= scale);
    write_all(dq_out, &dq);
    write_all(dk_out, &dk);
    write_all(dv_out, &dv);
}
