//! The element traits: [`DataType`], any type a tensor can store (`f32`,
//! `f64`, `i64`, `bool`, and the storage-only `half::f16`, `half::bf16`),
//! and [`Element`], the float subset that kernels compute in (`f32`, `f64`).

use std::fmt;

use super::math::{exp_f32, tanh_f32, tanh_f64};
use super::storage::Buffer;
use super::{Repr, Tensor, Word};
use crate::base::DType;
use std::sync::Arc;

/// Any element type a tensor can store: `f32`, `f64`, `i64`, `bool`,
/// `half::f16` or `half::bf16`.
///
/// Construction and access (`Tensor::from_vec`, `to_vec`, `as_slice`,
/// `make_mut`) and the layout kernels (copies, gathers, masks) are generic
/// over `DataType`; arithmetic is generic over the float subset [`Element`].
///
/// ```
/// use retrograd::{DType, DataType, Tensor};
/// assert_eq!(<i64 as DataType>::DTYPE, DType::I64);
/// let t = Tensor::from_vec(vec![true, false], &[2])?;
/// assert_eq!(t.to_vec::<bool>()?, vec![true, false]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait DataType:
    Copy
    + PartialEq
    + PartialOrd
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
    /// Converts from `f64`: rounding to nearest (ties to even) for `f32`,
    /// `f16` and `bf16` (overflow to infinity), truncation toward zero
    /// (saturating, NaN to 0) for `i64`, `v != 0` for `bool`.
    fn cast_from_f64(v: f64) -> Self;
    /// Converts from `i64` (rounding to nearest for floats, `v != 0` for `bool`).
    fn cast_from_i64(v: i64) -> Self;
    /// Converts to `f64` (exact for every float; `bool` is 0 or 1; `i64`
    /// rounds above 2^53).
    fn cast_to_f64(self) -> f64;
    /// Converts to `i64` (truncating floats toward zero, saturating, NaN
    /// to 0; `bool` is 0 or 1).
    fn cast_to_i64(self) -> i64;
    /// Wraps a scalar into a 0-d tensor.
    #[doc(hidden)]
    fn scalar_tensor(self) -> Tensor;
    /// Wraps a buffer into the dtype-tagged storage.
    #[doc(hidden)]
    fn wrap_buffer(data: Arc<[Self]>) -> Buffer;
    /// Views the storage as a slice of this type, if the dtype matches.
    #[doc(hidden)]
    fn unwrap_buffer(buf: &Buffer) -> Option<&Arc<[Self]>>;
    /// Mutable access to the storage as this type, if the dtype matches.
    #[doc(hidden)]
    fn unwrap_buffer_mut(buf: &mut Buffer) -> Option<&mut Arc<[Self]>>;
    /// The value of a 0-d tensor of this dtype.
    #[doc(hidden)]
    fn scalar_of(t: &Tensor) -> Option<Self>;
    /// The value of a 0-d tensor of this dtype, by reference.
    #[doc(hidden)]
    fn scalar_ref(t: &Tensor) -> Option<&Self>;
    /// The value of a 0-d tensor of this dtype, for writing in place.
    #[doc(hidden)]
    fn scalar_mut(t: &mut Tensor) -> Option<&mut Self>;
}

/// A floating-point element type retrograd computes in: `f32` or `f64`.
///
/// Kernels are generic over `Element`, so each one is written once and
/// compiled (and vectorised) for both types.
pub trait Element:
    DataType
    + num_traits::Float
    + num_traits::FloatConst
    + std::iter::Sum
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
{
    /// Converts from `f64` (rounding for `f32`).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` (exactly).
    fn to_f64(self) -> f64;
    /// `tanh`, branch-free so that a loop over a slice vectorises
    /// (see `tensor::math`).
    #[doc(hidden)]
    fn tanh_vectorisable(self) -> Self;
    /// `e^x` as the `exp` op computes it: for f32 the branch-free
    /// `tensor::math::exp_f32` (within 2 ulp), so a loop over a slice with
    /// an `exp` inside (the exact GELU's derivative) vectorises instead of
    /// calling libm per element; for f64 libm's, correctly rounded in
    /// practice and what the f64 reference tables were written against.
    #[doc(hidden)]
    fn exp_vectorisable(self) -> Self;
}

