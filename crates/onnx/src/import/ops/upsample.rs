//! `Upsample` (opsets 7 to 9, then replaced by `Resize`): `nearest` as
//! one `index_select` per scaled axis (each output position reads
//! `floor(position / scale)`); `linear` as `Resize` of opset 10 does it.

use super::{resize, Ctx};
use crate::import::attrs::Attr;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn upsample<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    // Opset 7 names the scales in an attribute, later ones in an input.
    let scales = match (c.opt(ins, 1), c.attrs.get("scales")) {
        (Some(s), _) => s.value().to_f64_vec(),
        (None, Some(Attr::Floats(v))) => v.clone(),
        _ => return Err(c.error("no scales")),
    };
    if scales.len() != rank || scales.iter().any(|&s| !(s.is_finite() && s >= 1.0)) {
        return Err(c.error(format!(
            "scales {scales:?} for rank {rank} (each at least 1)"
        )));
    }
    match c.attrs.string("mode", "nearest")?.as_str() {
        "nearest" => {}
        "linear" | "bilinear" => {
            let s = c.constant(Tensor::from_f64_slice(
                &scales,
                &[rank],
                retrograd_engine::tensor::DType::F32,
            )?);
            return resize::resize(c, &[Some(x.clone()), Some(s)]);
        }
        other => return Err(c.error(format!("mode {other:?}"))),
    }
    let out: Vec<usize> = x
        .shape()
        .iter()
        .zip(&scales)
        .map(|(&n, &s)| (n as f64 * s).floor() as usize)
        .collect();
    c.check_size(&out)?;
    let mut y = x.clone();
    for (d, (&n, &s)) in x.shape().iter().zip(&scales).enumerate() {
        if out[d] == n {
            continue;
        }
        let picks: Vec<i64> = (0..out[d])
            .map(|o| ((o as f64 / s).floor() as usize).min(n.saturating_sub(1)) as i64)
            .collect();
        y = y.try_index_select(d as isize, &Tensor::from_vec(picks, &[out[d]])?)?;
    }
    Ok(vec![y])
}
