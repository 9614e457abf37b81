//! Reading a `ModelProto` into an [`OnnxModel`]: the opset and op checks
//! (every unsupported node at once), the structure checks (undefined
//! values, cycles), initializers as parameters, buffers or constants,
//! constant folding, and a dry run that catches shapes that do not fit.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use prost::Message;

use super::attrs::{bad, Attrs};
use super::ops::{lookup, nesting_depth, non_tensor, outer_refs, refused, Ctx, MAX_DEPTH};
use super::{fuse, InputSpec, OnnxModel, Step};
use crate::proto::tensor_shape_proto::dimension;
use crate::proto::type_proto::Value as TypeValue;
use crate::proto::{GraphProto, ModelProto, NodeProto, ValueInfoProto};
use crate::tensor::{self, dtype_of};
use retrograd_engine::base::error::{Error, OnnxProblem, Result};
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::nn::{Buffer, Parameter};
use retrograd_engine::tensor::{DType, Tensor};

/// The lowest and highest default-domain opsets the importer reads: 7
/// (the first with today's broadcasting rules) to 28 (the newest of the
/// `onnx` 1.23 package). Converters read each op by the model's opset
/// where its meaning changed (an attribute that became an input, a
/// changed default).
pub const MIN_OPSET: i64 = 7;
/// See [`MIN_OPSET`].
pub const MAX_OPSET: i64 = 28;

/// The ops that read 16-bit float inputs as they are (see [`Step::run`]).
/// `Attention` and `Softmax` take them too: they round each step to the
/// 16-bit type as ONNX's definition does (`ops/half.rs`).
const KEEPS_16_BIT: &[&str] = &[
    "Cast",
    "CastLike",
    "Constant",
    "Shape",
    "Size",
    "Identity",
    "Attention",
    "Softmax",
    // Control flow: each step of a subgraph widens what it reads itself.
    "If",
    "Loop",
    "Scan",
];

/// The ops of the `ai.onnx.preview` domain the importer runs, converted
/// from the one table like the default domain's.
const PREVIEW_OPS: &[&str] = &["FlexAttention"];

/// The ops of other domains the importer runs (by name, from the one
/// table): the optimizer steps of `ai.onnx.preview.training` and a few
/// of `ai.onnx.ml`. A model of only these needs no default-domain opset.
const SIDE_DOMAINS: &[(&str, &[&str])] = &[
    ("ai.onnx.preview.training", &["Adagrad", "Adam", "Momentum"]),
    (
        "ai.onnx.ml",
        &["Binarizer", "ArrayFeatureExtractor", "TreeEnsemble"],
    ),
];

/// Whether `op` of `domain` is one of [`SIDE_DOMAINS`]'s ops; `None` for
/// a domain not listed there.
fn side_op(domain: &str, op: &str) -> Option<bool> {
    SIDE_DOMAINS
        .iter()
        .find(|(d, _)| *d == domain)
        .map(|(_, ops)| ops.contains(&op))
}

fn invalid(problem: OnnxProblem, detail: impl Into<String>) -> Error {
    Error::OnnxInvalid {
        problem,
        detail: detail.into(),
    }
}

/// `node "name" (OpType)`.
fn label(node: &NodeProto, index: usize) -> String {
    match node.name() {
        "" => format!("node {index} ({})", node.op_type()),
        name => format!("node {name:?} ({})", node.op_type()),
    }
}

/// Decodes and checks `bytes` into a model; external tensor data is read
/// from `dir` (the model file's directory) when given.
pub(super) fn from_bytes(bytes: &[u8], dir: Option<&Path>) -> Result<OnnxModel> {
    let model =
        ModelProto::decode(bytes).map_err(|e| invalid(OnnxProblem::Decode, e.to_string()))?;
    from_proto(&model, dir)
}

