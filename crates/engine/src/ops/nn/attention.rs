//! `scaled_dot_product_attention`, PyTorch's
//! `F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale)`:
//! `softmax(Q Kᵀ · scale + mask) V` over the last two dims, any leading
//! (batch, head) dims.
//!
//! The forward is one fused kernel: for small f32 heads on AVX-512 the
//! register tiles of `kernels::nn::attention_tiled`, elsewhere the flash
//! kernel (`kernels::nn::attention`); neither holds the whole `L × S`
//! scores, and both save only the output and the per-row logsumexp
//! (`[..., L]`). First-order gradients (`backward_fast`) recompute the
//! probabilities from that logsumexp with the forward's own kernel (the
//! choice depends on the geometry and dtype alone). The
//! `Var` formula records the fused backward op
//! `scaled_dot_product_attention_backward` (`attention_backward.rs`),
//! whose own derivatives and tangents are written with the unfused
//! composition (softmax of the full score matrix, as `Var` ops): so
//! gradients of gradients exist, at the unfused cost in memory. The
//! tangent rule (`jvp`) and the gradient of a mask that requires grad use
//! the unfused composition as well.
//!
//! A bool mask (`true`: the key takes part) is PyTorch's: it becomes the
//! additive mask `0` / `-inf` in the queries' dtype wherever a mask is read
//! ([`additive_mask`]), so every path (fused, unfused, tangents, second
//! derivatives) sees one kind of mask. A fully masked row gives 0 and
//! passes no gradient, as PyTorch 2.5 and later do on every backend (the
//! math backend's `_safe_softmax`; checked against torch 2.15), not the NaN
//! of a plain softmax over `-inf`: in the fused kernel and in the unfused
//! composition alike.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use smallvec::smallvec;

use super::attention_backward::{pack_len, unfused, unfused_over, SdpaBackward, Unfused};
use crate::base::error::{check_dtypes, Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, Randomness};
use crate::kernels::mask::select;
use crate::kernels::nn::attention::{self as kernel, Geometry, MaskView, Rows};
use crate::kernels::nn::{
    attention_tiled as kernel_tiled, attention_tiled_backward as kernel_tiled_backward,
};
use crate::ops::batching::{materialize, with_example_rank};
use crate::ops::rule::OpFacts;
use crate::ops::OpAttributes;
use crate::ops::{sum_tangents, FastBackward, GradInputs, Node, OpRegistry, StructuredOp};
use crate::tensor::{DType, Dims, Element, Tensor};

const OP: &str = "scaled_dot_product_attention";

/// An attention mask ([`SdpaOptions::attn_mask`]), either of PyTorch's
/// two kinds: `#[non_exhaustive]` so that more may join.
#[non_exhaustive]
#[derive(Clone, Copy, Debug)]
pub enum AttnMask<'a, 'g> {
    /// Added to the scaled scores before the softmax (`-inf` hides a key),
    /// PyTorch's float `attn_mask`: same dtype as the queries, broadcastable
    /// to `[..., L, S]`. Differentiable. A bool `Var` here (a comparison's
    /// result) is read as [`Bool`](Self::Bool), as PyTorch reads the
    /// mask's dtype.
    Additive(&'a Var<'g>),
    /// PyTorch's bool `attn_mask`: `true` where the query may attend to the
    /// key, broadcastable to `[..., L, S]`. Not differentiable.
    Bool(&'a Tensor),
}

impl<'a, 'g> From<&'a Var<'g>> for AttnMask<'a, 'g> {
    fn from(m: &'a Var<'g>) -> Self {
        AttnMask::Additive(m)
    }
}

impl<'a> From<&'a Tensor> for AttnMask<'a, '_> {
    /// A bool mask (any other dtype is an error when the attention runs).
    fn from(m: &'a Tensor) -> Self {
        AttnMask::Bool(m)
    }
}

/// The additive mask PyTorch makes of a bool one: `0` where `true` (the key
/// takes part), `-inf` where `false`, in `dtype` (the queries'), in the
/// mask's own shape. A float mask comes back as it is.
pub(super) fn additive_mask<'m>(
    op: &'static str,
    m: &'m Tensor,
    dtype: DType,
) -> Result<Cow<'m, Tensor>> {
    if m.dtype() != DType::Bool {
        return Ok(Cow::Borrowed(m));
    }
    if !dtype.is_float() {
        return Err(Error::NotFloat { op, found: dtype });
    }
    let (zero, hidden) = (
        Tensor::scalar_of(0.0, dtype),
        Tensor::scalar_of(f64::NEG_INFINITY, dtype),
    );
    Ok(Cow::Owned(select(op, m, &zero, &hidden)?))
}

