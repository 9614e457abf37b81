//! The constant tables of spectral analysis: `HannWindow`,
//! `HammingWindow`, `BlackmanWindow` and `MelWeightMatrix`, made on the
//! host in the element type `output_datatype` names (default f32).

use super::{one, Ctx};
use crate::tensor::dtype_of;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// The dtype `output_datatype` names.
fn out_dtype(c: &Ctx<'_, '_>) -> Result<DType> {
    let code = c.attrs.int("output_datatype", 1)?;
    i32::try_from(code)
        .ok()
        .and_then(dtype_of)
        .ok_or_else(|| c.error(format!("output_datatype {code}")))
}

/// A count from a one-value input.
fn count(c: &Ctx<'_, '_>, v: &Var<'_>, what: &str) -> Result<usize> {
    let n = c.scalar(v)?;
    if !(n >= 0.0 && n.fract() == 0.0) {
        return Err(c.error(format!("{what} = {n}")));
    }
    c.check_size(&[n as usize])?;
    Ok(n as usize)
}

/// `a0 - a1 cos(2πn / N) + a2 cos(4πn / N)` over `n < size`, `N = size`
/// (periodic, the default) or `size - 1` (symmetric).
fn cosine_window<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, a: [f64; 3]) -> Result<Vec<Var<'g>>> {
    let size = count(c, c.input(ins, 0)?, "size")?;
    let periodic = c.attrs.int("periodic", 1)? != 0;
    let span = if periodic {
        size
    } else {
        size.saturating_sub(1)
    } as f64;
    let tau = 2.0 * std::f64::consts::PI;
    let w: Vec<f64> = (0..size)
        .map(|n| {
            let t = n as f64 / span;
            a[0] - a[1] * (tau * t).cos() + a[2] * (2.0 * tau * t).cos()
        })
        .collect();
    one(c.constant(Tensor::from_f64_slice(&w, &[size], out_dtype(c)?)?))
}

pub(super) fn hann<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    cosine_window(c, ins, [0.5, 0.5, 0.0])
}

pub(super) fn hamming<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = 25.0 / 46.0;
    cosine_window(c, ins, [alpha, 1.0 - alpha, 0.0])
}

pub(super) fn blackman<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    cosine_window(c, ins, [0.42, 0.5, 0.08])
}

/// `MelWeightMatrix`: `[dft_length / 2 + 1, num_mel_bins]` triangles, each
/// peaking at 1 on a mel-spaced centre bin, rising from the previous
/// centre and falling to the next (bins are whole DFT bins, as ONNX's
/// reference rounds them).
pub(super) fn mel_weight_matrix<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let mels = count(c, c.input(ins, 0)?, "num_mel_bins")?;
    let dft = count(c, c.input(ins, 1)?, "dft_length")?;
    let rate = c.scalar(c.input(ins, 2)?)?;
    let (low, high) = (c.scalar(c.input(ins, 3)?)?, c.scalar(c.input(ins, 4)?)?);
    if !(rate > 0.0 && low >= 0.0 && high > low) {
        return Err(c.error(format!("sample_rate {rate}, edges {low} to {high} Hz")));
    }
    let spectrum = dft / 2 + 1;
    c.check_size(&[spectrum, mels])?;
    let mel = |f: f64| 2595.0 * (f / 700.0).ln_1p() / 10f64.ln();
    let (lo, hi) = (mel(low), mel(high));
    let step = (hi - lo) / (mels + 2) as f64;
    let bins: Vec<i64> = (0..mels + 2)
        .map(|i| {
            let hz = 700.0 * ((i as f64 * step + lo) / 2595.0 * 10f64.ln()).exp_m1();
            ((dft as f64 + 1.0) * hz / rate).floor() as i64
        })
        .collect();
    let mut w = vec![0.0f64; spectrum * mels];
    let mut set = |j: i64, i: usize, v: f64| -> Result<()> {
        let j = usize::try_from(j)
            .ok()
            .filter(|&j| j < spectrum)
            .ok_or_else(|| {
                c.error(format!(
                    "mel bin edge {j} is outside the {spectrum} DFT bins"
                ))
            })?;
        w[j * mels + i] = v;
        Ok(())
    };
    for i in 0..mels {
        let (left, centre, right) = (bins[i], bins[i + 1], bins[i + 2]);
        if centre == left {
            set(centre, i, 1.0)?;
        } else {
            for j in left..=centre {
                set(j, i, (j - left) as f64 / (centre - left) as f64)?;
            }
        }
        if right > centre {
            for j in centre..right {
                set(j, i, (right - j) as f64 / (right - centre) as f64)?;
            }
        }
    }
    one(c.constant(Tensor::from_f64_slice(
        &w,
        &[spectrum, mels],
        out_dtype(c)?,
    )?))
}
