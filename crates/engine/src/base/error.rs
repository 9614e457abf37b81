//! The one error type of retrograd.
//!
//! Every fallible public operation returns [`Result`]. Variants name the op
//! (or API) that failed and carry the shapes, names or indices involved, so a
//! message is enough to find the bug without a debugger. Operator sugar
//! (`&x * &y`) panics with exactly the same message.

use super::dtype::DType;
use std::path::Path;

/// `Result` with retrograd's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in retrograd.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two shapes cannot be combined (broadcasting, matmul, concatenation...).
    #[error("{op}: incompatible shapes {lhs:?} and {rhs:?}")]
    ShapeMismatch {
        /// The op that was asked to combine them.
        op: &'static str,
        /// The first operand's shape.
        lhs: Vec<usize>,
        /// The second operand's shape.
        rhs: Vec<usize>,
    },
    /// The number of elements does not fit the requested shape.
    #[error("{op}: {len} elements cannot be viewed as shape {shape:?}")]
    ElementCount {
        /// The op (or constructor) involved.
        op: &'static str,
        /// How many elements there are.
        len: usize,
        /// The shape that was requested.
        shape: Vec<usize>,
    },
    /// A shape too large for memory: the product of its dimensions overflows
    /// `usize` or its bytes exceed `isize::MAX`, or the allocator refused it.
    #[error("{op}: shape {shape:?} has too many elements to allocate")]
    ShapeOverflow {
        /// The op (or constructor) involved.
        op: &'static str,
        /// The offending shape.
        shape: Vec<usize>,
    },
    /// A result whose bytes are more memory than can be had: the allocator
    /// refused its buffer (an op's output, a gradient).
    #[error("{op}: a result of shape {shape:?} needs {bytes} bytes, more memory than can be had")]
    OutOfMemory {
        /// The op (or API) that needed it.
        op: String,
        /// The shape of the result.
        shape: Vec<usize>,
        /// The bytes its buffer needs.
        bytes: usize,
    },
    /// Operands of different dtypes were combined. retrograd never promotes
    /// silently: convert one side with `Tensor::to_dtype` first.
    #[error("{op}: dtype mismatch, {lhs} and {rhs} (convert one side with to_dtype)")]
    DTypeMismatch {
        /// The op involved.
        op: &'static str,
        /// The first operand's dtype.
        lhs: DType,
        /// The second operand's dtype.
        rhs: DType,
    },
    /// A float op was given an integer or bool tensor. retrograd never
    /// converts silently: cast with `to_dtype` first.
    #[error("{op}: expected a float tensor (f32 or f64), found {found} (convert with to_dtype)")]
    NotFloat {
        /// The op involved.
        op: &'static str,
        /// The dtype that was found.
        found: DType,
    },
    /// A gradient was asked of (or a variable made from) a dtype that is
    /// never differentiable: `i64` and `bool` tensors carry indices and
    /// masks, and only `f32`/`f64` values can require grad.
    #[error("{op}: {dtype} tensors are not differentiable (only f32 and f64 can require grad)")]
    NotDifferentiable {
        /// The API involved.
        op: &'static str,
        /// The tensor's dtype.
        dtype: DType,
    },
    /// A dtype the operation does not support, or a read with the wrong type.
    #[error("{op}: expected dtype {expected}, found {found}")]
    WrongDType {
        /// The op or accessor involved.
        op: &'static str,
        /// The dtype that was required.
        expected: DType,
        /// The dtype that was found.
        found: DType,
    },
    /// An axis is out of range for the tensor's rank.
    #[error("{op}: axis {axis} is out of range for a tensor of rank {rank}")]
    AxisOutOfRange {
        /// The op involved.
        op: &'static str,
        /// The axis as given (negative axes count from the end).
        axis: isize,
        /// The rank of the tensor.
        rank: usize,
    },
    /// An index (into a dimension, a class list, an embedding table...) is out of range.
    #[error("{op}: index {index} is out of range for a dimension of size {size}")]
    IndexOutOfRange {
        /// The op involved.
        op: &'static str,
        /// The index as given.
        index: i64,
        /// The size of the dimension indexed.
        size: usize,
    },
    /// An argument is invalid for a reason the other variants do not cover.
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The op or API involved.
        op: &'static str,
        /// What is wrong with the argument.
        reason: String,
    },
    /// Work whose cost grows faster than its input's size was asked of an
    /// input past the limit set for it (the built-in renderer's layout of
    /// a very large picture): refused up front rather than left to run for
    /// hours.
    #[error("{op}: {what} is {size}, over the limit of {limit}; {advice}")]
    TooLarge {
        /// The op or API involved.
        op: &'static str,
        /// What was measured against the limit.
        what: String,
        /// Its size in this call.
        size: usize,
        /// The most it may be.
        limit: usize,
        /// How to stay within the limit.
        advice: String,
    },
    /// `item()` (or a scalar-only API) was called on a tensor with more than one element.
    #[error("{op}: expected a tensor with exactly one element, found shape {shape:?}")]
    NotAScalar {
        /// The op or accessor involved.
        op: &'static str,
        /// The tensor's shape.
        shape: Vec<usize>,
    },
    /// `OpRegistry::get` (or `Graph::apply`) with a name nobody registered.
    #[error("unregistered op `{name}`{}", suggestion_text(.suggestion))]
    UnregisteredOp {
        /// The name that was asked for.
        name: String,
        /// The closest registered name, if any is close.
        suggestion: Option<String>,
    },
    /// `OpRegistry::register` with a name that is already taken.
    #[error("op `{name}` is already registered (use OpRegistry::replace to replace it)")]
    DuplicateOp {
        /// The name that is already taken.
        name: String,
    },
    /// An op was called with the wrong number of inputs.
    #[error("{op}: expected {expected} input(s), got {got}")]
    Arity {
        /// The op involved.
        op: String,
        /// How many inputs the op takes.
        expected: usize,
        /// How many it was given.
        got: usize,
    },
    /// A `Var` from one graph was used with another graph.
    #[error("{op}: a variable from another graph was used here")]
    ForeignVariable {
        /// The op or API that received the foreign handle.
        op: String,
    },
    /// `backward()` on a root with more than one element and no seed gradient.
    #[error("backward: the root has shape {shape:?}; a non-scalar root needs a grad_output (use backward_with)")]
    NonScalarRoot {
        /// The root's shape.
        shape: Vec<usize>,
    },
    /// `backward()` on a value that does not require grad: nothing to differentiate.
    #[error("backward: the root does not require grad (it depends on no variable)")]
    RootDoesNotRequireGrad,
    /// A backward formula returned a gradient of the wrong shape or count.
    #[error("{op}: backward returned {detail}")]
    BadGradient {
        /// The op whose backward misbehaved.
        op: String,
        /// What was wrong.
        detail: String,
    },
    /// A gradient was asked of an intermediate value that was not retained.
    #[error("gradient of value {value} was not retained (call retain_grad before backward)")]
    GradientNotRetained {
        /// The value id.
        value: usize,
    },
    /// A backward order that is not a valid reverse topological order.
    #[error("backward: invalid order: {reason}")]
    InvalidOrder {
        /// What is wrong with it.
        reason: String,
    },
    /// The op has no rule for the requested mode (e.g. no tangent rule for forward mode).
    #[error("{op}: {what} is not supported")]
    Unsupported {
        /// The op involved.
        op: String,
        /// What is not supported.
        what: &'static str,
    },
    /// Anomaly mode found a NaN or infinity.
    #[error(
        "anomaly: {op} (node {node}, recorded at {location}) produced a non-finite {phase} value"
    )]
    Anomaly {
        /// The op whose output (or gradient) was not finite.
        op: String,
        /// The index of its node.
        node: usize,
        /// Where the op was recorded (`file:line:column`).
        location: String,
        /// `"forward"` or `"gradient"`.
        phase: &'static str,
    },
    /// A finite-difference gradient check found a mismatch.
    #[error("gradcheck: input {input}, element {index}: analytic {analytic} vs numeric {numeric}")]
    GradCheck {
        /// Which input of the checked function.
        input: usize,
        /// Which element of that input (row-major).
        index: usize,
        /// The gradient backward computed.
        analytic: f64,
        /// The central-difference estimate.
        numeric: f64,
    },
    /// An I/O failure, with the path involved.
    #[error("{op}: {path}: {message}")]
    Io {
        /// The operation (save, load...).
        op: &'static str,
        /// The file involved.
        path: String,
        /// The underlying error message.
        message: String,
    },
    /// A file that could be read but does not hold what it should.
    #[error("{op}: {path}: {reason}")]
    Format {
        /// The operation (load, parse...).
        op: &'static str,
        /// The file (or source) involved.
        path: String,
        /// What is wrong with the content.
        reason: String,
    },
    /// A text holds a character that a tokenizer's vocabulary lacks.
    #[error("{op}: character {character:?} at position {position} is not in the vocabulary")]
    UnknownCharacter {
        /// The tokenizer API involved.
        op: &'static str,
        /// The character.
        character: char,
        /// Its position in the text, counted in characters (not bytes).
        position: usize,
    },
    /// A named tensor (of a checkpoint, a state dict, an optimizer's state)
    /// is missing, unexpected, or does not fit what it is loaded into.
    #[error("{context}: tensor `{name}`: {problem}")]
    TensorMismatch {
        /// Where it happened (an API name, or an API and a file path).
        context: String,
        /// The tensor's name.
        name: String,
        /// What is wrong with it.
        problem: TensorProblem,
    },
    /// Data-parallel replicas disagree: a rank's model does not have rank
    /// 0's parameters and buffers (names, shapes, dtypes). Every rank gets
    /// the same error, naming the first difference.
    #[error("{op}: rank {rank}'s model differs from rank 0's: {detail}")]
    ReplicaMismatch {
        /// The API that compared the replicas.
        op: &'static str,
        /// The lowest rank that differs from rank 0.
        rank: usize,
        /// The first difference, as `rank 0 has ..., rank r has ...`.
        detail: String,
    },
    /// Communication between processes failed or another rank reported a
    /// failure (data-parallel training, `retrograd::distributed`).
    #[error("{op}: {detail}")]
    Communication {
        /// The API or collective involved.
        op: &'static str,
        /// What went wrong, naming the rank where it did.
        detail: String,
    },
    /// A compiled step cannot be captured or replayed as it stands: a shape
    /// that depends on values, an op that would repeat its random masks, a
    /// backward pass inside the captured function, `create_graph` asked of
    /// a compiled step (see `retrograd::compile`).
    #[error("compiled step: {op} (node {node}): {reason}")]
    NotReplayable {
        /// The op (or API) concerned.
        op: String,
        /// Its node in the captured graph (0 when no node is concerned).
        node: usize,
        /// Why, and what to do instead.
        reason: String,
    },
    /// The inputs of a compiled step's run do not match what the function
    /// takes (their count, or an input of the wrong kind).
    #[error("compiled step: {detail}")]
    CompiledInputs {
        /// Which input, and what was expected.
        detail: String,
    },
    /// A recorded node has no ONNX form (or none with its settings), so the
    /// graph cannot be exported as it is.
    #[error("onnx export: node {node} ({op}): {reason}")]
    OnnxExport {
        /// The op of the node (`dropout`, `cross_entropy`...).
        op: String,
        /// The node's index in the graph.
        node: usize,
        /// Why it cannot be written.
        reason: String,
    },
    /// An ONNX model uses ops, opsets or settings this importer does not
    /// support; every unsupported node is listed at once.
    #[error("onnx import: {} unsupported: {}", .items.len(), .items.join("; "))]
    OnnxUnsupported {
        /// One entry per unsupported node (`node "Conv_3" (LSTM)`) or opset.
        items: Vec<String>,
    },
    /// An ONNX model that is malformed: it does not decode, its graph has a
    /// cycle or uses a value nothing defines, a tensor's data does not fit
    /// its shape, or shapes do not fit together.
    #[error("onnx: {problem}: {detail}")]
    OnnxInvalid {
        /// Which kind of defect.
        problem: OnnxProblem,
        /// Where it is (the node or tensor named) and what it is.
        detail: String,
    },
}

