//! [`NodeCtx`]: one recorded node as an op mapper sees it, and the
//! [`Mapper`] signature.

use super::Emit;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::ops::OpAttributes;
use retrograd_engine::tensor::{DType, Tensor};

/// Writes ONNX nodes computing one recorded node's output, which must end
/// up under the name [`NodeCtx::out`].
pub(crate) type Mapper = fn(&mut Emit, &NodeCtx<'_>) -> Result<()>;

/// A recorded node, for its mapper.
pub(crate) struct NodeCtx<'a> {
    /// The node's index in the graph (for messages).
    pub index: usize,
    /// The op's name.
    pub op: &'a str,
    /// The op's settings.
    pub attrs: OpAttributes,
    /// The ONNX names of the node's inputs.
    pub inputs: Vec<String>,
    /// The recorded input values (shapes, dtypes, stored constants).
    pub values: Vec<Tensor>,
    /// The recorded output value.
    pub output: Tensor,
    /// The ONNX name the output must have.
    pub out: String,
}

impl NodeCtx<'_> {
    /// [`Error::OnnxExport`] for this node.
    pub fn unsupported(&self, reason: impl Into<String>) -> Error {
        Error::OnnxExport {
            op: self.op.to_string(),
            node: self.index,
            reason: reason.into(),
        }
    }

    fn missing(&self, key: &str) -> Error {
        self.unsupported(format!("the op does not list its `{key}` attribute"))
    }

    /// The integer attribute `key`.
    pub fn int(&self, key: &str) -> Result<i64> {
        self.attrs.get_int(key).ok_or_else(|| self.missing(key))
    }

    /// The integer-list attribute `key`.
    pub fn ints(&self, key: &str) -> Result<Vec<i64>> {
        self.attrs
            .get_ints(key)
            .map(<[i64]>::to_vec)
            .ok_or_else(|| self.missing(key))
    }

    /// The float attribute `key`.
    pub fn float(&self, key: &str) -> Result<f64> {
        self.attrs.get_float(key).ok_or_else(|| self.missing(key))
    }

    /// The switch `key`.
    pub fn flag(&self, key: &str) -> Result<bool> {
        self.attrs.get_bool(key).ok_or_else(|| self.missing(key))
    }

    /// The ONNX name of input `i`.
    pub fn input(&self, i: usize) -> &str {
        &self.inputs[i]
    }

    /// The recorded shape of input `i`.
    pub fn shape(&self, i: usize) -> &[usize] {
        self.values[i].shape()
    }

    /// The rank of input `i`.
    pub fn rank(&self, i: usize) -> usize {
        self.values[i].rank()
    }

    /// The output's dtype.
    pub fn dtype(&self) -> DType {
        self.output.dtype()
    }

    /// A fresh intermediate name derived from the output's.
    pub fn tmp(&self, emit: &mut Emit, what: &str) -> String {
        emit.fresh(&format!("{}/{what}", self.out))
    }

    /// `axis` (negative counts from the end) as an index into rank `rank`.
    pub fn axis(&self, axis: i64, rank: usize) -> Result<i64> {
        let r = rank as i64;
        if (-r.max(1)..r.max(1)).contains(&axis) {
            Ok(if axis < 0 { axis + r } else { axis })
        } else {
            Err(self.unsupported(format!("axis {axis} is out of range for rank {rank}")))
        }
    }
}
