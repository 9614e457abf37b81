//! The one-call export of a [`Forward`] model, and how an example input
//! enters the graph being exported.

use std::path::Path;

use super::Exporter;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::nn::Forward;
use retrograd_engine::tensor::Tensor;

/// A graph input for an export: a float value as a variable (so every op
/// on it records), an integer or bool value (token ids, a mask) as a
/// constant, whose uses tracing records ([`Graph::set_tracing`]).
///
/// ```
/// use retrograd::{DType, Graph, Tensor};
/// let graph = Graph::new();
/// let x = retrograd::onnx::export_input(&graph, &Tensor::ones(&[2, 3], DType::F32)?)?;
/// let ids = retrograd::onnx::export_input(&graph, &Tensor::from_vec(vec![1i64, 2], &[2])?)?;
/// assert!(x.requires_grad() && !ids.requires_grad());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn export_input<'g>(graph: &'g Graph, value: &Tensor) -> Result<Var<'g>> {
    if value.is_float() {
        graph.try_variable(value.clone())
    } else {
        Ok(graph.constant(value.clone()))
    }
}

/// Records `model`'s forward pass on `example` (a float input becomes a
/// variable, so every op on it is recorded; an integer input a constant)
/// and writes it to `path` with input `"input"`, output `"output"`, the
/// module's parameter names and, if `dynamic_batch`, a free batch axis.
/// Put the model in eval mode first (`set_training(false)`).
///
/// ```
/// use retrograd::nn::{Activation, Linear, Sequential};
/// use retrograd::{DType, Tensor};
/// let mut model = Sequential::new();
/// model.push(Linear::new(4, 8)?);
/// model.push(Activation::Relu);
/// let path = std::env::temp_dir().join("retrograd_doc_export.onnx");
/// retrograd::onnx::export_forward(&model, &Tensor::ones(&[2, 4], DType::F32)?, &path, true)?;
/// let imported = retrograd::onnx::OnnxModel::load(&path)?;
/// assert_eq!(imported.input_names(), ["input"]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn export_forward(
    model: &dyn Forward,
    example: &Tensor,
    path: impl AsRef<Path>,
    dynamic_batch: bool,
) -> Result<()> {
    let graph = Graph::new();
    graph.try_set_tracing(true)?;
    let x = export_input(&graph, example)?;
    let y = model.forward(&x)?;
    let mut export = Exporter::new(&graph)
        .input("input", &x)
        .output("output", &y)
        .parameters_of(model);
    if dynamic_batch {
        export = export.dynamic_batch("batch");
    }
    export.save(path)
}