pub(super) fn from_proto(model: &ModelProto, dir: Option<&Path>) -> Result<OnnxModel> {
    let graph = model
        .graph
        .as_ref()
        .ok_or_else(|| invalid(OnnxProblem::Decode, "the model has no graph"))?;
    let mut unsupported = Vec::new();
    let opset = default_opset(model, &mut unsupported);
    let functions: HashSet<&str> = model.functions.iter().map(|f| f.name()).collect();
    // Every node's op and settings first: one error lists them all.
    let mut decoded = Vec::with_capacity(graph.node.len());
    for (i, node) in graph.node.iter().enumerate() {
        let label = label(node, i);
        let domain = node.domain();
        let known = match domain {
            "" | "ai.onnx" => !SIDE_DOMAINS
                .iter()
                .any(|(_, ops)| ops.contains(&node.op_type())),
            "ai.onnx.preview" => PREVIEW_OPS.contains(&node.op_type()),
            other => side_op(other, node.op_type()).unwrap_or(false),
        } && !functions.contains(node.op_type());
        let entry = if known { lookup(node.op_type()) } else { None };
        let Some((convert, check)) = entry else {
            let what = if domain.is_empty() || domain == "ai.onnx" {
                node.op_type().to_string()
            } else {
                format!("{domain}::{}", node.op_type())
            };
            let why = match refused(node.op_type()).filter(|_| known) {
                Some(why) => format!(": {why}"),
                None => String::new(),
            };
            unsupported.push(format!("{label}: op {what} is not supported{why}"));
            decoded.push(None);
            continue;
        };
        // Before decoding: copying a graph nested too deep would recurse as deep.
        let depth = nesting_depth(node);
        if depth > MAX_DEPTH {
            unsupported.push(format!(
                "{label}: subgraphs nested {depth} deep (at most {MAX_DEPTH}) are not supported"
            ));
            decoded.push(None);
            continue;
        }
        let mut attrs = Attrs::decode(label.clone(), &node.attribute)?;
        // What its subgraphs read of this graph: inputs after its own.
        attrs.outer = outer_refs(node);
        if let Err(reason) = check(&attrs, opset.unwrap_or(MAX_OPSET)) {
            unsupported.push(format!("{label}: {reason} is not supported"));
        }
        decoded.push(Some((convert, attrs)));
    }
    for (what, v) in graph
        .input
        .iter()
        .map(|v| ("input", v))
        .chain(graph.output.iter().map(|v| ("output", v)))
    {
        if let Some(kind) = non_tensor(v) {
            unsupported.push(format!(
                "graph {what} `{}`: a value of {kind} type is not supported",
                v.name()
            ));
        }
    }
    if !unsupported.is_empty() {
        return Err(Error::OnnxUnsupported { items: unsupported });
    }
    let opset = opset.unwrap_or(MAX_OPSET);
    let mut b = Builder::default();
    b.read_values(graph, dir)?;
    let order = topological_order(graph, &b.slots)?;
    let mut declared = declared_types(graph);
    for i in order {
        let node = &graph.node[i];
        let (convert, attrs) = decoded[i].take().expect("every node was decoded");
        let input_types = node
            .input
            .iter()
            .map(|n| declared.get(n.as_str()).copied())
            .collect::<Vec<_>>();
        if let Some(code) = cast_result_type(node.op_type(), &attrs, &input_types) {
            for o in node.output.iter().filter(|o| !o.is_empty()) {
                declared.insert(o.as_str(), code);
            }
        }
        let inputs = node
            .input
            .iter()
            .chain(&attrs.outer)
            .map(|n| (!n.is_empty()).then(|| b.slots[n.as_str()]))
            .collect();
        let outputs = node
            .output
            .iter()
            .map(|n| {
                if n.is_empty() {
                    Ok(b.anonymous())
                } else {
                    b.define(n)
                }
            })
            .collect::<Result<Vec<_>>>()?;
        b.steps.push(Step {
            convert,
            attrs,
            op_type: node.op_type().to_string(),
            inputs,
            outputs,
            input_types,
        });
    }
    let mut outputs = Vec::new();
    for o in &graph.output {
        let slot = *b.slots.get(o.name()).ok_or_else(|| {
            invalid(
                OnnxProblem::UndefinedValue,
                format!("graph output `{}` is never defined", o.name()),
            )
        })?;
        outputs.push((o.name().to_string(), slot));
    }
    let mut m = OnnxModel {
        graph_name: graph.name().to_string(),
        opset,
        inputs: b.inputs,
        outputs,
        params: Vec::new(),
        buffers: Vec::new(),
        constants: Vec::new(),
        steps: b.steps,
        slot_names: b.names,
        last_use: Vec::new(),
    };
    let (floats, others): (Vec<_>, Vec<_>) = b
        .initializers
        .into_iter()
        .partition(|(_, _, t)| t.is_float());
    m.constants
        .extend(others.into_iter().map(|(slot, _, t)| (slot, t)));
    fold_constants(&mut m)?;
    fuse::fuse(&mut m, &floats);
    classify(&mut m, floats);
    m.last_use = last_uses(&m);
    dry_run(&m)?;
    Ok(m)
}

