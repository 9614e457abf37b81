//! `scaled_dot_product_attention` as its ONNX decomposition:
//! `softmax(q kᵀ · scale + mask) v`, the mask causal, additive or bool.
//! Rows every key of which is masked give 0, as retrograd's (and PyTorch
//! 2.5+'s) fused attention does, not the NaN of a plain softmax.

use super::emit::attr_ints;
use super::{Emit, Mapper, NodeCtx};
use retrograd_engine::base::error::Result;
use retrograd_engine::tensor::{DType, Tensor};

pub(super) fn lookup(op: &str) -> Option<Mapper> {
    Some(match op {
        "scaled_dot_product_attention" => attention,
        _ => return None,
    })
}

fn attention(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    if let Some(p) = n.attrs.get_float("dropout_p").filter(|&p| p > 0.0) {
        return Err(n.unsupported(format!(
            "attention dropout (p = {p}) draws a random mask: record the graph in eval mode"
        )));
    }
    let q = n.shape(0);
    let rank = q.len();
    if rank < 2 || n.rank(1) != rank {
        return Err(n.unsupported(format!(
            "q {q:?} and k {:?} must share a rank >= 2",
            n.shape(1)
        )));
    }
    let (l, d) = (q[rank - 2], q[rank - 1]);
    let s_len = n.shape(1)[rank - 2];
    let dt = n.dtype();
    let scale = n
        .attrs
        .get_float("scale")
        .unwrap_or(1.0 / (d as f64).sqrt());
    let tmp = |what: &str| format!("{}/{what}", n.out);

    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 2, rank - 1);
    let kt = e.op(
        "Transpose",
        &[n.input(1)],
        &tmp("kt"),
        vec![attr_ints("perm", &perm)],
    );
    let scale = e.scalar("scale", scale, dt)?;
    let qs = e.op("Mul", &[n.input(0), &scale], &tmp("q_scaled"), vec![]);
    let mut scores = e.op("MatMul", &[&qs, &kt], &tmp("scores"), vec![]);
    let mut maskable = false;
    if n.flag("causal")? {
        // Query i attends to keys j <= i (PyTorch's top-left alignment).
        let mut m = vec![0.0; l * s_len];
        for i in 0..l {
            for j in (i + 1).min(s_len)..s_len {
                m[i * s_len + j] = f64::NEG_INFINITY;
            }
        }
        let causal = e.constant(
            &tmp("causal_mask"),
            &Tensor::from_f64_slice(&m, &[l, s_len], dt)?,
        )?;
        scores = e.op("Add", &[&scores, &causal], &tmp("masked"), vec![]);
        maskable = s_len < l;
    }
    if let Some(mask) = n.inputs.get(3) {
        maskable = true;
        scores = if n.values[3].dtype() == DType::Bool {
            let minus_inf = e.scalar("minus_inf", f64::NEG_INFINITY, dt)?;
            e.op(
                "Where",
                &[mask, &scores, &minus_inf],
                &tmp("masked"),
                vec![],
            )
        } else {
            e.op("Add", &[&scores, mask], &tmp("masked"), vec![])
        };
    }
    let mut probs = e.op(
        "Softmax",
        &[&scores],
        &tmp("probs"),
        vec![super::attr_int("axis", rank as i64 - 1)],
    );
    if maskable {
        let nan = e.op("IsNaN", &[&probs], &tmp("empty_rows"), vec![]);
        let zero = e.scalar("zero", 0.0, dt)?;
        probs = e.op(
            "Where",
            &[&nan, &zero, &probs],
            &tmp("probs_or_zero"),
            vec![],
        );
    }
    e.node("MatMul", &[&probs, n.input(2)], &[&n.out], vec![]);
    Ok(())
}
