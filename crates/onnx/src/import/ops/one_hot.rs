//! `OneHot`: `values[1]` where an index names the position on the new
//! axis, `values[0]` elsewhere; as `off + mask · (on - off)` so float
//! values receive gradients.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn one_hot<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (idx, depth, values) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let depth_v = c.scalar(depth)?;
    if depth_v.is_nan() || depth_v < 1.0 {
        return Err(c.error(format!("depth = {depth_v}")));
    }
    let depth = depth_v as usize;
    if values.shape().iter().product::<usize>() != 2 {
        return Err(c.error(format!(
            "values of shape {:?} (want [off, on])",
            values.shape()
        )));
    }
    let rank = idx.shape().len();
    let axis = c.axis(c.attrs.int("axis", -1)?, rank + 1)?;
    let mut shape = idx.shape().to_vec();
    shape.insert(axis, depth);
    c.check_size(&shape)?;
    let (outer, inner): (usize, usize) = (
        idx.shape()[..axis].iter().product(),
        idx.shape()[axis..].iter().product(),
    );
    let v = idx.value().contiguous().to_f64_vec();
    let mut mask = vec![0.0f64; outer * depth * inner];
    for o in 0..outer {
        for r in 0..inner {
            let i = v[o * inner + r];
            let i = if i < 0.0 { i + depth as f64 } else { i };
            // Out of range, or not a whole number: all `off`.
            if i >= 0.0 && i < depth as f64 && i.fract() == 0.0 {
                mask[(o * depth + i as usize) * inner + r] = 1.0;
            }
        }
    }
    let flat = values.try_reshape(&[2])?;
    if !values.dtype().is_float() {
        let pair = flat.value().to_f64_vec();
        let out: Vec<f64> = mask
            .iter()
            .map(|&m| if m == 1.0 { pair[1] } else { pair[0] })
            .collect();
        return one(c.constant(Tensor::from_f64_slice(&out, &shape, values.dtype())?));
    }
    let (off, on) = (flat.try_narrow(0, 0, 1)?, flat.try_narrow(0, 1, 1)?);
    let mask = c.constant(Tensor::from_f64_slice(&mask, &shape, values.dtype())?);
    one(off.try_add(&mask.try_mul(&on.try_sub(&off)?)?)?)
}
