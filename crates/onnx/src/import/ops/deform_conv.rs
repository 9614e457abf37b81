//! `DeformConv` (2-d): each kernel tap reads the input at its place moved
//! by a learned offset, bilinearly (zeros outside), times the optional
//! mask; then a product with the weights per group. The corners are
//! chosen on the host from the offsets' values; the interpolation
//! weights are computed from the offsets as ops, so the input, the
//! weights, the offsets and the mask all receive gradients.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn deform_conv<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, w, offset) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let (bias, mask) = (c.opt(ins, 3), c.opt(ins, 4));
    let (xs, ws, os) = (
        x.shape().to_vec(),
        w.shape().to_vec(),
        offset.shape().to_vec(),
    );
    if xs.len() != 4 || ws.len() != 4 || os.len() != 4 {
        return Err(c.error(format!(
            "X of shape {xs:?}, W of {ws:?}, offset of {os:?} (2-d deformable convolutions are supported)"
        )));
    }
    let list = |key: &str, n: usize, default: i64| -> Result<Vec<usize>> {
        let v = c.attrs.ints(key)?.unwrap_or_else(|| vec![default; n]);
        if v.len() != n || v.iter().any(|&x| x < 0) {
            return Err(c.error(format!("{key} {v:?}")));
        }
        Ok(v.iter().map(|&x| x as usize).collect())
    };
    let strides = list("strides", 2, 1)?;
    let dil = list("dilations", 2, 1)?;
    let pads = list("pads", 4, 0)?;
    let (groups, ogroups) = (c.attrs.int("group", 1)?, c.attrs.int("offset_group", 1)?);
    let (n, ch, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (oc, kh, kw) = (ws[0], ws[2], ws[3]);
    let (oh, ow) = (os[2], os[3]);
    let ok_groups = groups > 0
        && ogroups > 0
        && ch % ogroups as usize == 0
        && oc % groups as usize == 0
        && ws[1] * groups as usize == ch;
    let (k, l) = (kh * kw, oh * ow);
    let g_off = ogroups.max(1) as usize;
    let fits = |d: usize| {
        let (size, kk) = if d == 0 { (h, kh) } else { (wd, kw) };
        let reach = (kk.max(1) - 1) * dil[d] + 1;
        let padded = size + pads[d] + pads[d + 2];
        strides[d] > 0 && padded >= reach && (padded - reach) / strides[d] + 1 == os[d + 2]
    };
    if !ok_groups || os[0] != n || os[1] != g_off * k * 2 || k == 0 || !fits(0) || !fits(1) {
        return Err(c.error(format!(
            "X of shape {xs:?}, W of {ws:?}, offset of {os:?} in {groups} group(s), {ogroups} offset group(s)"
        )));
    }
    if let Some(m) = mask
        && m.shape() != [n, g_off * k, oh, ow]
    {
        return Err(c.error(format!("mask of shape {:?}", m.shape())));
    }
    let (ni, ki, li) = (n as isize, k as isize, l as isize);
    let cg = ch / g_off;
    // The input as rows of channels: [N · H · W, C].
    let rows = x
        .try_permute(&[0, 2, 3, 1])?
        .try_reshape(&[(n * h * wd) as isize, ch as isize])?;
    let offs = offset.try_reshape(&[ni, g_off as isize, ki, 2, li])?;
    let ov = offs.value().contiguous().to_f64_vec();
    let mut sampled = Vec::with_capacity(g_off);
    for g in 0..g_off {
        let og = offs.try_select(1, g)?;
        // Each tap's place without its offset, and with it (on the host).
        let mut base = [vec![0.0f64; n * k * l], vec![0.0f64; n * k * l]];
        let mut at = [vec![0.0f64; n * k * l], vec![0.0f64; n * k * l]];
        for b in 0..n {
            for ky in 0..kh {
                for kx in 0..kw {
                    let kk = ky * kw + kx;
                    for i in 0..oh {
                        for j in 0..ow {
                            let e = (b * k + kk) * l + i * ow + j;
                            let y0 = (i * strides[0] + ky * dil[0]) as f64 - pads[0] as f64;
                            let x0 = (j * strides[1] + kx * dil[1]) as f64 - pads[1] as f64;
                            let src = |axis: usize| {
                                (((b * g_off + g) * k + kk) * 2 + axis) * l + i * ow + j
                            };
                            base[0][e] = y0;
                            base[1][e] = x0;
                            at[0][e] = y0 + ov[src(0)];
                            at[1][e] = x0 + ov[src(1)];
                        }
                    }
                }
            }
        }
        // The fractional parts as ops: place - floor(place), floor a constant.
        let frac = |axis: usize| -> Result<Var<'g>> {
            let fl: Vec<f64> = at[axis]
                .iter()
                .zip(&base[axis])
                .map(|(p, b)| p.floor() - b)
                .collect();
            og.try_narrow(2, axis as isize, 1)?
                .try_reshape(&[ni, ki, li])?
                .try_sub(&c.constant(Tensor::from_f64_slice(&fl, &[n, k, l], x.dtype())?))
        };
        let (fy, fx) = (frac(0)?, frac(1)?);
        let mut sum: Option<Var<'g>> = None;
        for (dy, dx) in [(0i64, 0i64), (0, 1), (1, 0), (1, 1)] {
            let mut idx = Vec::with_capacity(n * k * l);
            let mut valid = Vec::with_capacity(n * k * l);
            for (e, (py, px)) in at[0].iter().zip(&at[1]).enumerate() {
                let yy = py.floor() as i64 + dy;
                let xx = px.floor() as i64 + dx;
                let inside = (0..h as i64).contains(&yy) && (0..wd as i64).contains(&xx);
                let b = e / (k * l);
                idx.push(if inside {
                    ((b * h) as i64 + yy) * wd as i64 + xx
                } else {
                    0
                });
                valid.push(f64::from(u8::from(inside)));
            }
            let wy = if dy == 1 {
                fy.clone()
            } else {
                fy.rsub_scalar(1.0)
            };
            let wx = if dx == 1 {
                fx.clone()
            } else {
                fx.rsub_scalar(1.0)
            };
            let valid = c.constant(Tensor::from_f64_slice(&valid, &[n, k, l], x.dtype())?);
            let weight = wy.try_mul(&wx)?.try_mul(&valid)?.try_unsqueeze(-1)?;
            let vals = rows
                .try_index_select(0, &Tensor::from_vec(idx, &[n * k * l])?)?
                .try_narrow(1, (g * cg) as isize, cg)?
                .try_reshape(&[ni, ki, li, cg as isize])?;
            let term = vals.try_mul(&weight)?;
            sum = Some(match sum {
                Some(s) => s.try_add(&term)?,
                None => term,
            });
        }
        let mut s = sum.expect("four corners");
        if let Some(m) = mask {
            let mg = m
                .try_reshape(&[ni, g_off as isize, ki, li])?
                .try_select(1, g)?
                .try_unsqueeze(-1)?;
            s = s.try_mul(&mg)?;
        }
        sampled.push(s);
    }
    // [N, K, L, C] → [N, L, C · K], channel-major as the weights are.
    let all = Var::try_cat(&sampled.iter().collect::<Vec<_>>(), 3)?;
    let cols = all.try_permute(&[0, 2, 3, 1])?;
    let groups = groups as usize;
    let (cpg, ocg) = (ch / groups, oc / groups);
    let mut outs = Vec::with_capacity(groups);
    for q in 0..groups {
        let cq = cols.try_narrow(2, (q * cpg) as isize, cpg)?.try_reshape(&[
            ni,
            li,
            (cpg * k) as isize,
        ])?;
        let wq = w
            .try_narrow(0, (q * ocg) as isize, ocg)?
            .try_reshape(&[ocg as isize, (cpg * k) as isize])?;
        outs.push(cq.try_matmul(&wq.try_transpose(0, 1)?)?);
    }
    let y = if groups == 1 {
        outs.swap_remove(0)
    } else {
        Var::try_cat(&outs.iter().collect::<Vec<_>>(), 2)?
    };
    let mut y =
        y.try_permute(&[0, 2, 1])?
            .try_reshape(&[ni, oc as isize, oh as isize, ow as isize])?;
    if let Some(b) = bias {
        y = y.try_add(&b.try_reshape(&[1, -1, 1, 1])?)?;
    }
    one(y)
}