/// The options of [`Var::try_scaled_dot_product_attention`], PyTorch's
/// keyword arguments: no mask, no dropout, not causal, scale `1/sqrt(E)`
/// by default.
#[derive(Clone, Copy, Debug, Default)]
pub struct SdpaOptions<'a, 'g> {
    attn_mask: Option<AttnMask<'a, 'g>>,
    dropout: Option<(f64, u64)>,
    is_causal: bool,
    scale: Option<f64>,
}

impl<'a, 'g> SdpaOptions<'a, 'g> {
    /// The defaults (see the type).
    pub fn new() -> Self {
        Self::default()
    }
    /// PyTorch's `is_causal`: query `i` attends to keys `j <= i`
    /// (top-left aligned `tril`, also when `L != S`). Not with a mask.
    pub fn is_causal(mut self, causal: bool) -> Self {
        self.is_causal = causal;
        self
    }
    /// The factor of `Q Kᵀ`; `None`: `1 / sqrt(E)`.
    pub fn scale(mut self, scale: Option<f64>) -> Self {
        self.scale = scale;
        self
    }
    /// Dropout of the attention weights with probability `p` in `[0, 1)`,
    /// drawn from `seed` exactly as [`Var::try_dropout`] draws on the
    /// `[..., L, S]` weights (the same seed gives the same mask). PyTorch
    /// applies `dropout_p` whenever it is positive; so does this.
    pub fn dropout_p(mut self, p: f64, seed: u64) -> Self {
        self.dropout = Some((p, seed));
        self
    }
    /// An attention mask: a `&Var` is an additive float mask (or a bool
    /// one, read by its dtype), a `&Tensor` a bool mask (`true`: attend).
    pub fn attn_mask(mut self, mask: impl Into<AttnMask<'a, 'g>>) -> Self {
        self.attn_mask = Some(mask.into());
        self
    }
}

/// The settings an attention op carries (its inputs carry the rest).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(super) struct Config {
    pub causal: bool,
    pub scale: Option<f64>,
    /// `(p, seed)` with `0 < p < 1`.
    pub dropout: Option<(f64, u64)>,
}

/// The sizes of an attention call, checked.
pub(super) struct Plan {
    pub geo: Geometry,
    /// The leading dims (`q.shape()[..rank - 2]`).
    pub batch_dims: Vec<usize>,
}

impl Config {
    /// The settings by name: `causal`, and `scale`, `dropout_p` and
    /// `dropout_seed` when set.
    pub(super) fn attributes(&self) -> OpAttributes {
        let attrs = OpAttributes::new()
            .bool("causal", self.causal)
            .float_opt("scale", self.scale);
        match self.dropout {
            Some((p, seed)) => attrs.float("dropout_p", p).int("dropout_seed", seed),
            None => attrs,
        }
    }

