//! The backward of the small-head attention (`attention_tiled.rs`) on the
//! same AVX-512 register tiles: `dQ`, `dK`, `dV` of one head per task.
//!
//! A head's query rows go in chunks of [`CHUNK`]; per block of 8 rows the
//! tiles recompute the scores `Q Kᵀ` exactly as the forward did (the same
//! tile, the same order over the head dim) and form `dP = dO Vᵀ` beside
//! them (the values transposed once per head, as the keys are); one pass
//! per row turns them into `P = exp(x - lse)` and `dS = P ⊙ (dP − D)`
//! (`D = rowsum(dO ⊙ O)`, `x` the scaled, masked score), and `dQ = scale ·
//! dS K` is stored from the next tile. After each chunk, `dV += Pᵀ dO` and
//! `dK += scale · dSᵀ Q` run over its rows as tiles of 8 keys, reading the
//! chunk's `P` and `dS` down their columns; causal keys skip the rows that
//! cannot see them. Scratch per task grows with `L + S` (two `CHUNK × S`
//! blocks), never `L · S`.
//!
//! The flash backward (`attention.rs`) makes five `gemm` calls per 64 × 64
//! block; at `T = 64` and dim 32 (the GPT of W4) their set-up cost about
//! as much as their arithmetic (ARCHITECTURE.md, PERF: "Small attention
//! heads"). Each head's sums run in an order fixed by the geometry, and
//! one task owns a head, so the bits do not depend on the thread count.

use std::mem::MaybeUninit;

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::attention::dot;
use super::attention::{BackwardInputs, Geometry, Grads, HeadRows};
use super::attention_tiled::{
    applies, as_f32, as_f32_out, as_f32_rows, F32Operands, Operands, ROWS,
};
#[cfg(target_arch = "x86_64")]
use super::attention_tiled::{
    exp_ps, lane_mask, rows_times, scores_tiles, transpose_keys, Matrix, Sum, LANES,
};
use crate::tensor::{Element, Filled};

/// Query rows whose probabilities and `dS` are held at once (a multiple of
/// [`ROWS`]): 64 rows of up to 1024 keys is 256 KiB each, in L2.
const CHUNK: usize = 64;

/// The gradients `dQ`, `dK`, `dV` (written to `dq`, `dk`, `dv`) of the
/// attention [`forward_with_lse`] computed, given what it read and wrote
/// (`ins`). Panics unless [`applies`] holds and the operands cover the
/// geometry.
///
/// [`forward_with_lse`]: super::attention_tiled::forward_with_lse
pub fn backward<'q, 'k, 'v, T: Element>(
    g: &Geometry,
    ins: &BackwardInputs<'_, '_, T>,
    dq: &'q mut [MaybeUninit<T>],
    dk: &'k mut [MaybeUninit<T>],
    dv: &'v mut [MaybeUninit<T>],
) -> (Filled<'q>, Filled<'k>, Filled<'v>) {
    assert!(
        applies::<T>(g),
        "attention_tiled_backward::backward outside its domain"
    );
    let ops = F32Operands::of(ins.q, ins.k, ins.v, ins.mask);
    let view = ops.view();
    let d_o = as_f32_rows(ins.d_o);
    let ins = BackwardInputs {
        q: view.q,
        k: view.k,
        v: view.v,
        mask: view.mask,
        o: as_f32(ins.o),
        d_o: &d_o,
        lse: as_f32(ins.lse),
    };
    backward_f32(
        g,
        view,
        &ins,
        [as_f32_out(dq), as_f32_out(dk), as_f32_out(dv)],
    );
    // SAFETY: `backward_f32` writes every element of its three outputs
    // (its doc; the lengths are asserted there).
    unsafe { (Filled::assume(dq), Filled::assume(dk), Filled::assume(dv)) }
}

/// [`backward`] on f32 (`ops` the operands of `ins`): writes every element
/// of the three gradients.
fn backward_f32(
    g: &Geometry,
    ops: Operands<'_, '_>,
    ins: &BackwardInputs<'_, '_, f32>,
    grads: Grads<'_, f32>,
) {
    let (l, ev) = (g.l, g.ev);
    ins.check(g, &grads);
    if l == 0 {
        // No query sees a key: their gradients are 0.
        let [_, dk, dv] = grads;
        dk.iter_mut().chain(dv.iter_mut()).for_each(|x| {
            x.write(0.0);
        });
        return;
    }
    if g.batch == 0 {
        return;
    }
    ops.check(g);
    let d_o = ins.d_o;
    for &h in &d_o.heads {
        assert!(
            h + (l - 1) * d_o.row_stride + ev <= d_o.data.len(),
            "rows out of bounds"
        );
    }
    ins.for_each_head(g, grads, |b, head, [dq, dk, dv]| {
        // SAFETY: `applies` checked AVX-512F; the operands' extents
        // were checked above.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            backward_head(g, b, ops, head, [dq, dk, dv])
        }
        #[cfg(not(target_arch = "x86_64"))]
        unreachable!(
            "`applies` is false off x86-64: {b} {}",
            dq.len() + dk.len() + dv.len() + head.o.len()
        )
    });
}

