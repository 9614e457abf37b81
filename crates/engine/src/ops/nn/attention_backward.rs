//! `scaled_dot_product_attention_backward`: the fused first-order gradient
//! of attention as an op, `(q, k, v, [mask], dO) ↦ [dq, dk, dv]` packed
//! into one flat tensor (an op has one output; the attention op's `Var`
//! formula cuts it with `narrow` and `reshape`). Its forward runs the
//! flash-style kernel (`kernels::nn::attention::backward`), reusing the
//! forward's output and logsumexp when the attention node hands them over.
//!
//! Its own backward and tangent are written with the unfused composition
//! ([`Unfused`]: the full `[..., L, S]` probabilities as `Var` ops), so
//! gradients of gradients (and higher) exist, at the unfused cost in
//! memory. Notation: `S = Q Kᵀ·scale + mask`, `P = softmax(S)`, `M` the
//! dropout keep-mask scaled by `1/(1-p)`, `P' = P ⊙ M`, `dP = (dO Vᵀ) ⊙ M`,
//! `r = rowsum(P ⊙ dP)`, `dS = P ⊙ (dP − r)`; then `dQ = dS K·scale`,
//! `dK = dSᵀ Q·scale`, `dV = P'ᵀ dO`.

use smallvec::smallvec;

use super::attention::{
    batched_inputs, fused_backward, fused_forward, sample, shares_dropout, Config,
};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};
use crate::kernels::mask::{compare, Comparison};
use crate::kernels::nn::sparse::keeps;
use crate::kernels::reduce_minmax::amax;
use crate::ops::rule::OpFacts;
use crate::ops::OpAttributes;
use crate::ops::{sum_tangents, GradInputs, Node, OpRegistry, StructuredOp};
use crate::tensor::{DType, Tensor};

const OP: &str = "scaled_dot_product_attention_backward";

/// The packed gradients `[dq, dk, dv]` (flattened, in that order) of
/// scaled dot-product attention. Inputs: `q`, `k`, `v`, the mask (additive
/// or bool) if present, and the output's gradient `dO`.
#[derive(Clone, Debug, Default)]
pub struct SdpaBackward {
    pub(super) cfg: Config,
    /// The forward's output and logsumexp for exactly these inputs, if the
    /// attention node had them (a cache: recomputed when absent).
    pub(super) saved: Option<(Tensor, Tensor)>,
}

/// The length of the packed gradients.
pub(super) fn pack_len(q: &Var<'_>, k: &Var<'_>, v: &Var<'_>) -> usize {
    q.value().numel() + k.value().numel() + v.value().numel()
}

fn split<T>(inputs: &[T]) -> Result<(&T, &T, &T, Option<&T>, &T)> {
    match inputs {
        [q, k, v, d] => Ok((q, k, v, None, d)),
        [q, k, v, m, d] => Ok((q, k, v, Some(m), d)),
        _ => Err(Error::Arity {
            op: OP.to_string(),
            expected: 4,
            got: inputs.len(),
        }),
    }
}

fn rowsum<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    x.try_sum_axes(&[-1], true)
}

fn flat<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    x.try_reshape(&[-1])
}

/// The attention weights of the unfused composition, as `Var` ops.
pub(super) struct Unfused<'g> {
    /// `softmax(Q Kᵀ · scale + mask)`, `[..., L, S]`.
    pub p: Var<'g>,
    /// The dropout keep-mask scaled by `1/(1-p)` (a constant), if any.
    keep: Option<Var<'g>>,
    scale: f64,
}

/// Builds the weights of the unfused composition.
pub(super) fn unfused<'g>(
    cfg: &Config,
    q: &Var<'g>,
    k: &Var<'g>,
    mask: Option<&Var<'g>>,
) -> Result<Unfused<'g>> {
    unfused_over(cfg, q, k, mask, 0)
}