    /// Checks `q`, `k`, `v` and the mask (if any) and returns the sizes.
    pub(super) fn plan(
        &self,
        op: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Plan> {
        for t in [k, v].into_iter().chain(mask) {
            check_dtypes(op, q.dtype(), t.dtype())?;
        }
        let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
        let r = qs.len();
        if r < 2 || ks.len() != r || vs.len() != r {
            return Err(Error::invalid(
                op,
                format!("q, k, v must have the same rank >= 2 ([..., L, E], [..., S, E], [..., S, Ev]); got {qs:?}, {ks:?}, {vs:?}"),
            ));
        }
        if qs[..r - 2] != ks[..r - 2] || qs[..r - 2] != vs[..r - 2] {
            return Err(Error::invalid(
                op,
                format!("q, k, v must have the same leading dims; got {qs:?}, {ks:?}, {vs:?}"),
            ));
        }
        if ks[r - 1] != qs[r - 1] || vs[r - 2] != ks[r - 2] {
            return Err(Error::invalid(
                op,
                format!("k must be [..., S, E] and v [..., S, Ev] for q [..., L, E]; got q {qs:?}, k {ks:?}, v {vs:?}"),
            ));
        }
        let (l, s, e, ev) = (qs[r - 2], ks[r - 2], qs[r - 1], vs[r - 1]);
        let scale = self.scale.unwrap_or(1.0 / (e as f64).sqrt());
        if !scale.is_finite() {
            return Err(Error::invalid(
                op,
                format!("scale must be finite, got {scale}"),
            ));
        }
        if let Some((p, _)) = self.dropout
            && !(0.0..1.0).contains(&p)
        {
            return Err(Error::invalid(
                op,
                format!("dropout_p must be in [0, 1), got {p}"),
            ));
        }
        if self.causal && mask.is_some() {
            return Err(Error::invalid(
                op,
                "an attn_mask and is_causal cannot both be set",
            ));
        }
        let batch_dims = qs[..r - 2].to_vec();
        if let Some(m) = mask {
            mask_strides(op, m.shape(), &batch_dims, l, s)?;
        }
        let geo = Geometry {
            batch: batch_dims.iter().product(),
            l,
            s,
            e,
            ev,
            scale,
            causal: self.causal,
            dropout: self.dropout.filter(|&(p, _)| p > 0.0),
        };
        Ok(Plan { geo, batch_dims })
    }
}

/// Strides of a mask broadcast to `[batch_dims..., L, S]` (0 on broadcast dims).
fn mask_strides(
    op: &'static str,
    ms: &[usize],
    batch_dims: &[usize],
    l: usize,
    s: usize,
) -> Result<Vec<usize>> {
    let target: Vec<usize> = batch_dims.iter().copied().chain([l, s]).collect();
    if ms.len() > target.len() {
        return Err(Error::invalid(
            op,
            format!("attn_mask {ms:?} does not broadcast to {target:?}"),
        ));
    }
    let pad = target.len() - ms.len();
    let mut strides = vec![0; target.len()];
    let mut step = 1;
    for d in (0..ms.len()).rev() {
        let t = target[pad + d];
        if ms[d] == t && t != 1 {
            strides[pad + d] = step;
        } else if ms[d] != 1 {
            return Err(Error::invalid(
                op,
                format!("attn_mask {ms:?} does not broadcast to {target:?}"),
            ));
        }
        step *= ms[d];
    }
    Ok(strides)
}

/// The kernel's view of a mask: per-head offsets and the row/column strides.
pub(super) fn mask_view<'a, T: Element>(m: &'a Tensor, plan: &Plan) -> Result<MaskView<'a, T>> {
    let g = &plan.geo;
    let strides = mask_strides(OP, m.shape(), &plan.batch_dims, g.l, g.s)?;
    let nb = plan.batch_dims.len();
    let offsets = head_offsets(&plan.batch_dims, &strides[..nb]);
    Ok(MaskView {
        data: m.as_slice_of::<T>(),
        offsets,
        row_stride: strides[nb],
        col_stride: strides[nb + 1],
    })
}

/// Where each head (row-major over `batch_dims`) starts, for an operand
/// whose batch dimensions step by `strides` (0 where broadcast).
fn head_offsets(batch_dims: &[usize], strides: &[usize]) -> Vec<usize> {
    let heads: usize = batch_dims.iter().product();
    (0..heads)
        .map(|b| crate::tensor::shape::strided_offset(b, batch_dims, strides))
        .collect()
}

/// `t` (`[..batch, rows, width]`) as the kernel reads it: in place through
/// its strides when each row is contiguous (a permuted view of heads, say),
/// else from its row-major copy.
fn rows_of<T: Element>(t: &Tensor) -> Rows<'_, T> {
    let (shape, strides) = (t.shape(), t.strides());
    let r = shape.len();
    let (rows, width) = (shape[r - 2], shape[r - 1]);
    let in_place = (width <= 1 || strides[r - 1] == 1) && (rows <= 1 || strides[r - 2] > 0);
    if !in_place || t.is_contiguous() {
        let batch = shape[..r - 2].iter().product();
        return Rows::packed(t.as_slice_of::<T>(), batch, rows, width);
    }
    let heads = head_offsets(&shape[..r - 2], &strides[..r - 2]);
    let data = t
        .strided::<T>()
        .expect("dtype was checked by the caller")
        .data;
    Rows {
        data,
        heads,
        row_stride: strides[r - 2],
    }
}

