//! The [`DType`] tag: which element type a tensor holds. A plain enum with
//! no dependencies, so that [`Error`](crate::Error) can name dtypes: it sits
//! with `error.rs` in the base layer (ARCHITECTURE.md, "Layers").

use std::fmt;

/// The element type of a tensor.
///
/// `F32` and `F64` are the float dtypes: the only ones ops compute and
/// differentiate in. `F16` and `BF16` are storage only (checkpoints from
/// other tools, half the memory): they are stored, cast, compared, moved
/// and saved, but arithmetic needs a cast to f32 first. `I64` (indices,
/// token ids, class targets) and `Bool` (masks, comparison results) are
/// never differentiable, and neither are the half dtypes.
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
    /// 16-bit IEEE half float (`half::f16`); storage only, never differentiable.
    F16,
    /// 16-bit brain float (`half::bf16`: f32's exponent, 8 bits of
    /// significand); storage only, never differentiable.
    BF16,
}

impl DType {
    /// Size of one element in bytes.
    ///
    /// ```
    /// use retrograd::DType;
    /// assert_eq!(DType::F32.size_in_bytes(), 4);
    /// assert_eq!(DType::I64.size_in_bytes(), 8);
    /// assert_eq!(DType::Bool.size_in_bytes(), 1);
    /// assert_eq!(DType::BF16.size_in_bytes(), 2);
    /// ```
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::Bool => 1,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether this is a float dtype (`F32` or `F64`): the dtypes that ops
    /// compute in and that can require grad.
    ///
    /// ```
    /// use retrograd::DType;
    /// assert!(DType::F64.is_float());
    /// assert!(!DType::I64.is_float() && !DType::Bool.is_float());
    /// assert!(!DType::BF16.is_float()); // storage only: see `is_half`
    /// ```
    #[inline(always)]
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }

    /// Whether this is a 16-bit float dtype (`F16` or `BF16`): floats that
    /// are stored, cast and saved but not computed in (cast to f32 first).
    ///
    /// ```
    /// use retrograd::DType;
    /// assert!(DType::F16.is_half() && DType::BF16.is_half());
    /// assert!(!DType::F32.is_half());
    /// ```
    #[inline(always)]
    pub fn is_half(self) -> bool {
        matches!(self, DType::F16 | DType::BF16)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I64 => "i64",
            DType::Bool => "bool",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        })
    }
}
