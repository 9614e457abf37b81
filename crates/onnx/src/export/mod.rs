//! Export: a recorded graph written as an ONNX model.
//!
//! The exporter walks the nodes that the named outputs depend on, in
//! append order, and asks each node's op mapper (one per retrograd op
//! name, in this folder's family files) for ONNX nodes that compute the
//! same value from the node's inputs and [`attributes`]. Leaves become
//! graph inputs (those named with [`Exporter::input`]), initializers (the
//! variables: trainable weights; and constants named as module buffers) or
//! `Constant` nodes (every other constant). An op without a mapper, or
//! with settings its mapper cannot express, is [`Error::OnnxExport`]
//! naming it: a graph is written whole and right, or not at all.
//!
//! [`attributes`]: retrograd_engine::Differentiable::attributes

mod attention;
#[cfg(test)]
mod bert_tests;
mod elementwise;
mod emit;
mod forward;
mod nn_ops;
mod node;
mod opset;
mod reduce_ops;
mod shape_ops;

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

pub(crate) use emit::{attr_int, Emit, FreeAxis};
pub use forward::{export_forward, export_input};
pub(crate) use node::{Mapper, NodeCtx};
pub use opset::{EXPORT_OPSET, MAX_EXPORT_OPSET};

use super::proto::tensor_shape_proto::{dimension, Dimension};
use super::proto::type_proto::{self, Value as TypeValue};
use super::proto::{
    GraphProto, ModelProto, OperatorSetIdProto, TensorShapeProto, TypeProto, ValueInfoProto,
};
use super::tensor::onnx_type;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::{Graph, GraphState, Var, LEAF_CONSTANT, LEAF_VARIABLE};
use retrograd_engine::nn::Module;
use retrograd_engine::tensor::Tensor;

/// A value the export computes: a recorded node, or a constant computed
/// while tracing (by value id).
enum Computation {
    Node(usize),
    Traced(u32),
}

/// Whether value `id` is a constant that depends on no input, variable or
/// node: a literal, or computed while tracing from such constants only.
/// Walked with an explicit stack (a traced constant's inputs have smaller
/// ids), so a long chain of traced constants needs no deep recursion.
fn is_fixed(
    st: &GraphState,
    id: u32,
    inputs: &HashMap<u32, String>,
    memo: &mut HashMap<u32, bool>,
) -> bool {
    // (value, whether its inputs are already answered)
    let mut stack = vec![(id, false)];
    while let Some((v, inputs_done)) = stack.pop() {
        if memo.contains_key(&v) {
            continue;
        }
        if inputs.contains_key(&v) || st.producers()[v as usize] != LEAF_CONSTANT {
            memo.insert(v, false);
            continue;
        }
        let Some(traced) = st.traced_of(v) else {
            memo.insert(v, true);
            continue;
        };
        if inputs_done {
            let fixed = traced
                .inputs
                .iter()
                .all(|i| memo.get(i).copied().unwrap_or(false));
            memo.insert(v, fixed);
        } else {
            stack.push((v, true));
            stack.extend(
                traced
                    .inputs
                    .iter()
                    .filter(|i| !memo.contains_key(i))
                    .map(|&i| (i, false)),
            );
        }
    }
    memo.get(&id).copied().unwrap_or(false)
}

/// The mapper of a retrograd op name, if the exporter has one.
pub(crate) fn mapper(op: &str) -> Option<Mapper> {
    elementwise::lookup(op)
        .or_else(|| shape_ops::lookup(op))
        .or_else(|| reduce_ops::lookup(op))
        .or_else(|| nn_ops::lookup(op))
        .or_else(|| attention::lookup(op))
}

/// Whether the exporter can write nodes of the op named `op` (with most
/// settings: a few settings have no ONNX form, and are reported then).
///
/// ```
/// assert!(retrograd::onnx::can_export("conv2d"));
/// assert!(!retrograd::onnx::can_export("cross_entropy"));
/// ```
pub fn can_export(op: &str) -> bool {
    mapper(op).is_some()
}