/// The fused forward: `(output, logsumexp)`.
pub(super) fn fused_forward(
    cfg: &Config,
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let mask = mask.map(|m| additive_mask(op, m, q.dtype())).transpose()?;
    let mask = mask.as_deref();
    let plan = cfg.plan(op, q, k, v, mask)?;
    let g = plan.geo;
    let mut out_shape = plan.batch_dims.clone();
    out_shape.extend([g.l, g.ev]);
    let mut lse_shape = plan.batch_dims.clone();
    lse_shape.push(g.l);
    crate::with_dtype!("scaled_dot_product_attention", q.dtype(), T => {
        let mv = mask.map(|m| mask_view::<T>(m, &plan)).transpose()?;
        let (qs, ks, vs) = (rows_of::<T>(q), rows_of::<T>(k), rows_of::<T>(v));
        let (qs, ks, vs, mv) = (&qs, &ks, &vs, mv.as_ref());
        let mut lse = None;
        let out = Tensor::build::<T>(Dims::from_slice(&out_shape), |o| {
            // The inner build hands back the proof for `o` it made with its own.
            let mut filled_o = None;
            let slot = &mut filled_o;
            lse = Some(Tensor::build::<T>(Dims::from_slice(&lse_shape), move |ls| {
                let (fo, fl) = if kernel_tiled::applies::<T>(&g) {
                    kernel_tiled::forward_with_lse(&g, qs, ks, vs, mv, o, ls)
                } else {
                    kernel::forward(&g, qs, ks, vs, mv, o, ls)
                };
                *slot = Some(fo);
                fl
            }));
            filled_o.expect("the inner build ran")
        });
        Ok((out, lse.expect("the inner build ran")))
    })
}

/// The attention's output alone, for inference where nothing requires grad
/// or traces (the ONNX import): the fused forward, its logsumexp dropped.
pub fn inference_forward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: Option<f64>,
    causal: bool,
) -> Result<Tensor> {
    let cfg = Config {
        causal,
        scale,
        dropout: None,
    };
    Ok(fused_forward(&cfg, OP, q, k, v, mask)?.0)
}

/// The fused backward: `(dq, dk, dv)` given the output, its logsumexp and `d_o`.
#[allow(clippy::too_many_arguments)]
pub(super) fn fused_backward(
    cfg: &Config,
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    o: &Tensor,
    lse: &Tensor,
    d_o: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let mask = mask.map(|m| additive_mask(op, m, q.dtype())).transpose()?;
    let mask = mask.as_deref();
    let plan = cfg.plan(op, q, k, v, mask)?;
    let g = plan.geo;
    check_dtypes(op, q.dtype(), d_o.dtype())?;
    if d_o.shape() != o.shape() {
        return Err(Error::shape_mismatch(op, o.shape(), d_o.shape()));
    }
    crate::with_dtype!("scaled_dot_product_attention", q.dtype(), T => {
        let mv = mask.map(|m| mask_view::<T>(m, &plan)).transpose()?;
        let (qs, ks, vs) = (rows_of::<T>(q), rows_of::<T>(k), rows_of::<T>(v));
        let (os, dos, ls) = (o.as_slice_of::<T>(), rows_of::<T>(d_o), lse.as_slice_of::<T>());
        let (qs, ks, vs, mv, dos) = (&qs, &ks, &vs, mv.as_ref(), &dos);
        let (mut dk_t, mut dv_t) = (None, None);
        let dv_t_slot = &mut dv_t;
        let dq = Tensor::build::<T>(Dims::from_slice(q.shape()), |dq| {
            // Each inner build hands back the proofs for the outer outputs.
            let mut filled_dq = None;
            let slot_dq = &mut filled_dq;
            dk_t = Some(Tensor::build::<T>(Dims::from_slice(k.shape()), move |dk| {
                let mut filled_dk = None;
                let slot_dk = &mut filled_dk;
                *dv_t_slot = Some(Tensor::build::<T>(Dims::from_slice(v.shape()), move |dv| {
                    let ins = kernel::BackwardInputs {
                        q: qs,
                        k: ks,
                        v: vs,
                        mask: mv,
                        o: os,
                        d_o: dos,
                        lse: ls,
                    };
                    let (fq, fk, fv) = if kernel_tiled::applies::<T>(&g) {
                        kernel_tiled_backward::backward(&g, &ins, dq, dk, dv)
                    } else {
                        kernel::backward(&g, &ins, dq, dk, dv)
                    };
                    (*slot_dq, *slot_dk) = (Some(fq), Some(fk));
                    fv
                }));
                filled_dk.expect("the inner build ran")
            }));
            filled_dq.expect("the inner build ran")
        });
        Ok((dq, dk_t.expect("the inner build ran"), dv_t.expect("the inner build ran")))
    })
}

