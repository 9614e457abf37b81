//! Images put back together from pieces: `Col2Im` (sliding blocks summed
//! into an image) and `MaxUnpool` (pooled maxima put back where they were
//! found). Both are `index_add` into zeros at positions computed on the
//! host, so values differentiate.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// Attribute `name` with one value per spatial axis, or `default` for each.
fn per_axis(c: &Ctx<'_, '_>, name: &str, n: usize, default: i64) -> Result<Vec<usize>> {
    let v = c.attrs.ints(name)?.unwrap_or_else(|| vec![default; n]);
    if v.len() != n || v.iter().any(|&x| x < 0) {
        return Err(c.error(format!("{name} = {v:?} for {n} spatial axes")));
    }
    Ok(v.iter().map(|&x| x as usize).collect())
}

/// Row-major flat index of `at` in `dims`.
fn flat(at: &[usize], dims: &[usize]) -> usize {
    at.iter().zip(dims).fold(0, |acc, (&i, &d)| acc * d + i)
}

/// `Col2Im`: `[N, C · Π block, L]` columns summed into `[N, C, image...]`,
/// block `l`'s element `k` at `l`'s corner times `strides` plus `k` times
/// `dilations`, less the leading `pads`.
pub(super) fn col2im<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let image: Vec<i64> = c.ints(c.input(ins, 1)?)?;
    let block: Vec<i64> = c.ints(c.input(ins, 2)?)?;
    let n = image.len();
    if block.len() != n || image.iter().chain(&block).any(|&d| d <= 0) {
        return Err(c.error(format!("image_shape {image:?} and block_shape {block:?}")));
    }
    let image: Vec<usize> = image.iter().map(|&d| d as usize).collect();
    let block: Vec<usize> = block.iter().map(|&d| d as usize).collect();
    let dil = per_axis(c, "dilations", n, 1)?;
    let strides = per_axis(c, "strides", n, 1)?;
    let pads = per_axis(c, "pads", 2 * n, 0)?;
    let padded: Vec<usize> = (0..n).map(|d| image[d] + pads[d] + pads[n + d]).collect();
    let mut counts = Vec::with_capacity(n);
    for d in 0..n {
        let reach = dil[d] * (block[d] - 1) + 1;
        if strides[d] == 0 || padded[d] < reach {
            return Err(c.error(format!(
                "a block of {} (dilation {}) in a padded axis of {}",
                block[d], dil[d], padded[d]
            )));
        }
        counts.push((padded[d] - reach) / strides[d] + 1);
    }
    let k: usize = block.iter().product();
    let l: usize = counts.iter().product();
    let xs = x.shape().to_vec();
    if xs.len() != 3 || xs[1] % k != 0 || xs[2] != l {
        return Err(c.error(format!(
            "input of shape {xs:?} for blocks of {k} values at {l} places"
        )));
    }
    let (batch, ch) = (xs[0], xs[1] / k);
    let total: usize = padded.iter().product();
    c.check_size(&[batch, ch, total])?;
    // Where each (k, l) column entry lands in the padded image.
    let mut idx = Vec::with_capacity(k * l);
    let mut kk = vec![0usize; n];
    let mut ll = vec![0usize; n];
    for ki in 0..k {
        let mut r = ki;
        for d in (0..n).rev() {
            kk[d] = r % block[d];
            r /= block[d];
        }
        for li in 0..l {
            let mut r = li;
            for d in (0..n).rev() {
                ll[d] = r % counts[d];
                r /= counts[d];
            }
            let at: Vec<usize> = (0..n)
                .map(|d| ll[d] * strides[d] + kk[d] * dil[d])
                .collect();
            idx.push(flat(&at, &padded) as i64);
        }
    }
    let src = x.try_reshape(&[batch as isize, ch as isize, (k * l) as isize])?;
    let zeros = c.constant(Tensor::zeros(&[batch, ch, total], x.dtype())?);
    let summed = zeros.try_index_add(2, &Tensor::from_vec(idx, &[k * l])?, &src)?;
    let mut shape = vec![batch as isize, ch as isize];
    shape.extend(padded.iter().map(|&d| d as isize));
    let mut y = summed.try_reshape(&shape)?;
    for d in 0..n {
        if pads[d] != 0 || pads[n + d] != 0 {
            y = y.try_narrow((d + 2) as isize, pads[d] as isize, image[d])?;
        }
    }
    one(y)
}

