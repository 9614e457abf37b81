//! Import: an ONNX model as a retrograd model, [`OnnxModel`].
//!
//! Each ONNX node runs as retrograd ops (`ops/`), so an imported model
//! records a graph like any model, prints and draws it, and trains: its
//! float initializers are [`Parameter`]s under their ONNX names.

mod attrs;
mod fuse;
mod load;
mod ops;

use std::path::Path;
use std::time::Instant;

pub use load::{MAX_OPSET, MIN_OPSET};

use attrs::Attrs;
use ops::Convert;

use retrograd_engine::base::error::{Error, OnnxProblem, Result};
use retrograd_engine::base::profile::PartClock;
use retrograd_engine::base::Profile;
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::nn::{join_name, Buffer, Module, Parameter};
use retrograd_engine::tensor::{DType, Tensor};

/// The ONNX op types the importer runs, in its table's order.
///
/// ```
/// let ops = retrograd::onnx::supported_import_ops();
/// assert!(ops.contains(&"Conv") && ops.contains(&"LayerNormalization"));
/// ```
pub fn supported_import_ops() -> Vec<&'static str> {
    ops::OPS.iter().map(|(name, _, _)| *name).collect()
}

/// A graph input as the model declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// The input's name.
    pub name: String,
    /// Its element type, if declared.
    pub dtype: Option<DType>,
    /// Its sizes, if declared: `None` for a free (named) or unknown size.
    pub dims: Option<Vec<Option<usize>>>,
    slot: usize,
}

/// One node to run: its converter, settings and value slots.
pub(crate) struct Step {
    convert: Convert,
    attrs: Attrs,
    op_type: String,
    inputs: Vec<Option<usize>>,
    outputs: Vec<usize>,
    /// The ONNX element type each input declares, where known ([`Ctx::input_types`](ops::Ctx)).
    input_types: Vec<Option<i32>>,
}

/// An ONNX model read into retrograd: run it on a graph like any model
/// ([`forward`](Self::forward)), or on plain tensors
/// ([`infer`](Self::infer)); fine-tune it, since it is a [`Module`] whose
/// parameters are its float initializers under their ONNX names (batch
/// norm's running statistics are buffers).
///
/// ```
/// use retrograd::nn::{Forward, Linear, Module};
/// use retrograd::onnx::{Exporter, OnnxModel};
/// use retrograd::optim::{Optimizer, Sgd, SgdConfig};
/// use retrograd::{DType, Graph, Tensor};
///
/// // A model written by the exporter (or by torch.onnx.export).
/// let linear = Linear::new(2, 1)?;
/// let graph = Graph::new();
/// graph.set_tracing(true);
/// let x = graph.variable(Tensor::ones(&[3, 2], DType::F32)?);
/// let bytes = Exporter::new(&graph).input("x", &x).output("y", &linear.forward(&x)?)
///     .parameters_of(&linear).dynamic_batch("batch").to_bytes()?;
///
/// let model = OnnxModel::from_bytes(&bytes)?;
/// let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.1))?;
/// let g = Graph::new();
/// let y = model.forward(&g, &[&g.constant(Tensor::ones(&[4, 2], DType::F32)?)])?;
/// let loss = y[0].try_mul(&y[0])?.mean();
/// opt.step(&loss.backward()?)?;            // the imported weights move
/// assert_ne!(model.parameters()[0].1.value().to_f64_vec(), linear.weight().value().to_f64_vec());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct OnnxModel {
    graph_name: String,
    opset: i64,
    inputs: Vec<InputSpec>,
    outputs: Vec<(String, usize)>,
    params: Vec<(String, Parameter, usize)>,
    buffers: Vec<(String, Buffer, usize)>,
    constants: Vec<(usize, Tensor)>,
    steps: Vec<Step>,
    slot_names: Vec<String>,
    /// The last step reading each slot (`usize::MAX`: an output).
    last_use: Vec<usize>,
}