/// What a forward saves for its backward: where its output lives and its
/// shape (to recognise it), and the per-row logsumexp. The output is named
/// by address, not held: a compiled step replays this node's forward and
/// its fast backward every run, writing the output into the same planned
/// buffer, which a held clone would keep from being reused (and the saved
/// logsumexp is replaced by every forward, so the backward of a replay
/// reads its own run's instead of recomputing the forward).
#[derive(Debug)]
struct Saved {
    out_at: usize,
    shape: Dims,
    lse: Tensor,
}

/// Where a tensor's first element lives; `None` for a non-float or a
/// strided one.
fn address(t: &Tensor) -> Option<usize> {
    match t.dtype() {
        DType::F32 => t.as_slice::<f32>().ok().map(|s| s.as_ptr() as usize),
        DType::F64 => t.as_slice::<f64>().ok().map(|s| s.as_ptr() as usize),
        _ => None,
    }
}

/// Scaled dot-product attention. Inputs `q`, `k`, `v`, then a mask if
/// present (additive float, or bool). The registry holds it with PyTorch's defaults (not
/// causal, no dropout, scale `1/sqrt(E)`), the mask inferred from the
/// input count.
#[derive(Clone, Debug, Default)]
pub struct ScaledDotProductAttention {
    cfg: Config,
    /// Where the forward leaves its logsumexp for this node's backward;
    /// `None` (the registered instance, shared between graphs): the
    /// backward recomputes it.
    saved: Option<Arc<Mutex<Option<Saved>>>>,
}

fn split<'a, T>(op: &'static str, inputs: &'a [T]) -> Result<(&'a T, &'a T, &'a T, Option<&'a T>)> {
    match inputs {
        [q, k, v] => Ok((q, k, v, None)),
        [q, k, v, m] => Ok((q, k, v, Some(m))),
        _ => Err(Error::Arity {
            op: op.to_string(),
            expected: 3,
            got: inputs.len(),
        }),
    }
}

/// The inputs of an attention op over a batch (`q`, `k`, `v`, the mask if
/// `masked`, then the backward's output gradient if any): each made
/// batched, since the op pairs the leading axes of `q`, `k` and `v` one to
/// one, except the mask, which broadcasts: a batched one gets unit axes
/// after its batch axis (as many as it lacks of `q`'s rank), a shared one
/// stays as it is.
pub(super) fn batched_inputs<'g>(
    inputs: &[Batched<'g>],
    masked: bool,
    ctx: &BatchContext,
) -> Result<Vec<Var<'g>>> {
    let rank = inputs[0].example_rank();
    inputs
        .iter()
        .enumerate()
        .map(|(i, x)| {
            if masked && i == 3 {
                with_example_rank(x, rank)
            } else {
                materialize(x, ctx)
            }
        })
        .collect()
}

/// Whether attention with `cfg` over a batch needs the unfused
/// composition: a dropout whose one mask every example shares
/// (`Randomness::Same`), which the fused kernels, drawing over every
/// element of the batch's weights, cannot repeat.
pub(super) fn shares_dropout(cfg: &Config, ctx: &BatchContext) -> bool {
    cfg.dropout.is_some_and(|(p, _)| p > 0.0) && ctx.randomness == Randomness::Same
}