mod private {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for i64 {}
    impl Sealed for bool {}
    impl Sealed for half::f16 {}
    impl Sealed for half::bf16 {}
}

/// The storage plumbing of one dtype: its `Buffer` and `Repr` variants and
/// the `Word` accessors of its 0-d form.
macro_rules! data_type_plumbing {
    ($T:ty, $variant:ident, $from:ident, $get:ident, $get_ref:ident, $get_mut:ident) => {
        #[inline(always)]
        fn scalar_tensor(self) -> Tensor {
            Tensor::from_repr(Repr::$variant(Word::$from(self)))
        }
        #[inline(always)]
        fn wrap_buffer(data: Arc<[Self]>) -> Buffer {
            Buffer::$variant(data)
        }
        #[inline(always)]
        fn unwrap_buffer(buf: &Buffer) -> Option<&Arc<[Self]>> {
            match buf {
                Buffer::$variant(d) => Some(d),
                _ => None,
            }
        }
        #[inline(always)]
        fn unwrap_buffer_mut(buf: &mut Buffer) -> Option<&mut Arc<[Self]>> {
            match buf {
                Buffer::$variant(d) => Some(d),
                _ => None,
            }
        }
        #[inline(always)]
        fn scalar_of(t: &Tensor) -> Option<Self> {
            match t.repr() {
                Repr::$variant(v) => Some(v.$get()),
                _ => None,
            }
        }
        #[inline(always)]
        fn scalar_ref(t: &Tensor) -> Option<&Self> {
            match t.repr() {
                Repr::$variant(v) => Some(v.$get_ref()),
                _ => None,
            }
        }
        #[inline(always)]
        fn scalar_mut(t: &mut Tensor) -> Option<&mut Self> {
            match t.repr_mut() {
                Repr::$variant(v) => Some(v.$get_mut()),
                _ => None,
            }
        }
    };
}

