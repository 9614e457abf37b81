//! The normalizations composed of differentiable ops:
//! `GroupNormalization`, `LRN`, `MeanVarianceNormalization` and
//! `BatchNormalization`'s training mode.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// `v` (`[C]`) shaped to broadcast over `[N, C, ...]` of rank `rank`.
fn per_channel<'g>(v: &Var<'g>, rank: usize) -> Result<Var<'g>> {
    let mut shape = vec![1isize; rank];
    shape[1] = -1;
    v.try_reshape(&shape)
}

/// `GroupNormalization`: each instance's groups of channels to zero mean
/// and unit variance, then a per-channel scale and bias (per group before
/// opset 21, spread here over the group's channels).
pub(super) fn group_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, scale, bias) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let shape = x.shape().to_vec();
    let groups = c.attrs.int("num_groups", 0)?;
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let channels = shape.get(1).copied().unwrap_or(0);
    let g = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0 && shape.len() >= 2 && channels % g == 0)
        .ok_or_else(|| {
            c.error(format!(
                "num_groups = {groups} for input of shape {shape:?}"
            ))
        })?;
    let spread = |v: &Var<'g>, what: &str| -> Result<Var<'g>> {
        match v.shape() {
            [n] if *n == channels => Ok(v.clone()),
            [n] if *n == g => {
                let picks: Vec<i64> = (0..channels)
                    .map(|ch| (ch / (channels / g)) as i64)
                    .collect();
                v.try_index_select(0, &Tensor::from_vec(picks, &[channels])?)
            }
            other => Err(c.error(format!(
                "{what} of shape {other:?} for {channels} channels in {g} groups"
            ))),
        }
    };
    let (scale, bias) = (spread(scale, "scale")?, spread(bias, "bias")?);
    let grouped = x.try_reshape(&[shape[0] as isize, g as isize, -1])?;
    let mean = grouped.try_mean_axes(&[2], true)?;
    let centered = grouped.try_sub(&mean)?;
    let var = centered.try_mul(&centered)?.try_mean_axes(&[2], true)?;
    let normed = centered.try_mul(&var.add_scalar(eps).try_rsqrt()?)?;
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    let y = normed.try_reshape(&dims)?;
    one(y
        .try_mul(&per_channel(&scale, shape.len())?)?
        .try_add(&per_channel(&bias, shape.len())?)?)
}

/// `LRN`: each value over `(bias + alpha / size · Σ x²)^beta`, the sum over
/// the `size` channels around it (cut at the ends).
pub(super) fn lrn<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let shape = x.shape().to_vec();
    let size = c.attrs.int("size", 0)?;
    let (alpha, beta, bias) = (
        c.attrs.float("alpha", 1e-4)?,
        c.attrs.float("beta", 0.75)?,
        c.attrs.float("bias", 1.0)?,
    );
    let size = usize::try_from(size)
        .ok()
        .filter(|&s| s > 0 && shape.len() >= 2)
        .ok_or_else(|| c.error(format!("size = {size} for input of shape {shape:?}")))?;
    let channels = shape[1];
    let (before, after) = ((size - 1) / 2, size - 1 - (size - 1) / 2);
    let sq = x.try_mul(x)?;
    // Zero channels on both sides, then the sum of `size` shifted windows.
    let mut pads = vec![0isize; 2 * shape.len()];
    let at = 2 * (shape.len() - 2);
    pads[at] = before as isize;
    pads[at + 1] = after as isize;
    while pads.len() > 2 && pads[pads.len() - 2..] == [0, 0] {
        pads.truncate(pads.len() - 2);
    }
    let padded = sq.try_pad(&pads, 0.0)?;
    let mut sum = padded.try_narrow(1, 0, channels)?;
    for i in 1..size {
        sum = sum.try_add(&padded.try_narrow(1, i as isize, channels)?)?;
    }
    let den = sum
        .mul_scalar(alpha / size as f64)
        .add_scalar(bias)
        .try_powf(beta)?;
    one(x.try_div(&den)?)
}

/// `MeanVarianceNormalization`: `(x - mean) / (std + 1e-9)` over `axes`
/// (default `[0, 2, 3]`).
pub(super) fn mean_variance_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let rank = x.shape().len();
    let axes: Vec<isize> = c
        .attrs
        .ints("axes")?
        .unwrap_or_else(|| vec![0, 2, 3])
        .iter()
        .map(|&a| c.axis(a, rank).map(|a| a as isize))
        .collect::<Result<_>>()?;
    let mean = x.try_mean_axes(&axes, true)?;
    let centered = x.try_sub(&mean)?;
    let std = centered
        .try_mul(&centered)?
        .try_mean_axes(&axes, true)?
        .try_sqrt()?;
    one(centered.try_div(&std.add_scalar(1e-9))?)
}

/// `BatchNormalization` with `training_mode = 1`: normalised by the
/// batch's mean and (population) variance over every axis but the
/// channels; the running statistics come out updated as
/// `running · momentum + batch · (1 - momentum)`.
pub(super) fn batch_norm_training<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let (scale, bias) = (c.input(ins, 1)?, c.input(ins, 2)?);
    let (mean_in, var_in) = (c.input(ins, 3)?, c.input(ins, 4)?);
    let rank = x.shape().len();
    let channels = x.shape().get(1).copied().unwrap_or(0);
    for (v, what) in [
        (scale, "scale"),
        (bias, "B"),
        (mean_in, "input_mean"),
        (var_in, "input_var"),
    ] {
        if rank < 2 || v.shape() != [channels] {
            return Err(c.error(format!(
                "{what} of shape {:?} for input of shape {:?}",
                v.shape(),
                x.shape()
            )));
        }
    }
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let momentum = c.attrs.float("momentum", 0.9)?;
    let axes: Vec<isize> = (0..rank as isize).filter(|&a| a != 1).collect();
    let mean = x.try_mean_axes(&axes, true)?;
    let centered = x.try_sub(&mean)?;
    let var = centered.try_mul(&centered)?.try_mean_axes(&axes, true)?;
    let normed = centered.try_mul(&var.add_scalar(eps).try_rsqrt()?)?;
    let y = normed
        .try_mul(&per_channel(scale, rank)?)?
        .try_add(&per_channel(bias, rank)?)?;
    let flat = |v: &Var<'g>| v.try_reshape(&[channels as isize]);
    let running = |old: &Var<'g>, now: &Var<'g>| -> Result<Var<'g>> {
        old.mul_scalar(momentum)
            .try_add(&flat(now)?.mul_scalar(1.0 - momentum))
    };
    Ok(vec![y, running(mean_in, &mean)?, running(var_in, &var)?])
}
