//! The recurrent layers `RNN`, `GRU` and `LSTM`, unrolled over the
//! sequence as retrograd ops (`matmul`, `sigmoid`, `tanh`, slices), so an
//! imported recurrent model trains like any other.
//!
//! One shape for all three: `X` is `[seq, batch, input]` (`layout = 1`:
//! `[batch, seq, input]`), `W` is `[dirs, gates · hidden, input]`, `R` is
//! `[dirs, gates · hidden, hidden]`, `B` is `[dirs, 2 · gates · hidden]`
//! (the input's bias, then the state's). `Y` is `[seq, dirs, batch,
//! hidden]`, `Y_h` (and `LSTM`'s `Y_c`) `[dirs, batch, hidden]`.

use super::Ctx;
use crate::import::attrs::Attr;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

#[derive(Clone, Copy, PartialEq)]
enum Cell {
    Rnn,
    Gru,
    Lstm,
}

impl Cell {
    fn gates(self) -> usize {
        match self {
            Cell::Rnn => 1,
            Cell::Gru => 3,
            Cell::Lstm => 4,
        }
    }

    /// The default activations of one direction.
    fn activations(self) -> &'static [&'static str] {
        match self {
            Cell::Rnn => &["Tanh"],
            Cell::Gru => &["Sigmoid", "Tanh"],
            Cell::Lstm => &["Sigmoid", "Tanh", "Tanh"],
        }
    }
}

/// An activation named by the node, with its `alpha` and `beta`.
#[derive(Clone)]
struct Act {
    name: String,
    alpha: f64,
    beta: f64,
}

impl Act {
    fn apply<'g>(&self, c: &Ctx<'_, 'g>, x: &Var<'g>) -> Result<Var<'g>> {
        let (a, b) = (self.alpha, self.beta);
        match self.name.as_str() {
            "Sigmoid" => x.try_sigmoid(),
            "Tanh" => x.try_tanh(),
            "Relu" => x.try_relu(),
            "LeakyRelu" => x.try_leaky_relu(a),
            "HardSigmoid" => x
                .mul_scalar(a)
                .add_scalar(b)
                .try_clamp(Some(0.0), Some(1.0)),
            "Affine" => Ok(x.mul_scalar(a).add_scalar(b)),
            "ScaledTanh" => Ok(x.mul_scalar(b).try_tanh()?.mul_scalar(a)),
            "Softsign" => x.try_div(&x.try_abs()?.add_scalar(1.0)),
            other => Err(c.error(format!("activation {other:?} is not supported"))),
        }
    }
}

/// The activations of every direction, `alpha` and `beta` handed out in
/// order to those that take them.
fn activations(c: &Ctx<'_, '_>, cell: Cell, dirs: usize) -> Result<Vec<Act>> {
    let names: Vec<String> = match c.attrs.strings("activations")? {
        Some(v) => v,
        None => (0..dirs)
            .flat_map(|_| cell.activations().iter().map(|s| s.to_string()))
            .collect(),
    };
    let per = cell.activations().len();
    if names.len() != per * dirs {
        return Err(c.error(format!(
            "{} activations for {dirs} direction(s) of {per}",
            names.len()
        )));
    }
    let floats = |name: &str| match c.attrs.get(name) {
        Some(Attr::Floats(v)) => v.clone(),
        Some(Attr::Float(v)) => vec![*v],
        _ => Vec::new(),
    };
    let (alphas, betas) = (floats("activation_alpha"), floats("activation_beta"));
    let (mut ai, mut bi) = (0, 0);
    let take = |list: &[f64], i: &mut usize, default: f64| {
        let v = list.get(*i).copied().unwrap_or(default);
        *i += 1;
        v
    };
    let mut out = Vec::new();
    for name in names {
        let (alpha, beta) = match name.as_str() {
            "LeakyRelu" => (take(&alphas, &mut ai, 0.01), 0.0),
            "HardSigmoid" => (take(&alphas, &mut ai, 0.2), take(&betas, &mut bi, 0.5)),
            "Affine" | "ScaledTanh" => (take(&alphas, &mut ai, 1.0), take(&betas, &mut bi, 0.0)),
            _ => (0.0, 0.0),
        };
        out.push(Act { name, alpha, beta });
    }
    Ok(out)
}