/// Writes a recorded graph as an ONNX model: name its inputs and outputs,
/// optionally name its weights after a module's parameters and ask for a
/// dynamic batch axis, then [`save`](Self::save) or
/// [`to_bytes`](Self::to_bytes).
///
/// Record the graph with tracing on ([`Graph::set_tracing`]), so that
/// values computed from the inputs without a node (a comparison's mask,
/// arithmetic on token ids) are exported as the ops that computed them; a
/// float input made with [`Graph::variable`] (so every op on it records),
/// an integer input (token ids) with [`Graph::constant`], the model in
/// eval mode. Values a model computes outside the graph (from an input's
/// `value()`) are constants to the exporter, as to backward.
///
/// ```
/// use retrograd::nn::{Forward, Linear, Module};
/// use retrograd::onnx::{Exporter, OnnxModel};
/// use retrograd::{DType, Graph, Tensor};
///
/// let model = Linear::new(3, 2)?;
/// let graph = Graph::new();
/// graph.set_tracing(true);
/// let x = graph.variable(Tensor::ones(&[4, 3], DType::F32)?);
/// let y = model.forward(&x)?.tanh();
/// let bytes = Exporter::new(&graph)
///     .input("x", &x)
///     .output("y", &y)
///     .parameters_of(&model)
///     .dynamic_batch("batch")
///     .to_bytes()?;
/// // Read back: the weights come back as parameters under their names.
/// let imported = OnnxModel::from_bytes(&bytes)?;
/// let names: Vec<String> = imported.parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// let out = imported.infer(&[Tensor::ones(&[7, 3], DType::F32)?])?; // another batch size
/// assert_eq!(out[0].shape(), &[7, 2]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Exporter<'g> {
    graph: &'g Graph,
    inputs: Vec<(String, Var<'g>)>,
    outputs: Vec<(String, Var<'g>)>,
    /// Names of leaves (weights, buffers) by value id.
    leaf_names: HashMap<u32, String>,
    /// Value ids of constant leaves that are module buffers (initializers).
    buffer_leaves: Vec<u32>,
    dynamic_batch: Option<String>,
    /// Free axes asked for by value name: (value, axis, dimension name).
    dynamic_axes: Vec<(String, usize, String)>,
    graph_name: String,
    /// Errors met while naming (reported by `to_model`).
    pending: Vec<Error>,
    /// The default domain's opset written.
    opset: i64,
}

impl<'g> Exporter<'g> {
    /// An export of `graph`, with nothing named yet.
    pub fn new(graph: &'g Graph) -> Self {
        Exporter {
            graph,
            inputs: Vec::new(),
            outputs: Vec::new(),
            leaf_names: HashMap::new(),
            buffer_leaves: Vec::new(),
            dynamic_batch: None,
            dynamic_axes: Vec::new(),
            graph_name: "retrograd".to_string(),
            pending: Vec::new(),
            opset: EXPORT_OPSET,
        }
    }

    /// Names a graph input: a leaf of this graph (or a recorded value, to
    /// export only what follows it).
    pub fn input(mut self, name: &str, value: &Var<'g>) -> Self {
        self.inputs.push((name.to_string(), value.clone()));
        self
    }

    /// Names a graph output.
    pub fn output(mut self, name: &str, value: &Var<'g>) -> Self {
        self.outputs.push((name.to_string(), value.clone()));
        self
    }

    /// Names the weights after `module`'s parameters (`"0.weight"`) and
    /// writes its buffers that the graph reads (batch norm's running
    /// statistics) as initializers under their names.
    pub fn parameters_of(mut self, module: &dyn Module) -> Self {
        let st = self.graph.state();
        for (name, p) in module.parameters() {
            if let Some(&id) = st.params().get(&p.id()) {
                self.leaf_names.insert(id, name);
            }
        }
        let buffers = module.buffers();
        for (id, (value, &producer)) in st.values().iter().zip(st.producers()).enumerate() {
            if producer != LEAF_CONSTANT {
                continue;
            }
            let found = buffers.iter().find(|(_, b)| {
                let b = b.value();
                b.shares_storage_with(value) && b.shape() == value.shape()
            });
            if let Some((name, _)) = found {
                self.leaf_names.insert(id as u32, name.clone());
                self.buffer_leaves.push(id as u32);
            }
        }
        drop(st);
        self
    }

    /// Names one leaf (a weight), overriding other names.
    pub fn name(mut self, value: &Var<'g>, name: &str) -> Self {
        match value.value_id() {
            Some(id) => {
                self.leaf_names.insert(id as u32, name.to_string());
            }
            None => self.pending.push(Error::invalid(
                "onnx export",
                format!("`{name}` is not a value of this graph (it has no slot)"),
            )),
        }
        self
    }

    /// Makes dimension 0 of every input and output a named, free size
    /// (`"batch"`), so the model runs at any batch size. Reshapes keep the
    /// batch axis free by copying it (`0`) or inferring it (`-1`).
    pub fn dynamic_batch(mut self, dim_name: &str) -> Self {
        self.dynamic_batch = Some(dim_name.to_string());
        self
    }

    /// Makes axis `axis` of the input or output named `value` a named,
    /// free size (`"sequence"`), as `torch.onnx.export`'s `dynamic_axes`.
    /// Reshapes copy or infer it; a slice from 0 whose length equals a
    /// free input axis's recorded size (a position table cut to the
    /// sequence length, where the model read the length off its input)
    /// ends at that axis's size when run. So record at sizes that no fixed
    /// size of the model equals, and distinct for distinct free axes.
    ///
    /// ```
    /// use retrograd::onnx::{Exporter, OnnxModel};
    /// use retrograd::{DType, Graph, Tensor};
    ///
    /// let table = Tensor::from_vec((0..40).map(|i| i as f32).collect(), &[10, 4])?; // 10 positions
    /// let graph = Graph::new();
    /// graph.set_tracing(true);
    /// let x = graph.variable(Tensor::ones(&[2, 3, 4], DType::F32)?); // batch 2, length 3
    /// let positions = graph.variable(table).narrow(0, 0, 3);          // the length, read off x
    /// let y = &x + &positions;
    /// let bytes = Exporter::new(&graph)
    ///     .input("x", &x)
    ///     .output("y", &y)
    ///     .dynamic_batch("batch")
    ///     .dynamic_axis("x", 1, "sequence")
    ///     .dynamic_axis("y", 1, "sequence")
    ///     .to_bytes()?;
    /// let model = OnnxModel::from_bytes(&bytes)?;
    /// let out = model.infer(&[Tensor::zeros(&[5, 7, 4], DType::F32)?])?; // batch 5, length 7
    /// assert_eq!(out[0].shape(), &[5, 7, 4]);
    /// assert_eq!(out[0].to_f64_vec()[24..28], [24.0, 25.0, 26.0, 27.0]); // position 6
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn dynamic_axis(mut self, value: &str, axis: usize, dim_name: &str) -> Self {
        self.dynamic_axes
            .push((value.to_string(), axis, dim_name.to_string()));
        self
    }

    /// The free axes of the input or output `name` of `value`: axis 0 with
    /// a dynamic batch, and those asked for by name.
    fn free_axes(&self, name: &str, value: &Tensor) -> Vec<(usize, String)> {
        let mut axes: Vec<(usize, String)> = Vec::new();
        if let Some(b) = self.dynamic_batch.as_ref().filter(|_| value.rank() > 0) {
            axes.push((0, b.clone()));
        }
        for (v, axis, dim) in &self.dynamic_axes {
            if v == name {
                axes.retain(|(a, _)| a != axis);
                axes.push((*axis, dim.clone()));
            }
        }
        axes
    }

    /// The default domain's opset to write: [`EXPORT_OPSET`] (17) unless
    /// asked, up to [`MAX_EXPORT_OPSET`]; another is an error from
    /// [`to_model`](Self::to_model). Nodes whose form changed after 17
    /// are written in the later form (reductions take their axes as an
    /// input from 18).
    ///
    /// ```
    /// use retrograd::onnx::{Exporter, OnnxModel};
    /// use retrograd::{DType, Graph, Tensor};
    ///
    /// let graph = Graph::new();
    /// graph.set_tracing(true);
    /// let x = graph.variable(Tensor::ones(&[2, 3], DType::F32)?);
    /// let y = x.mean_axes(&[1], true);
    /// let bytes = Exporter::new(&graph).input("x", &x).output("y", &y).opset(21).to_bytes()?;
    /// let model = OnnxModel::from_bytes(&bytes)?;
    /// assert_eq!(model.opset(), 21);
    /// assert_eq!(model.infer(&[Tensor::ones(&[2, 3], DType::F32)?])?[0].to_f64_vec(), [1.0, 1.0]);
    /// assert!(Exporter::new(&graph).input("x", &x).output("y", &y).opset(16).to_bytes().is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn opset(mut self, opset: i64) -> Self {
        self.opset = opset;
        self
    }

    /// The ONNX graph's name (default `"retrograd"`).
    pub fn graph_name(mut self, name: &str) -> Self {
        self.graph_name = name.to_string();
        self
    }

    /// The ONNX model.
    pub fn to_model(&self) -> Result<ModelProto> {
        if let Some(e) = self.pending.first() {
            return Err(e.clone());
        }
        if self.outputs.is_empty() {
            return Err(Error::invalid("onnx export", "name at least one output"));
        }
        if !self.graph.is_tracing() {
            return Err(Error::invalid(
                "onnx export",
                "record the graph with tracing on (graph.set_tracing(true) before the forward \
                 pass), so that values computed from the inputs without a node (masks, \
                 comparisons, integer arithmetic) are exported as ops rather than baked in",
            ));
        }
        for (value, axis, dim) in &self.dynamic_axes {
            let found = self
                .inputs
                .iter()
                .chain(&self.outputs)
                .find(|(n, _)| n == value);
            match found {
                None => {
                    return Err(Error::invalid(
                        "onnx export",
                        format!("dynamic axis `{dim}`: no input or output is named `{value}`"),
                    ))
                }
                Some((_, v)) if *axis >= v.value().rank() => {
                    return Err(Error::invalid(
                        "onnx export",
                        format!(
                            "dynamic axis `{dim}`: `{value}` has shape {:?}, no axis {axis}",
                            v.value().shape()
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        for (name, v) in self.inputs.iter().chain(&self.outputs) {
            self.graph.check_same("onnx export", v)?;
            if v.value_id().is_none() {
                return Err(Error::invalid(
                    "onnx export",
                    format!(
                        "`{name}` has no slot in this graph: make inputs with graph.variable \
                         (floats) or graph.constant (integers), on a Graph::new()"
                    ),
                ));
            }
        }
        opset::check(self.opset)?;
        let mut graph = self.write_graph()?;
        opset::upgrade(&mut graph, self.opset);
        Ok(ModelProto {
            ir_version: Some(opset::ir_version(self.opset)),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(self.opset),
            }],
            producer_name: Some("retrograd".into()),
            producer_version: Some(env!("CARGO_PKG_VERSION").into()),
            graph: Some(graph),
            ..Default::default()
        })
    }

    /// The ONNX model as protobuf bytes (what a `.onnx` file holds).
    pub fn to_bytes(&self) -> Result<Vec<u8>> {
        Ok(self.to_model()?.encode_to_vec())
    }

    /// Writes the `.onnx` file atomically (a synced temporary file renamed
    /// into place).
    pub fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        retrograd_engine::io::write_atomically("onnx export", path.as_ref(), &self.to_bytes()?)
    }

    fn write_graph(&self) -> Result<GraphProto> {
        let st = self.graph.state();
        let free = self
            .inputs
            .iter()
            .flat_map(|(name, v)| {
                let value = v.value();
                self.free_axes(name, value)
                    .into_iter()
                    .map(move |(axis, dim)| FreeAxis {
                        size: value.shape()[axis],
                        input: name.clone(),
                        axis,
                        name: dim,
                    })
            })
            .collect();
        let mut emit = Emit::new(free);
        // ONNX names of values already written, by value id.
        let mut names: HashMap<u32, String> = HashMap::new();
        for (name, v) in &self.inputs {
            if !emit.claim(name) {
                return Err(Error::invalid(
                    "onnx export",
                    format!("input name `{name}` is used twice"),
                ));
            }
            names.insert(v.slot(), name.clone());
        }
        // Output names are claimed now, so no other value takes them.
        let mut output_of: HashMap<u32, String> = HashMap::new();
        for (name, v) in &self.outputs {
            if !emit.claim(name) {
                return Err(Error::invalid(
                    "onnx export",
                    format!("output name `{name}` is used twice"),
                ));
            }
            output_of.entry(v.slot()).or_insert_with(|| name.clone());
        }
        let mut used_inputs = vec![false; self.inputs.len()];
        for c in self.needed(&st, &names) {
            let (op_id, input_ids, out_id, index) = match c {
                Computation::Node(n) => (
                    st.nodes()[n].op,
                    st.inputs_of(n).to_vec(),
                    st.nodes()[n].output,
                    n,
                ),
                Computation::Traced(id) => {
                    let t = st.traced_of(id).expect("a traced value");
                    (t.op, t.inputs.to_vec(), id, st.nodes().len())
                }
            };
            let mut inputs = Vec::new();
            let mut values = Vec::new();
            for &id in &input_ids {
                inputs.push(self.leaf_name(&st, id, &mut names, &mut emit)?);
                values.push(st.values()[id as usize].clone());
                if let Some(i) = self.inputs.iter().position(|(_, v)| v.slot() == id) {
                    used_inputs[i] = true;
                }
            }
            let op = st.op(op_id);
            let op_name = st.op_name(op_id).to_string();
            let out = match output_of.get(&out_id) {
                Some(name) => name.clone(),
                None => emit.fresh(
                    st.name_of(out_id)
                        .map_or_else(|| format!("{op_name}_{}", out_id), str::to_string)
                        .as_str(),
                ),
            };
            let ctx = NodeCtx {
                index,
                op: &op_name,
                attrs: op.attributes(),
                inputs,
                values,
                output: st.values()[out_id as usize].clone(),
                out: out.clone(),
            };
            let map = mapper(&op_name).ok_or_else(|| {
                ctx.unsupported("this op has no ONNX form in the exporter".to_string())
            })?;
            map(&mut emit, &ctx)?;
            names.insert(out_id, out);
        }
        for (i, (name, _)) in self.inputs.iter().enumerate() {
            let is_output = self
                .outputs
                .iter()
                .any(|(_, v)| v.slot() == self.inputs[i].1.slot());
            if !used_inputs[i] && !is_output {
                return Err(Error::invalid(
                    "onnx export",
                    format!(
                        "input `{name}` does not feed the outputs in the recorded graph (an op \
                         that reads it by value, such as an embedding given index lists, bakes \
                         it in as a constant: pass it as a graph value)"
                    ),
                ));
            }
        }
        // An output that is a leaf, or another output's value, is copied.
        for (name, v) in &self.outputs {
            let id = v.slot();
            let written = names.get(&id) == Some(name);
            if !written {
                let src = self.leaf_name(&st, id, &mut names, &mut emit)?;
                if src != *name {
                    emit.node("Identity", &[&src], &[name], vec![]);
                }
            }
        }
        let info =
            |(n, v): &(String, Var<'g>)| value_info(n, v.value(), &self.free_axes(n, v.value()));
        Ok(GraphProto {
            name: Some(self.graph_name.clone()),
            input: self.inputs.iter().map(info).collect(),
            output: self.outputs.iter().map(info).collect(),
            node: emit.nodes,
            initializer: emit.initializers,
            ..Default::default()
        })
    }

    /// What the outputs depend on, in execution order, stopping at the
    /// named inputs: recorded nodes, and constants computed while tracing
    /// from values that are not constant leaves (a mask compared from the
    /// token ids).
    fn needed(&self, st: &GraphState, inputs: &HashMap<u32, String>) -> Vec<Computation> {
        let producers = st.producers();
        let mut fixed: HashMap<u32, bool> = HashMap::new();
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        let mut stack: Vec<u32> = self.outputs.iter().map(|(_, v)| v.slot()).collect();
        while let Some(id) = stack.pop() {
            if inputs.contains_key(&id) || !seen.insert(id) {
                continue;
            }
            match producers[id as usize] {
                LEAF_VARIABLE => {}
                LEAF_CONSTANT => {
                    if let Some(t) = st
                        .traced_of(id)
                        .filter(|_| !is_fixed(st, id, inputs, &mut fixed))
                    {
                        out.push((id, Computation::Traced(id)));
                        stack.extend_from_slice(&t.inputs);
                    }
                }
                n => {
                    out.push((id, Computation::Node(n as usize)));
                    stack.extend_from_slice(st.inputs_of(n as usize));
                }
            }
        }
        out.sort_by_key(|(id, _)| *id);
        out.into_iter().map(|(_, c)| c).collect()
    }

    /// The ONNX name of value `id`, writing it first if it is a leaf not
    /// yet written: an initializer for a variable or a buffer, a
    /// `Constant` node for any other constant.
    fn leaf_name(
        &self,
        st: &GraphState,
        id: u32,
        names: &mut HashMap<u32, String>,
        emit: &mut Emit,
    ) -> Result<String> {
        if let Some(n) = names.get(&id) {
            return Ok(n.clone());
        }
        let value = &st.values()[id as usize];
        let given = self
            .leaf_names
            .get(&id)
            .cloned()
            .or_else(|| st.name_of(id).map(str::to_string));
        let name = match st.producers()[id as usize] {
            LEAF_VARIABLE => {
                let name = emit.fresh(given.as_deref().unwrap_or(&format!("param_{id}")));
                emit.initializer(&name, value)?;
                name
            }
            LEAF_CONSTANT if self.buffer_leaves.contains(&id) => {
                let name = emit.fresh(given.as_deref().unwrap_or(&format!("buffer_{id}")));
                emit.initializer(&name, value)?;
                name
            }
            LEAF_CONSTANT => {
                emit.constant(given.as_deref().unwrap_or(&format!("const_{id}")), value)?
            }
            node => {
                return Err(Error::invalid(
                    "onnx export",
                    format!("value {id} (made by node {node}) was used before it was written"),
                ))
            }
        };
        names.insert(id, name.clone());
        Ok(name)
    }
}

/// The declared type and shape of a graph input or output: the `free`
/// axes named (`batch`), the others their recorded sizes.
fn value_info(name: &str, value: &Tensor, free: &[(usize, String)]) -> ValueInfoProto {
    let dim = value
        .shape()
        .iter()
        .enumerate()
        .map(|(i, &d)| Dimension {
            value: Some(match free.iter().find(|(a, _)| *a == i) {
                Some((_, name)) => dimension::Value::DimParam(name.clone()),
                None => dimension::Value::DimValue(d as i64),
            }),
            ..Default::default()
        })
        .collect();
    ValueInfoProto {
        name: Some(name.to_string()),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(type_proto::Tensor {
                elem_type: Some(onnx_type(value.dtype())),
                shape: Some(TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}