/// One task: the gradients of head `b`.
///
/// # Safety
/// The CPU has AVX-512F; the operands cover the geometry (checked by
/// [`backward_f32`]).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn backward_head(
    g: &Geometry,
    b: usize,
    ops: Operands<'_, '_>,
    head: HeadRows<'_, '_, f32>,
    [dq_out, dk_out, dv_out]: Grads<'_, f32>,
) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        let Operands { q, k, v, .. } = ops;
        let (l, s, e, ev) = (g.l, g.s, g.e, g.ev);
        let scale = g.scale as f32;
        let width = s.div_ceil(LANES) * LANES;
        let (q_head, k_head, v_head) = (
            q.data.as_ptr().add(q.heads[b]),
            k.data.as_ptr().add(k.heads[b]),
            v.data.as_ptr().add(v.heads[b]),
        );
        let do_head = head.d_o.data.as_ptr().add(head.d_o.heads[b]);
        let do_stride = head.d_o.row_stride;
        let mut kt = vec![0.0f32; e * width];
        transpose_keys(k_head, k.row_stride, s, e, &mut kt, width);
        let mut vt = vec![0.0f32; ev * width];
        transpose_keys(v_head, v.row_stride, s, ev, &mut vt, width);
        let mut dk = vec![0.0f32; s * e];
        let mut dv = vec![0.0f32; s * ev];
        let mut p = vec![0.0f32; CHUNK * width];
        let mut ds = vec![0.0f32; CHUNK * width];
        let mut gathered = vec![0.0f32; if ops.mask.is_some() { s } else { 0 }];
        let dq_head = dq_out.as_mut_ptr().cast::<f32>();
        for c0 in (0..l).step_by(CHUNK) {
            let c1 = l.min(c0 + CHUNK);
            // Keys any row of the chunk sees, and the columns its products read.
            let chunk_keys = if g.causal { s.min(c1) } else { s };
            let chunk_width = chunk_keys.div_ceil(LANES) * LANES;
            for r0 in (c0..c1).step_by(ROWS) {
                let br = ROWS.min(c1 - r0);
                let block_keys = if g.causal { s.min(r0 + br) } else { s };
                let (pp, dsp) = (
                    p.as_mut_ptr().add((r0 - c0) * width),
                    ds.as_mut_ptr().add((r0 - c0) * width),
                );
                // A tile past the last row repeats it.
                let row = |r: usize| r0 + r.min(br - 1);
                let qrows: [*const f32; ROWS] =
                    std::array::from_fn(|r| q_head.add(row(r) * q.row_stride));
                let dorows: [*const f32; ROWS] =
                    std::array::from_fn(|r| do_head.add(row(r) * do_stride));
                scores_tiles(&qrows, e, &kt, width, block_keys, pp, width);
                scores_tiles(&dorows, ev, &vt, width, block_keys, dsp, width);
                for r in 0..ROWS {
                    let at = (r0 - c0 + r) * width;
                    let (p_row, ds_row) =
                        (&mut p[at..at + chunk_width], &mut ds[at..at + chunk_width]);
                    if r >= br {
                        // A repeated row: read by the `dQ` tile, never stored.
                        p_row.fill(0.0);
                        ds_row.fill(0.0);
                        continue;
                    }
                    let i = r0 + r;
                    let seen = if g.causal { s.min(i + 1) } else { s };
                    let d = dot(head.d_o.row(b, i, ev), &head.o[i * ev..(i + 1) * ev]);
                    let mask_row = ops.mask_row(b, i, &mut gathered);
                    let x = RowScores {
                        seen,
                        scale,
                        mask: mask_row,
                        lse: head.lse[i],
                    };
                    probabilities_and_ds(p_row, ds_row, x, d);
                }
                // dQ = scale · dS K for the block's rows.
                let sum = Sum::rows(dsp, width, block_keys);
                let keys = Matrix {
                    data: k_head,
                    stride: k.row_stride,
                    cols: e,
                };
                let out = Matrix {
                    data: dq_head.add(r0 * e),
                    stride: e,
                    cols: e,
                };
                rows_times::<false>(sum, keys, &[scale; ROWS], out, br);
            }
            // dV += Pᵀ dO and dK += scale · dSᵀ Q over the chunk's rows, 8
            // keys at a time; a causal key is seen from its own row on.
            for j0 in (0..chunk_keys).step_by(ROWS) {
                let keys = ROWS.min(chunk_keys - j0);
                let i_start = if g.causal { c0.max(j0) } else { c0 };
                if i_start >= c1 {
                    continue;
                }
                let at = (i_start - c0) * width + j0;
                let n = c1 - i_start;
                let column = |m: &[f32]| Sum::columns(m.as_ptr().add(at), width, n);
                let grads = Matrix {
                    data: do_head.add(i_start * do_stride),
                    stride: do_stride,
                    cols: ev,
                };
                let to_dv = Matrix {
                    data: dv.as_mut_ptr().add(j0 * ev),
                    stride: ev,
                    cols: ev,
                };
                rows_times::<true>(column(&p), grads, &[1.0; ROWS], to_dv, keys);
                let queries = Matrix {
                    data: q_head.add(i_start * q.row_stride),
                    stride: q.row_stride,
                    cols: e,
                };
                let to_dk = Matrix {
                    data: dk.as_mut_ptr().add(j0 * e),
                    stride: e,
                    cols: e,
                };
                rows_times::<true>(column(&ds), queries, &[scale; ROWS], to_dk, keys);
            }
        }
        for (d, &x) in dk_out.iter_mut().zip(&dk) {
            d.write(x);
        }
        for (d, &x) in dv_out.iter_mut().zip(&dv) {
            d.write(x);
        }
    }
}