impl ScaledDotProductAttention {
    /// The logsumexp of the forward that produced `out`, saved or recomputed.
    fn lse(&self, inputs: &[&Tensor], out: &Tensor) -> Result<Tensor> {
        if let Some(slot) = &self.saved {
            let saved = slot.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = saved.as_ref()
                && address(out) == Some(s.out_at)
                && s.shape.as_slice() == out.shape()
            {
                return Ok(s.lse.clone());
            }
        }
        let (q, k, v, m) = split(OP, inputs)?;
        Ok(fused_forward(&self.cfg, OP, q, k, v, m.copied())?.1)
    }
}

impl StructuredOp for ScaledDotProductAttention {
    const NAME: &'static str = OP;
    const INPUTS: &'static [&'static str] = &["query", "key", "value", "attn_mask"];
    fn attributes(&self) -> OpAttributes {
        self.cfg.attributes()
    }
    /// `q`, `k`, `v`, then the mask if given.
    fn arity(&self) -> Option<usize> {
        None
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    /// Its dropout seed, replaced at every run of a compiled step; the
    /// step's backward then runs the recorded `SdpaBackward` node with the
    /// same fresh seed (lowering keeps a seeded op off its fast rule).
    fn seed(&self) -> Option<u64> {
        self.cfg.dropout.map(|(_, seed)| seed)
    }
    fn forward_seeded(&self, inputs: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        let cfg = Config {
            dropout: self.cfg.dropout.map(|(p, _)| (p, seed)),
            ..self.cfg
        };
        StructuredOp::forward(&ScaledDotProductAttention { cfg, saved: None }, inputs).map(Some)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (q, k, v, m) = split(OP, inputs)?;
        let (out, lse) = fused_forward(&self.cfg, OP, q, k, v, m.copied())?;
        if let Some(slot) = &self.saved
            && let Some(out_at) = address(&out)
        {
            let saved = Saved {
                out_at,
                shape: Dims::from_slice(out.shape()),
                lse,
            };
            *slot.lock().unwrap_or_else(|e| e.into_inner()) = Some(saved);
        }
        Ok(out)
    }
    /// One fused op computes the three gradients, packed.
    fn grads<'g>(&self, g: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        let (inputs, out) = (n.inputs, n.output);
        let (q, k, v, m) = split(OP, inputs)?;
        let plain: Vec<&Tensor> = inputs.iter().map(Var::value).collect();
        let lse = self.lse(&plain, out.value())?;
        let op = SdpaBackward {
            cfg: self.cfg,
            saved: Some((out.value().clone(), lse)),
        };
        let mut args = vec![q, k, v];
        args.extend(m);
        args.push(g);
        let packed = g.graph().record(op, &args)?;
        let (nq, nk) = (q.value().numel(), k.value().numel());
        let piece = |start: usize, x: &Var<'g>| -> Result<Option<Var<'g>>> {
            x.requires_grad()
                .then(|| {
                    let shape: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
                    packed
                        .try_narrow(0, start as isize, x.value().numel())?
                        .try_reshape(&shape)
                })
                .transpose()
        };
        let mut grads: GradInputs<'g> = smallvec![piece(0, q)?, piece(nq, k)?, piece(nq + nk, v)?];
        if let Some(m) = m {
            grads.push(
                m.requires_grad()
                    .then(|| {
                        let u = unfused(&self.cfg, q, k, Some(m))?;
                        u.mask_grad(g, v, m.shape())
                    })
                    .transpose()?,
            );
        }
        debug_assert_eq!(pack_len(q, k, v), packed.value().numel());
        Ok(grads)
    }
    fn backward_fast(&self, call: FastBackward<'_>, grads: &mut [Option<Tensor>]) -> Result<bool> {
        let FastBackward {
            g,
            x: inputs,
            output: out,
            needs,
        } = call;
        let (q, k, v, m) = split(OP, inputs)?;
        if needs.get(3) == Some(&true) {
            return Ok(false); // the mask's gradient: the Var formula
        }
        let lse = self.lse(inputs, out)?;
        let (dq, dk, dv) = fused_backward(&self.cfg, OP, q, k, v, m.copied(), out, &lse, g)?;
        for (i, d) in [dq, dk, dv].into_iter().enumerate() {
            if needs[i] {
                grads[i] = Some(d);
            }
        }
        Ok(true)
    }
    /// `q`, `k` and the mask move the scores together: one score tangent.
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        let (inputs, out) = (n.inputs, n.output);
        let (q, k, v, m) = split(OP, inputs)?;
        let (tq, tk, tv, tm) = split(OP, t)?;
        let u = unfused(&self.cfg, q, k, m)?;
        let ds = u.score_tangent(q, k, tq.as_ref(), tk.as_ref(), tm.and_then(Option::as_ref))?;
        sum_tangents(
            out.shape(),
            [
                ds.map(|ds| u.dropped(&u.softmax_tangent(&ds)?)?.try_matmul(v)),
                tv.as_ref().map(|tv| u.dropped(&u.p)?.try_matmul(tv)),
            ],
        )
    }
    /// The fused op over the batched inputs (a fresh instance: the
    /// logsumexp it saves is the batch's). Its dropout mask is drawn over
    /// every element of the batch's weights, so under
    /// `Randomness::Different` each example has its own (the first
    /// example's is the one it has alone); under `Same` the unfused
    /// composition with one example's mask, broadcast.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let args = batched_inputs(x, x.len() == 4, ctx)?;
        if shares_dropout(&self.cfg, ctx) {
            let u = unfused_over(&self.cfg, &args[0], &args[1], args.get(3), 1)?;
            return Ok(Batched::along_batch(u.dropped(&u.p)?.try_matmul(&args[2])?));
        }
        let op = ScaledDotProductAttention {
            cfg: self.cfg,
            saved: Some(Arc::new(Mutex::new(None))),
        };
        let refs: Vec<&Var<'g>> = args.iter().collect();
        Ok(Batched::along_batch(args[0].graph().record(op, &refs)?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(ScaledDotProductAttention {
                cfg: Config {
                    causal: false,
                    scale: Some(0.6),
                    dropout: None,
                },
                saved: None,
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 3, 4], seed, 1.0),
                    sample(&[2, 5, 4], seed + 3, 1.0),
                    sample(&[2, 5, 3], seed + 5, 1.0),
                    sample(&[3, 5], seed + 7, 0.5),
                ]
            }),
            ..OpFacts::opaque(None)
        }
    }
}

