//! `RoiAlign`: each region's bins sampled by bilinear interpolation on a
//! regular grid, averaged (or the largest weighted tap kept). The taps'
//! positions and weights are computed on the host; the values are one
//! `index_select` of the feature map's pixels, so they differentiate.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// The four taps of a bilinear sample at `(y, x)` of an `h × w` plane, as
/// (flat position, weight); all weights 0 outside the plane's margin.
fn taps(y: f64, x: f64, h: usize, w: usize) -> [(usize, f64); 4] {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return [(0, 0.0); 4];
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut y0, mut x0) = (y as usize, x as usize);
    let y1 = if y0 >= h - 1 {
        y0 = h - 1;
        y = y0 as f64;
        y0
    } else {
        y0 + 1
    };
    let x1 = if x0 >= w - 1 {
        x0 = w - 1;
        x = x0 as f64;
        x0
    } else {
        x0 + 1
    };
    let (ly, lx) = (y - y0 as f64, x - x0 as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    [
        (y0 * w + x0, hy * hx),
        (y0 * w + x1, hy * lx),
        (y1 * w + x0, ly * hx),
        (y1 * w + x1, ly * lx),
    ]
}

pub(super) fn roi_align<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, rois, batch_idx) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let xs = x.shape().to_vec();
    let r = rois.shape().first().copied().unwrap_or(0);
    if xs.len() != 4 || rois.shape() != [r, 4] || batch_idx.shape() != [r] {
        return Err(c.error(format!(
            "X of shape {xs:?}, rois of {:?}, batch_indices of {:?}",
            rois.shape(),
            batch_idx.shape()
        )));
    }
    let (n, ch, h, w) = (xs[0], xs[1], xs[2], xs[3]);
    let (ph, pw) = (
        c.attrs.int("output_height", 1)?,
        c.attrs.int("output_width", 1)?,
    );
    let ratio = c.attrs.int("sampling_ratio", 0)?;
    let scale = c.attrs.float("spatial_scale", 1.0)?;
    let max_mode = match c.attrs.string("mode", "avg")?.as_str() {
        "avg" => false,
        "max" => true,
        other => return Err(c.error(format!("mode {other:?} (avg or max)"))),
    };
    let half = match c
        .attrs
        .string(
            "coordinate_transformation_mode",
            if c.opset < 16 {
                "output_half_pixel"
            } else {
                "half_pixel"
            },
        )?
        .as_str()
    {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => return Err(c.error(format!("coordinate_transformation_mode {other:?}"))),
    };
    let (ph, pw) = match (usize::try_from(ph), usize::try_from(pw)) {
        (Ok(a), Ok(b)) if a > 0 && b > 0 && ratio >= 0 && h > 0 && w > 0 => (a, b),
        _ => {
            return Err(c.error(format!(
                "output {ph} x {pw}, sampling_ratio {ratio} on a {h} x {w} map"
            )))
        }
    };
    c.check_size(&[r, ph, pw, ch])?;
    let boxes = rois.value().contiguous().to_f64_vec();
    let owner = batch_idx.value().contiguous().to_f64_vec();
    // Per output bin, its samples' taps: (row of the [N·H·W, C] map, weight).
    let mut bins: Vec<Vec<(usize, f64)>> = Vec::with_capacity(r * ph * pw);
    let offset = if half { 0.5 } else { 0.0 };
    for k in 0..r {
        let b = owner[k];
        if !(b >= 0.0 && (b as usize) < n) {
            return Err(c.error(format!("batch index {b} for a batch of {n}")));
        }
        let base = b as usize * h * w;
        let bx = &boxes[k * 4..][..4];
        let (x0, y0) = (bx[0] * scale - offset, bx[1] * scale - offset);
        let (mut rw, mut rh) = (bx[2] * scale - offset - x0, bx[3] * scale - offset - y0);
        if !half {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bin_h, bin_w) = (rh / ph as f64, rw / pw as f64);
        let grid = |size: f64| -> usize {
            if ratio > 0 {
                ratio as usize
            } else {
                size.ceil().max(0.0) as usize
            }
        };
        let (gh, gw) = (grid(bin_h), grid(bin_w));
        if gh.checked_mul(gw).is_none_or(|g| g > 1 << 16) {
            return Err(c.error(format!("a sampling grid of {gh} x {gw} per bin")));
        }
        let count = (gh * gw).max(1) as f64;
        for i in 0..ph {
            for j in 0..pw {
                let mut bin = Vec::with_capacity(4 * gh * gw);
                for iy in 0..gh {
                    let yy = y0 + i as f64 * bin_h + (iy as f64 + 0.5) * bin_h / gh as f64;
                    for ix in 0..gw {
                        let xx = x0 + j as f64 * bin_w + (ix as f64 + 0.5) * bin_w / gw as f64;
                        for (p, wt) in taps(yy, xx, h, w) {
                            bin.push((base + p, if max_mode { wt } else { wt / count }));
                        }
                    }
                }
                bins.push(bin);
            }
        }
    }
    // Every bin padded to the most taps: weight 0 for a sum; a copy of
    // the bin's first sample for a max.
    let most = bins.iter().map(Vec::len).max().unwrap_or(0).max(4);
    c.check_size(&[bins.len(), most, ch])?;
    let (mut idx, mut wts) = (Vec::new(), Vec::new());
    for bin in &bins {
        for t in 0..most {
            let (p, wt) = match bin.get(t) {
                Some(&tap) => tap,
                None if max_mode => bin.get(t % 4).copied().unwrap_or((0, 0.0)),
                None => (0, 0.0),
            };
            idx.push(p as i64);
            wts.push(wt);
        }
    }
    let m = bins.len() * most;
    let map = x
        .try_permute(&[0, 2, 3, 1])?
        .try_reshape(&[(n * h * w) as isize, ch as isize])?;
    let picked = map
        .try_index_select(0, &Tensor::from_vec(idx, &[m])?)?
        .try_mul(&c.constant(Tensor::from_f64_slice(&wts, &[m, 1], x.dtype())?))?;
    let bins_n = bins.len() as isize;
    let y = if max_mode {
        picked
            .try_reshape(&[bins_n, (most / 4) as isize, 4, ch as isize])?
            .try_max_axes(&[1, 2], false)?
    } else {
        picked
            .try_reshape(&[bins_n, most as isize, ch as isize])?
            .try_sum_axes(&[1], false)?
    };
    one(y
        .try_reshape(&[r as isize, ph as isize, pw as isize, ch as isize])?
        .try_permute(&[0, 3, 1, 2])?)
}
