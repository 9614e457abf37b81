//! `ConvTranspose`: 1-d and 2-d with even pads on retrograd's transposed
//! convolutions; any other rank, uneven pads, `output_shape` and
//! `auto_pad` as a product and a sum into the image (each input position
//! times the kernel, `index_add`ed where it lands), also differentiable.

use super::{one, Ctx};
use crate::import::attrs::Attrs;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::ops::nn::ConvTransposeOptions;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn check(a: &Attrs, _: i64) -> std::result::Result<(), String> {
    match a.string("auto_pad", "NOTSET").as_deref() {
        Ok("NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER") => Ok(()),
        Ok(other) => Err(format!("auto_pad = {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// The settings of one transposed convolution over `dims` spatial axes.
struct Plan {
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Cut from the full output's start and end (negative: zeros added).
    begin: Vec<i64>,
    end: Vec<i64>,
    extra: Vec<usize>,
}

fn plan(c: &Ctx<'_, '_>, input: &[usize], kernel: &[usize]) -> Result<Plan> {
    let dims = kernel.len();
    let list = |key: &str, default: i64, n: usize| -> Result<Vec<i64>> {
        let v = c.attrs.ints(key)?.unwrap_or_else(|| vec![default; n]);
        if v.len() != n {
            return Err(c.error(format!("{key} {v:?} for {dims} spatial axes")));
        }
        Ok(v)
    };
    let unsigned = |v: Vec<i64>, key: &str| -> Result<Vec<usize>> {
        v.iter()
            .map(|&x| usize::try_from(x).map_err(|_| c.error(format!("{key} {v:?}"))))
            .collect()
    };
    let strides = unsigned(list("strides", 1, dims)?, "strides")?;
    let dilations = unsigned(list("dilations", 1, dims)?, "dilations")?;
    let extra = unsigned(list("output_padding", 0, dims)?, "output_padding")?;
    if strides.contains(&0) || dilations.contains(&0) {
        return Err(c.error(format!("strides {strides:?}, dilations {dilations:?}")));
    }
    let full: Vec<i64> = (0..dims)
        .map(|d| {
            ((input[d].max(1) - 1) * strides[d] + (kernel[d] - 1) * dilations[d] + 1 + extra[d])
                as i64
        })
        .collect();
    let auto_pad = c.attrs.string("auto_pad", "NOTSET")?;
    let out_shape = match c.attrs.ints("output_shape")? {
        Some(s) => {
            // It may name the batch and channel axes too.
            let s = if s.len() == dims + 2 {
                s[2..].to_vec()
            } else {
                s
            };
            if s.len() != dims || s.iter().any(|&v| v < 0) {
                return Err(c.error(format!("output_shape {s:?} for {dims} spatial axes")));
            }
            Some(s)
        }
        None if auto_pad.starts_with("SAME") => {
            Some((0..dims).map(|d| (input[d] * strides[d]) as i64).collect())
        }
        None => None,
    };
    let (begin, end) = match out_shape {
        Some(out) => {
            // The padding that makes the output that size, the odd one at
            // the start unless SAME_UPPER.
            let upper = auto_pad == "SAME_UPPER";
            (0..dims)
                .map(|d| {
                    let total = full[d] - out[d];
                    let half = total.div_euclid(2);
                    if upper {
                        (half, total - half)
                    } else {
                        (total - half, half)
                    }
                })
                .unzip()
        }
        None if auto_pad == "VALID" => (vec![0; dims], vec![0; dims]),
        None => {
            let p = list("pads", 0, 2 * dims)?;
            (p[..dims].to_vec(), p[dims..].to_vec())
        }
    };
    Ok(Plan {
        strides,
        dilations,
        begin,
        end,
        extra,
    })
}

pub(super) fn conv_transpose<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, w) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let b = c.opt(ins, 2);
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let groups = c.attrs.int("group", 1)?;
    let groups = usize::try_from(groups)
        .ok()
        .filter(|&g| g > 0)
        .ok_or_else(|| c.error(format!("group = {groups}")))?;
    if xs.len() < 3
        || ws.len() != xs.len()
        || ws[0] != xs[1]
        || xs[1] % groups != 0
        || ws[2..].contains(&0)
    {
        return Err(c.error(format!(
            "input of shape {xs:?} and weight of shape {ws:?} in {groups} group(s)"
        )));
    }
    let dims = xs.len() - 2;
    let kernel = ws[2..].to_vec();
    let p = plan(c, &xs[2..], &kernel)?;
    let even = p.begin == p.end && p.begin.iter().all(|&v| v >= 0);
    let pads: Vec<usize> = p.begin.iter().map(|&v| v.max(0) as usize).collect();
    match dims {
        1 if even => {
            let o = ConvTransposeOptions::<1>::new()
                .stride(p.strides[0])
                .padding(pads[0])
                .output_padding(p.extra[0])
                .dilation(p.dilations[0])
                .groups(groups);
            one(x.try_conv_transpose1d(w, b, &o)?)
        }
        2 if even => {
            let o = ConvTransposeOptions::<2>::new()
                .stride([p.strides[0], p.strides[1]])
                .padding([pads[0], pads[1]])
                .output_padding([p.extra[0], p.extra[1]])
                .dilation([p.dilations[0], p.dilations[1]])
                .groups(groups);
            one(x.try_conv_transpose2d(w, b, &o)?)
        }
        _ => one(scattered(c, x, w, b, groups, &p)?),
    }
}

/// The transposed convolution as `[L, C_in] × [C_in, C_out · K]` per
/// group, each product's `(k, l)` entry added at `l · stride + k ·
/// dilation` of a canvas that holds the full output and any zeros past
/// it, then the output's window of that canvas.
fn scattered<'g>(
    c: &Ctx<'_, 'g>,
    x: &Var<'g>,
    w: &Var<'g>,
    b: Option<&Var<'g>>,
    groups: usize,
    p: &Plan,
) -> Result<Var<'g>> {
    let (xs, ws) = (x.shape().to_vec(), w.shape().to_vec());
    let dims = xs.len() - 2;
    let (batch, cin) = (xs[0], xs[1]);
    let (cin_g, cout_g) = (cin / groups, ws[1]);
    let input = &xs[2..];
    let kernel = &ws[2..];
    let (l, k): (usize, usize) = (input.iter().product(), kernel.iter().product());
    let full: Vec<i64> = (0..dims)
        .map(|d| {
            ((input[d].max(1) - 1) * p.strides[d] + (kernel[d] - 1) * p.dilations[d] + 1) as i64
        })
        .collect();
    let out: Vec<i64> = (0..dims)
        .map(|d| full[d] + p.extra[d] as i64 - p.begin[d] - p.end[d])
        .collect();
    if out.iter().any(|&o| o < 0) {
        return Err(c.error(format!("pads that leave an output of {out:?}")));
    }
    // The canvas runs from min(0, begin) to max(full, begin + out).
    let offset: Vec<i64> = p.begin.iter().map(|&v| (-v).max(0)).collect();
    let canvas: Vec<usize> = (0..dims)
        .map(|d| (full[d].max(p.begin[d] + out[d]) + offset[d]) as usize)
        .collect();
    let total: usize = canvas.iter().product();
    c.check_size(&[batch, cout_g * groups, total])?;
    let mut idx = Vec::with_capacity(k * l);
    let (mut kk, mut ll) = (vec![0usize; dims], vec![0usize; dims]);
    for ki in 0..k {
        let mut r = ki;
        for d in (0..dims).rev() {
            kk[d] = r % kernel[d];
            r /= kernel[d];
        }
        for li in 0..l {
            let mut r = li;
            for d in (0..dims).rev() {
                ll[d] = r % input[d];
                r /= input[d];
            }
            let at = (0..dims).fold(0usize, |acc, d| {
                let pos = ll[d] * p.strides[d] + kk[d] * p.dilations[d] + offset[d] as usize;
                acc * canvas[d] + pos
            });
            idx.push(at as i64);
        }
    }
    let idx = Tensor::from_vec(idx, &[k * l])?;
    let rows = x
        .try_reshape(&[batch as isize, cin as isize, l as isize])?
        .try_transpose(1, 2)?;
    let mut parts = Vec::with_capacity(groups);
    for g in 0..groups {
        let xg = rows.try_narrow(2, (g * cin_g) as isize, cin_g)?;
        let wg = w
            .try_narrow(0, (g * cin_g) as isize, cin_g)?
            .try_reshape(&[cin_g as isize, (cout_g * k) as isize])?;
        // [N, L, C_out · K] → [N, C_out, K · L], k-major as `idx` is.
        let cols = xg
            .try_matmul(&wg)?
            .try_reshape(&[batch as isize, l as isize, cout_g as isize, k as isize])?
            .try_permute(&[0, 2, 3, 1])?
            .try_reshape(&[batch as isize, cout_g as isize, (k * l) as isize])?;
        let zeros = c.constant(Tensor::zeros(&[batch, cout_g, total], x.dtype())?);
        parts.push(zeros.try_index_add(2, &idx, &cols)?);
    }
    let y = if groups == 1 {
        parts.swap_remove(0)
    } else {
        Var::try_cat(&parts.iter().collect::<Vec<_>>(), 1)?
    };
    let mut shape = vec![batch as isize, (cout_g * groups) as isize];
    shape.extend(canvas.iter().map(|&d| d as isize));
    let mut y = y.try_reshape(&shape)?;
    for d in 0..dims {
        let start = p.begin[d] + offset[d];
        if start != 0 || out[d] as usize != canvas[d] {
            y = y.try_narrow((d + 2) as isize, start as isize, out[d] as usize)?;
        }
    }
    if let Some(b) = b {
        let mut bs = vec![1isize; dims + 2];
        bs[1] = -1;
        y = y.try_add(&b.try_reshape(&bs)?)?;
    }
    Ok(y)
}
