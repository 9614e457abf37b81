//! The optimizer steps of the `ai.onnx.preview.training` domain:
//! `Adagrad`, `Adam` and `Momentum`, each updating `n` tensors from their
//! gradients and states in one node. They are the update itself, not a
//! function to differentiate, so they compute on the host (in f64) and
//! give back constants in each tensor's dtype.

use super::Ctx;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// One tensor's values, shape and dtype.
type Values = (Vec<f64>, Vec<usize>, DType);

/// The learning rate, the step count and `groups` lists of `n` tensors
/// (`X`, `G`, then the states), each list's tensors alike in shape.
struct Step {
    rate: f64,
    count: f64,
    lists: Vec<Vec<Values>>,
}

fn read(c: &Ctx<'_, '_>, ins: &Ins<'_>, groups: usize) -> Result<Step> {
    let rate = c.scalar(c.input(ins, 0)?)?;
    let count = c.scalar(c.input(ins, 1)?)?;
    let rest = ins.len().saturating_sub(2);
    if rest == 0 || !rest.is_multiple_of(groups) {
        return Err(c.error(format!(
            "{rest} tensors after R and T (want {groups} lists of the same length)"
        )));
    }
    let n = rest / groups;
    let mut lists = Vec::with_capacity(groups);
    for g in 0..groups {
        let mut list = Vec::with_capacity(n);
        for i in 0..n {
            let v = c.input(ins, 2 + g * n + i)?;
            list.push((
                v.value().contiguous().to_f64_vec(),
                v.shape().to_vec(),
                v.dtype(),
            ));
        }
        lists.push(list);
    }
    for i in 0..n {
        let shape = &lists[0][i].1;
        if lists.iter().any(|l| &l[i].1 != shape) {
            return Err(c.error(format!("the {i}-th tensors of each list differ in shape")));
        }
    }
    Ok(Step { rate, count, lists })
}

/// Constants of `outs` (per output list, per tensor) shaped as `like`.
fn give<'g>(c: &Ctx<'_, 'g>, outs: Vec<Vec<Vec<f64>>>, like: &[Values]) -> Result<Vec<Var<'g>>> {
    let mut vars = Vec::new();
    for list in outs {
        for (v, (_, shape, dtype)) in list.iter().zip(like) {
            vars.push(c.constant(Tensor::from_f64_slice(v, shape, *dtype)?));
        }
    }
    Ok(vars)
}

/// `Adagrad`: `H += g²`, `X -= r g / (sqrt(H) + ε)` with `g = G + λX` and
/// `r = R / (1 + T · decay_factor)`.
pub(super) fn adagrad<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let s = read(c, ins, 3)?;
    let decay = c.attrs.float("decay_factor", 0.0)?;
    let eps = c.attrs.float("epsilon", 1e-6)?;
    let lambda = c.attrs.float("norm_coefficient", 0.0)?;
    let r = s.rate / (1.0 + s.count * decay);
    let (mut xs, mut hs) = (Vec::new(), Vec::new());
    for i in 0..s.lists[0].len() {
        let (x, g, h) = (&s.lists[0][i].0, &s.lists[1][i].0, &s.lists[2][i].0);
        let mut xn = Vec::with_capacity(x.len());
        let mut hn = Vec::with_capacity(x.len());
        for j in 0..x.len() {
            let gr = lambda * x[j] + g[j];
            let hh = h[j] + gr * gr;
            xn.push(x[j] - r * gr / (hh.sqrt() + eps));
            hn.push(hh);
        }
        xs.push(xn);
        hs.push(hn);
    }
    give(c, vec![xs, hs], &s.lists[0])
}

/// `Adam`: first and second moments `V`, `H` of `g = G + λX`, the rate
/// bias-corrected after the first step, then `X` scaled by
/// `1 - norm_coefficient_post`.
pub(super) fn adam<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let s = read(c, ins, 4)?;
    let alpha = c.attrs.float("alpha", 0.9)?;
    let beta = c.attrs.float("beta", 0.999)?;
    let eps = c.attrs.float("epsilon", 1e-6)?;
    let lambda = c.attrs.float("norm_coefficient", 0.0)?;
    let post = c.attrs.float("norm_coefficient_post", 0.0)?;
    let t = s.count;
    let r = if t > 0.0 {
        s.rate * (1.0 - beta.powf(t)).sqrt() / (1.0 - alpha.powf(t))
    } else {
        s.rate
    };
    let (mut xs, mut vs, mut hs) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..s.lists[0].len() {
        let [x, g, v, h] = [0, 1, 2, 3].map(|k| &s.lists[k][i].0);
        let (mut xn, mut vn, mut hn) = (Vec::new(), Vec::new(), Vec::new());
        for j in 0..x.len() {
            let gr = lambda * x[j] + g[j];
            let vv = alpha * v[j] + (1.0 - alpha) * gr;
            let hh = beta * h[j] + (1.0 - beta) * gr * gr;
            xn.push((1.0 - post) * (x[j] - r * vv / (hh.sqrt() + eps)));
            vn.push(vv);
            hn.push(hh);
        }
        xs.push(xn);
        vs.push(vn);
        hs.push(hn);
    }
    give(c, vec![xs, vs, hs], &s.lists[0])
}

/// `Momentum`, `standard` (`X -= R V`) or `nesterov` (`X -= R (g + αV)`),
/// with `V = αV + β g` (`β` taken as 1 on the first step, `T = 0`).
pub(super) fn momentum<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let s = read(c, ins, 3)?;
    let alpha = c.attrs.float("alpha", 0.0)?;
    let beta = c.attrs.float("beta", 0.0)?;
    let lambda = c.attrs.float("norm_coefficient", 0.0)?;
    let nesterov = match c.attrs.string("mode", "standard")?.as_str() {
        "standard" => false,
        "nesterov" => true,
        other => return Err(c.error(format!("mode {other:?} (standard or nesterov)"))),
    };
    let b = if s.count > 0.0 { beta } else { 1.0 };
    let (mut xs, mut vs) = (Vec::new(), Vec::new());
    for i in 0..s.lists[0].len() {
        let [x, g, v] = [0, 1, 2].map(|k| &s.lists[k][i].0);
        let (mut xn, mut vn) = (Vec::new(), Vec::new());
        for j in 0..x.len() {
            let gr = lambda * x[j] + g[j];
            let vv = alpha * v[j] + b * gr;
            xn.push(if nesterov {
                x[j] - s.rate * (gr + alpha * vv)
            } else {
                x[j] - s.rate * vv
            });
            vn.push(vv);
        }
        xs.push(xn);
        vs.push(vn);
    }
    give(c, vec![xs, vs], &s.lists[0])
}
