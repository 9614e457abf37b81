//! ONNX in and out (feature `onnx`, on by default).
//!
//! - **Export** ([`Exporter`], [`export_forward`]): a recorded inference
//!   graph as an ONNX model (opset 17): weights as initializers under
//!   their parameter names, named inputs and outputs, optionally a free
//!   batch axis. Every op of the README models, the CNN layers and the
//!   transformers has an ONNX form (attention as its decomposition); an op
//!   without one is [`Error::OnnxExport`](crate::Error::OnnxExport) naming
//!   it, never a silently different graph.
//! - **Import** ([`OnnxModel`]): an `.onnx` file (opsets 13 to 23) as a
//!   retrograd model that runs each node as retrograd ops, so it records,
//!   prints, draws and trains like any model; its float initializers are
//!   trainable parameters under their ONNX names. Unsupported ops and
//!   opsets are one [`Error::OnnxUnsupported`](crate::Error::OnnxUnsupported)
//!   listing every one; a malformed file is
//!   [`Error::OnnxInvalid`](crate::Error::OnnxInvalid).
//!
//! The protobuf messages ([`proto`]) are prost types generated once from
//! ONNX's `onnx.proto` (see `tools/onnx-proto`).

mod export;
mod import;
pub mod proto;
mod tensor;

pub use export::{can_export, export_forward, export_input, Exporter, EXPORT_OPSET};
pub use import::{supported_import_ops, InputSpec, OnnxModel, MAX_OPSET, MIN_OPSET};
