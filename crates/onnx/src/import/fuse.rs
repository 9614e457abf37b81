//! Fusion at import: ONNX node patterns that spell out one retrograd op
//! run as that op, which is faster and differentiates through one
//! backward formula. The result is the same function; a pattern matches
//! only when its intermediate values feed nothing else.
//!
//! - GELU: `x · (1 + erf(x / √2)) / 2`, as this crate's exporter and
//!   PyTorch's write it (`Div` or `Mul` by `1/√2`, `Erf`, `Add 1`, two
//!   `Mul`s in either order), becomes one `Gelu`.
//! - Attention: `MatMul(softmax(MatMul(q, kᵀ) · scale + mask), v)`, with
//!   the scale on the scores or on `q`, an optional additive mask (a
//!   constant causal mask becomes `is_causal`), and the `Where(IsNaN(p),
//!   0, p)` that this crate's exporter adds for fully masked rows, becomes
//!   one fused `scaled_dot_product_attention` (flash-style, O(L) memory);
//!   where nothing requires grad and nothing traces, the output alone
//!   (small f32 heads: `kernels::nn::attention_tiled`).
//! - Bias: `Add(MatMul(a, b), c)` (either operand order) with `c` a 1-d
//!   float initializer or constant (or an `Identity` of one) becomes one
//!   step that, where nothing requires grad and nothing traces, runs one
//!   product accumulated onto the bias rows (`kernels::matmul_bias`),
//!   else the two ops. Matched after attention (whose score `Add` it
//!   leaves alone: a mask is never a 1-d constant there).
//! - Residual and norm: `LayerNormalization(Add(a, b))` with neither
//!   operand a constant (a bias is the product's, below) becomes one step
//!   that, where nothing requires grad and nothing traces and `a`, `b`
//!   have one shape, sums and normalises each row in one pass
//!   (`kernels::nn::norm::add_layer_norm`), else the two ops.
//! - Convolution: `Relu(Conv(x, w, b))`, and a 2x2 stride-2 `MaxPool` of
//!   it, becomes one step that, where nothing requires grad and nothing
//!   traces, runs the convolution with the ReLU and the pooling in its
//!   output pass (`kernels::nn::conv_fused`), else the ops.

use std::collections::HashMap;

use super::attrs::Attrs;
use super::ops::{
    fused_add_layer_norm, fused_attention, fused_conv_relu, fused_matmul_add, lookup, Convert,
    FUSED_POOL,
};
use super::{OnnxModel, Step};
use crate::proto::attribute_proto::AttributeType;
use crate::proto::AttributeProto;
use retrograd_engine::tensor::Tensor;

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
        let mut constants: HashMap<usize, &Tensor> = m
            .constants
            .iter()
            .map(|(s, t)| (*s, t))
            .chain(initializers.iter().map(|(s, _, t)| (*s, t)))
            .collect();
        // `torch.onnx.export` writes one initializer for equal weights
        // (a BERT's zero biases) and an `Identity` of it for each use.
        for s in &m.steps {
            if let ("Identity", [Some(x)], [y]) =
                (s.op_type.as_str(), &s.inputs[..], &s.outputs[..])
                && let Some(&t) = constants.get(x)
            {
                constants.insert(*y, t);
            }
        }
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
            let found = match step.op_type.as_str() {
                "Erf" => gelu(&v, i).map(|(last, x, covered)| {
                    (last, fused("Gelu", &m.steps[last], vec![Some(x)]), covered)
                }),
                "Softmax" => {
                    attention(&v, i).map(|a| (a.last, a.step(&m.steps[a.last]), a.covered))
                }
                "LayerNormalization" => add_norm(&v, i)
                    .map(|(add, inputs)| (i, add_norm_step(&m.steps[i], inputs), vec![add, i])),
                "Relu" => conv_relu(&v, i).map(|(conv, last, covered)| {
                    let pool = last != i;
                    (
                        last,
                        conv_relu_step(&m.steps[conv], &m.steps[last], pool),
                        covered,
                    )
                }),
                _ => None,
            };
            if let Some((last, step, covered)) = found
                && covered.iter().all(|&s| !remove[s])
            {
                for s in covered {
                    remove[s] = true;
                }
                remove[last] = false;
                replace.insert(last, step);
            }
        }
        // Biases last, on what the patterns above left.
        for i in 0..m.steps.len() {
            if m.steps[i].op_type == "Add"
                && !remove[i]
                && !replace.contains_key(&i)
                && let Some((product, a, b, bias)) = matmul_bias(&v, i)
                && !remove[product]
                && !replace.contains_key(&product)
            {
                remove[product] = true;
                replace.insert(i, matmul_add_step(&m.steps[i], [a, b, bias]));
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
        input_types: Vec::new(),
    }
}