/// The element type codes the graph declares for its values: inputs,
/// outputs, `value_info` and initializers.
fn declared_types(graph: &GraphProto) -> HashMap<&str, i32> {
    let mut types = HashMap::new();
    for v in graph
        .input
        .iter()
        .chain(&graph.output)
        .chain(&graph.value_info)
    {
        let code = match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(TypeValue::TensorType(t)) => t.elem_type.filter(|&c| c != 0),
            _ => None,
        };
        if let Some(code) = code {
            types.insert(v.name(), code);
        }
    }
    for t in &graph.initializer {
        types.insert(t.name(), t.data_type());
    }
    types
}

/// The element type a cast node gives its output: `Cast`'s `to`, or the
/// declared type of `CastLike`'s second input.
fn cast_result_type(op_type: &str, attrs: &Attrs, input_types: &[Option<i32>]) -> Option<i32> {
    match op_type {
        "Cast" => attrs.int("to", 0).ok().map(|to| to as i32),
        "CastLike" => input_types.get(1).copied().flatten(),
        _ => None,
    }
}

/// The ops whose one definition is opset 1's (ONNX has changed nothing
/// of them since): a model of only these may declare an opset below
/// [`MIN_OPSET`].
const SAME_SINCE_OPSET_1: &[&str] = &["Not"];

/// The default domain's opset, or an unsupported-opset entry.
fn default_opset(model: &ModelProto, unsupported: &mut Vec<String>) -> Option<i64> {
    let mut found = None;
    let old_ok = model.graph.as_ref().is_some_and(|g| {
        g.node
            .iter()
            .all(|n| SAME_SINCE_OPSET_1.contains(&n.op_type()) && n.domain().is_empty())
    });
    for o in &model.opset_import {
        if o.domain().is_empty() || o.domain() == "ai.onnx" {
            let v = o.version();
            let early = (1..MIN_OPSET).contains(&v) && old_ok;
            if !(MIN_OPSET..=MAX_OPSET).contains(&v) && !early {
                unsupported.push(format!(
                    "opset {v} of the default domain (supported: {MIN_OPSET} to {MAX_OPSET})"
                ));
            }
            found = Some(v);
        }
    }
    let only_side = model.graph.as_ref().is_some_and(|g| {
        !g.node.is_empty()
            && g.node
                .iter()
                .all(|n| side_op(n.domain(), n.op_type()) == Some(true))
    });
    if found.is_none() && !only_side {
        unsupported.push("a model without the default domain's opset".to_string());
    }
    found
}

#[derive(Default)]
struct Builder {
    slots: HashMap<String, usize>,
    names: Vec<String>,
    inputs: Vec<InputSpec>,
    initializers: Vec<(usize, String, Tensor)>,
    steps: Vec<Step>,
}

