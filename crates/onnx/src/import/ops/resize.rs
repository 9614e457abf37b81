//! ONNX's `Resize`: nearest, linear and cubic interpolation (with
//! antialiasing, `exclude_outside`, every coordinate mapping, `roi` for
//! `tf_crop_and_resize`, `axes` and `keep_aspect_ratio_policy`). The
//! interpolation is separable: along each resized axis the output is a
//! fixed matrix times the input, computed on the host and applied with
//! retrograd's differentiable product, so the gradient flows back through
//! the same weights.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// How output positions map to input coordinates, and the kernel.
struct Plan {
    mode: String,
    coordinates: String,
    nearest: String,
    cubic_a: f64,
    antialias: bool,
    exclude_outside: bool,
    extrapolation: f64,
}

impl Plan {
    /// The kernel's weights for a position `ratio` past its left pixel.
    fn coeffs(&self, ratio: f64, scale: f64) -> Vec<f64> {
        match self.mode.as_str() {
            "nearest" => {
                if ratio.fract() == 0.0 {
                    return vec![0.0, 1.0];
                }
                let right = match self.nearest.as_str() {
                    "round_prefer_ceil" => ratio >= 0.5,
                    "floor" => false,
                    "ceil" => true,
                    _ => ratio > 0.5,
                };
                vec![f64::from(u8::from(!right)), f64::from(u8::from(right))]
            }
            "linear" if self.antialias => {
                let scale = scale.min(1.0);
                let start = (-1.0 / scale).floor() as i64 + 1;
                let footprint = 2 - 2 * start;
                let c: Vec<f64> = (start..start + footprint)
                    .map(|i| (1.0 - ((i as f64 - ratio) * scale).abs()).clamp(0.0, 1.0))
                    .collect();
                normalised(c)
            }
            "linear" => vec![1.0 - ratio, ratio],
            _ if self.antialias => {
                let a = self.cubic_a;
                let scale = scale.min(1.0);
                let k = |x: f64| {
                    let x = x.abs();
                    if x <= 1.0 {
                        (a + 2.0) * x * x * x - (a + 3.0) * x * x + 1.0
                    } else if x < 2.0 {
                        a * x * x * x - 5.0 * a * x * x + 8.0 * a * x - 4.0 * a
                    } else {
                        0.0
                    }
                };
                let start = (-2.0 / scale).floor() as i64 + 1;
                let end = 2 - start;
                normalised(
                    (start..end)
                        .map(|i| k(scale * (i as f64 - ratio)))
                        .collect(),
                )
            }
            _ => {
                let a = self.cubic_a;
                let (r, s) = (ratio, 1.0 - ratio);
                vec![
                    ((a * (r + 1.0) - 5.0 * a) * (r + 1.0) + 8.0 * a) * (r + 1.0) - 4.0 * a,
                    ((a + 2.0) * r - (a + 3.0)) * r * r + 1.0,
                    ((a + 2.0) * s - (a + 3.0)) * s * s + 1.0,
                    ((a * (s + 1.0) - 5.0 * a) * (s + 1.0) + 8.0 * a) * (s + 1.0) - 4.0 * a,
                ]
            }
        }
    }

    /// The input coordinate of output position `y`, and whether it lies
    /// outside the crop (`tf_crop_and_resize`).
    fn source(
        &self,
        y: f64,
        scale: f64,
        n_in: usize,
        n_out: usize,
        roi: (f64, f64),
    ) -> (f64, bool) {
        let (input, out_f) = (n_in as f64, scale * n_in as f64);
        match self.coordinates.as_str() {
            "align_corners" if out_f == 1.0 => (0.0, false),
            "align_corners" => (y * (input - 1.0) / (out_f - 1.0), false),
            "asymmetric" => (y / scale, false),
            "tf_crop_and_resize" => {
                let x = if out_f == 1.0 {
                    (roi.1 - roi.0) * (input - 1.0) / 2.0
                } else {
                    y * (roi.1 - roi.0) * (input - 1.0) / (out_f - 1.0)
                } + roi.0 * (input - 1.0);
                (x, x < 0.0 || x > input - 1.0)
            }
            "pytorch_half_pixel" if out_f == 1.0 => (-0.5, false),
            "half_pixel_symmetric" => {
                let adjustment = n_out as f64 / out_f;
                let offset = input / 2.0 * (1.0 - adjustment);
                (offset + (y + 0.5) / scale - 0.5, false)
            }
            _ => ((y + 0.5) / scale - 0.5, false),
        }
    }