/// `scale · sin(0.37 i + 1.3 seed + 0.1)`: smooth, distinct sample values.
pub(super) fn sample(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| scale * (0.37 * i as f64 + 1.3 * seed as f64 + 0.1).sin())
        .collect();
    Tensor::from_vec(v, shape).expect("a valid shape")
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(ScaledDotProductAttention::default());
}

impl<'g> Var<'g> {
    fallible! {
        /// Scaled dot-product attention of the queries `self` (`[..., L, E]`)
        /// over keys `k` (`[..., S, E]`) and values `v` (`[..., S, Ev]`):
        /// `softmax(Q Kᵀ · scale + mask) V`, `[..., L, Ev]`. PyTorch's
        /// `F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p,
        /// is_causal, scale)`; see [`SdpaOptions`]. The leading dims of `q`,
        /// `k` and `v` must be equal (no broadcasting between them); the mask
        /// broadcasts to `[..., L, S]`.
        ///
        /// Fused (flash-attention style): memory grows with `L + S`, not
        /// `L · S`, per head. Gradients of gradients and forward mode go
        /// through the unfused composition (see the module docs).
        ///
        /// Errors (naming the op and shapes): ranks below 2 or unequal,
        /// mismatched `E`, `S` or leading dims, a mask that does not
        /// broadcast, mixed dtypes (a float mask must have the queries'
        /// dtype; a `&Tensor` mask must be bool), a non-finite scale,
        /// `dropout_p` outside `[0, 1)`, a mask together with `is_causal`.
        ///
        /// ```
        /// use retrograd::{Graph, SdpaOptions, Tensor};
        /// let g = Graph::new();
        /// let q = g.variable(Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2])?);
        /// let k = g.variable(Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2])?);
        /// let v = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
        /// let y = q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new().is_causal(true))?;
        /// // Row 0 sees key 0 only; row 1 weighs keys 0 and 1 by softmax([0, 1/sqrt(2)]).
        /// let w = 1.0 / (1.0 + (0.5f64).sqrt().exp());
        /// let expect = [1.0, 2.0, w * 1.0 + (1.0 - w) * 3.0, w * 2.0 + (1.0 - w) * 4.0];
        /// for (a, b) in y.value().to_f64_vec().iter().zip(expect) {
        ///     assert!((a - b).abs() < 1e-12);
        /// }
        /// let grads = y.sum().backward()?;
        /// assert_eq!(grads.wrt(&v).to_f64_vec(), vec![1.0 + w, 1.0 + w, 1.0 - w, 1.0 - w]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        ///
        /// A bool mask, PyTorch's: `true` where a query attends to a key. A
        /// row with no `true` gives 0 (PyTorch 2.5+), and no gradient.
        ///
        /// ```
        /// use retrograd::{Graph, SdpaOptions, Tensor};
        /// let g = Graph::new();
        /// let q = g.variable(Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2])?);
        /// let v = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
        /// let causal = g.constant(Tensor::full(&[2, 2], 1.0, retrograd::DType::Bool)?).tril(0);
        /// let a = q.scaled_dot_product_attention(&q, &v, &SdpaOptions::new().attn_mask(&causal));
        /// let b = q.scaled_dot_product_attention(&q, &v, &SdpaOptions::new().is_causal(true));
        /// assert_eq!(a.value(), b.value());
        /// let none = Tensor::from_vec(vec![true, false, false, false], &[2, 2])?;
        /// let y = q.scaled_dot_product_attention(&q, &v, &SdpaOptions::new().attn_mask(&none));
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 2.0, 0.0, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_scaled_dot_product_attention / scaled_dot_product_attention(
            &self,
            k: &Var<'g>,
            v: &Var<'g>,
            options: &SdpaOptions<'_, 'g>,
        ) -> Var<'g> {
            let op = ScaledDotProductAttention {
                cfg: Config {
                    causal: options.is_causal,
                    scale: options.scale,
                    dropout: options.dropout,
                },
                saved: Some(Arc::new(Mutex::new(None))),
            };
            let bool_mask;
            let mut inputs = vec![self, k, v];
            match options.attn_mask {
                Some(AttnMask::Additive(m)) => inputs.push(m),
                Some(AttnMask::Bool(m)) => {
                    bool_mask = bool_mask_var(self, m)?;
                    inputs.push(&bool_mask);
                }
                None => {}
            }
            self.graph().record(op, &inputs)
        }
    }
}