impl Builder {
    fn define(&mut self, name: &str) -> Result<usize> {
        if self.slots.contains_key(name) {
            return Err(invalid(
                OnnxProblem::BadNode,
                format!("value `{name}` is defined twice"),
            ));
        }
        let slot = self.names.len();
        self.names.push(name.to_string());
        self.slots.insert(name.to_string(), slot);
        Ok(slot)
    }

    /// A slot for an output the node leaves unnamed (an optional output
    /// no one reads): computed, never looked up by name.
    fn anonymous(&mut self) -> usize {
        self.names.push(String::new());
        self.names.len() - 1
    }

    /// Initializers, then graph inputs that no initializer overrides.
    fn read_values(&mut self, graph: &GraphProto, dir: Option<&Path>) -> Result<()> {
        for t in &graph.initializer {
            let value = tensor::from_proto_in(t, dir)?;
            let slot = self.define(t.name())?;
            self.initializers.push((slot, t.name().to_string(), value));
        }
        for input in &graph.input {
            if self.slots.contains_key(input.name()) {
                continue; // an initializer listed as an input (IR < 4)
            }
            let slot = self.define(input.name())?;
            self.inputs.push(input_spec(input, slot)?);
        }
        Ok(())
    }
}

/// What a graph input declares: its dtype and sizes (`None`: free or unknown).
fn input_spec(v: &ValueInfoProto, slot: usize) -> Result<InputSpec> {
    let mut spec = InputSpec {
        name: v.name().to_string(),
        dtype: None,
        dims: None,
        slot,
    };
    if let Some(TypeValue::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        spec.dtype = match t.elem_type {
            Some(code) => Some(dtype_of(code).ok_or_else(|| {
                invalid(
                    OnnxProblem::BadTensor,
                    format!(
                        "input `{}` has element type {}",
                        v.name(),
                        crate::tensor::type_name(code)
                    ),
                )
            })?),
            None => None,
        };
        spec.dims = t.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match d.value {
                    Some(dimension::Value::DimValue(n)) if n >= 0 => Some(n as usize),
                    _ => None,
                })
                .collect()
        });
    }
    Ok(spec)
}

/// The nodes in an order where each runs after what it reads (Kahn's
/// algorithm, keeping the file's order among ready nodes). A value no one
/// defines is [`OnnxProblem::UndefinedValue`]; nodes left waiting on each
/// other are [`OnnxProblem::Cycle`].
fn topological_order(graph: &GraphProto, defined: &HashMap<String, usize>) -> Result<Vec<usize>> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, node) in graph.node.iter().enumerate() {
        for o in node.output.iter().filter(|o| !o.is_empty()) {
            if defined.contains_key(o.as_str()) || producer.insert(o.as_str(), i).is_some() {
                return Err(invalid(
                    OnnxProblem::BadNode,
                    format!("{}: output `{o}` is defined twice", label(node, i)),
                ));
            }
        }
    }
    let mut waiting = vec![0usize; graph.node.len()];
    let mut readers: Vec<Vec<usize>> = vec![Vec::new(); graph.node.len()];
    for (i, node) in graph.node.iter().enumerate() {
        let outer = outer_refs(node);
        for input in node.input.iter().chain(&outer).filter(|n| !n.is_empty()) {
            if defined.contains_key(input.as_str()) {
                continue;
            }
            match producer.get(input.as_str()) {
                Some(&p) => {
                    waiting[i] += 1;
                    readers[p].push(i);
                }
                None => {
                    return Err(invalid(
                        OnnxProblem::UndefinedValue,
                        format!(
                            "{} reads `{input}`, which no input, initializer or node defines",
                            label(node, i)
                        ),
                    ))
                }
            }
        }
    }
    let mut ready: std::collections::BTreeSet<usize> =
        (0..waiting.len()).filter(|&i| waiting[i] == 0).collect();
    let mut order = Vec::with_capacity(waiting.len());
    while let Some(i) = ready.pop_first() {
        order.push(i);
        for &r in &readers[i] {
            waiting[r] -= 1;
            if waiting[r] == 0 {
                ready.insert(r);
            }
        }
    }
    if order.len() < graph.node.len() {
        let stuck: Vec<String> = (0..waiting.len())
            .filter(|&i| waiting[i] > 0)
            .take(8)
            .map(|i| label(&graph.node[i], i))
            .collect();
        return Err(invalid(
            OnnxProblem::Cycle,
            format!("nodes that wait on each other: {}", stuck.join(", ")),
        ));
    }
    Ok(order)
}

