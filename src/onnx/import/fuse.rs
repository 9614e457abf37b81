//! Fusion at import: ONNX node patterns that spell out one retrograd op
//! run as that op, which is faster and differentiates through one
//! backward formula. The result is the same function; a pattern matches
//! only when its intermediate values feed nothing else.
//!
//! - GELU: `x · (1 + erf(x / √2)) / 2`, as this crate's exporter and
//!   PyTorch's write it (`Div` or `Mul` by `1/√2`, `Erf`, `Add 1`, two
//!   `Mul`s in either order), becomes one `Gelu`.

use std::collections::HashMap;

use super::attrs::Attrs;
use super::ops::lookup;
use super::{OnnxModel, Step};
use crate::tensor::Tensor;

/// The model's steps with their readers and constants, for matching.
struct View<'a> {
    steps: &'a [Step],
    /// The step writing each slot.
    producer: HashMap<usize, usize>,
    /// How many step inputs (and graph outputs) read each slot.
    readers: HashMap<usize, usize>,
    /// Known constant values by slot.
    constants: HashMap<usize, &'a Tensor>,
}

impl<'a> View<'a> {
    fn new(m: &'a OnnxModel, initializers: &'a [(usize, String, Tensor)]) -> Self {
        let mut producer = HashMap::new();
        let mut readers: HashMap<usize, usize> = HashMap::new();
        for (i, s) in m.steps.iter().enumerate() {
            for &o in &s.outputs {
                producer.insert(o, i);
            }
            for &slot in s.inputs.iter().flatten() {
                *readers.entry(slot).or_default() += 1;
            }
        }
        for (_, slot) in &m.outputs {
            *readers.entry(*slot).or_default() += 1;
        }
        let constants = m
            .constants
            .iter()
            .map(|(s, t)| (*s, t))
            .chain(initializers.iter().map(|(s, _, t)| (*s, t)))
            .collect();
        View {
            steps: &m.steps,
            producer,
            readers,
            constants,
        }
    }

    /// The step writing `slot`, if it is `op_type` and its output is read once.
    fn only_use(&self, slot: usize, op_type: &str) -> Option<usize> {
        let i = *self.producer.get(&slot)?;
        (self.steps[i].op_type == op_type && self.readers.get(&slot) == Some(&1)).then_some(i)
    }

    /// Whether `slot` holds a scalar constant within 1e-6 of `value`.
    fn is_scalar(&self, slot: usize, value: f64) -> bool {
        self.constants.get(&slot).is_some_and(|t| {
            t.numel() == 1
                && t.try_item()
                    .is_ok_and(|v| (v - value).abs() <= 1e-6 * value.abs().max(1.0))
        })
    }

    /// For a binary step, the operand that is not a scalar constant equal
    /// to `value` (either order).
    fn other_than(&self, step: usize, value: f64) -> Option<usize> {
        match self.steps[step].inputs[..] {
            [Some(a), Some(b)] if self.is_scalar(b, value) => Some(a),
            [Some(a), Some(b)] if self.is_scalar(a, value) => Some(b),
            _ => None,
        }
    }

    /// The operands of a binary step.
    fn operands(&self, step: usize) -> Option<(usize, usize)> {
        match self.steps[step].inputs[..] {
            [Some(a), Some(b)] => Some((a, b)),
            _ => None,
        }
    }
}

/// Rewrites known patterns among `m`'s steps.
pub(super) fn fuse(m: &mut OnnxModel, initializers: &[(usize, String, Tensor)]) {
    let mut replace: HashMap<usize, Step> = HashMap::new();
    let mut remove = vec![false; m.steps.len()];
    {
        let v = View::new(m, initializers);
        for (i, step) in m.steps.iter().enumerate() {
            if step.op_type == "Erf"
                && let Some((last, x, covered)) = gelu(&v, i)
                && covered.iter().all(|&s| !remove[s])
            {
                for s in covered {
                    remove[s] = true;
                }
                remove[last] = false;
                replace.insert(last, fused("Gelu", &m.steps[last], vec![Some(x)]));
            }
        }
    }
    let steps = std::mem::take(&mut m.steps);
    m.steps = steps
        .into_iter()
        .enumerate()
        .filter(|(i, _)| !remove[*i])
        .map(|(i, s)| replace.remove(&i).unwrap_or(s))
        .collect();
}

/// A step running `op_type` (from the op table, default settings) on
/// `inputs`, writing `like`'s outputs and named after it.
fn fused(op_type: &str, like: &Step, inputs: Vec<Option<usize>>) -> Step {
    let (convert, _) = lookup(op_type).expect("fused ops are in the table");
    let label = format!("{} fused as {op_type}", like.attrs.label);
    Step {
        convert,
        attrs: Attrs::decode(label, &[]).expect("no attributes to decode"),
        op_type: op_type.to_string(),
        inputs,
        outputs: like.outputs.clone(),
    }
}

/// Matches GELU around the `Erf` step `erf`: returns the last step, the
/// input `x` and every step of the pattern.
fn gelu(v: &View<'_>, erf: usize) -> Option<(usize, usize, Vec<usize>)> {
    let s = v.steps;
    let t = s[erf].inputs.first().copied().flatten()?;
    // t = x / √2, or x · (1/√2).
    let scale = v.only_use(t, "Div").or_else(|| v.only_use(t, "Mul"))?;
    let x = match s[scale].op_type.as_str() {
        "Div" => match s[scale].inputs[..] {
            [Some(x), Some(c)] if v.is_scalar(c, std::f64::consts::SQRT_2) => x,
            _ => return None,
        },
        _ => v.other_than(scale, std::f64::consts::FRAC_1_SQRT_2)?,
    };
    // p = erf + 1, read by one Mul.
    let e = s[erf].outputs[0];
    let add = find_reader(v, e, "Add")?;
    v.other_than(add, 1.0).filter(|&o| o == e)?;
    let p = s[add].outputs[0];
    let m1 = find_reader(v, p, "Mul")?;
    let (a, b) = v.operands(m1)?;
    let other = if a == p { b } else { a };
    let m1_out = s[m1].outputs[0];
    if other == x {
        // (x · p) · 0.5
        let m2 = find_reader(v, m1_out, "Mul")?;
        v.other_than(m2, 0.5).filter(|&o| o == m1_out)?;
        Some((m2, x, vec![scale, erf, add, m1, m2]))
    } else {
        // (x · 0.5) · p
        let half = v.only_use(other, "Mul")?;
        v.other_than(half, 0.5).filter(|&o| o == x)?;
        Some((m1, x, vec![scale, erf, add, half, m1]))
    }
}

/// The one step reading `slot`, if it is `op_type` and nothing else reads it.
fn find_reader(v: &View<'_>, slot: usize, op_type: &str) -> Option<usize> {
    if v.readers.get(&slot) != Some(&1) {
        return None;
    }
    v.steps
        .iter()
        .position(|s| s.op_type == op_type && s.inputs.contains(&Some(slot)))
}
