//! The opset-23 transformer ops: `Attention` (with its key/value cache,
//! grouped heads, masks, causal and sliding-window limits, softcap) and
//! `RMSNormalization`, composed from retrograd's differentiable ops in the
//! order ONNX's definition gives, so an imported model trains through them.

use super::half::{self, round};
use super::Ctx;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `x / sqrt(mean(x²) + epsilon) · scale` over the axes from `axis` on.
pub(super) fn rms_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, scale) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let rank = x.shape().len();
    let axis = c.axis(c.attrs.int("axis", -1)?, rank)?;
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let axes: Vec<isize> = (axis as isize..rank as isize).collect();
    let eps = c.constant(Tensor::scalar_of(eps, x.dtype()));
    let inv = x
        .try_mul(x)?
        .try_mean_axes(&axes, true)?
        .try_add(&eps)?
        .try_rsqrt()?;
    Ok(vec![x.try_mul(&inv)?.try_mul(scale)?])
}

/// `[batch, sequence, heads · size]` as `[batch, heads, sequence, size]`.
pub(super) fn split_heads<'g>(
    c: &Ctx<'_, 'g>,
    x: &Var<'g>,
    heads: i64,
    what: &str,
) -> Result<Var<'g>> {
    let s = x.shape();
    if heads <= 0 || !s[2].is_multiple_of(heads as usize) {
        return Err(c.error(format!(
            "{what} of shape {s:?} does not split into {heads} heads"
        )));
    }
    x.try_reshape(&[s[0] as isize, s[1] as isize, heads as isize, -1])?
        .try_permute(&[0, 2, 1, 3])
}

/// `[batch, kv_heads, sequence, size]` with each head repeated in place
/// to make `heads` (a multiple): `[h0, h0, h1, h1, ..]`, as grouped-query
/// attention shares a key/value head among consecutive query heads.
pub(super) fn repeat_heads<'g>(x: &Var<'g>, heads: usize) -> Result<Var<'g>> {
    let s = x.shape().to_vec();
    x.try_unsqueeze(2)?
        .try_expand(&[s[0], s[1], heads / s[1], s[2], s[3]])?
        .try_reshape(&[s[0] as isize, heads as isize, s[2] as isize, s[3] as isize])
}

/// An additive bias of `-inf` where `allowed(b, i, j)` is false, else 0:
/// `[batch, 1, q, kv]`, or `[q, kv]` when it does not depend on the batch.
fn bias_where(
    batch: Option<usize>,
    q: usize,
    kv: usize,
    dtype: DType,
    allowed: impl Fn(usize, usize, usize) -> bool,
) -> Result<Tensor> {
    let nb = batch.unwrap_or(1);
    let mut v = Vec::with_capacity(nb * q * kv);
    for b in 0..nb {
        for i in 0..q {
            for j in 0..kv {
                v.push(if allowed(b, i, j) {
                    0.0
                } else {
                    f64::NEG_INFINITY
                });
            }
        }
    }
    match batch {
        Some(nb) => Tensor::from_f64_slice(&v, &[nb, 1, q, kv], dtype),
        None => Tensor::from_f64_slice(&v, &[q, kv], dtype),
    }
}

