//! Losses and normalisations: `NegativeLogLikelihoodLoss`,
//! `SoftmaxCrossEntropyLoss`, `LpNormalization`, `InstanceNormalization`,
//! `GlobalMaxPool`, composed from retrograd's differentiable ops (the
//! class picks through `gather`), so a loss read from a file trains.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `-input[n, target[n, ...], ...] · weight[target]` per element, then
/// the `reduction`: `none`, `sum`, or `mean` (the sum over the sum of the
/// weights that count). Targets equal to `ignore_index` count for nothing.
fn nll<'g>(
    c: &Ctx<'_, 'g>,
    input: &Var<'g>,
    target: &Var<'g>,
    weight: Option<&Var<'g>>,
) -> Result<Var<'g>> {
    let shape = input.shape();
    if shape.len() < 2 || target.shape().len() + 1 != shape.len() {
        return Err(c.error(format!(
            "input {:?} and target {:?} (input [N, C, ...], target [N, ...])",
            shape,
            target.shape()
        )));
    }
    let classes = shape[1] as i64;
    let ignore = c
        .attrs
        .has("ignore_index")
        .then(|| c.attrs.int("ignore_index", 0))
        .transpose()?;
    let t = target
        .value()
        .to_dtype(DType::I64)
        .contiguous()
        .to_vec::<i64>()?;
    let w = weight.map(|w| w.value().to_f64_vec());
    let mut picks = Vec::with_capacity(t.len());
    let mut scale = Vec::with_capacity(t.len());
    for &k in &t {
        if Some(k) == ignore {
            picks.push(0);
            scale.push(0.0);
            continue;
        }
        if !(0..classes).contains(&k) {
            return Err(c.error(format!("target {k} for {classes} classes")));
        }
        picks.push(k);
        scale.push(w.as_ref().map_or(1.0, |w| w[k as usize]));
    }
    let mut idx_shape = target.shape().to_vec();
    idx_shape.insert(1, 1);
    let index = Tensor::from_vec(picks, &idx_shape)?;
    let picked = input.try_gather(1, &index)?.try_squeeze_dim(1)?;
    let weights = Tensor::from_f64_slice(&scale, target.shape(), input.dtype())?;
    let total: f64 = scale.iter().sum();
    let losses = picked.try_mul(&c.constant(weights))?.try_neg()?;
    let all: Vec<isize> = (0..losses.shape().len() as isize).collect();
    match c.attrs.string("reduction", "mean")?.as_str() {
        "none" => Ok(losses),
        "sum" => losses.try_sum_axes(&all, false),
        "mean" => losses
            .try_sum_axes(&all, false)?
            .try_div(&c.constant(Tensor::scalar_of(total, input.dtype()))),
        other => Err(c.error(format!("reduction {other:?}"))),
    }
}

pub(super) fn nll_loss<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(nll(c, c.input(ins, 0)?, c.input(ins, 1)?, c.opt(ins, 2))?)
}

/// The negative log-likelihood of the log-softmax over axis 1; the second
/// output, if named, is that log-softmax.
pub(super) fn softmax_cross_entropy<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let log_prob = c.input(ins, 0)?.try_log_softmax(1)?;
    let loss = nll(c, &log_prob, c.input(ins, 1)?, c.opt(ins, 2))?;
    Ok(vec![loss, log_prob])
}

/// `x` over its `p`-norm (1 or 2) along `axis`; 0 where the norm is 0.
pub(super) fn lp_normalization<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let axis = c.axis(c.attrs.int("axis", -1)?, x.shape().len())? as isize;
    let norm = match c.attrs.int("p", 2)? {
        1 => x.try_abs()?.try_sum_axes(&[axis], true)?,
        2 => x.try_mul(x)?.try_sum_axes(&[axis], true)?.try_sqrt()?,
        p => return Err(c.error(format!("p = {p} (1 or 2)"))),
    };
    let y = x.try_div(&norm)?;
    if norm.value().to_f64_vec().iter().all(|&v| v != 0.0) {
        return one(y);
    }
    let live = norm.value().map_f64(|v| f64::from(u8::from(v != 0.0)));
    let live = live.to_dtype(DType::Bool);
    one(y.try_where(&live, &c.constant(Tensor::scalar_of(0.0, x.dtype())))?)
}

/// Each `(n, c)` plane normalised over its spatial axes, then scaled and
/// shifted per channel.
pub(super) fn instance_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, scale, bias) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let rank = x.shape().len();
    if rank < 3 {
        return Err(c.error(format!(
            "an input of shape {:?} (rank 3 or more)",
            x.shape()
        )));
    }
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let axes: Vec<isize> = (2..rank as isize).collect();
    let mean = x.try_mean_axes(&axes, true)?;
    let centred = x.try_sub(&mean)?;
    let var = centred.try_mul(&centred)?.try_mean_axes(&axes, true)?;
    let inv = var
        .try_add(&c.constant(Tensor::scalar_of(eps, x.dtype())))?
        .try_rsqrt()?;
    let mut per_channel: Vec<isize> = vec![-1];
    per_channel.extend(std::iter::repeat_n(1, rank - 2));
    let y = centred
        .try_mul(&inv)?
        .try_mul(&scale.try_reshape(&per_channel)?)?
        .try_add(&bias.try_reshape(&per_channel)?)?;
    one(y)
}

/// The largest value of each `(n, c)` plane.
pub(super) fn global_max_pool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let axes: Vec<isize> = (2..x.shape().len() as isize).collect();
    if axes.is_empty() {
        return Err(c.error(format!(
            "an input of shape {:?} (rank 3 or more)",
            x.shape()
        )));
    }
    one(x.try_max_axes(&axes, true)?)
}