    /// The `[n_out, n_in]` matrix of one axis, and the outputs that take
    /// the extrapolation value instead.
    fn matrix(
        &self,
        n_in: usize,
        n_out: usize,
        scale: f64,
        roi: (f64, f64),
    ) -> (Vec<f64>, Vec<bool>) {
        let mut w = vec![0.0; n_out * n_in];
        let mut outside = vec![false; n_out];
        for (o, out) in outside.iter_mut().enumerate() {
            let (x, off) = self.source(o as f64, scale, n_in, n_out, roi);
            *out = off;
            let left = x.floor();
            let ratio = if x == left { 1.0 } else { x - left };
            let mut c = self.coeffs(ratio, scale);
            let n = c.len() as i64;
            let pad = (n + 1) / 2;
            let xp = x + pad as f64;
            let p = xp.floor() as i64;
            let frac = xp - p as f64;
            let offset = if n % 2 == 0 {
                if frac == 0.0 {
                    -(n / 2)
                } else {
                    -(n / 2) + 1
                }
            } else {
                let base = -((n - 1) / 2);
                if frac <= 0.5 {
                    base
                } else {
                    base + 1
                }
            };
            let first = p + offset - pad;
            if self.exclude_outside {
                for (k, ck) in c.iter_mut().enumerate() {
                    let i = first + k as i64;
                    if i < 0 || i >= n_in as i64 {
                        *ck = 0.0;
                    }
                }
                let s: f64 = c.iter().sum();
                if s != 0.0 {
                    c.iter_mut().for_each(|v| *v /= s);
                }
            }
            for (k, ck) in c.iter().enumerate() {
                let i = (first + k as i64).clamp(0, n_in as i64 - 1) as usize;
                w[o * n_in + i] += ck;
            }
        }
        (w, outside)
    }
}

fn normalised(c: Vec<f64>) -> Vec<f64> {
    let s: f64 = c.iter().sum();
    c.into_iter().map(|v| v / s).collect()
}