/// The kind of defect of a malformed ONNX model ([`Error::OnnxInvalid`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OnnxProblem {
    /// The bytes are not an ONNX protobuf message (a truncated file).
    #[error("not a valid ONNX protobuf")]
    Decode,
    /// The graph has a cycle.
    #[error("cyclic graph")]
    Cycle,
    /// A node reads a value no input, initializer or node defines.
    #[error("undefined value")]
    UndefinedValue,
    /// A tensor's data does not fit its declared shape or type.
    #[error("bad tensor")]
    BadTensor,
    /// A node lacks a required attribute or input, or has an invalid one.
    #[error("bad node")]
    BadNode,
    /// Shapes that do not fit together (an input, a weight, an op's operands).
    #[error("shape mismatch")]
    ShapeMismatch,
}

/// What is wrong with a named tensor ([`Error::TensorMismatch`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum TensorProblem {
    /// It is required but absent.
    #[error("missing")]
    Missing,
    /// It is present but nothing expects it.
    #[error("unexpected (no parameter or state has this name)")]
    Unexpected,
    /// Its shape differs from the one expected.
    #[error("expected shape {expected:?}, found {found:?}")]
    Shape {
        /// The shape required.
        expected: Vec<usize>,
        /// The shape found.
        found: Vec<usize>,
    },
    /// Its dtype differs from the one expected.
    #[error("expected dtype {expected}, found {found}")]
    DType {
        /// The dtype required.
        expected: DType,
        /// The dtype found.
        found: DType,
    },
    /// Its value is not valid (e.g. a negative step count).
    #[error("{0}")]
    Value(String),
}