/// `MaxUnpool`: each value of `X` at the flat position its index names in
/// the unpooled shape (`(in - 1) · stride + kernel - pads`), zeros
/// elsewhere; a larger `output_shape` pads that result at the end.
pub(super) fn max_unpool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, idx) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let xs = x.shape().to_vec();
    if xs.len() < 3 || idx.shape() != xs.as_slice() {
        return Err(c.error(format!(
            "X of shape {xs:?} and indices of shape {:?}",
            idx.shape()
        )));
    }
    let n = xs.len() - 2;
    let kernel = c
        .attrs
        .ints("kernel_shape")?
        .ok_or_else(|| c.error("kernel_shape is required"))?;
    if kernel.len() != n || kernel.iter().any(|&k| k <= 0) {
        return Err(c.error(format!("kernel_shape {kernel:?} for {n} spatial axes")));
    }
    let strides = per_axis(c, "strides", n, 1)?;
    let pads = per_axis(c, "pads", 2 * n, 0)?;
    let mut inferred = xs[..2].to_vec();
    for d in 0..n {
        let full = (xs[d + 2].max(1) - 1) * strides[d] + kernel[d] as usize;
        inferred.push(
            full.checked_sub(pads[d] + pads[n + d])
                .ok_or_else(|| c.error(format!("pads {pads:?} exceed the unpooled size")))?,
        );
    }
    let out: Vec<usize> = match c.opt(ins, 2) {
        Some(s) => c.ints(s)?.iter().map(|&d| d.max(0) as usize).collect(),
        None => inferred.clone(),
    };
    if out.len() != inferred.len() || out.iter().zip(&inferred).any(|(o, i)| o < i) {
        return Err(c.error(format!(
            "output_shape {out:?} is smaller than the unpooled shape {inferred:?}"
        )));
    }
    let total: usize = inferred.iter().product();
    c.check_size(&out)?;
    let raw = idx.value().contiguous().to_f64_vec();
    // A position named twice takes the last value, as an assignment does.
    let mut last = std::collections::HashMap::new();
    for (i, &p) in raw.iter().enumerate() {
        if p < 0.0 || p as usize >= total {
            return Err(c.error(format!("index {p} is outside {inferred:?}")));
        }
        last.insert(p as usize, i);
    }
    let mut kept: Vec<(usize, usize)> = last.into_iter().collect();
    kept.sort_unstable();
    let from: Vec<i64> = kept.iter().map(|&(_, i)| i as i64).collect();
    let to: Vec<i64> = kept.iter().map(|&(p, _)| p as i64).collect();
    let m = kept.len();
    let src = x
        .try_reshape(&[-1])?
        .try_index_select(0, &Tensor::from_vec(from, &[m])?)?;
    let zeros = c.constant(Tensor::zeros(&[total], x.dtype())?);
    let dims: Vec<isize> = inferred.iter().map(|&d| d as isize).collect();
    let y = zeros
        .try_index_add(0, &Tensor::from_vec(to, &[m])?, &src)?
        .try_reshape(&dims)?;
    if out == inferred {
        return one(y);
    }
    // PyTorch's pad order: last axis first, (before, after) pairs.
    let pads: Vec<isize> = (0..out.len())
        .rev()
        .flat_map(|d| [0, (out[d] - inferred[d]) as isize])
        .collect();
    one(y.try_pad(&pads, 0.0)?)
}