pub(super) fn resize<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if !x.dtype().is_float() {
        return Err(c.error(format!(
            "resizing {} values (floats are supported)",
            x.dtype()
        )));
    }
    let rank = x.shape().len();
    // Opset 10: (X, scales); from 11: (X, roi, scales, sizes).
    let (roi, scales, sizes) = if c.opset < 11 {
        (None, c.opt(ins, 1), None)
    } else {
        (c.opt(ins, 1), c.opt(ins, 2), c.opt(ins, 3))
    };
    let floats = |v: &Var<'g>| v.value().to_f64_vec();
    let roi = roi.map(floats).filter(|r| !r.is_empty());
    let scales = scales.map(floats).filter(|s| !s.is_empty());
    let sizes = sizes
        .map(|s| c.ints(s))
        .transpose()?
        .filter(|s| !s.is_empty());
    let axes: Vec<usize> = match c.attrs.ints("axes")? {
        Some(a) => a.iter().map(|&a| c.axis(a, rank)).collect::<Result<_>>()?,
        None => (0..rank).collect(),
    };
    let plan = Plan {
        mode: c.attrs.string("mode", "nearest")?,
        coordinates: c.attrs.string(
            "coordinate_transformation_mode",
            if c.opset < 11 {
                "asymmetric"
            } else {
                "half_pixel"
            },
        )?,
        nearest: c.attrs.string("nearest_mode", "round_prefer_floor")?,
        cubic_a: c.attrs.float("cubic_coeff_a", -0.75)?,
        antialias: c.attrs.int("antialias", 0)? != 0,
        exclude_outside: c.attrs.int("exclude_outside", 0)? != 0,
        extrapolation: c.attrs.float("extrapolation_value", 0.0)?,
    };
    if !matches!(plan.mode.as_str(), "nearest" | "linear" | "cubic") {
        return Err(c.error(format!("mode {:?}", plan.mode)));
    }
    let shape = x.shape().to_vec();
    let mut scale = vec![1.0; rank];
    let mut out = shape.clone();
    match (&scales, &sizes) {
        (Some(s), _) => {
            if s.len() != axes.len() {
                return Err(c.error(format!("{} scales for {} axes", s.len(), axes.len())));
            }
            for (&a, &f) in axes.iter().zip(s) {
                if !(f > 0.0 && f.is_finite()) {
                    return Err(c.error(format!("scale {f}")));
                }
                scale[a] = f;
                out[a] = (f * shape[a] as f64) as usize;
            }
        }
        (None, Some(n)) => {
            if n.len() != axes.len() || n.iter().any(|&v| v < 0) {
                return Err(c.error(format!("sizes {n:?} for {} axes", axes.len())));
            }
            for (&a, &v) in axes.iter().zip(n) {
                out[a] = v as usize;
                scale[a] = v as f64 / shape[a] as f64;
            }
            let policy = c.attrs.string("keep_aspect_ratio_policy", "stretch")?;
            if policy != "stretch" {
                let pick = axes.iter().map(|&a| scale[a]);
                let s = match policy.as_str() {
                    "not_larger" => pick.fold(f64::INFINITY, f64::min),
                    "not_smaller" => pick.fold(0.0, f64::max),
                    other => return Err(c.error(format!("keep_aspect_ratio_policy {other:?}"))),
                };
                for &a in &axes {
                    scale[a] = s;
                    out[a] = (s * shape[a] as f64 + 0.5) as usize;
                }
            }
        }
        (None, None) => return Err(c.error("neither scales nor sizes")),
    }
    c.check_size(&out)?;
    let axis_roi = |a: usize| -> (f64, f64) {
        match &roi {
            Some(r) if r.len() == 2 * axes.len() => {
                let k = axes.iter().position(|&b| b == a).unwrap_or(0);
                (r[k], r[axes.len() + k])
            }
            Some(r) if r.len() == 2 * rank => (r[a], r[rank + a]),
            _ => (0.0, 1.0),
        }
    };
    let mut y = x.clone();
    let last = rank as isize - 1;
    for &a in &axes {
        let r = axis_roi(a);
        let identity = (scale[a] - 1.0).abs() < 1e-12 && out[a] == shape[a] && r == (0.0, 1.0);
        if identity {
            continue;
        }
        if shape[a] == 0 {
            return Err(c.error(format!("resizing an empty axis {a}")));
        }
        let (w, outside) = plan.matrix(shape[a], out[a], scale[a], r);
        let w = Tensor::from_f64_slice(&w, &[out[a], shape[a]], x.dtype())?;
        let moved = y.try_transpose(a as isize, last)?;
        let mut z = moved.try_matmul(&c.constant(w).try_transpose(0, 1)?)?;
        if outside.iter().any(|&o| o) {
            let keep: Vec<bool> = outside.iter().map(|&o| !o).collect();
            let keep = Tensor::from_vec(keep, &[out[a]])?;
            let fill = c.constant(Tensor::scalar_of(plan.extrapolation, x.dtype()));
            z = z.try_where(&keep, &fill)?;
        }
        y = z.try_transpose(a as isize, last)?;
    }
    one(y)
}

