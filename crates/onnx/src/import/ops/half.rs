//! 16-bit float arithmetic rounded where ONNX's definition rounds it. A
//! composite op on f16 or bf16 stores each intermediate result in the
//! 16-bit type; computing it all in f32 and rounding once at the end
//! gives different last bits. These helpers compute in f32 and round to
//! the 16-bit type after each step, which is what a 16-bit kernel that
//! widens each operation to f32 does. A rounded value is a constant: 16-bit
//! values carry no gradient in retrograd (see `Cast`).

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `Some(dtype)` for f16 and bf16.
pub(super) fn narrow(dtype: DType) -> Option<DType> {
    matches!(dtype, DType::F16 | DType::BF16).then_some(dtype)
}

/// `x` (f32) stored in `to` and read back as f32; `x` itself when `to` is `None`.
pub(super) fn round<'g>(x: &Var<'g>, to: Option<DType>) -> Result<Var<'g>> {
    match to {
        Some(d) => x.try_to_dtype(d)?.try_to_dtype(DType::F32),
        None => Ok(x.clone()),
    }
}

/// A scalar constant of value `v` as `dtype` computes with it: stored in
/// the 16-bit type and widened to f32 when `dtype` is one.
pub(super) fn scalar<'g>(c: &Ctx<'_, 'g>, v: f64, dtype: DType) -> Var<'g> {
    let t = Tensor::scalar_of(v, dtype);
    c.constant(match narrow(dtype) {
        Some(_) => t.to_dtype(DType::F32),
        None => t,
    })
}

/// The sum along `axis` (kept, of size 1) of f32 values holding `to`
/// values, as a 16-bit sum adds them: bf16 one term at a time with each
/// partial sum rounded; f16 in f32, rounded once.
fn sum<'g>(c: &Ctx<'_, 'g>, x: &Var<'g>, axis: usize, to: DType) -> Result<Var<'g>> {
    if to != DType::BF16 {
        return round(&x.try_sum_axes(&[axis as isize], true)?, Some(to));
    }
    let shape = x.shape().to_vec();
    let (n, inner) = (shape[axis], shape[axis + 1..].iter().product::<usize>());
    let outer: usize = shape[..axis].iter().product();
    let v = x.value().contiguous().to_vec::<f32>()?;
    let mut out = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = 0.0f32;
            for j in 0..n {
                acc = half::bf16::from_f32(acc + v[(o * n + j) * inner + i]).to_f32();
            }
            out.push(acc);
        }
    }
    let mut kept = shape;
    kept[axis] = 1;
    Ok(c.constant(Tensor::from_vec(out, &kept)?))
}

/// Softmax along `axis` of f32 values holding `to` values, each step
/// stored in `to`: `x - max`, its `exp`, their sum, the quotient.
pub(super) fn softmax<'g>(c: &Ctx<'_, 'g>, x: &Var<'g>, axis: isize, to: DType) -> Result<Var<'g>> {
    let a = c.axis(axis as i64, x.shape().len())?;
    let max = x.try_max_axes(&[a as isize], true)?;
    let e = round(&round(&x.try_sub(&max)?, Some(to))?.try_exp()?, Some(to))?;
    let s = sum(c, &e, a, to)?;
    round(&e.try_div(&s)?, Some(to))
}

/// ONNX's `Softmax`: on f16 or bf16, rounded as its definition computes
/// it (see [`softmax`]); otherwise retrograd's softmax.
pub(super) fn softmax_op<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let Some(to) = narrow(x.dtype()) else {
        return super::nn::softmax(c, ins);
    };
    let wide = [Some(x.try_to_dtype(DType::F32)?)];
    let y = super::nn::along_axis(c, &wide, |x, a| softmax(c, x, a, to))?;
    one(y.try_to_dtype(to)?)
}