fn suggestion_text(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!(" (did you mean `{s}`?)"),
        None => String::new(),
    }
}

impl Error {
    /// [`Error::InvalidArgument`]: `op` refused an argument, for `reason`.
    pub fn invalid(op: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op,
            reason: reason.into(),
        }
    }

    /// [`Error::ShapeMismatch`]: `op` was given shapes `lhs` and `rhs`
    /// that do not fit together.
    pub fn shape_mismatch(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
        }
    }

    pub(crate) fn dtype_mismatch(op: &'static str, lhs: DType, rhs: DType) -> Self {
        Error::DTypeMismatch { op, lhs, rhs }
    }
}

/// `Error::DTypeMismatch` for `op` unless the two dtypes are one.
#[inline]
pub(crate) fn check_dtypes(op: &'static str, lhs: DType, rhs: DType) -> Result<()> {
    if lhs != rhs {
        return Err(Error::dtype_mismatch(op, lhs, rhs));
    }
    Ok(())
}

/// `Error::Io` for `op` on `path`, with `e` (an `io::Error` or any other
/// message) as its message.
pub fn io_error(op: &'static str, path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Io {
        op,
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

/// `Error::Format` for `op` reading `path`: the file is not what it
/// should be, for `reason`.
pub fn format_error(op: &'static str, path: &Path, reason: impl Into<String>) -> Error {
    Error::Format {
        op,
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

/// The value, or a panic with the error's message at the caller's location:
/// the non-`try_` methods and operator sugar (`&x * &y`) are their `try_`
/// form through this.
#[track_caller]
#[inline]
pub fn or_panic<T>(r: Result<T>) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}
