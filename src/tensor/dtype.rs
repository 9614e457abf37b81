//! The [`DType`] tag: which element type a tensor holds. A plain enum with
//! no dependencies, so that [`Error`](crate::Error) can name dtypes: it sits
//! with `error.rs` in the lowest layer (ARCHITECTURE.md, "Layers").

use std::fmt;

/// The element type of a tensor.
///
/// `F32` and `F64` are the float dtypes: the only ones ops compute and
/// differentiate in. `I64` (indices, token ids, class targets) and `Bool`
/// (masks, comparison results) are never differentiable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit IEEE float.
    F32,
    /// 64-bit IEEE float.
    F64,
    /// 64-bit signed integer (indices, targets); never differentiable.
    I64,
    /// Boolean (masks, comparison results); never differentiable.
    Bool,
}

impl DType {
    /// Size of one element in bytes.
    ///
    /// ```
    /// use retrograd::DType;
    /// assert_eq!(DType::F32.size_in_bytes(), 4);
    /// assert_eq!(DType::I64.size_in_bytes(), 8);
    /// assert_eq!(DType::Bool.size_in_bytes(), 1);
    /// ```
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
        }
    }

    /// Whether this is a float dtype (`F32` or `F64`): the dtypes that ops
    /// compute in and that can require grad.
    ///
    /// ```
    /// use retrograd::DType;
    /// assert!(DType::F64.is_float());
    /// assert!(!DType::I64.is_float() && !DType::Bool.is_float());
    /// ```
    #[inline(always)]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::Bool => "bool",
        })
    }
}