/// `Add(MatMul(a, b), bias)` at the `Add` step `add`, the product read
/// only there and `bias` a 1-d float constant: `(product step, a, b, bias)`.
fn matmul_bias(v: &View<'_>, add: usize) -> Option<(usize, usize, usize, usize)> {
    let (x, y) = v.operands(add)?;
    let is_bias = |slot: usize| {
        v.constants
            .get(&slot)
            .is_some_and(|t| t.shape().len() == 1 && t.dtype().is_float())
    };
    let (product, bias) = match (v.only_use(x, "MatMul"), v.only_use(y, "MatMul")) {
        (Some(p), _) if is_bias(y) => (p, y),
        (_, Some(p)) if is_bias(x) => (p, x),
        _ => return None,
    };
    let (a, b) = v.operands(product)?;
    Some((product, a, b, bias))
}

/// The step running `MatMul` + `Add` as one, writing `add`'s outputs.
fn matmul_add_step(add: &Step, inputs: [usize; 3]) -> Step {
    Step {
        convert: fused_matmul_add as Convert,
        attrs: Attrs::decode(format!("{} fused as MatMul+Add", add.attrs.label), &[])
            .expect("no attributes to decode"),
        op_type: "MatMul+Add (fused)".to_string(),
        inputs: inputs.map(Some).to_vec(),
        outputs: add.outputs.clone(),
        input_types: Vec::new(),
    }
}

/// `LayerNormalization(Add(a, b))` at the norm step `norm`, the sum read
/// only there and neither operand a constant: `(add step, the fused
/// step's inputs)`.
fn add_norm(v: &View<'_>, norm: usize) -> Option<(usize, Vec<Option<usize>>)> {
    let step = &v.steps[norm];
    let x = step.inputs.first().copied().flatten()?;
    if step.outputs.len() != 1 {
        return None;
    }
    let add = v.only_use(x, "Add")?;
    let (a, b) = v.operands(add)?;
    if v.constants.contains_key(&a) || v.constants.contains_key(&b) {
        return None;
    }
    let scale = step.inputs.get(1).copied().flatten()?;
    let bias = step.inputs.get(2).copied().flatten();
    Some((add, vec![Some(a), Some(b), Some(scale), bias]))
}

/// The step running `Add` + `LayerNormalization` as one: the norm's
/// settings and outputs.
fn add_norm_step(norm: &Step, inputs: Vec<Option<usize>>) -> Step {
    let op_type = "Add+LayerNormalization (fused)";
    Step {
        convert: fused_add_layer_norm as Convert,
        attrs: norm.attrs.relabelled_with_int(
            format!("{} fused as {op_type}", norm.attrs.label),
            "fused",
            1,
        ),
        op_type: op_type.to_string(),
        inputs,
        outputs: norm.outputs.clone(),
        input_types: Vec::new(),
    }
}

/// `Relu(Conv(..))` at the `Relu` step `relu`, the convolution read only
/// there, and the 2x2 stride-2 `MaxPool` reading it if the ReLU's output
/// goes nowhere else: `(conv step, last step, every step)`.
fn conv_relu(v: &View<'_>, relu: usize) -> Option<(usize, usize, Vec<usize>)> {
    let x = v.steps[relu].inputs.first().copied().flatten()?;
    let conv = v.only_use(x, "Conv")?;
    let y = *v.steps[relu].outputs.first()?;
    match find_reader(v, y, "MaxPool") {
        Some(pool) if is_max_pool_2x2(&v.steps[pool]) => Some((conv, pool, vec![conv, relu, pool])),
        _ => Some((conv, relu, vec![conv, relu])),
    }
}