/// Float initializers become parameters under their names, except batch
/// norm's running statistics (buffers, never trained). (Integer and bool
/// ones are constants already.)
fn classify(m: &mut OnnxModel, initializers: Vec<(usize, String, Tensor)>) {
    let stats: HashSet<usize> = m
        .steps
        .iter()
        .filter(|s| s.op_type == "BatchNormalization")
        .flat_map(|s| s.inputs.iter().skip(3).take(2).flatten().copied())
        .collect();
    let read: HashSet<usize> = m
        .steps
        .iter()
        .flat_map(|s| s.inputs.iter().flatten().copied())
        .collect();
    for (slot, name, value) in initializers {
        if !read.contains(&slot) && !m.outputs.iter().any(|(_, s)| *s == slot) {
            continue; // unused (a fused pattern's constant)
        }
        if stats.contains(&slot) {
            m.buffers.push((name, Buffer::new(value), slot));
        } else {
            m.params.push((name, Parameter::new(value), slot));
        }
    }
}

/// Runs, once, every step whose inputs are all constants (`Constant`
/// nodes, shape arithmetic on constant shapes) and keeps its outputs as
/// constants.
fn fold_constants(m: &mut OnnxModel) -> Result<()> {
    let graph = Graph::inference();
    let mut known: HashMap<usize, Tensor> = m.constants.iter().cloned().collect();
    let mut kept = Vec::with_capacity(m.steps.len());
    for step in std::mem::take(&mut m.steps) {
        let foldable = step.inputs.iter().flatten().all(|s| known.contains_key(s));
        if !foldable {
            kept.push(step);
            continue;
        }
        let inputs: Vec<Option<Var<'_>>> = step
            .inputs
            .iter()
            .map(|s| s.map(|s| Var::from(known[&s].clone())))
            .collect();
        let outs = step.run(graph, m.opset, &inputs)?;
        for (slot, v) in step.outputs.iter().zip(outs) {
            known.insert(*slot, v.value().clone());
            m.constants.push((*slot, v.value().clone()));
        }
    }
    m.steps = kept;
    Ok(())
}

/// For each slot, the last step that reads it (`usize::MAX`: an output,
/// kept to the end).
fn last_uses(m: &OnnxModel) -> Vec<usize> {
    let mut last = vec![0usize; m.slot_names.len()];
    for (i, s) in m.steps.iter().enumerate() {
        for &slot in s.inputs.iter().flatten() {
            last[slot] = i;
        }
    }
    for (_, slot) in &m.outputs {
        last[*slot] = usize::MAX;
    }
    last
}