impl OnnxModel {
    /// Reads and checks an `.onnx` file (and the files beside it that hold
    /// tensor data stored outside it, as exporters write large models).
    ///
    /// Errors: [`Error::Io`] if it cannot be read; [`Error::OnnxInvalid`]
    /// if it does not decode or its graph is malformed (a cycle, a value
    /// nothing defines, a tensor whose data does not fit its shape, shapes
    /// that do not fit together); [`Error::OnnxUnsupported`] listing every
    /// unsupported node and opset.
    pub fn load(path: impl AsRef<Path>) -> Result<OnnxModel> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            op: "onnx import",
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        load::from_bytes(&bytes, Some(path.parent().unwrap_or(Path::new("."))))
    }

    /// Reads and checks a model from the bytes of an `.onnx` file (see [`load`](Self::load)).
    /// Tensor data stored in external files needs [`load`](Self::load).
    pub fn from_bytes(bytes: &[u8]) -> Result<OnnxModel> {
        load::from_bytes(bytes, None)
    }

    /// Reads and checks a decoded model (see [`load`](Self::load)).
    pub fn from_proto(model: &crate::proto::ModelProto) -> Result<OnnxModel> {
        load::from_proto(model, None)
    }

    /// The graph inputs, in order.
    pub fn inputs(&self) -> &[InputSpec] {
        &self.inputs
    }

    /// The graph inputs' names.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|i| i.name.as_str()).collect()
    }

    /// The graph outputs' names.
    pub fn output_names(&self) -> Vec<&str> {
        self.outputs.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The ONNX graph's name.
    pub fn graph_name(&self) -> &str {
        &self.graph_name
    }

    /// The model's default-domain opset.
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// The ONNX op types of the nodes that run (after constant folding and
    /// fusion), in order.
    pub fn op_types(&self) -> Vec<&str> {
        self.steps.iter().map(|s| s.op_type.as_str()).collect()
    }

    /// Runs the model on `graph`, one value per graph input in order; the
    /// outputs in order. On a [`Graph::new`] the parameters come in as
    /// variables (so a loss on the outputs trains them); on the inference
    /// graph nothing is recorded.
    ///
    /// Errors: a wrong number of inputs, or an input whose dtype or sizes
    /// differ from the declared ones, is [`OnnxProblem::ShapeMismatch`]
    /// naming it; an error inside a node names the node.
    pub fn forward<'g>(&self, graph: &'g Graph, inputs: &[&Var<'g>]) -> Result<Vec<Var<'g>>> {
        self.forward_timed(graph, inputs, None)
    }

    /// [`forward`](Self::forward), adding each step's wall time to `clock`.
    fn forward_timed<'g>(
        &self,
        graph: &'g Graph,
        inputs: &[&Var<'g>],
        mut clock: Option<&mut PartClock>,
    ) -> Result<Vec<Var<'g>>> {
        self.check_inputs(inputs.iter().map(|v| (v.dtype(), v.shape())))?;
        let mut slots: Vec<Option<Var<'g>>> = vec![None; self.slot_names.len()];
        for (spec, v) in self.inputs.iter().zip(inputs) {
            graph.check_same("onnx forward", v)?;
            slots[spec.slot] = Some((*v).clone());
        }
        for (_, p, slot) in &self.params {
            slots[*slot] = Some(graph.param(p));
        }
        for (_, b, slot) in &self.buffers {
            slots[*slot] = Some(graph.constant(b.value()));
        }
        for (slot, t) in &self.constants {
            slots[*slot] = Some(Var::constant_in(graph, t.clone()));
        }
        for (i, step) in self.steps.iter().enumerate() {
            let start = clock.is_some().then(Instant::now);
            let args: Vec<Option<Var<'g>>> = step
                .inputs
                .iter()
                .map(|s| s.and_then(|s| slots[s].clone()))
                .collect();
            let outs = step.run(graph, self.opset, &args)?;
            drop(args);
            for (slot, v) in step.outputs.iter().zip(outs) {
                slots[*slot] = Some(v);
            }
            // Free what no later step reads (activations on the inference graph).
            for &slot in step.inputs.iter().flatten() {
                if self.last_use[slot] == i {
                    slots[slot] = None;
                }
            }
            if let (Some(clock), Some(start)) = (clock.as_deref_mut(), start) {
                clock.add(i, start);
            }
        }
        self.outputs
            .iter()
            .map(|(name, slot)| {
                slots[*slot].clone().ok_or_else(|| Error::OnnxInvalid {
                    problem: OnnxProblem::UndefinedValue,
                    detail: format!("output `{name}` was not computed"),
                })
            })
            .collect()
    }

    /// Runs the model on plain tensors, recording nothing (on this
    /// thread's [`Graph::inference`]).
    pub fn infer(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        self.infer_timed(inputs, None)
    }

    /// [`infer`](Self::infer), adding each step's wall time to `clock`.
    fn infer_timed(&self, inputs: &[Tensor], clock: Option<&mut PartClock>) -> Result<Vec<Tensor>> {
        let graph = Graph::inference();
        let vars: Vec<Var<'static>> = inputs.iter().map(Var::from).collect();
        let refs: Vec<&Var<'static>> = vars.iter().collect();
        Ok(self
            .forward_timed(graph, &refs, clock)?
            .into_iter()
            .map(|v| v.value().clone())
            .collect())
    }

    /// Runs [`infer`](Self::infer) `runs` times on `inputs` (after one
    /// untimed run, which warms the thread's tensor pool) and times each
    /// node as it runs (after constant folding and fusion: the nodes of
    /// [`op_types`](Self::op_types)), as onnxruntime's
    /// `SessionOptions.enable_profiling` does. Each part's kind is its
    /// ONNX op type (a fused pattern's, such as `MatMul+Add`), its label
    /// the node's name.
    ///
    /// Errors: `runs` of 0 is [`Error::InvalidArgument`]; otherwise
    /// [`infer`](Self::infer)'s.
    pub fn profile(&self, inputs: &[Tensor], runs: u32) -> Result<Profile> {
        if runs == 0 {
            return Err(Error::invalid("profile", "runs must be at least 1"));
        }
        self.infer(inputs)?;
        let mut clock = PartClock::new(self.steps.len());
        for _ in 0..runs {
            self.infer_timed(inputs, Some(&mut clock))?;
        }
        let names = self
            .steps
            .iter()
            .map(|step| (step.op_type.clone(), step.attrs.label.clone()));
        Ok(Profile::of_clock(runs, names, &clock))
    }

    fn check_inputs<'a>(
        &self,
        given: impl ExactSizeIterator<Item = (DType, &'a [usize])>,
    ) -> Result<()> {
        let mismatch = |detail: String| Error::OnnxInvalid {
            problem: OnnxProblem::ShapeMismatch,
            detail,
        };
        if given.len() != self.inputs.len() {
            return Err(mismatch(format!(
                "the model takes {} inputs ({}), {} given",
                self.inputs.len(),
                self.input_names().join(", "),
                given.len()
            )));
        }
        for (spec, (dtype, shape)) in self.inputs.iter().zip(given) {
            if spec.dtype.is_some_and(|d| d != dtype) {
                return Err(mismatch(format!(
                    "input `{}` must be {}, got {dtype}",
                    spec.name,
                    spec.dtype.unwrap_or(dtype)
                )));
            }
            if let Some(dims) = &spec.dims {
                let fits = dims.len() == shape.len()
                    && dims
                        .iter()
                        .zip(shape)
                        .all(|(d, &s)| d.is_none_or(|d| d == s));
                if !fits {
                    let want: Vec<String> = dims
                        .iter()
                        .map(|d| d.map_or("?".into(), |d| d.to_string()))
                        .collect();
                    return Err(mismatch(format!(
                        "input `{}` must have shape [{}], got {shape:?}",
                        spec.name,
                        want.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }
}

impl Module for OnnxModel {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        for (name, p, _) in &self.params {
            f(&join_name(prefix, name), p);
        }
    }

    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        for (name, b, _) in &self.buffers {
            f(&join_name(prefix, name), b);
        }
    }
}

impl std::fmt::Debug for OnnxModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnnxModel")
            .field("graph", &self.graph_name)
            .field("opset", &self.opset)
            .field("inputs", &self.input_names())
            .field("outputs", &self.output_names())
            .field("parameters", &self.params.len())
            .field("nodes", &self.steps.len())
            .finish()
    }
}