/// Whether `step` is a `MaxPool` of 2x2 windows with stride 2, no padding
/// or dilation, rounding down, and no indices output.
fn is_max_pool_2x2(step: &Step) -> bool {
    let a = &step.attrs;
    let ints = |name: &str, want: &[i64]| {
        a.ints(name)
            .is_ok_and(|v| v.is_none_or(|v| v.iter().all(|x| want.contains(x))))
    };
    step.outputs.len() == 1
        && a.ints("kernel_shape").is_ok_and(|k| k == Some(vec![2, 2]))
        && a.ints("strides").is_ok_and(|s| s == Some(vec![2, 2]))
        && ints("pads", &[0])
        && ints("dilations", &[1])
        && a.int("ceil_mode", 0) == Ok(0)
        && a.int("storage_order", 0) == Ok(0)
        && matches!(
            a.string("auto_pad", "NOTSET").as_deref(),
            Ok("NOTSET" | "VALID")
        )
}

/// The step running `Conv` + `Relu` (+ `MaxPool` if `pool`) as one: the
/// convolution's inputs and settings, `last`'s outputs.
fn conv_relu_step(conv: &Step, last: &Step, pool: bool) -> Step {
    let op_type = if pool {
        "Conv+Relu+MaxPool (fused)"
    } else {
        "Conv+Relu (fused)"
    };
    let label = format!("{} fused as {op_type}", conv.attrs.label);
    Step {
        convert: fused_conv_relu as Convert,
        attrs: conv
            .attrs
            .relabelled_with_int(label, FUSED_POOL, i64::from(pool)),
        op_type: op_type.to_string(),
        inputs: conv.inputs.clone(),
        outputs: last.outputs.clone(),
        input_types: Vec::new(),
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

/// A matched attention: the fused step's inputs and settings.
struct Attention {
    q: usize,
    /// `k`, or `kᵀ` as the first product reads it when no transpose of
    /// the last two axes writes it (`k_transposed`).
    k: usize,
    k_transposed: bool,
    v: usize,
    mask: Option<usize>,
    scale: f64,
    causal: bool,
    /// The softmax's axis, checked against the scores' rank when run.
    axis: i64,
    last: usize,
    covered: Vec<usize>,
}

impl Attention {
    fn step(&self, like: &Step) -> Step {
        let float = |name: &str, f: f64| AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Float as i32),
            f: Some(f as f32),
            ..Default::default()
        };
        let int = |name: &str, i: i64| AttributeProto {
            name: Some(name.into()),
            r#type: Some(AttributeType::Int as i32),
            i: Some(i),
            ..Default::default()
        };
        let attrs = [
            float("scale", self.scale),
            int("causal", i64::from(self.causal)),
            int("k_transposed", i64::from(self.k_transposed)),
            int("axis", self.axis),
        ];
        let label = format!("{} fused as attention", like.attrs.label);
        Step {
            convert: fused_attention as Convert,
            attrs: Attrs::decode(label, &attrs).expect("plain attributes"),
            op_type: "Attention (fused)".to_string(),
            inputs: vec![Some(self.q), Some(self.k), Some(self.v), self.mask],
            outputs: like.outputs.clone(),
            input_types: Vec::new(),
        }
    }
}

/// The scalar constant a binary step multiplies by (`Mul` by `c`: `c`;
/// `Div` by `c`: `1/c`), and its other operand.
fn scaling(v: &View<'_>, step: usize) -> Option<(usize, f64)> {
    let (a, b) = v.operands(step)?;
    let value = |slot: usize| {
        v.constants
            .get(&slot)
            .filter(|t| t.numel() == 1 && t.dtype().is_float())
            .and_then(|t| t.try_item().ok())
    };
    match v.steps[step].op_type.as_str() {
        "Mul" => value(b)
            .map(|c| (a, c))
            .or_else(|| value(a).map(|c| (b, c))),
        "Div" => value(b).filter(|&c| c != 0.0).map(|c| (a, 1.0 / c)),
        _ => None,
    }
}