/// Runs the model once on zeros of the declared input shapes so that
/// weights and shapes that do not fit are reported at load, naming the
/// node. A free dimension is tried at size 1, then 2 (a model may need
/// more than one of something); only a model that runs at neither fails.
/// Skipped when an input's dtype or shape is not declared, or the inputs
/// would be large, or an input has rank 0 or 1: such an input may be a
/// shape, sizes, axes, steps, scales or a bound (`Reshape`'s, `Slice`'s,
/// `Resize`'s, `Clip`'s), where zeros are no stand-in for the values
/// (token ids and images, of rank 2 and more, are).
fn dry_run(m: &OnnxModel) -> Result<()> {
    let shape_like = |s: &InputSpec| s.dims.as_ref().is_some_and(|d| d.len() <= 1);
    if m.inputs.iter().any(shape_like) {
        return Ok(());
    }
    let mut first_error = None;
    for free in [1, 2] {
        let mut inputs = Vec::new();
        for spec in &m.inputs {
            let (Some(dtype), Some(dims)) = (spec.dtype, &spec.dims) else {
                return Ok(());
            };
            let shape: Vec<usize> = dims.iter().map(|d| d.unwrap_or(free)).collect();
            if matches!(dtype, DType::F16 | DType::BF16)
                || shape
                    .iter()
                    .try_fold(1usize, |a, &d| a.checked_mul(d))
                    .is_none_or(|n| n > 1 << 24)
            {
                return Ok(());
            }
            inputs.push(Tensor::zeros(&shape, dtype)?);
        }
        match m.infer(&inputs) {
            Ok(_) => return Ok(()),
            Err(e) => {
                let all_static = m
                    .inputs
                    .iter()
                    .all(|s| s.dims.iter().flatten().all(Option::is_some));
                first_error.get_or_insert(e);
                if all_static {
                    break;
                }
            }
        }
    }
    Err(match first_error.expect("a failed run") {
        e @ (Error::OnnxInvalid { .. } | Error::OnnxUnsupported { .. }) => e,
        other => invalid(OnnxProblem::ShapeMismatch, other.to_string()),
    })
}

impl Step {
    /// Runs the step's converter, naming the node in any error.
    pub(super) fn run<'g>(
        &self,
        graph: &'g Graph,
        opset: i64,
        inputs: &[Option<Var<'g>>],
    ) -> Result<Vec<Var<'g>>> {
        let ctx = Ctx {
            graph,
            attrs: &self.attrs,
            opset,
            n_outputs: self.outputs.len(),
            input_types: &self.input_types,
        };
        // retrograd stores 16-bit floats but computes in f32 and f64: a
        // node on f16 or bf16 values computes in f32 and gives its float
        // outputs back in the 16-bit type (exact for data movement; one
        // rounding for arithmetic, as a 16-bit kernel accumulating in f32
        // does). Casts and shape queries read their inputs as they are.
        let narrow = inputs
            .iter()
            .flatten()
            .map(|v| v.dtype())
            .find(|d| matches!(d, DType::F16 | DType::BF16))
            .filter(|_| !KEEPS_16_BIT.contains(&self.op_type.as_str()));
        let widened: Vec<Option<Var<'g>>>;
        let inputs = match narrow {
            None => inputs,
            Some(_) => {
                widened = inputs
                    .iter()
                    .map(|v| match v {
                        Some(v) if matches!(v.dtype(), DType::F16 | DType::BF16) => {
                            v.try_to_dtype(DType::F32).map(Some)
                        }
                        other => Ok(other.clone()),
                    })
                    .collect::<Result<_>>()?;
                &widened
            }
        };
        let outs = (self.convert)(&ctx, inputs).and_then(|outs| match narrow {
            None => Ok(outs),
            Some(d) => outs
                .into_iter()
                .map(|v| {
                    if v.dtype() == DType::F32 {
                        v.try_to_dtype(d)
                    } else {
                        Ok(v)
                    }
                })
                .collect(),
        });
        let outs = outs.map_err(|e| match e {
            Error::OnnxInvalid { .. } | Error::OnnxUnsupported { .. } => e,
            Error::ShapeMismatch { .. }
            | Error::ElementCount { .. }
            | Error::AxisOutOfRange { .. } => invalid(
                OnnxProblem::ShapeMismatch,
                format!("{}: {e}", self.attrs.label),
            ),
            other => bad(&self.attrs.label, other),
        })?;
        if outs.len() < self.outputs.len() {
            return Err(bad(
                &self.attrs.label,
                format!(
                    "made {} outputs, the node names {}",
                    outs.len(),
                    self.outputs.len()
                ),
            ));
        }
        Ok(outs)
    }
}