/// ONNX's `Attention`: inputs Q, K, V (`[batch, heads, sequence, size]`,
/// or `[batch, sequence, heads · size]` with `q_num_heads` and
/// `kv_num_heads`), an optional mask (bool: true attends; float: added),
/// an optional past key and value (the cache, prepended), and from opset
/// 24 the keys each batch row really has (`nonpad_kv_seqlen`). Outputs Y,
/// the present key and value, and the scores `qk_matmul_output_mode`
/// chooses (0, 1: after the product and softcap; 2: plus the mask; 3:
/// after the softmax). On f16 and bf16 each step's result is rounded to
/// the input type as ONNX's definition rounds it (`half.rs`), the softmax
/// too unless `softmax_precision` names a wider type.
pub(super) fn attention<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let narrow = half::narrow(c.input(ins, 0)?.dtype());
    // The 16-bit inputs widened to f32, rounded back after each step.
    let wide: Vec<Option<Var<'g>>> = ins
        .iter()
        .map(|v| match v {
            Some(v) if narrow.is_some() && half::narrow(v.dtype()).is_some() => {
                v.try_to_dtype(DType::F32).map(Some)
            }
            other => Ok(other.clone()),
        })
        .collect::<Result<_>>()?;
    let ins = &wide[..];
    let r = |x: &Var<'g>| round(x, narrow);
    let (q, k, v) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let mask = c.opt(ins, 3);
    let (past_k, past_v) = (c.opt(ins, 4), c.opt(ins, 5));
    let nonpad = c.opt(ins, 6).map(|n| c.ints(n)).transpose()?;
    let rank = q.shape().len();
    if k.shape().len() != rank || v.shape().len() != rank || !(rank == 3 || rank == 4) {
        return Err(c.error(format!(
            "Q, K, V of shapes {:?}, {:?}, {:?} (all rank 3 or all rank 4)",
            q.shape(),
            k.shape(),
            v.shape()
        )));
    }
    if past_k.is_some() != past_v.is_some() {
        return Err(c.error("a past key without a past value, or the reverse"));
    }
    let dtype = q.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(c.error(format!(
            "attention on {dtype} (f16, bf16, f32 and f64 are supported)"
        )));
    }
    let (q, k, v) = if rank == 3 {
        let qh = c.attrs.int("q_num_heads", 0)?;
        let kvh = c.attrs.int("kv_num_heads", 0)?;
        (
            split_heads(c, q, qh, "Q")?,
            split_heads(c, k, kvh, "K")?,
            split_heads(c, v, kvh, "V")?,
        )
    } else {
        (q.clone(), k.clone(), v.clone())
    };
    let head_size = q.shape()[3];
    let scale = match c.attrs.get("scale") {
        Some(_) => c.attrs.float("scale", 1.0)?,
        None => 1.0 / (head_size as f64).sqrt(),
    };
    let root = half::scalar(c, scale.sqrt(), narrow.unwrap_or(dtype));
    let present_k = match past_k {
        Some(p) => Var::try_cat(&[p, &k], 2)?,
        None => k,
    };
    let present_v = match past_v {
        Some(p) => Var::try_cat(&[p, &v], 2)?,
        None => v,
    };
    let (batch, q_len, kv_len) = (q.shape()[0], q.shape()[2], present_k.shape()[2]);
    let past_len = past_k.map_or(0, |p| p.shape()[2]);

    // The mask as an additive bias, padded with -inf to every key.
    let mask = match mask {
        None => None,
        Some(m) => {
            let m = if m.dtype() == DType::Bool {
                let keep = m.value().contiguous().to_vec::<bool>()?;
                let bias: Vec<f64> = keep
                    .iter()
                    .map(|&k| if k { 0.0 } else { f64::NEG_INFINITY })
                    .collect();
                c.constant(Tensor::from_f64_slice(&bias, m.shape(), dtype)?)
            } else if m.dtype() != dtype {
                return Err(c.error(format!("a {} mask for {dtype} inputs", m.dtype())));
            } else {
                m.clone()
            };
            let last = m.shape().last().copied().unwrap_or(1);
            Some(if last < kv_len && !m.shape().is_empty() {
                m.try_pad(&[0, (kv_len - last) as isize], f64::NEG_INFINITY)?
            } else {
                m
            })
        }
    };
    // The constant limits: causal (bottom-right aligned after the cache or
    // the real keys), the sliding window, the padding past the real keys.
    let offsets: Option<Vec<i64>> = nonpad
        .as_ref()
        .filter(|_| past_k.is_none())
        .map(|n| n.iter().map(|&n| n - q_len as i64).collect());
    if let Some(n) = &nonpad
        && n.len() != batch
    {
        return Err(c.error(format!(
            "nonpad_kv_seqlen has {} entries for batch {batch}",
            n.len()
        )));
    }
    let offset = |b: usize| -> i64 {
        offsets
            .as_ref()
            .map_or(past_len as i64, |o| o.get(b).copied().unwrap_or(0))
    };
    let causal = c.attrs.int("is_causal", 0)? != 0;
    let left = c.attrs.int("left_window_size", -1)?;
    let right = c.attrs.int("right_window_size", -1)?;
    let per_batch = offsets.is_some().then_some(batch);
    let mut limits: Vec<Tensor> = Vec::new();
    if causal {
        limits.push(bias_where(per_batch, q_len, kv_len, dtype, |b, i, j| {
            j as i64 <= i as i64 + offset(b)
        })?);
    }
    if left >= 0 || right >= 0 {
        limits.push(bias_where(per_batch, q_len, kv_len, dtype, |b, i, j| {
            let diff = i as i64 + offset(b) - j as i64;
            (left < 0 || diff <= left) && (right < 0 || -diff <= right)
        })?);
    }
    if let Some(n) = &nonpad {
        limits.push(bias_where(Some(batch), 1, kv_len, dtype, |b, _, j| {
            (j as i64) < n[b]
        })?);
    }
    let mut bias: Option<Var<'g>> = mask;
    for t in limits {
        let t = c.constant(t);
        bias = Some(match bias {
            Some(b) => b.try_add(&t)?,
            None => t,
        });
    }

    // Grouped heads: each key/value head serves `q_heads / kv_heads` query heads.
    let (qh, kvh) = (q.shape()[1], present_k.shape()[1]);
    let (k_all, v_all) = if qh != kvh {
        if kvh == 0 || !qh.is_multiple_of(kvh) || present_v.shape()[1] != kvh {
            return Err(c.error(format!(
                "{qh} query heads for {kvh} key and {} value heads",
                present_v.shape()[1]
            )));
        }
        (repeat_heads(&present_k, qh)?, repeat_heads(&present_v, qh)?)
    } else {
        (present_k.clone(), present_v.clone())
    };

    let (q_scaled, k_scaled) = (r(&q.try_mul(&root)?)?, r(&k_all.try_mul(&root)?)?);
    let mut scores = r(&q_scaled.try_matmul(&k_scaled.try_transpose(-2, -1)?)?)?;
    let softcap = c.attrs.float("softcap", 0.0)?;
    if softcap > 0.0 {
        let cap = half::scalar(c, softcap, narrow.unwrap_or(dtype));
        scores = r(&r(&r(&scores.try_div(&cap)?)?.try_tanh()?)?.try_mul(&cap)?)?;
    }
    let with_bias = match &bias {
        Some(b) => r(&scores.try_add(b)?)?,
        None => scores.clone(),
    };
    // The softmax in the input's 16-bit type, or the wider type asked for.
    let softmax_in = match c.attrs.int("softmax_precision", 0)? {
        10 => Some(DType::F16),
        16 => Some(DType::BF16),
        0 => narrow,
        _ => None,
    };
    let mut probs = match softmax_in {
        Some(to) if narrow.is_some() => half::softmax(c, &with_bias, -1, to)?,
        _ => with_bias.try_softmax(-1)?,
    };
    // A row whose every key is masked attends to nothing: 0, not NaN.
    if let Some(b) = &bias {
        let b = b.value();
        let n = b.shape().last().copied().unwrap_or(0);
        let rows: Vec<bool> = b
            .contiguous()
            .to_f64_vec()
            .chunks(n.max(1))
            .map(|row| row.iter().any(|&x| x != f64::NEG_INFINITY))
            .collect();
        if rows.iter().any(|&r| !r) {
            let mut shape = b.shape().to_vec();
            if let Some(l) = shape.last_mut() {
                *l = 1;
            }
            let live = Tensor::from_vec(rows, &shape)?;
            probs = probs.try_where(&live, &c.constant(Tensor::scalar_of(0.0, dtype)))?;
        }
    }
    probs = r(&probs)?;
    let mut y = r(&probs.try_matmul(&v_all)?)?;
    if rank == 3 {
        let s = y.shape().to_vec();
        y = y
            .try_permute(&[0, 2, 1, 3])?
            .try_reshape(&[s[0] as isize, s[2] as isize, -1])?;
    }
    let qk = match c.attrs.int("qk_matmul_output_mode", 0)? {
        0 | 1 => scores,
        2 => with_bias,
        3 => probs,
        other => return Err(c.error(format!("qk_matmul_output_mode {other}"))),
    };
    let outs = vec![y, present_k, present_v, qk];
    match narrow {
        Some(d) => outs.iter().map(|o| o.try_to_dtype(d)).collect(),
        None => Ok(outs),
    }
}

