//! Window pooling of any number of spatial axes (`MaxPool`, `AveragePool`,
//! `LpPool` where retrograd's 2-d pooling ops do not fit: 1-d and 3-d
//! windows, dilated or asymmetric averages, pads past half a window,
//! `MaxPool`'s indices output). Every window's elements are gathered with
//! the differentiable `index_select` and reduced along a new last axis,
//! so gradients flow as through the 2-d ops.

use super::Ctx;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

/// What a window computes.
#[derive(Clone, Copy, PartialEq)]
pub(super) enum Kind {
    Max,
    Average { count_pads: bool },
    Lp(f64),
}

/// The pooled output of `x` (`[batch, channels, spatial...]`) and, for
/// [`Kind::Max`], the flat index of each maximum in `x` (row-major over
/// all of `x`, as ONNX's `Indices` output).
pub(super) fn pool<'g>(
    c: &Ctx<'_, 'g>,
    x: &Var<'g>,
    kernel: &[usize],
    geometry: (&[usize], &[usize], &[usize], &[usize]),
    kind: Kind,
) -> Result<(Var<'g>, Option<Tensor>)> {
    let (strides, dilations, begin, end) = geometry;
    let shape = x.shape().to_vec();
    let d = kernel.len();
    if shape.len() != d + 2 || kernel.contains(&0) || strides.contains(&0) {
        return Err(c.error(format!(
            "a {d}-d window {kernel:?} (strides {strides:?}) over shape {shape:?}"
        )));
    }
    let ceil = c.attrs.int("ceil_mode", 0)? != 0;
    let spatial = &shape[2..];
    let mut out = vec![0usize; d];
    let mut extent = vec![0usize; d];
    for i in 0..d {
        let span = (kernel[i] - 1) * dilations[i] + 1;
        let room = spatial[i] + begin[i] + end[i];
        if room < span {
            return Err(c.error(format!(
                "a window of {span} over {room} positions on spatial axis {i}"
            )));
        }
        let steps = (room - span) as f64 / strides[i] as f64;
        let mut n = if ceil { steps.ceil() } else { steps.floor() } as usize + 1;
        // The last window starts inside the input or its pads.
        if ceil && (n - 1) * strides[i] >= spatial[i] + begin[i] {
            n -= 1;
        }
        out[i] = n;
        extent[i] = ((n - 1) * strides[i] + span).max(room);
    }
    c.check_size(&[
        shape[0],
        shape[1],
        out.iter().product(),
        kernel.iter().product(),
    ])?;
    // Pad to the full extent: -inf never wins a max, 0 adds nothing to a sum.
    let fill = if kind == Kind::Max {
        f64::NEG_INFINITY
    } else {
        0.0
    };
    let mut pads = Vec::with_capacity(2 * d);
    for i in (0..d).rev() {
        pads.push(begin[i] as isize);
        pads.push((extent[i] - spatial[i] - begin[i]) as isize);
    }
    let padded = if pads.iter().all(|&p| p == 0) {
        x.clone()
    } else {
        x.try_pad(&pads, fill)?
    };
    // Every window's positions in the padded spatial block, row-major.
    let windows: usize = out.iter().product();
    let taps: usize = kernel.iter().product();
    let mut index = Vec::with_capacity(windows * taps);
    let mut counts = Vec::with_capacity(windows);
    let mut coord = vec![0usize; d];
    let mut o = vec![0usize; d];
    for w in 0..windows {
        let mut rest = w;
        for i in (0..d).rev() {
            o[i] = rest % out[i];
            rest /= out[i];
        }
        let mut counted = 0usize;
        for t in 0..taps {
            let mut rest = t;
            for i in (0..d).rev() {
                let k = rest % kernel[i];
                rest /= kernel[i];
                coord[i] = o[i] * strides[i] + k * dilations[i];
            }
            let inside_pads = (0..d).all(|i| coord[i] < spatial[i] + begin[i] + end[i]);
            let inside = (0..d).all(|i| coord[i] >= begin[i] && coord[i] < begin[i] + spatial[i]);
            if inside || (inside_pads && kind == (Kind::Average { count_pads: true })) {
                counted += 1;
            }
            index.push(coord.iter().zip(&extent).fold(0, |a, (&p, &e)| a * e + p) as i64);
        }
        counts.push(counted as f64);
    }
    let flat: usize = extent.iter().product();
    let mut grouped: Vec<isize> = vec![shape[0] as isize, shape[1] as isize];
    grouped.extend(out.iter().map(|&v| v as isize));
    grouped.push(taps as isize);
    let gathered = padded
        .try_reshape(&[shape[0] as isize, shape[1] as isize, flat as isize])?
        .try_index_select(2, &Tensor::from_vec(index.clone(), &[windows * taps])?)?
        .try_reshape(&grouped)?;
    let last = (d + 2) as isize;
    let dtype = x.dtype();
    let y = match kind {
        Kind::Max => gathered.try_max_axes(&[last], false)?,
        Kind::Average { .. } => {
            let n = Tensor::from_f64_slice(&counts, &out, dtype)?;
            gathered
                .try_sum_axes(&[last], false)?
                .try_div(&c.constant(n))?
        }
        Kind::Lp(p) => {
            let pow = |v: f64| c.constant(Tensor::scalar_of(v, dtype));
            gathered
                .try_abs()?
                .try_pow(&pow(p))?
                .try_sum_axes(&[last], false)?
                .try_pow(&pow(1.0 / p))?
        }
    };
    if kind != Kind::Max || c.n_outputs < 2 {
        return Ok((y, None));
    }
    // The position of each maximum, back in the unpadded input.
    let values = gathered.value().contiguous().to_f64_vec();
    let planes = shape[0] * shape[1];
    let plane: usize = spatial.iter().product();
    let mut at = Vec::with_capacity(planes * windows);
    for p in 0..planes {
        for w in 0..windows {
            let row = &values[(p * windows + w) * taps..(p * windows + w + 1) * taps];
            let best = (0..taps).fold(0, |b, t| if row[t] > row[b] { t } else { b });
            let mut rest = index[w * taps + best] as usize;
            let mut lin = 0usize;
            let mut stride = 1usize;
            for i in (0..d).rev() {
                let q = rest % extent[i];
                rest /= extent[i];
                lin += q.saturating_sub(begin[i]).min(spatial[i] - 1) * stride;
                stride *= spatial[i];
            }
            at.push((p * plane + lin) as i64);
        }
    }
    let mut ishape = vec![shape[0], shape[1]];
    ishape.extend(&out);
    Ok((y, Some(Tensor::from_vec(at, &ishape)?)))
}
