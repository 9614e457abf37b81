//! Fourier transforms: `DFT` and `STFT`, as a product with a constant
//! matrix of cosines and sines, so they differentiate through `matmul`.
//! Complex values are a last axis of 2 (real, imaginary); a real signal
//! has a last axis of 1.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// What one transform over an axis of `n` values (each of `parts` reals,
/// 1 or 2) computes.
struct Plan {
    n: usize,
    parts: usize,
    /// The transform's length: the signal is cut or zero-padded to it.
    len: usize,
    inverse: bool,
    onesided: bool,
}

impl Plan {
    /// Output values along the axis, and reals per value.
    fn out(&self) -> (usize, usize) {
        match (self.inverse, self.onesided) {
            (false, true) => (self.len / 2 + 1, 2),
            (true, true) => (self.len, 1),
            _ => (self.len, 2),
        }
    }

    /// The `[n · parts, k · out_parts]` matrix taking a row of
    /// interleaved inputs to a row of interleaved outputs. The inverse
    /// one-sided transform (to a real signal) counts each bin but the
    /// first and the middle twice, for its mirror image.
    fn matrix(&self) -> Vec<f64> {
        let (k_out, p_out) = self.out();
        let cols = k_out * p_out;
        let mut w = vec![0.0; self.n * self.parts * cols];
        let len = self.len as f64;
        let sign = if self.inverse { 1.0 } else { -1.0 };
        let scale = if self.inverse { 1.0 / len } else { 1.0 };
        // A one-sided spectrum holds the bins 0..=len/2.
        let used = if self.inverse && self.onesided {
            self.n.min(self.len / 2 + 1)
        } else {
            self.n.min(self.len)
        };
        for i in 0..used {
            for k in 0..k_out {
                // The output index `k` against the input index `i`.
                let (t, f) = if self.inverse { (k, i) } else { (i, k) };
                let theta = sign * 2.0 * std::f64::consts::PI * ((t * f) % self.len) as f64 / len;
                let (s, co) = theta.sin_cos();
                let twice = if self.inverse && self.onesided && i != 0 && 2 * i != self.len {
                    2.0
                } else {
                    1.0
                };
                let g = scale * twice;
                // (a + jb)(co + js) = (a·co - b·s) + j(a·s + b·co)
                let at = |row: usize, col: usize| row * cols + col;
                let (re_in, im_in) = (i * self.parts, i * self.parts + 1);
                w[at(re_in, k * p_out)] = g * co;
                if p_out == 2 {
                    w[at(re_in, k * p_out + 1)] = g * s;
                }
                if self.parts == 2 {
                    w[at(im_in, k * p_out)] = -g * s;
                    if p_out == 2 {
                        w[at(im_in, k * p_out + 1)] = g * co;
                    }
                }
            }
        }
        w
    }
}

/// The transform of `x` (`[..., n, parts]`) over its second-last axis.
fn transform<'g>(c: &Ctx<'_, 'g>, x: &Var<'g>, plan: &Plan) -> Result<Var<'g>> {
    let shape = x.shape().to_vec();
    let rank = shape.len();
    let rows: usize = shape[..rank - 2].iter().product();
    let (k, p) = plan.out();
    c.check_size(&[plan.n * plan.parts, k * p])?;
    let w = Tensor::from_f64_slice(&plan.matrix(), &[plan.n * plan.parts, k * p], x.dtype())?;
    let flat = x.try_reshape(&[rows as isize, (plan.n * plan.parts) as isize])?;
    let y = flat.try_matmul(&c.constant(w))?;
    let mut out: Vec<isize> = shape[..rank - 2].iter().map(|&d| d as isize).collect();
    out.extend([k as isize, p as isize]);
    y.try_reshape(&out)
}