impl DataType for f32 {
    const DTYPE: DType = DType::F32;
    #[inline(always)]
    fn cast_from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn cast_from_i64(v: i64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn cast_to_f64(self) -> f64 {
        f64::from(self)
    }
    #[inline(always)]
    fn cast_to_i64(self) -> i64 {
        self as i64
    }
    data_type_plumbing!(f32, F32, from_f32, f32, f32_ref, f32_mut);
}

impl DataType for f64 {
    const DTYPE: DType = DType::F64;
    #[inline(always)]
    fn cast_from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn cast_from_i64(v: i64) -> Self {
        v as f64
    }
    #[inline(always)]
    fn cast_to_f64(self) -> f64 {
        self
    }
    #[inline(always)]
    fn cast_to_i64(self) -> i64 {
        self as i64
    }
    data_type_plumbing!(f64, F64, from_f64, f64, f64_ref, f64_mut);
}

impl DataType for i64 {
    const DTYPE: DType = DType::I64;
    #[inline(always)]
    fn cast_from_f64(v: f64) -> Self {
        v as i64
    }
    #[inline(always)]
    fn cast_from_i64(v: i64) -> Self {
        v
    }
    #[inline(always)]
    fn cast_to_f64(self) -> f64 {
        self as f64
    }
    #[inline(always)]
    fn cast_to_i64(self) -> i64 {
        self
    }
    data_type_plumbing!(i64, I64, from_i64, i64, i64_ref, i64_mut);
}

impl DataType for bool {
    const DTYPE: DType = DType::Bool;
    #[inline(always)]
    fn cast_from_f64(v: f64) -> Self {
        v != 0.0
    }
    #[inline(always)]
    fn cast_from_i64(v: i64) -> Self {
        v != 0
    }
    #[inline(always)]
    fn cast_to_f64(self) -> f64 {
        f64::from(u8::from(self))
    }
    #[inline(always)]
    fn cast_to_i64(self) -> i64 {
        i64::from(self)
    }
    data_type_plumbing!(bool, Bool, from_bool, bool, bool_ref, bool_mut);
}

/// `v` as an f64, exact below 2^53 and rounded to odd above: the dropped
/// bits' "any set" goes into the last kept bit, so a later rounding to
/// fewer bits (f32 to odd, then f16 or bf16) is correctly rounded. `v as
/// f64` would round to nearest first, and a value just off a bf16 midpoint
/// could land on it and then tie the wrong way.
fn i64_to_f64_round_to_odd(v: i64) -> f64 {
    let mag = v.unsigned_abs();
    let bits = 64 - mag.leading_zeros();
    if bits <= 53 {
        return v as f64;
    }
    let drop = bits - 53;
    let sticky = u64::from(mag & ((1u64 << drop) - 1) != 0);
    // 53 significant bits: exact in f64, and so is the power-of-two scaling.
    let f = ((mag >> drop) | sticky) as f64 * f64::from(1u32 << drop);
    if v < 0 {
        -f
    } else {
        f
    }
}

/// `v` as an f32 rounded to odd: the nearest f32 if exact, else of the two
/// f32s around `v` the one with an odd last bit (an infinity becomes the
/// largest finite f32). Rounding that again to 11 or 8 significant bits
/// (f16, bf16: at least two fewer than f32's 24) is correctly rounded.
///
/// `half`'s own `from_f64` drops the low 32 bits of the f64 before it
/// rounds, so a value just above a tie (the excess in those bits) would tie
/// to even; its `from_f32` rounds correctly from every bit.
fn f64_to_f32_round_to_odd(v: f64) -> f32 {
    let f = v as f32;
    if f.is_nan() || f64::from(f) == v {
        return f;
    }
    let bits = f.to_bits();
    if bits & 1 == 1 {
        return f;
    }
    // The nearest was even and inexact: its neighbour toward `v` is odd.
    if f64::from(f).abs() > v.abs() {
        f32::from_bits(bits - 1)
    } else {
        f32::from_bits(bits + 1)
    }
}

/// A storage-only 16-bit float: to f64 is exact; from f64 or i64 rounds
/// once, to nearest with ties to even (through f32 rounded to odd).
macro_rules! half_data_type {
    ($T:ty, $variant:ident, $from:ident, $get:ident, $get_ref:ident, $get_mut:ident) => {
        impl DataType for $T {
            const DTYPE: DType = DType::$variant;
            #[inline(always)]
            fn cast_from_f64(v: f64) -> Self {
                <$T>::from_f32(f64_to_f32_round_to_odd(v))
            }
            #[inline(always)]
            fn cast_from_i64(v: i64) -> Self {
                Self::cast_from_f64(i64_to_f64_round_to_odd(v))
            }
            #[inline(always)]
            fn cast_to_f64(self) -> f64 {
                self.to_f64()
            }
            #[inline(always)]
            fn cast_to_i64(self) -> i64 {
                self.to_f64() as i64
            }
            data_type_plumbing!($T, $variant, $from, $get, $get_ref, $get_mut);
        }
    };
}

half_data_type!(half::f16, F16, from_f16, f16, f16_ref, f16_mut);
half_data_type!(half::bf16, BF16, from_bf16, bf16, bf16_ref, bf16_mut);

impl Element for f32 {
    #[inline(always)]
    fn tanh_vectorisable(self) -> Self {
        tanh_f32(self)
    }
    #[inline(always)]
    fn exp_vectorisable(self) -> Self {
        exp_f32(self)
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Element for f64 {
    #[inline(always)]
    fn tanh_vectorisable(self) -> Self {
        tanh_f64(self)
    }
    #[inline(always)]
    fn exp_vectorisable(self) -> Self {
        self.exp()
    }
    #[inline(always)]
    fn from_f64(v: f64) -> Self {
        v
    }
    #[inline(always)]
    fn to_f64(self) -> f64 {
        self
    }
}
