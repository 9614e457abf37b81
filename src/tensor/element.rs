//! The [`Element`] trait that kernels are generic over: `f32` and `f64`.

use std::fmt;

use super::dtype::DType;
use super::math::{tanh_f32, tanh_f64};

/// A floating-point element type retrograd computes in: `f32` or `f64`.
///
/// Kernels are generic over `Element`, so each one is written once and
/// compiled (and vectorised) for both types.
pub trait Element:
    num_traits::Float
    + num_traits::FloatConst
    + std::iter::Sum
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
    + fmt::Debug
    + fmt::Display
    + Default
    + Send
    + Sync
    + 'static
    + private::Sealed
{
    /// The dtype tag of this element type.
    const DTYPE: DType;
    /// Converts from `f64` (rounding for `f32`).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` (exactly).
    fn to_f64(self) -> f64;
    /// `tanh`, branch-free so that a loop over a slice vectorises
    /// (see `tensor::math`).
    #[doc(hidden)]
    fn tanh_vectorisable(self) -> Self;
    /// Wraps a scalar into a tensor.
    #[doc(hidden)]
    fn scalar_tensor(self) -> super::Tensor;
    /// Wraps a buffer into the dtype-tagged storage.
    #[doc(hidden)]
    fn wrap_buffer(data: std::sync::Arc<[Self]>) -> super::storage::Buffer;
    /// Views the storage as a slice of this type, if the dtype matches.
    #[doc(hidden)]
    fn unwrap_buffer(buf: &super::storage::Buffer) -> Option<&std::sync::Arc<[Self]>>;
    /// Mutable access to the storage as this type, if the dtype matches.
    #[doc(hidden)]
    fn unwrap_buffer_mut(buf: &mut super::storage::Buffer) -> Option<&mut std::sync::Arc<[Self]>>;
    /// The value of a 0-d tensor of this dtype.
    #[doc(hidden)]
    fn scalar_of(t: &super::Tensor) -> Option<Self>;
    /// The value of a 0-d tensor of this dtype, by reference.
    #[doc(hidden)]
    fn scalar_ref(t: &super::Tensor) -> Option<&Self>;
    /// The value of a 0-d tensor of this dtype, for writing in place.
    #[doc(hidden)]
    fn scalar_mut(t: &mut super::Tensor) -> Option<&mut Self>;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn tanh_vectorisable(self) -> Self {
        tanh_f32(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn scalar_tensor(self) -> super::Tensor {
        super::Tensor::from_repr(super::Repr::F32(super::Word::from_f32(self)))
    }
    #[inline(always)]
    fn wrap_buffer(data: std::sync::Arc<[Self]>) -> super::storage::Buffer {
        super::storage::Buffer::F32(data)
    }
    #[inline(always)]
    fn unwrap_buffer(buf: &super::storage::Buffer) -> Option<&std::sync::Arc<[Self]>> {
        match buf {
            super::storage::Buffer::F32(d) => Some(d),
            _ => None,
        }
    }
    #[inline(always)]
    fn unwrap_buffer_mut(buf: &mut super::storage::Buffer) -> Option<&mut std::sync::Arc<[Self]>> {
        match buf {
            super::storage::Buffer::F32(d) => Some(d),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_of(t: &super::Tensor) -> Option<Self> {
        match t.repr() {
            super::Repr::F32(v) => Some(v.f32()),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_ref(t: &super::Tensor) -> Option<&Self> {
        match t.repr() {
            super::Repr::F32(v) => Some(v.f32_ref()),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_mut(t: &mut super::Tensor) -> Option<&mut Self> {
        match t.repr_mut() {
            super::Repr::F32(v) => Some(v.f32_mut()),
            _ => None,
        }
    }
}

impl Element for f64 {
    const DTYPE: DType = DType::F64;
    #[inline(always)]
    fn tanh_vectorisable(self) -> Self {
        tanh_f64(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn scalar_tensor(self) -> super::Tensor {
        super::Tensor::from_repr(super::Repr::F64(super::Word::from_f64(self)))
    }
    #[inline(always)]
    fn wrap_buffer(data: std::sync::Arc<[Self]>) -> super::storage::Buffer {
        super::storage::Buffer::F64(data)
    }
    #[inline(always)]
    fn unwrap_buffer(buf: &super::storage::Buffer) -> Option<&std::sync::Arc<[Self]>> {
        match buf {
            super::storage::Buffer::F64(d) => Some(d),
            _ => None,
        }
    }
    #[inline(always)]
    fn unwrap_buffer_mut(buf: &mut super::storage::Buffer) -> Option<&mut std::sync::Arc<[Self]>> {
        match buf {
            super::storage::Buffer::F64(d) => Some(d),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_of(t: &super::Tensor) -> Option<Self> {
        match t.repr() {
            super::Repr::F64(v) => Some(v.f64()),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_ref(t: &super::Tensor) -> Option<&Self> {
        match t.repr() {
            super::Repr::F64(v) => Some(v.f64_ref()),
            _ => None,
        }
    }
    #[inline(always)]
    fn scalar_mut(t: &mut super::Tensor) -> Option<&mut Self> {
        match t.repr_mut() {
            super::Repr::F64(v) => Some(v.f64_mut()),
            _ => None,
        }
    }
}