/// Whether `slot` is a constant `[L, L]` causal mask: 0 on and below the
/// diagonal, -inf above.
fn is_causal_mask(v: &View<'_>, slot: usize) -> bool {
    v.constants.get(&slot).is_some_and(|t| {
        let [l, s] = t.shape()[..] else { return false };
        l == s
            && t.dtype().is_float()
            && t.to_f64_vec().iter().enumerate().all(|(i, &x)| {
                if i % s > i / s {
                    x == f64::NEG_INFINITY
                } else {
                    x == 0.0
                }
            })
    })
}

/// The scores `MatMul(q, kᵀ)` behind `x`, through an optional scale on
/// `x` or on `q`: `(product, q, kᵀ, scale, covered)`.
fn scaled_scores(v: &View<'_>, mut x: usize) -> Option<(usize, usize, usize, f64, Vec<usize>)> {
    let mut covered = Vec::new();
    let mut scale = 1.0;
    for op in ["Mul", "Div"] {
        if let Some(step) = v.only_use(x, op)
            && let Some((inner, c)) = scaling(v, step)
        {
            scale *= c;
            covered.push(step);
            x = inner;
            break;
        }
    }
    let product = v.only_use(x, "MatMul")?;
    covered.push(product);
    let (mut q, kt) = v.operands(product)?;
    if let Some(step) = v.only_use(q, "Mul")
        && let Some((inner, c)) = scaling(v, step)
    {
        scale *= c;
        covered.push(step);
        q = inner;
    }
    Some((product, q, kt, scale, covered))
}

/// Whether step `t` is a `Transpose` swapping the last two of its axes.
fn swaps_last_two(v: &View<'_>, t: usize) -> bool {
    let Ok(Some(perm)) = v.steps[t].attrs.ints("perm") else {
        return false;
    };
    let n = perm.len();
    n >= 2
        && perm.iter().enumerate().all(|(i, &p)| {
            p as usize
                == if i + 2 == n {
                    n - 1
                } else if i + 1 == n {
                    n - 2
                } else {
                    i
                }
        })
}

/// Matches attention around the `Softmax` step `softmax`.
fn attention(v: &View<'_>, softmax: usize) -> Option<Attention> {
    let s = v.steps;
    let axis = s[softmax].attrs.int("axis", -1).ok()?;
    let mut covered = vec![softmax];
    // The softmax reads the scores, maybe plus a mask (either operand).
    let x = s[softmax].inputs.first().copied().flatten()?;
    let (mut mask, mut causal) = (None, false);
    let (_, q, kt, scale, more) = match v.only_use(x, "Add") {
        Some(add) => {
            let (a, b) = v.operands(add)?;
            let (found, m) = match scaled_scores(v, a) {
                Some(found) => (found, b),
                None => (scaled_scores(v, b)?, a),
            };
            if is_causal_mask(v, m) {
                causal = true;
            } else {
                mask = Some(m);
            }
            covered.push(add);
            found
        }
        None => scaled_scores(v, x)?,
    };
    covered.extend(more);
    // kᵀ written by a transpose read only here: fuse that too.
    let (k, k_transposed) = match v.only_use(kt, "Transpose") {
        Some(t) if swaps_last_two(v, t) => {
            covered.push(t);
            (s[t].inputs.first().copied().flatten()?, false)
        }
        _ => (kt, true),
    };
    // The weights: straight into the second product, or through the
    // exporter's Where(IsNaN(p), 0, p).
    let p = s[softmax].outputs[0];
    let mut weights = p;
    if v.readers.get(&p) == Some(&2) {
        let is_nan = v
            .steps
            .iter()
            .position(|st| st.op_type == "IsNaN" && st.inputs.first() == Some(&Some(p)))?;
        let nan = s[is_nan].outputs[0];
        let select = find_reader(v, nan, "Where")?;
        if s[select].inputs[..] != [Some(nan), s[select].inputs[1], Some(p)]
            || !v.is_scalar(s[select].inputs[1]?, 0.0)
        {
            return None;
        }
        covered.extend([is_nan, select]);
        weights = s[select].outputs[0];
    }
    let last = find_reader(v, weights, "MatMul")?;
    let (pw, value) = v.operands(last)?;
    if pw != weights {
        return None;
    }
    covered.push(last);
    Some(Attention {
        q,
        k,
        k_transposed,
        v: value,
        mask,
        scale,
        causal,
        axis,
        last,
        covered,
    })
}