/// `DFT`: forward or inverse, full or one-sided, over one signal axis
/// (an attribute before opset 20, an input from it), cut or zero-padded
/// to `dft_length`.
pub(super) fn dft<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let shape = x.shape().to_vec();
    let rank = shape.len();
    let parts = shape.last().copied().unwrap_or(0);
    if rank < 2 || !(parts == 1 || parts == 2) {
        return Err(c.error(format!(
            "input of shape {shape:?}: the last axis must be 1 (real) or 2 (complex)"
        )));
    }
    let axis = if c.opset >= 20 {
        match c.opt(ins, 2) {
            Some(a) => c.ints(a)?.first().copied().unwrap_or(-2),
            None => -2,
        }
    } else {
        c.attrs.int("axis", 1)?
    };
    let axis = c.axis(axis, rank)?;
    if axis == rank - 1 {
        return Err(c.error("the axis is the last one, which holds the real and imaginary parts"));
    }
    let inverse = c.attrs.int("inverse", 0)? != 0;
    let onesided = c.attrs.int("onesided", 0)? != 0;
    let n = shape[axis];
    let len = match c.opt(ins, 1) {
        Some(l) => {
            let l = c.ints(l)?.first().copied().unwrap_or(0);
            usize::try_from(l)
                .ok()
                .filter(|&l| l > 0)
                .ok_or_else(|| c.error(format!("dft_length = {l}")))?
        }
        None if inverse && onesided => 2 * n.saturating_sub(1),
        None => n,
    };
    if len == 0 {
        return Err(c.error("a transform of length 0"));
    }
    if onesided && inverse && parts != 2 {
        return Err(c.error("an inverse one-sided transform takes complex input"));
    }
    // The axis next to the last, so that a row-major reshape makes rows.
    let mut perm: Vec<usize> = (0..rank - 1).filter(|&d| d != axis).collect();
    perm.extend([axis, rank - 1]);
    let signed: Vec<isize> = perm.iter().map(|&d| d as isize).collect();
    let moved = x.try_permute(&signed)?;
    let plan = Plan {
        n,
        parts,
        len,
        inverse,
        onesided,
    };
    let y = transform(c, &moved, &plan)?;
    let mut back = vec![0isize; rank];
    for (i, &d) in perm.iter().enumerate() {
        back[d] = i as isize;
    }
    one(y.try_permute(&back)?)
}

/// `STFT`: frames of `frame_length` (or the window's length) every
/// `frame_step` values, each times the window, then its DFT over the frame
/// (one-sided by default): `[batch, frames, bins, 2]`.
pub(super) fn stft<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let shape = x.shape().to_vec();
    if shape.len() != 3 || !(shape[2] == 1 || shape[2] == 2) {
        return Err(c.error(format!(
            "signal of shape {shape:?} (want [batch, length, 1 or 2])"
        )));
    }
    let (batch, n, parts) = (shape[0], shape[1], shape[2]);
    let step = c.ints(c.input(ins, 1)?)?.first().copied().unwrap_or(0);
    let window = c.opt(ins, 2);
    let len = match (c.opt(ins, 3), window) {
        (Some(l), _) => c.ints(l)?.first().copied().unwrap_or(0),
        (None, Some(w)) => w.shape().first().copied().unwrap_or(0) as i64,
        (None, None) => return Err(c.error("neither a window nor frame_length is given")),
    };
    let (step, len) = match (usize::try_from(step), usize::try_from(len)) {
        (Ok(s), Ok(l)) if s > 0 && l > 0 && l <= n => (s, l),
        _ => {
            return Err(c.error(format!(
                "frame_step {step} and frame_length {len} for a signal of {n}"
            )))
        }
    };
    if let Some(w) = window
        && w.shape() != [len]
    {
        return Err(c.error(format!(
            "a window of shape {:?} for frames of {len}",
            w.shape()
        )));
    }
    let onesided = c.attrs.int("onesided", 1)? != 0;
    if onesided && parts == 2 {
        return Err(c.error("a one-sided STFT takes a real signal"));
    }
    let frames = (n - len) / step + 1;
    c.check_size(&[batch, frames, len, parts])?;
    let picks: Vec<i64> = (0..frames)
        .flat_map(|f| (0..len).map(move |i| (f * step + i) as i64))
        .collect();
    let picks = Tensor::from_vec(picks, &[frames * len])?;
    let mut framed = x.try_index_select(1, &picks)?.try_reshape(&[
        batch as isize,
        frames as isize,
        len as isize,
        parts as isize,
    ])?;
    if let Some(w) = window {
        framed = framed.try_mul(&w.try_reshape(&[len as isize, 1])?)?;
    }
    let plan = Plan {
        n: len,
        parts,
        len,
        inverse: false,
        onesided,
    };
    one(transform(c, &framed, &plan)?)
}