/// Where one coordinate of `GridSample` reads along an axis of `d`
/// positions: `(index, weight)` taps, an index of `None` reading 0.
fn grid_taps(
    x: f64,
    d: usize,
    mode: &str,
    padding: &str,
    (lo, hi): (f64, f64),
) -> Vec<(Option<usize>, f64)> {
    let reflect = |v: f64| {
        let range = hi - lo;
        if range <= 0.0 {
            return lo.max(0.0);
        }
        let (dx, from_low) = if v < lo {
            (lo - v, true)
        } else if v > hi {
            (v - hi, false)
        } else {
            return v;
        };
        let n = (dx / range).trunc();
        let r = dx - n * range;
        let even = n % 2.0 == 0.0;
        if from_low == even {
            lo + r
        } else {
            hi - r
        }
    };
    let at = |i: i64| -> Option<usize> {
        let last = d as i64 - 1;
        match padding {
            "border" => Some(i.clamp(0, last) as usize),
            "reflection" => Some((reflect(i as f64).trunc() as i64).clamp(0, last) as usize),
            _ => (0..=last).contains(&i).then_some(i as usize),
        }
    };
    let mut x = if mode == "nearest" {
        let r = x.round();
        // Halves to even, as PyTorch and ONNX round the nearest index.
        if (x - x.trunc()).abs() == 0.5 {
            2.0 * (x / 2.0).round()
        } else {
            r
        }
    } else {
        x
    };
    if x < lo || x > hi {
        match padding {
            "border" => x = x.clamp(0.0, d as f64 - 1.0),
            "reflection" => x = reflect(x),
            _ => {}
        }
    }
    match mode {
        "nearest" => vec![(at(x as i64), 1.0)],
        "linear" => {
            let x0 = x.floor();
            let t = x - x0;
            vec![(at(x0 as i64), 1.0 - t), (at(x0 as i64 + 1), t)]
        }
        _ => {
            let x0 = x.floor();
            let t = x - x0;
            let a = -0.75;
            let c = [
                ((a * (t + 1.0) - 5.0 * a) * (t + 1.0) + 8.0 * a) * (t + 1.0) - 4.0 * a,
                ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0,
                ((a + 2.0) * (1.0 - t) - (a + 3.0)) * (1.0 - t) * (1.0 - t) + 1.0,
                ((a * (2.0 - t) - 5.0 * a) * (2.0 - t) + 8.0 * a) * (2.0 - t) - 4.0 * a,
            ];
            (0..4)
                .map(|k| (at(x0 as i64 - 1 + k as i64), c[k]))
                .collect()
        }
    }
}

/// ONNX's `GridSample` over any number of spatial axes: each output
/// position reads the input at the grid's normalised coordinates
/// (`[-1, 1]`, last axis first) by nearest, linear or cubic
/// interpolation, with `zeros`, `border` or `reflection` padding. Per
/// batch row the reads are one matrix, applied with the differentiable
/// product: the gradient reaches the input (the grid's positions are
/// read as constants).
pub(super) fn grid_sample<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, grid) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let xs = x.shape().to_vec();
    let gs = grid.shape().to_vec();
    let d = xs.len().saturating_sub(2);
    if d == 0 || gs.len() != d + 2 || gs[0] != xs[0] || gs[d + 1] != d || !x.dtype().is_float() {
        return Err(c.error(format!(
            "input {xs:?} ({}) and grid {gs:?} (input [N, C, spatial...], grid [N, out..., {d}])",
            x.dtype()
        )));
    }
    let mode = match c
        .attrs
        .string("mode", if c.opset < 20 { "bilinear" } else { "linear" })?
        .as_str()
    {
        "bilinear" | "linear" => "linear",
        "bicubic" | "cubic" => "cubic",
        "nearest" => "nearest",
        other => return Err(c.error(format!("mode {other:?}"))),
    };
    let padding = c.attrs.string("padding_mode", "zeros")?;
    if !matches!(padding.as_str(), "zeros" | "border" | "reflection") {
        return Err(c.error(format!("padding_mode {padding:?}")));
    }
    let align = c.attrs.int("align_corners", 0)? != 0;
    let spatial = &xs[2..];
    let outs = &gs[1..=d];
    let (n, ch) = (xs[0], xs[1]);
    let s: usize = spatial.iter().product();
    let o: usize = outs.iter().product();
    c.check_size(&[n, o, s])?;
    let g = grid.value().contiguous().to_f64_vec();
    let mut w = vec![0.0; n * o * s];
    for b in 0..n {
        for p in 0..o {
            let coords = &g[(b * o + p) * d..(b * o + p + 1) * d];
            // The grid lists x (the last axis) first.
            let per_axis: Vec<Vec<(Option<usize>, f64)>> = (0..d)
                .map(|i| {
                    let len = spatial[i];
                    let v = coords[d - 1 - i];
                    let (x, bounds) = if align {
                        (
                            (v + 1.0) / 2.0 * (len as f64 - 1.0),
                            (0.0, len as f64 - 1.0),
                        )
                    } else {
                        (
                            ((v + 1.0) * len as f64 - 1.0) / 2.0,
                            (-0.5, len as f64 - 0.5),
                        )
                    };
                    grid_taps(x, len, mode, &padding, bounds)
                })
                .collect();
            // Every combination of one tap per axis.
            let mut combos: Vec<(usize, f64)> = vec![(0, 1.0)];
            for (i, taps) in per_axis.iter().enumerate() {
                let mut next = Vec::with_capacity(combos.len() * taps.len());
                for &(flat, weight) in &combos {
                    for &(idx, tw) in taps {
                        if let Some(idx) = idx {
                            next.push((flat * spatial[i] + idx, weight * tw));
                        }
                    }
                }
                // A tap reading 0 drops out; the flat index keeps its axes' places.
                combos = next;
            }
            for (flat, weight) in combos {
                w[(b * o + p) * s + flat] += weight;
            }
        }
    }
    let w = c.constant(Tensor::from_f64_slice(&w, &[n, o, s], x.dtype())?);
    let mut shape: Vec<isize> = vec![n as isize, ch as isize];
    shape.extend(outs.iter().map(|&v| v as isize));
    let y = x
        .try_reshape(&[n as isize, ch as isize, s as isize])?
        .try_matmul(&w.try_transpose(1, 2)?)?
        .try_reshape(&shape)?;
    one(y)
}