/// ONNX's `RotaryEmbedding`: the first `rotary_embedding_dim` features of
/// each head turned by the angles whose cosines and sines the caches hold
/// (rows picked by `position_ids` when given), in halves or, with
/// `interleaved`, in even/odd pairs; the rest pass through. The input is
/// `[batch, heads, sequence, size]`, or `[batch, sequence, heads · size]`
/// with `num_heads`.
pub(super) fn rotary_embedding<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, cos, sin) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let rank = x.shape().len();
    let s = |v: usize| v as isize;
    let heads_last = match rank {
        4 => x.try_permute(&[0, 2, 1, 3])?,
        3 => split_heads(c, x, c.attrs.int("num_heads", 0)?, "the input")?
            .try_permute(&[0, 2, 1, 3])?,
        _ => return Err(c.error(format!("an input of shape {:?} (rank 3 or 4)", x.shape()))),
    };
    let [b, seq, _, d] = heads_last.shape()[..] else {
        return Err(c.error("a 4-d input"));
    };
    let dim = match c.attrs.int("rotary_embedding_dim", 0)? {
        0 => d,
        r => usize::try_from(r)
            .ok()
            .filter(|&r| r <= d && r % 2 == 0)
            .ok_or_else(|| c.error(format!("rotary_embedding_dim {r} for heads of {d}")))?,
    };
    let half = dim / 2;
    let pick = |cache: &Var<'g>| -> Result<Var<'g>> {
        let rows = match c.opt(ins, 3) {
            Some(p) => {
                let ids = p.value().to_dtype(retrograd_engine::tensor::DType::I64);
                let n = ids.numel();
                cache
                    .try_index_select(0, &ids.reshape(&[n])?)?
                    .try_reshape(&[s(b), s(seq), -1])?
            }
            None => cache.clone(),
        };
        if rows.shape().last() != Some(&half) {
            return Err(c.error(format!(
                "a cache of shape {:?} for {half} angles",
                rows.shape()
            )));
        }
        rows.try_unsqueeze(2)
    };
    let (cos, sin) = (pick(cos)?, pick(sin)?);
    let turned = heads_last.try_narrow(-1, 0, dim)?;
    let interleaved = c.attrs.int("interleaved", 0)? != 0;
    let (x1, x2) = if interleaved {
        (
            turned.try_slice(-1, 0, dim as isize, 2)?,
            turned.try_slice(-1, 1, dim as isize, 2)?,
        )
    } else {
        (
            turned.try_narrow(-1, 0, half)?,
            turned.try_narrow(-1, half as isize, half)?,
        )
    };
    let real = cos.try_mul(&x1)?.try_sub(&sin.try_mul(&x2)?)?;
    let imag = sin.try_mul(&x1)?.try_add(&cos.try_mul(&x2)?)?;
    let turned = if interleaved {
        let shape: Vec<isize> = turned.shape().iter().map(|&v| v as isize).collect();
        Var::try_cat(&[&real.try_unsqueeze(-1)?, &imag.try_unsqueeze(-1)?], -1)?
            .try_reshape(&shape)?
    } else {
        Var::try_cat(&[&real, &imag], -1)?
    };
    let y = if dim < d {
        Var::try_cat(
            &[&turned, &heads_last.try_narrow(-1, dim as isize, d - dim)?],
            -1,
        )?
    } else {
        turned
    };
    let y = y.try_permute(&[0, 2, 1, 3])?;
    if rank == 3 {
        let shape: Vec<isize> = x.shape().iter().map(|&v| v as isize).collect();
        return Ok(vec![y.try_permute(&[0, 2, 1, 3])?.try_reshape(&shape)?]);
    }
    Ok(vec![y])
}