/// How to read one row of raw scores: the first `seen` keys are visible,
/// each `x = score · scale + mask` (as the forward's `softmax_row` forms
/// it), and `lse` is the forward's logsumexp of the row.
#[derive(Clone, Copy)]
struct RowScores {
    seen: usize,
    scale: f32,
    mask: Option<*const f32>,
    lse: f32,
}

/// One row: the raw scores in `p` become `P = exp(x - lse)` and the `dP`
/// in `ds` becomes `dS = P ⊙ (dP − d)`, both 0 past the visible keys (to
/// the end of the rows) and for a fully masked row (`lse` `-inf`).
///
/// # Safety
/// AVX-512F; `p` and `ds` have the same length, a multiple of 16, at least
/// `seen`; the mask (if any) has `seen` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn probabilities_and_ds(p: &mut [f32], ds: &mut [f32], x: RowScores, d: f32) {
    // SAFETY: the caller upholds the contract in the doc above.
    unsafe {
        if x.lse == f32::NEG_INFINITY {
            p.fill(0.0);
            ds.fill(0.0);
            return;
        }
        let vectors = x.seen.div_ceil(LANES);
        let (pp, dp) = (p.as_mut_ptr(), ds.as_mut_ptr());
        let (sc, shift, dv) = (
            _mm512_set1_ps(x.scale),
            _mm512_set1_ps(x.lse),
            _mm512_set1_ps(d),
        );
        for c in 0..vectors {
            let m = lane_mask((x.seen - c * LANES).min(LANES));
            let s = _mm512_loadu_ps(pp.add(c * LANES));
            let xs = match x.mask {
                Some(a) => _mm512_fmadd_ps(s, sc, _mm512_maskz_loadu_ps(m, a.add(c * LANES))),
                None => _mm512_mul_ps(s, sc),
            };
            let pr = _mm512_maskz_mov_ps(m, exp_ps(_mm512_sub_ps(xs, shift)));
            _mm512_storeu_ps(pp.add(c * LANES), pr);
            let g = _mm512_sub_ps(_mm512_loadu_ps(dp.add(c * LANES)), dv);
            _mm512_storeu_ps(dp.add(c * LANES), _mm512_mul_ps(pr, g));
        }
        p[vectors * LANES..].fill(0.0);
        ds[vectors * LANES..].fill(0.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::nn::attention::{self, MaskView, Rows};
    use crate::kernels::nn::attention_tiled::forward_with_lse;
    use crate::kernels::testing::{
        assume_filled as filled, attention_heads, attention_sweep, hard_mask, values,
    };

    /// Runs the tiled forward and backward and the flash ones (on the same
    /// strided operands, the same `dO`) and compares every gradient.
    fn check(l: usize, s: usize, e: usize, ev: usize, causal: bool, masked: bool) {
        let batch = 3;
        let g = attention_heads(batch, [l, s, e, ev], causal);
        if !applies::<f32>(&g) {
            eprintln!("no AVX-512F: the tiled attention backward is not checked here");
            return;
        }
        // Heads read at a row stride wider than the rows, as heads split
        // off a `[B, T, H, D]` projection.
        let strided = |rows: usize, width: usize, seed: u64| {
            let stride = width + 3;
            let data = values(batch * rows * stride + width + 2, seed, 2.0);
            let heads = (0..batch).map(|b| b * rows * stride + 2).collect();
            (data, heads, stride)
        };
        let (qd, qh, qs) = strided(l, e, 1);
        let (kd, kh, ks) = strided(s, e, 2);
        let (vd, vh, vs) = strided(s, ev, 3);
        let (dd, dh, dst) = strided(l, ev, 4);
        let rows = |data, heads, row_stride| Rows {
            data,
            heads,
            row_stride,
        };
        let (q, k, v, d_o) = (
            rows(&qd[..], qh, qs),
            rows(&kd[..], kh, ks),
            rows(&vd[..], vh, vs),
            rows(&dd[..], dh, dst),
        );
        // One mask for every head.
        let md = hard_mask(l, s, 5);
        let mv = MaskView {
            data: &md,
            offsets: vec![0; batch],
            row_stride: s,
            col_stride: 1,
        };
        let mask = masked.then_some(&mv);
        let run = |tiled: bool| {
            let mut o = vec![MaybeUninit::new(f32::NAN); batch * l * ev];
            let mut lse = vec![MaybeUninit::new(f32::NAN); batch * l];
            if tiled {
                let _ = forward_with_lse(&g, &q, &k, &v, mask, &mut o, &mut lse);
            } else {
                let _ = attention::forward(&g, &q, &k, &v, mask, &mut o, &mut lse);
            }
            let (o, lse) = (filled(o), filled(lse));
            let mut dq = vec![MaybeUninit::new(f32::NAN); batch * l * e];
            let mut dk = vec![MaybeUninit::new(f32::NAN); batch * s * e];
            let mut dv = vec![MaybeUninit::new(f32::NAN); batch * s * ev];
            let ins = BackwardInputs {
                q: &q,
                k: &k,
                v: &v,
                mask,
                o: &o,
                d_o: &d_o,
                lse: &lse,
            };
            if tiled {
                let _ = backward(&g, &ins, &mut dq, &mut dk, &mut dv);
            } else {
                let _ = attention::backward(&g, &ins, &mut dq, &mut dk, &mut dv);
            }
            [o, lse, filled(dq), filled(dk), filled(dv)]
        };
        let (tiled, flash) = (run(true), run(false));
        for (name, (t, f)) in ["o", "lse", "dq", "dk", "dv"]
            .iter()
            .zip(tiled.iter().zip(&flash))
        {
            for (n, (&a, &b)) in t.iter().zip(f).enumerate() {
                let close = (a == b) || (a - b).abs() <= 2e-5 * (1.0 + b.abs().max(a.abs()));
                assert!(
                    close,
                    "l {l} s {s} e {e} ev {ev} causal {causal} masked {masked}: {name}[{n}] {a} against the flash {b}"
                );
            }
        }
    }

    #[test]
    fn matches_the_flash_backward_on_odd_sizes() {
        attention_sweep(&[8, 17, 32], &[1, 5, 64, 70, 129], check);
        // Value dims apart from the key dims; chunks of rows past one.
        check(20, 33, 32, 17, false, true);
        check(9, 70, 8, 48, true, false);
        check(150, 150, 16, 64, true, false);
        check(130, 40, 64, 20, false, true);
    }

    #[test]
    fn no_query_rows_give_zero_key_and_value_gradients() {
        let g = Geometry {
            batch: 2,
            l: 0,
            s: 5,
            e: 4,
            ev: 4,
            scale: 0.5,
            causal: false,
            dropout: None,
        };
        if !applies::<f32>(&g) {
            return;
        }
        let kv = values(2 * 5 * 4, 1, 1.0);
        let (q, k) = (
            Rows::packed(&[][..], 2, 0, 4),
            Rows::packed(&kv[..], 2, 5, 4),
        );
        let d_o = Rows::packed(&[][..], 2, 0, 4);
        let mut dq: Vec<MaybeUninit<f32>> = Vec::new();
        let mut dk = vec![MaybeUninit::new(f32::NAN); 40];
        let mut dv = vec![MaybeUninit::new(f32::NAN); 40];
        let ins = BackwardInputs {
            q: &q,
            k: &k,
            v: &k,
            mask: None,
            o: &[],
            d_o: &d_o,
            lse: &[],
        };
        let _ = backward(&g, &ins, &mut dq, &mut dk, &mut dv);
        assert!(filled(dk).iter().chain(&filled(dv)).all(|&x| x == 0.0));
    }
}