/// `[d0, d1, ...]` of `v` with its first two axes swapped.
fn swap01<'g>(v: &Var<'g>) -> Result<Var<'g>> {
    v.try_transpose(0, 1)
}

fn recurrent<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, cell: Cell) -> Result<Vec<Var<'g>>> {
    let layout = c.attrs.int("layout", 0)?;
    let batch_first = match layout {
        0 => false,
        1 => true,
        other => return Err(c.error(format!("layout = {other} (0 or 1)"))),
    };
    let x = c.input(ins, 0)?;
    let (w, r) = (c.input(ins, 1)?, c.input(ins, 2)?);
    let x = if batch_first { swap01(x)? } else { x.clone() };
    let dirs_named = match c.attrs.string("direction", "forward")?.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => return Err(c.error(format!("direction {other:?}"))),
    };
    let dirs = dirs_named.len();
    let g = cell.gates();
    let (xs, ws, rs) = (x.shape().to_vec(), w.shape().to_vec(), r.shape().to_vec());
    let hidden = match c.attrs.int("hidden_size", 0)? {
        0 => rs.get(2).copied().unwrap_or(0),
        h => usize::try_from(h).map_err(|_| c.error(format!("hidden_size = {h}")))?,
    };
    if xs.len() != 3
        || ws != [dirs, g * hidden, xs[2]]
        || rs != [dirs, g * hidden, hidden]
        || hidden == 0
    {
        return Err(c.error(format!(
            "X of shape {xs:?}, W of {ws:?}, R of {rs:?} for {dirs} direction(s) of {g} gate(s) of {hidden}"
        )));
    }
    let (seq, batch) = (xs[0], xs[1]);
    let clip = if c.attrs.has("clip") {
        Some(c.attrs.float("clip", 0.0)?)
    } else {
        None
    };
    let lbr = c.attrs.int("linear_before_reset", 0)? != 0;
    if cell == Cell::Lstm && c.attrs.int("input_forget", 0)? != 0 {
        return Err(c.error("input_forget = 1 is not supported"));
    }
    let acts = activations(c, cell, dirs)?;
    let per = acts.len() / dirs;
    let b = c.opt(ins, 3);
    if let Some(b) = b
        && b.shape() != [dirs, 2 * g * hidden]
    {
        return Err(c.error(format!("B of shape {:?}", b.shape())));
    }
    // Each batch row's length: steps past it keep the state and output 0.
    let lens = match c.opt(ins, 4) {
        Some(l) => {
            let l = c.ints(l)?;
            if l.len() != batch || l.iter().any(|&n| n < 0 || n as usize > seq) {
                return Err(c.error(format!("sequence_lens {l:?} for {batch} rows of {seq}")));
            }
            Some(l)
        }
        None => None,
    };
    let state_in = |i: usize, what: &str| -> Result<Option<Var<'g>>> {
        let Some(v) = c.opt(ins, i) else {
            return Ok(None);
        };
        let v = if batch_first { swap01(v)? } else { v.clone() };
        if v.shape() != [dirs, batch, hidden] {
            return Err(c.error(format!("{what} of shape {:?}", v.shape())));
        }
        Ok(Some(v))
    };
    let h0 = state_in(5, "initial_h")?;
    let c0 = if cell == Cell::Lstm {
        state_in(6, "initial_c")?
    } else {
        None
    };
    let peep = if cell == Cell::Lstm {
        c.opt(ins, 7)
    } else {
        None
    };
    if let Some(p) = peep
        && p.shape() != [dirs, 3 * hidden]
    {
        return Err(c.error(format!("P of shape {:?}", p.shape())));
    }
    let (bi, hi) = (batch as isize, hidden as isize);
    let zeros = c.constant(Tensor::zeros(&[batch, hidden], x.dtype())?);
    let mut ys = Vec::new();
    let mut hs = Vec::new();
    let mut cs = Vec::new();
    for (d, &reverse) in dirs_named.iter().enumerate() {
        let wd = w.try_select(0, d)?;
        let rt = r.try_select(0, d)?.try_transpose(0, 1)?;
        // The input's part of every step at once: [seq · batch, gates · hidden].
        let mut xw = x
            .try_reshape(&[(seq * batch) as isize, xs[2] as isize])?
            .try_matmul(&wd.try_transpose(0, 1)?)?;
        let mut rb = None;
        if let Some(b) = b {
            let bd = b.try_select(0, d)?;
            let (wb, rbd) = (
                bd.try_narrow(0, 0, g * hidden)?,
                bd.try_narrow(0, (g * hidden) as isize, g * hidden)?,
            );
            if cell == Cell::Gru && lbr {
                // The state's bias of the new gate sits inside the reset product.
                xw = xw.try_add(&wb)?.try_add(
                    &rbd.try_narrow(0, 0, 2 * hidden)?
                        .try_pad(&[0, hidden as isize], 0.0)?,
                )?;
                rb = Some(rbd.try_narrow(0, (2 * hidden) as isize, hidden)?);
            } else {
                xw = xw.try_add(&wb)?.try_add(&rbd)?;
            }
        }
        let xw = xw.try_reshape(&[seq as isize, bi, (g * hidden) as isize])?;
        let act = &acts[d * per..(d + 1) * per];
        let mut h = match &h0 {
            Some(h) => h.try_select(0, d)?,
            None => zeros.clone(),
        };
        let mut cst = match &c0 {
            Some(v) => v.try_select(0, d)?,
            None => zeros.clone(),
        };
        let peeps = match peep {
            Some(p) => {
                let pd = p.try_select(0, d)?;
                Some([
                    pd.try_narrow(0, 0, hidden)?,
                    pd.try_narrow(0, hi, hidden)?,
                    pd.try_narrow(0, 2 * hi, hidden)?,
                ])
            }
            None => None,
        };
        let clipped = |v: Var<'g>| -> Result<Var<'g>> {
            match clip {
                Some(k) => v.try_clamp(Some(-k), Some(k)),
                None => Ok(v),
            }
        };
        let mut outs: Vec<Option<Var<'g>>> = vec![None; seq];
        let steps: Vec<usize> = if reverse {
            (0..seq).rev().collect()
        } else {
            (0..seq).collect()
        };
        for t in steps {
            let xt = xw.try_select(0, t)?;
            let gate = |v: &Var<'g>, k: usize| v.try_narrow(1, (k * hidden) as isize, hidden);
            let (h_new, c_new) = match cell {
                Cell::Rnn => {
                    let pre = clipped(xt.try_add(&h.try_matmul(&rt)?)?)?;
                    (act[0].apply(c, &pre)?, None)
                }
                Cell::Gru => {
                    let rt_zr = rt.try_narrow(1, 0, 2 * hidden)?;
                    let rt_h = rt.try_narrow(1, 2 * hi, hidden)?;
                    let zr = xt
                        .try_narrow(1, 0, 2 * hidden)?
                        .try_add(&h.try_matmul(&rt_zr)?)?;
                    let z = act[0].apply(c, &clipped(gate(&zr, 0)?)?)?;
                    let rg = act[0].apply(c, &clipped(gate(&zr, 1)?)?)?;
                    let xh = gate(&xt, 2)?;
                    let pre = if lbr {
                        let mut hr = h.try_matmul(&rt_h)?;
                        if let Some(rb) = &rb {
                            hr = hr.try_add(rb)?;
                        }
                        xh.try_add(&rg.try_mul(&hr)?)?
                    } else {
                        xh.try_add(&rg.try_mul(&h)?.try_matmul(&rt_h)?)?
                    };
                    let n = act[1].apply(c, &clipped(pre)?)?;
                    // (1 - z) · n + z · h
                    let hn = n.try_add(&z.try_mul(&h.try_sub(&n)?)?)?;
                    (hn, None)
                }
                Cell::Lstm => {
                    let pre = xt.try_add(&h.try_matmul(&rt)?)?;
                    let (mut i, mut o, mut f) = (gate(&pre, 0)?, gate(&pre, 1)?, gate(&pre, 2)?);
                    let cand = gate(&pre, 3)?;
                    if let Some([pi, _, pf]) = &peeps {
                        i = i.try_add(&pi.try_mul(&cst)?)?;
                        f = f.try_add(&pf.try_mul(&cst)?)?;
                    }
                    let i = act[0].apply(c, &clipped(i)?)?;
                    let f = act[0].apply(c, &clipped(f)?)?;
                    let cand = act[1].apply(c, &clipped(cand)?)?;
                    let cn = f.try_mul(&cst)?.try_add(&i.try_mul(&cand)?)?;
                    if let Some([_, po, _]) = &peeps {
                        o = o.try_add(&po.try_mul(&cn)?)?;
                    }
                    let o = act[0].apply(c, &clipped(o)?)?;
                    (o.try_mul(&act[2].apply(c, &cn)?)?, Some(cn))
                }
            };
            let (h_new, c_new) = match &lens {
                Some(lens) => {
                    let live: Vec<f64> = lens
                        .iter()
                        .map(|&n| if (t as i64) < n { 1.0 } else { 0.0 })
                        .collect();
                    let m = c.constant(Tensor::from_f64_slice(&live, &[batch, 1], x.dtype())?);
                    let keep = |new: &Var<'g>, old: &Var<'g>| -> Result<Var<'g>> {
                        old.try_add(&m.try_mul(&new.try_sub(old)?)?)
                    };
                    outs[t] = Some(m.try_mul(&h_new)?);
                    let cn = match c_new {
                        Some(cn) => Some(keep(&cn, &cst)?),
                        None => None,
                    };
                    (keep(&h_new, &h)?, cn)
                }
                None => {
                    outs[t] = Some(h_new.clone());
                    (h_new, c_new)
                }
            };
            h = h_new;
            if let Some(cn) = c_new {
                cst = cn;
            }
        }
        let outs: Vec<Var<'g>> = outs.into_iter().flatten().collect();
        let refs: Vec<&Var<'g>> = outs.iter().collect();
        ys.push(if refs.is_empty() {
            c.constant(Tensor::zeros(&[0, batch, hidden], x.dtype())?)
        } else {
            Var::try_stack(&refs, 0)?
        });
        hs.push(h);
        cs.push(cst);
    }
    // Y: [seq, dirs, batch, hidden]; Y_h, Y_c: [dirs, batch, hidden].
    let y = Var::try_stack(&ys.iter().collect::<Vec<_>>(), 1)?;
    let yh = Var::try_stack(&hs.iter().collect::<Vec<_>>(), 0)?;
    let yc = Var::try_stack(&cs.iter().collect::<Vec<_>>(), 0)?;
    let (y, yh, yc) = if batch_first {
        // [batch, seq, dirs, hidden] and [batch, dirs, hidden].
        (y.try_permute(&[2, 0, 1, 3])?, swap01(&yh)?, swap01(&yc)?)
    } else {
        (y, yh, yc)
    };
    Ok(match cell {
        Cell::Lstm => vec![y, yh, yc],
        _ => vec![y, yh],
    })
}

/// `RNN`: `H = f(X·Wᵀ + H·Rᵀ + b)`, `f` tanh by default.
pub(super) fn rnn<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    recurrent(c, ins, Cell::Rnn)
}

/// `GRU`, gates `z`, `r`, `h`; `linear_before_reset` puts the reset
/// gate after the state's product.
pub(super) fn gru<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    recurrent(c, ins, Cell::Gru)
}

/// `LSTM`, gates `i`, `o`, `f`, `c`, with optional peepholes `P`
/// (`i`, `o`, `f`) and `clip`.
pub(super) fn lstm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    recurrent(c, ins, Cell::Lstm)
}
