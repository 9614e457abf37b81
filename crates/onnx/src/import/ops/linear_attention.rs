//! `LinearAttention` (opset 27): attention as a recurrence over a
//! `[d_k, d_v]` state per key/value head (linear, gated, delta and gated
//! delta rules), run token by token on retrograd's differentiable ops so
//! an imported model trains through the whole sequence.

use super::attention::split_heads;
use super::{Attrs, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

const RULES: [&str; 4] = ["linear", "gated", "delta", "gated_delta"];

/// `[batch, time, n]` as `[batch, n, time, 1]`: a per-head scalar (or
/// one shared across heads) for each token.
fn per_head<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    let s = x.shape();
    x.try_reshape(&[s[0] as isize, s[1] as isize, s[2] as isize, 1])?
        .try_permute(&[0, 2, 1, 3])
}

/// Inputs `query` `[B, T, Hq·dk]`, `key` `[B, T, Hkv·dk]`, `value` `[B,
/// T, Hkv·dv]`, optional `past_state` `[B, Hkv, dk, dv]` (zeros when
/// omitted), `decay` (log-space, `[B, T, Hkv]` or `[B, T, Hkv·dk]`;
/// the gated rules) and `beta` (`[B, T, Hkv]` or `[B, T, 1]`; the delta
/// rules). Outputs `[B, T, Hq·dv]` and the state after the last token.
/// Query head `h` reads the state of key/value head `h / (Hq / Hkv)`.
pub(super) fn linear_attention<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (q, k, v) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let (past, decay, beta) = (c.opt(ins, 3), c.opt(ins, 4), c.opt(ins, 5));
    let rule = c.attrs.string("update_rule", "gated_delta")?;
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => return Err(c.error(format!("update_rule {other:?} (one of {RULES:?})"))),
    };
    let (qh, kvh) = (
        c.attrs.int("q_num_heads", 0)?,
        c.attrs.int("kv_num_heads", 0)?,
    );
    if qh <= 0 || kvh <= 0 || qh % kvh != 0 {
        return Err(c.error(format!(
            "q_num_heads {qh} and kv_num_heads {kvh} (positive, the first a multiple of the second)"
        )));
    }
    for (name, x) in [("query", q), ("key", k), ("value", v)] {
        if x.shape().len() != 3 || x.shape()[..2] != q.shape()[..2] {
            return Err(c.error(format!(
                "{name} of shape {:?} (want [batch, time, heads · size], query {:?})",
                x.shape(),
                q.shape()
            )));
        }
    }
    if gated != decay.is_some() || delta != beta.is_some() {
        return Err(c.error(format!(
            "update_rule {rule:?} with{} decay and with{} beta \
             (decay goes with the gated rules, beta with the delta rules)",
            if decay.is_some() { "" } else { "out" },
            if beta.is_some() { "" } else { "out" },
        )));
    }
    let (q4, k4, v4) = (
        split_heads(c, q, qh, "query")?,
        split_heads(c, k, kvh, "key")?,
        split_heads(c, v, kvh, "value")?,
    );
    let (b, t) = (q.shape()[0], q.shape()[1]);
    let (qh, kvh) = (qh as usize, kvh as usize);
    let (dk, dv) = (q4.shape()[3], v4.shape()[3]);
    if k4.shape()[3] != dk {
        return Err(c.error(format!(
            "query heads of {dk} and key heads of {} features",
            k4.shape()[3]
        )));
    }
    // Decay per key feature `[B, Hkv, T, dk]` or per head `[B, Hkv, T, 1]`.
    let decay = match decay {
        None => None,
        Some(g) if g.shape().len() == 3 && g.shape()[..2] == [b, t] => {
            let last = g.shape()[2];
            Some(if last == kvh {
                per_head(g)?
            } else if last == kvh * dk {
                split_heads(c, g, kvh as i64, "decay")?
            } else {
                return Err(c.error(format!(
                    "decay of shape {:?} (last axis {kvh} or {})",
                    g.shape(),
                    kvh * dk
                )));
            })
        }
        Some(g) => return Err(c.error(format!("decay of shape {:?}", g.shape()))),
    };
    let beta = match beta {
        None => None,
        Some(x)
            if x.shape().len() == 3
                && x.shape()[..2] == [b, t]
                && (x.shape()[2] == kvh || x.shape()[2] == 1) =>
        {
            Some(per_head(x)?)
        }
        Some(x) => {
            return Err(c.error(format!(
                "beta of shape {:?} (want [{b}, {t}, {kvh}] or [{b}, {t}, 1])",
                x.shape()
            )))
        }
    };
    let dtype = q.dtype();
    let mut state = match past {
        Some(p) if p.shape() == [b, kvh, dk, dv] => p.clone(),
        Some(p) => {
            return Err(c.error(format!(
                "past_state of shape {:?} (want {:?})",
                p.shape(),
                [b, kvh, dk, dv]
            )))
        }
        None => c.constant(Tensor::zeros(&[b, kvh, dk, dv], dtype)?),
    };
    // 0 (the default) asks for 1/sqrt(dk).
    let scale = c.attrs.float("scale", 0.0)?;
    let scale = if scale == 0.0 {
        1.0 / (dk as f64).sqrt()
    } else {
        scale
    };
    let scale = c.constant(Tensor::scalar_of(scale, dtype));
    // The query heads of one key/value head side by side: `[B, Hkv, group · T, dk]`
    // reads each state once per token.
    let group = qh / kvh;
    let q_grouped = q4.try_reshape(&[b as isize, kvh as isize, group as isize, t as isize, -1])?;
    let mut outs = Vec::with_capacity(t);
    for i in 0..t {
        let at = |x: &Var<'g>| x.try_narrow(2, i as isize, 1);
        let (k_t, mut v_t) = (at(&k4)?, at(&v4)?);
        if let Some(g) = &decay {
            // `[B, Hkv, 1, dk or 1]` as a column over the state's rows.
            state = state.try_mul(&at(g)?.try_transpose(-2, -1)?.try_exp()?)?;
        }
        if let Some(beta) = &beta {
            let recalled = k_t.try_matmul(&state)?;
            v_t = at(beta)?.try_mul(&v_t.try_sub(&recalled)?)?;
        }
        state = state.try_add(&k_t.try_transpose(-2, -1)?.try_matmul(&v_t)?)?;
        let q_t = q_grouped.try_narrow(3, i as isize, 1)?.try_reshape(&[
            b as isize,
            kvh as isize,
            group as isize,
            dk as isize,
        ])?;
        outs.push(q_t.try_matmul(&state)?.try_mul(&scale)?);
    }
    // Each `[B, Hkv, group, dv]`, stacked on a time axis: `[B, T, Hq · dv]`.
    let outs: Vec<Var<'g>> = outs
        .iter()
        .map(|o| o.try_unsqueeze(1))
        .collect::<Result<_>>()?;
    let refs: Vec<&Var<'g>> = outs.iter().collect();
    let y = if t == 0 {
        c.constant(Tensor::zeros(&[b, 0, qh * dv], dtype)?)
    } else {
        Var::try_cat(&refs, 1)?.try_reshape(&[b as isize, t as isize, (qh * dv) as isize])?
    };
    Ok(vec![y, state])
}

/// The rule and the head counts are checked at load.
pub(super) fn check(a: &Attrs, _: i64) -> std::result::Result<(), String> {
    let rule = a
        .string("update_rule", "gated_delta")
        .map_err(|e| e.to_string())?;
    if !RULES.contains(&rule.as_str()) {
        return Err(format!("update_rule {rule:?}"));
    }
    if !a.has("q_num_heads") || !a.has("kv_num_heads") {
        return Err("a node without q_num_heads and kv_num_heads".into());
    }
    Ok(())
}
