//! ONNX in and out (feature `onnx`, on by default).
//!
//! - **Export** ([`Exporter`], [`export_forward`]): a recorded inference
//!   graph as an ONNX model (opset 17, or any up to 28 by
//!   [`Exporter::opset`]): weights as initializers under
//!   their parameter names, named inputs and outputs, optionally free
//!   axes (a batch, a sequence length). Every op of the README models, the CNN layers and the
//!   transformers has an ONNX form (attention as its decomposition); an op
//!   without one is [`Error::OnnxExport`](retrograd_engine::Error::OnnxExport) naming
//!   it, never a silently different graph.
//! - **Import** ([`OnnxModel`]): an `.onnx` file (opsets 7 to 28) as a
//!   retrograd model that runs each node as retrograd ops, so it records,
//!   prints, draws and trains like any model; its float initializers are
//!   trainable parameters under their ONNX names. Unsupported ops and
//!   opsets are one [`Error::OnnxUnsupported`](retrograd_engine::Error::OnnxUnsupported)
//!   listing every one; a malformed file is
//!   [`Error::OnnxInvalid`](retrograd_engine::Error::OnnxInvalid).
//!
//! The protobuf messages ([`proto`]) are prost types generated once from
//! ONNX's `onnx.proto` (see `tools/onnx-proto`).
//!
//! Where things are: `proto/` includes the prost messages generated once
//! from ONNX's `onnx.proto` (both in `tools/onnx-proto/`, committed, so the
//! build needs no protoc); `tensor.rs`: `TensorProto` to and from `Tensor` (raw or
//! typed data, external data files read only inside the model's folder,
//! sizes from the file capped at 2^28 elements); `narrow.rs`: the 8-, 6-
//! and 4-bit floats and the 4- and 2-bit integers, read widened to f32 and
//! i64 and rounded to by `Cast`. `export/`: `Exporter`
//! walks the traced nodes the outputs depend on and asks each op's mapper
//! (one per retrograd op name, in the family files `elementwise.rs`,
//! `shape_ops.rs`, `reduce_ops.rs`, `nn_ops.rs`, `attention.rs`: attention
//! as its opset-17 decomposition with the `Where(IsNaN)` that keeps fully
//! masked rows at 0) for ONNX nodes computed from the op's
//! `Differentiable::attributes`; `opset.rs` rewrites opset 17's forms
//! into a later opset's; `emit.rs` writes nodes, constants and
//! initializers and keeps the inputs' free axes free (reshapes copy or
//! infer them, a table cut to a free axis's recorded length ends at that
//! axis's size: `Shape`); `forward.rs` is the one-call `export_forward`;
//! an op with no mapper is `Error::OnnxExport`. `import/`:
//! `load.rs` decodes and checks a model (opsets 7-28, topological order,
//! every value defined, a dry run at free size 1 then 2), `ops/` is the one
//! table `OPS` of ONNX op type, converter (retrograd `Var` ops, so imported
//! models differentiate) and settings check, integer shape arithmetic on
//! the host (`host.rs`), 16-bit inputs rounded where ONNX's reference
//! rounds them (`half.rs`: attention, softmax), casts and linear
//! quantization onto the narrow types (`cast.rs`, `quantize.rs`,
//! `bitcast.rs`), control flow (`If`, `Loop`: `control_flow.rs`;
//! `Scan`: `scan.rs`) running its graph attributes through the same
//! converters (`subgraph.rs`: a subgraph reads the enclosing graphs'
//! values, which the node takes after its own inputs; nesting at most 64
//! deep; loops unrolled, so gradients flow through every iteration;
//! sequence- and optional-typed values refused by name); `fuse.rs`
//! rewrites GELU and attention subgraphs into the fused ops (attention
//! falls back to the nodes' composition when
//! `scaled_dot_product_attention`'s contract does not hold) and `MatMul` +
//! `Add` of a 1-d bias into one step (one product onto the bias rows where
//! nothing requires grad, `kernels::matmul_bias`), and `Add` then
//! `LayerNormalization` into one pass per row; `OnnxModel`
//! (`mod.rs`) is a `Module` whose float initializers are parameters.

mod export;
mod import;
mod narrow;
pub mod proto;
mod tensor;

pub use export::{
    can_export, export_forward, export_input, Exporter, EXPORT_OPSET, MAX_EXPORT_OPSET,
};
pub use import::{supported_import_ops, InputSpec, OnnxModel, MAX_OPSET, MIN_OPSET};

/// The tensor a serialized ONNX `TensorProto` holds: the `.pb` files of
/// ONNX's test data (`test_data_set_0/input_0.pb`), or any tensor written
/// with `onnx.numpy_helper.from_array(..).SerializeToString()`. Element
/// types read as [`OnnxModel`] reads them (integers of every width as i64).
///
/// Errors: [`OnnxProblem::Decode`](retrograd_engine::OnnxProblem::Decode) if the bytes
/// are not a `TensorProto`; [`OnnxProblem::BadTensor`](retrograd_engine::OnnxProblem::BadTensor)
/// for an element type with no dtype (strings, 8-bit floats) or data that
/// does not fit its dims.
///
/// ```
/// use prost::Message;
/// let proto = retrograd::onnx::proto::TensorProto {
///     dims: vec![2],
///     data_type: Some(7), // INT64
///     int64_data: vec![3, -4],
///     ..Default::default()
/// };
/// let t = retrograd::onnx::decode_tensor(&proto.encode_to_vec())?;
/// assert_eq!(t.to_vec::<i64>()?, vec![3, -4]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn decode_tensor(bytes: &[u8]) -> retrograd_engine::Result<retrograd_engine::Tensor> {
    use prost::Message;
    let proto =
        proto::TensorProto::decode(bytes).map_err(|e| retrograd_engine::Error::OnnxInvalid {
            problem: retrograd_engine::base::error::OnnxProblem::Decode,
            detail: format!("not a TensorProto: {e}"),
        })?;
    tensor::from_proto(&proto)
}
