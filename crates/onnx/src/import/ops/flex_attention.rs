//! `FlexAttention` (domain `ai.onnx.preview`): scaled dot-product
//! attention whose scores and probabilities pass through the model's own
//! modifier subgraphs (`score_mod` after the product, `prob_mod` after
//! the softmax), composed of differentiable ops so it trains.

use std::collections::HashMap;

use super::attention::repeat_heads;
use super::{subgraph, Attrs, Ctx};
use crate::proto::GraphProto;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// Inputs Q `[B, Hq, L, E]`, K `[B, Hkv, S, E]`, V `[B, Hkv, S, Ev]`;
/// output `[B, Hq, L, Ev]`. Q and K are each scaled by `sqrt(scale)`
/// (default `1/sqrt(E)`) before their product; query head `h` reads
/// key/value head `h / (Hq / Hkv)`. The softmax and what follows run in
/// `softmax_precision` (default f32, f64 for f64 inputs).
pub(super) fn flex_attention<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (q, k, v) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let fits = qs.len() == 4
        && ks.len() == 4
        && vs.len() == 4
        && ks[0] == qs[0]
        && vs[0] == qs[0]
        && ks[1] == vs[1]
        && ks[2] == vs[2]
        && ks[3] == qs[3]
        && ks[1] > 0
        && qs[1].is_multiple_of(ks[1]);
    if !fits {
        return Err(c.error(format!(
            "Q, K, V of shapes {qs:?}, {ks:?}, {vs:?} (want [B, Hq, L, E], [B, Hkv, S, E], \
             [B, Hkv, S, Ev] with Hq a multiple of Hkv)"
        )));
    }
    let dtype = q.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) || k.dtype() != dtype || v.dtype() != dtype {
        return Err(c.error(format!(
            "Q, K, V of {dtype}, {}, {} (one float type)",
            k.dtype(),
            v.dtype()
        )));
    }
    let scale = match c.attrs.get("scale") {
        Some(_) => c.attrs.float("scale", 1.0)?,
        None => 1.0 / (qs[3] as f64).sqrt(),
    };
    // The square root is taken in f32, whatever the input type.
    let root = f64::from((scale as f32).sqrt());
    let root = c.constant(Tensor::scalar_of(root, dtype));
    let heads = qs[1];
    let (k, v) = (repeat_heads(k, heads)?, repeat_heads(v, heads)?);
    let scores = q
        .try_mul(&root)?
        .try_matmul(&k.try_mul(&root)?.try_transpose(-2, -1)?)?;
    let wide = precision(c.attrs, dtype).map_err(|why| c.error(why))?;
    let mut scores = scores.try_to_dtype(wide)?;
    let outer = subgraph::outer_values(c, ins)?;
    if let Some(g) = c.attrs.graph("score_mod")? {
        scores = modify(c, g, &scores, &outer, "score_mod")?;
    }
    let mut probs = scores.try_softmax(-1)?;
    if let Some(g) = c.attrs.graph("prob_mod")? {
        probs = modify(c, g, &probs, &outer, "prob_mod")?;
    }
    Ok(vec![probs
        .try_matmul(&v.try_to_dtype(wide)?)?
        .try_to_dtype(dtype)?])
}

/// The type the softmax runs in: `softmax_precision` (f32 or f64), else
/// f64 for f64 inputs and f32 for the rest.
fn precision(a: &Attrs, input: DType) -> std::result::Result<DType, String> {
    match a.int("softmax_precision", 0).map_err(|e| e.to_string())? {
        0 if input == DType::F64 => Ok(DType::F64),
        0 | 1 => Ok(DType::F32),
        11 => Ok(DType::F64),
        other => Err(format!(
            "softmax_precision {other} (1, float, and 11, double, are supported)"
        )),
    }
}

/// `x` through modifier subgraph `g`, which must give one value of `x`'s
/// shape and type.
fn modify<'g>(
    c: &Ctx<'_, 'g>,
    g: &GraphProto,
    x: &Var<'g>,
    outer: &HashMap<String, Var<'g>>,
    what: &str,
) -> Result<Var<'g>> {
    let out = subgraph::run(c, g, std::slice::from_ref(x), outer)?;
    match &out[..] {
        [y] if y.shape() == x.shape() => Ok(y.try_to_dtype(x.dtype())?),
        _ => Err(c.error(format!(
            "{what} gives {} values of shapes {:?} for scores of shape {:?} (want one, the same)",
            out.len(),
            out.iter().map(|y| y.shape().to_vec()).collect::<Vec<_>>(),
            x.shape()
        ))),
    }
}

/// The precision and the modifier subgraphs are checked at load.
pub(super) fn check(a: &Attrs, opset: i64) -> std::result::Result<(), String> {
    precision(a, DType::F32)?;
    for name in ["score_mod", "prob_mod"] {
        if let Some(g) = a.graph(name).map_err(|e| e.to_string())? {
            subgraph::check(g, opset).map_err(|why| format!("{name}: {why}"))?;
        }
    }
    Ok(())
}