/// [`unfused`] whose first `shared` axes (a `vmap` batch whose examples
/// draw the same numbers) share one dropout mask: the one drawn for the
/// weights' shape without them, broadcast.
pub(super) fn unfused_over<'g>(
    cfg: &Config,
    q: &Var<'g>,
    k: &Var<'g>,
    mask: Option<&Var<'g>>,
    shared: usize,
) -> Result<Unfused<'g>> {
    let e = q.shape().last().copied().unwrap_or(1);
    let scale = cfg.scale.unwrap_or(1.0 / (e as f64).sqrt());
    let mut s = q.try_matmul_transposed(k, false, true)?.mul_scalar(scale);
    if let Some(m) = mask {
        s = if m.value().dtype() == DType::Bool {
            // PyTorch's bool mask as `0` / `-inf`, recorded from the mask
            // rather than made a constant of its value, so that a vmapped
            // function reads each example's mask.
            let graph = q.graph();
            let level = |v: f64| graph.constant(Tensor::scalar_of(v, q.dtype()));
            s.try_add(&level(0.0).try_where(m, &level(f64::NEG_INFINITY))?)?
        } else {
            s.try_add(m)?
        };
    }
    let shape = s.shape().to_vec();
    let r = shape.len();
    let (l, n) = (shape[r - 2], shape[r - 1]);
    let graph = q.graph();
    if cfg.causal {
        let bias: Vec<f64> = (0..l * n)
            .map(|idx| {
                if idx % n > idx / n {
                    f64::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();
        s = s.try_add(&graph.constant(Tensor::from_f64_slice(&bias, &[l, n], q.dtype())?))?;
    }
    // A row hidden from every key weighs nothing (PyTorch's
    // `_safe_softmax`), rather than the NaN of a softmax over `-inf`: its
    // scores are set to 0 before the softmax (so nothing NaN reaches a
    // gradient) and its weights to 0 after it.
    let mut dead = None;
    if mask.is_some() {
        let top = amax(OP, s.value(), &[-1], true)?;
        let rows = compare(
            Comparison::Eq,
            &top,
            &Tensor::scalar_of(f64::NEG_INFINITY, top.dtype()),
        )?;
        if rows.as_slice::<bool>()?.contains(&true) {
            s = s.try_masked_fill(&rows, 0.0)?;
            dead = Some(rows);
        }
    }
    let mut p = s.try_softmax(-1)?;
    if let Some(rows) = &dead {
        p = p.try_masked_fill(rows, 0.0)?;
    }
    let keep = match cfg.dropout.filter(|&(p, _)| p > 0.0) {
        Some((pr, seed)) => {
            let drawn = &shape[shared..];
            let total: usize = drawn.iter().product();
            let inv = 1.0 / (1.0 - pr);
            let m: Vec<f64> = (0..total as u64)
                .map(|i| if keeps(seed, pr, i) { inv } else { 0.0 })
                .collect();
            Some(graph.constant(Tensor::from_f64_slice(&m, drawn, q.dtype())?))
        }
        None => None,
    };
    Ok(Unfused { p, keep, scale })
}

impl<'g> Unfused<'g> {
    /// `x ⊙ M` (or `x` without dropout).
    pub fn dropped(&self, x: &Var<'g>) -> Result<Var<'g>> {
        match &self.keep {
            Some(m) => x.try_mul(m),
            None => Ok(x.clone()),
        }
    }

    /// `P ⊙ (t − rowsum(P ⊙ t))`: the softmax's Jacobian (symmetric) applied to `t`.
    pub fn softmax_tangent(&self, t: &Var<'g>) -> Result<Var<'g>> {
        self.p.try_mul(&t.try_sub(&rowsum(&self.p.try_mul(t)?)?)?)
    }

    /// The scores' tangent `scale (tq Kᵀ + Q tkᵀ) + tm`, `None` if no tangent.
    pub fn score_tangent(
        &self,
        q: &Var<'g>,
        k: &Var<'g>,
        tq: Option<&Var<'g>>,
        tk: Option<&Var<'g>>,
        tm: Option<&Var<'g>>,
    ) -> Result<Option<Var<'g>>> {
        let shape = self.p.shape().to_vec();
        let scale = self.scale;
        sum_tangents(
            &shape,
            [
                tq.map(|tq| Ok(tq.try_matmul_transposed(k, false, true)?.mul_scalar(scale))),
                tk.map(|tk| Ok(q.try_matmul_transposed(tk, false, true)?.mul_scalar(scale))),
                tm.map(|tm| tm.try_expand(&shape)),
            ],
        )
    }

    /// The first-order gradients `(dQ, dK, dV)` given the output's
    /// gradient `d_o`, with `Var` ops.
    pub fn grads(
        &self,
        q: &Var<'g>,
        k: &Var<'g>,
        v: &Var<'g>,
        d_o: &Var<'g>,
    ) -> Result<[Var<'g>; 3]> {
        let dp = self.dropped(&d_o.try_matmul_transposed(v, false, true)?)?;
        let ds = self.softmax_tangent(&dp)?;
        Ok([
            ds.try_matmul(k)?.mul_scalar(self.scale),
            ds.try_matmul_transposed(q, true, false)?
                .mul_scalar(self.scale),
            self.dropped(&self.p)?
                .try_matmul_transposed(d_o, true, false)?,
        ])
    }

    /// The gradient of the mask given the output's gradient `g`: `dS`
    /// summed to the mask's shape.
    pub fn mask_grad(&self, g: &Var<'g>, v: &Var<'g>, mask_shape: &[usize]) -> Result<Var<'g>> {
        let dp = self.dropped(&g.try_matmul_transposed(v, false, true)?)?;
        self.softmax_tangent(&dp)?.sum_to_size(mask_shape)
    }
}

impl StructuredOp for SdpaBackward {
    const NAME: &'static str = OP;
    const INPUTS: &'static [&'static str] = &["query", "key", "value", "attn_mask", "grad_output"];
    fn attributes(&self) -> OpAttributes {
        self.cfg.attributes()
    }
    /// `q`, `k`, `v`, the mask if given, then the output's gradient.
    fn arity(&self) -> Option<usize> {
        None
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    fn without_saved(&self) -> Option<std::sync::Arc<dyn crate::Differentiable>> {
        self.saved.as_ref().map(|_| {
            std::sync::Arc::new(SdpaBackward {
                cfg: self.cfg,
                saved: None,
            }) as std::sync::Arc<dyn crate::Differentiable>
        })
    }
    fn seed(&self) -> Option<u64> {
        self.cfg.dropout.map(|(_, seed)| seed)
    }
    /// With another dropout seed (a compiled step's run), recomputing the forward.
    fn forward_seeded(&self, inputs: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        let cfg = Config {
            dropout: self.cfg.dropout.map(|(p, _)| (p, seed)),
            ..self.cfg
        };
        StructuredOp::forward(&SdpaBackward { cfg, saved: None }, inputs).map(Some)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let (q, k, v, m, d_o) = split(inputs)?;
        let (o, lse) = match &self.saved {
            Some((o, lse)) if o.shape() == d_o.shape() && o.dtype() == d_o.dtype() => {
                (o.clone(), lse.clone())
            }
            _ => fused_forward(&self.cfg, OP, q, k, v, m.copied())?,
        };
        let (dq, dk, dv) = fused_backward(&self.cfg, OP, q, k, v, m.copied(), &o, &lse, d_o)?;
        crate::with_dtype!("scaled_dot_product_attention", q.dtype(), T => {
            let mut all = Vec::with_capacity(dq.numel() + dk.numel() + dv.numel());
            for t in [&dq, &dk, &dv] {
                all.extend_from_slice(t.as_slice_of::<T>());
            }
            let n = all.len();
            Tensor::from_vec(all, &[n])
        })
    }
    /// The inputs' gradients share the recomputed probabilities and `dS`.
    fn grads<'g>(&self, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<GradInputs<'g>> {
        let (q, k, v, m, d_o) = split(n.inputs)?;
        let u = unfused(&self.cfg, q, k, m)?;
        let scale = u.scale;
        let (nq, nk, nv) = (q.value().numel(), k.value().numel(), v.value().numel());
        let cut = |start: usize, n: usize, like: &Var<'g>| -> Result<Var<'g>> {
            let shape: Vec<isize> = like.shape().iter().map(|&d| d as isize).collect();
            g2.try_narrow(0, start as isize, n)?.try_reshape(&shape)
        };
        let (a, b, c) = (cut(0, nq, q)?, cut(nq, nk, k)?, cut(nq + nk, nv, v)?);
        let p = &u.p;
        let pd = u.dropped(p)?;
        let dp = u.dropped(&d_o.try_matmul_transposed(v, false, true)?)?;
        let r = rowsum(&p.try_mul(&dp)?)?;
        let ds = p.try_mul(&dp.try_sub(&r)?)?;
        // The cotangent of dS from dQ = dS K·scale and dK = dSᵀ Q·scale.
        let dds = a
            .try_matmul_transposed(k, false, true)?
            .try_add(&q.try_matmul_transposed(&b, false, true)?)?
            .mul_scalar(scale);
        let t = rowsum(&dds.try_mul(p)?)?;
        let dp_bar = p.try_mul(&dds.try_sub(&t)?)?;
        let p_bar = dds.try_mul(&dp.try_sub(&r)?)?.try_sub(&dp.try_mul(&t)?)?;
        let dpd_bar = u.dropped(&dp_bar)?;
        let p_tot = p_bar.try_add(&u.dropped(&d_o.try_matmul_transposed(&c, false, true)?)?)?;
        let s_bar = u.softmax_tangent(&p_tot)?;
        let q_bar = q
            .requires_grad()
            .then(|| {
                ds.try_matmul(&b)?
                    .try_add(&s_bar.try_matmul(k)?)
                    .map(|x| x.mul_scalar(scale))
            })
            .transpose()?;
        let k_bar = k
            .requires_grad()
            .then(|| {
                ds.try_matmul_transposed(&a, true, false)?
                    .try_add(&s_bar.try_matmul_transposed(q, true, false)?)
                    .map(|x| x.mul_scalar(scale))
            })
            .transpose()?;
        let v_bar = v
            .requires_grad()
            .then(|| dpd_bar.try_matmul_transposed(d_o, true, false))
            .transpose()?;
        let do_bar = d_o
            .requires_grad()
            .then(|| pd.try_matmul(&c)?.try_add(&dpd_bar.try_matmul(v)?))
            .transpose()?;
        let mut grads: GradInputs<'g> = smallvec![q_bar, k_bar, v_bar];
        if let Some(m) = m {
            grads.push(
                m.requires_grad()
                    .then(|| s_bar.sum_to_size(m.shape()))
                    .transpose()?,
            );
        }
        grads.push(do_bar);
        Ok(grads)
    }
    /// The inputs' tangents share the recomputed probabilities and `dS`.
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        if t.iter().all(Option::is_none) {
            return Ok(None);
        }
        let (inputs, out) = (n.inputs, n.output);
        let (q, k, v, m, d_o) = split(inputs)?;
        let zero = |x: &Var<'g>| x.graph().constant(x.value().zeros_like());
        let tan = |i: usize, x: &Var<'g>| t.get(i).cloned().flatten().unwrap_or_else(|| zero(x));
        let (tq, tk, tv) = (tan(0, q), tan(1, k), tan(2, v));
        let tm = m.and_then(|_| t[3].clone());
        let tdo = tan(t.len() - 1, d_o);
        let u = unfused(&self.cfg, q, k, m)?;
        let scale = u.scale;
        let p = &u.p;
        let pd = u.dropped(p)?;
        let dp = u.dropped(&d_o.try_matmul_transposed(v, false, true)?)?;
        let r = rowsum(&p.try_mul(&dp)?)?;
        let ds = p.try_mul(&dp.try_sub(&r)?)?;
        let s_dot = u
            .score_tangent(q, k, Some(&tq), Some(&tk), tm.as_ref())?
            .ok_or_else(|| Error::invalid(OP, "no tangent"))?;
        let p_dot = u.softmax_tangent(&s_dot)?;
        let dp_dot = u.dropped(
            &tdo.try_matmul_transposed(v, false, true)?
                .try_add(&d_o.try_matmul_transposed(&tv, false, true)?)?,
        )?;
        let r_dot = rowsum(&p_dot.try_mul(&dp)?.try_add(&p.try_mul(&dp_dot)?)?)?;
        let ds_dot = p_dot
            .try_mul(&dp.try_sub(&r)?)?
            .try_add(&p.try_mul(&dp_dot.try_sub(&r_dot)?)?)?;
        let dq = ds_dot
            .try_matmul(k)?
            .try_add(&ds.try_matmul(&tk)?)?
            .mul_scalar(scale);
        let dk = ds_dot
            .try_matmul_transposed(q, true, false)?
            .try_add(&ds.try_matmul_transposed(&tq, true, false)?)?
            .mul_scalar(scale);
        let dv = u
            .dropped(&p_dot)?
            .try_matmul_transposed(d_o, true, false)?
            .try_add(&pd.try_matmul_transposed(&tdo, true, false)?)?;
        let packed = Var::try_cat(&[&flat(&dq)?, &flat(&dk)?, &flat(&dv)?], 0)?;
        debug_assert_eq!(packed.shape(), out.shape());
        Ok(Some(packed))
    }
    /// The fused op over the batched inputs (with nothing saved: the
    /// forward's output and logsumexp held are the first example's), its
    /// packed `[dq, dk, dv]` of the whole batch cut and packed again per
    /// example, `[B, |dq| + |dk| + |dv|]`. A dropout every example shares
    /// (`Randomness::Same`): the unfused gradients, as the forward's rule.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let masked = x.len() == 5;
        let args = batched_inputs(x, masked, ctx)?;
        let (q, k, v, d_o) = (&args[0], &args[1], &args[2], &args[args.len() - 1]);
        let parts = if shares_dropout(&self.cfg, ctx) {
            unfused_over(&self.cfg, q, k, masked.then(|| &args[3]), 1)?.grads(q, k, v, d_o)?
        } else {
            let op = SdpaBackward {
                cfg: self.cfg,
                saved: None,
            };
            let refs: Vec<&Var<'g>> = args.iter().collect();
            let packed = q.graph().record(op, &refs)?;
            let (nq, nk, nv) = (q.value().numel(), k.value().numel(), v.value().numel());
            [
                packed.try_narrow(0, 0, nq)?,
                packed.try_narrow(0, nq as isize, nk)?,
                packed.try_narrow(0, (nq + nk) as isize, nv)?,
            ]
        };
        let batch = ctx.size;
        let rows = parts
            .iter()
            .map(|p| p.reshape_dims(&[batch, p.value().numel() / batch]))
            .collect::<Result<Vec<_>>>()?;
        Ok(Batched::along_batch(Var::try_cat(
            &[&rows[0], &rows[1], &rows[2]],
            1,
        )?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(SdpaBackward {
                cfg: Config {
                    causal: true,
                    scale: Some(0.7),
                    dropout: None,
                },
                saved: None,
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 4, 3], seed, 1.0),
                    sample(&[2, 3, 3], seed + 3, 1.0),
                    sample(&[2, 3, 2], seed + 5, 1.0),
                    sample(&[2, 4, 2], seed + 9, 1.0),
                ]
            }),
            ..OpFacts::opaque(None)
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(SdpaBackward::default());
}