/// A bool mask as a constant of `q`'s graph; any other dtype is
/// `Error::WrongDType` (an additive mask is a `&Var`).
fn bool_mask_var<'g>(q: &Var<'g>, m: &Tensor) -> Result<Var<'g>> {
    if m.dtype() != DType::Bool {
        return Err(Error::WrongDType {
            op: OP,
            expected: DType::Bool,
            found: m.dtype(),
        });
    }
    Ok(q.graph().constant(m.clone()))
}

/// The unfused composition `dropout(softmax(Q Kᵀ · scale + mask)) V` with
/// `Var` ops (the full `[..., L, S]` weights): the reference the fused op
/// is tested against.
pub fn scaled_dot_product_attention_unfused<'g>(
    q: &Var<'g>,
    k: &Var<'g>,
    v: &Var<'g>,
    options: &SdpaOptions<'_, 'g>,
) -> Result<Var<'g>> {
    let cfg = Config {
        causal: options.is_causal,
        scale: options.scale,
        dropout: options.dropout,
    };
    let mask = match options.attn_mask {
        Some(AttnMask::Additive(m)) => Some(m.clone()),
        Some(AttnMask::Bool(m)) => Some(bool_mask_var(q, m)?),
        None => None,
    };
    let additive = mask
        .as_ref()
        .map(|m| additive_mask(OP, m.value(), q.dtype()))
        .transpose()?;
    cfg.plan(OP, q.value(), k.value(), v.value(), additive.as_deref())?;
    let u: Unfused<'g> = unfused(&cfg, q, k, mask.as_ref())?;
    u.dropped(&u.p)?.try_matmul(v)
}