/// ONNX's `AffineGrid`: the normalised sampling grid of an affine map
/// `theta` (`[N, 2, 3]` for images, `[N, 3, 4]` for volumes) over an
/// output of `size`, as `GridSample` reads it (last axis first); a product
/// of the constant base grid with `theta`, so `theta` gets its gradient.
pub(super) fn affine_grid<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let theta = c.input(ins, 0)?;
    let size = c.ints(c.input(ins, 1)?)?;
    let d = size.len().saturating_sub(2);
    if !(d == 2 || d == 3)
        || theta.shape() != [size[0].max(0) as usize, d, d + 1]
        || size.iter().any(|&s| s < 0)
    {
        return Err(c.error(format!(
            "theta {:?} for size {size:?} ([N, 2, 3] for 4 sizes, [N, 3, 4] for 5)",
            theta.shape()
        )));
    }
    let align = c.attrs.int("align_corners", 0)? != 0;
    let spatial: Vec<usize> = size[2..].iter().map(|&s| s as usize).collect();
    let points: usize = spatial.iter().product();
    c.check_size(&[size[0] as usize, points, d])?;
    let coord = |i: usize, n: usize| -> f64 {
        if align {
            if n <= 1 {
                0.0
            } else {
                -1.0 + 2.0 * i as f64 / (n - 1) as f64
            }
        } else {
            (2.0 * i as f64 + 1.0) / n as f64 - 1.0
        }
    };
    // One row (x, y[, z], 1) per output position, x along the last axis.
    let mut base = Vec::with_capacity(points * (d + 1));
    for p in 0..points {
        let mut rest = p;
        let mut pos = vec![0usize; d];
        for i in (0..d).rev() {
            pos[i] = rest % spatial[i];
            rest /= spatial[i];
        }
        for i in (0..d).rev() {
            base.push(coord(pos[i], spatial[i]));
        }
        base.push(1.0);
    }
    let base = c.constant(Tensor::from_f64_slice(
        &base,
        &[points, d + 1],
        theta.dtype(),
    )?);
    let mut shape: Vec<isize> = vec![size[0] as isize];
    shape.extend(spatial.iter().map(|&s| s as isize));
    shape.push(d as isize);
    one(base
        .try_matmul(&theta.try_transpose(1, 2)?)?
        .try_reshape(&shape)?)
}
