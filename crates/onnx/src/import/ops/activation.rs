//! ONNX activations that are short compositions of retrograd's
//! differentiable ops (so an imported model trains through them), each
//! the formula ONNX's operator page gives.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// A scalar of `x`'s dtype on the node's graph.
fn lit<'g>(c: &Ctx<'_, 'g>, x: &Var<'g>, v: f64) -> Var<'g> {
    c.constant(Tensor::scalar_of(v, x.dtype()))
}

/// `max(0, min(1, alpha · x + beta))`.
pub(super) fn hard_sigmoid<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 0.2)?;
    let beta = c.attrs.float("beta", 0.5)?;
    one(c.input(ins, 0)?.try_hard_sigmoid(alpha, beta)?)
}

/// `x · HardSigmoid(x)` with alpha 1/6, beta 1/2.
pub(super) fn hard_swish<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.input(ins, 0)?.try_hard_swish()?)
}

/// `gamma · elu(x, alpha)`.
pub(super) fn selu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 1.673_263_192_176_818_8)?;
    let gamma = c.attrs.float("gamma", 1.050_701_022_148_132_3)?;
    let x = c.input(ins, 0)?;
    one(x.try_elu_with(alpha)?.try_mul(&lit(c, x, gamma))?)
}

/// `max(0, x) + min(0, alpha · (exp(x / alpha) - 1))` = `alpha · elu(x / alpha)`.
pub(super) fn celu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 1.0)?;
    if alpha == 0.0 {
        return Err(c.error("alpha = 0"));
    }
    let x = c.input(ins, 0)?;
    one(x
        .try_div(&lit(c, x, alpha))?
        .try_elu_with(1.0)?
        .try_mul(&lit(c, x, alpha))?)
}

/// `x · tanh(softplus(x))`.
pub(super) fn mish<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    one(x.try_mul(&x.try_softplus_with(1.0, 700.0)?.try_tanh()?)?)
}

/// `x / (1 + |x|)`.
pub(super) fn softsign<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    one(x.try_div(&x.try_abs()?.try_add(&lit(c, x, 1.0))?)?)
}

/// `x` where `x > alpha`, else 0.
pub(super) fn thresholded_relu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 1.0)?;
    let x = c.input(ins, 0)?;
    let keep = x.try_gt_scalar(alpha)?;
    one(x.try_where(&keep, &lit(c, x, 0.0))?)
}

/// `x + bias` below `-lambd`, `x - bias` above `lambd`, else 0.
pub(super) fn shrink<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let lambd = c.attrs.float("lambd", 0.5)?;
    let bias = c.attrs.float("bias", 0.0)?;
    let x = c.input(ins, 0)?;
    if !x.dtype().is_float() {
        // Integer inputs: the same formula on the host.
        let y = x.value().map_f64(|v| {
            if v < -lambd {
                v + bias
            } else if v > lambd {
                v - bias
            } else {
                0.0
            }
        });
        return one(c.constant(y));
    }
    let low = x.try_lt_scalar(-lambd)?;
    let high = x.try_gt_scalar(lambd)?;
    let zero = lit(c, x, 0.0);
    let above = x.try_sub(&lit(c, x, bias))?.try_where(&high, &zero)?;
    one(x.try_add(&lit(c, x, bias))?.try_where(&low, &above)?)
}

/// `slope · x` where `x < 0`, else `x` (the slope broadcast to `x`).
pub(super) fn prelu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, slope) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let negative = x.try_lt_scalar(0.0)?;
    one(x.try_mul(slope)?.try_where(&negative, x)?)
}

/// `x · sigmoid(alpha · x)` (opset 24).
pub(super) fn swish<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 1.0)?;
    let x = c.input(ins, 0)?;
    one(x.try_mul(&x.try_mul(&lit(c, x, alpha))?.try_sigmoid()?)?)
}

/// The elementwise mean of the inputs (broadcast).
pub(super) fn mean<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let mut acc = c.input(ins, 0)?.clone();
    for i in 1..ins.len() {
        acc = acc.try_add(c.input(ins, i)?)?;
    }
    one(acc.try_div(&lit(c, &acc, ins.len() as f64))?)
}

/// Whether each element is infinite (`detect_positive`, `detect_negative`
/// choose the signs); a bool constant.
pub(super) fn is_inf<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let pos = c.attrs.int("detect_positive", 1)? != 0;
    let neg = c.attrs.int("detect_negative", 1)? != 0;
    let x = c.input(ins, 0)?;
    let flags: Vec<bool> = x
        .value()
        .to_f64_vec()
        .into_iter()
        .map(|v| (pos && v == f64::INFINITY) || (neg && v == f64::NEG_INFINITY))
        .collect();
    one(c.constant(Tensor::from_vec(flags, x.shape())?))
}

/// `a · sigmoid(alpha · a) · b` (opset 28).
pub(super) fn swiglu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    if a.shape() != b.shape() {
        return Err(c.error(format!(
            "inputs of shapes {:?} and {:?} (equal shapes, no broadcasting)",
            a.shape(),
            b.shape()
        )));
    }
    let alpha = c.attrs.float("alpha", 1.0)?;
    one(a
        .try_mul(&a.try_mul(&lit(c, a, alpha))?.try_sigmoid()?)?
        .try_mul(b)?)
}
