//! [`Tensor`]: an immutable n-dimensional value with a shape, a dtype and
//! shared storage.
//!
//! Representation: a 0-d tensor (a scalar) is stored inline, with no heap
//! allocation at all, so graphs of scalar ops cost no allocator traffic. Every
//! tensor of rank 1 or more is dense, its elements in an `Arc<[T]>` shared by
//! every clone (and by reshapes of it): row-major over the whole buffer, or a
//! strided [`view`] of another tensor's buffer (a transpose, narrow, select
//! or expand), which copies nothing until a kernel needs rows.
//!
//! Dtypes: `f32` and `f64` (the [`Element`]s, which ops compute and
//! differentiate in), `i64` and `bool` (indices and masks), and the
//! storage-only `f16` and `bf16` (any [`DataType`]). All six have an inline
//! 0-d form and a dense form.
//!
//! Where things are: `Tensor` (`mod.rs`; `DType` is re-exported from
//! `base`), (`element.rs` also implements `DataType` for
//! `half::f16`/`bf16`, storage only: f64 and i64 round once to them,
//! through f32 rounded to odd, because `half`'s `from_f64` drops the low 32
//! bits before it rounds), the `Element` trait (`element.rs`), branch-free
//! scalar `exp`/`tanh` for f32/f64 (`math.rs`: Cephes, within 2 ulp; behind
//! `Element::tanh_vectorisable`/`exp_vectorisable` (the `exp` op's f32
//! rule) and the vectorised exp and tanh loops) and a branch-free f32
//! `erfc` (within 6 ulp; the exact GELU), shapes and broadcasting rules
//! (`shape.rs`), `Arc<[T]>` storage and `unique_mut` (`storage.rs`),
//! strided views (`view.rs`: `transpose`/`permute`, `narrow`/stepped
//! slices, `select`, `expand` and reshapes that PyTorch's view rule allows
//! share storage; `strides`, `storage_offset`, `is_contiguous`,
//! `contiguous`, and `Tensor::strided` for kernels that read strides) and
//! the copy that packs a view (`strided_copy.rs`: coalesced dimensions,
//! tiled 2-d transposes), kernel outputs built in uninitialised storage
//! (`fill.rs`: `Tensor::build`, the `Filled` proof, `from_exact_iter`), the
//! per-thread pool of small dense tensors (`recycle.rs`), transparent huge
//! pages asked for behind buffers of 4 MiB or more (`huge_pages.rs`), buffers a
//! compiled step's memory plan lends to the next builds (`planned.rs`), a buffer the
//! allocator refuses turned into `Error::OutOfMemory` at the op or backward
//! that asked for it instead of an abort (`refused.rs`: large buffers are
//! asked for fallibly first; `Graph::record` and `backward` catch), a 0-d value's
//! 8-byte word (`word.rs`; an f16/bf16 in its low 16 bits), `Display`,
//! seeded random tensors, `TensorSummary` (`summary.rs`: norm, extremes,
//! mean, non-finite count and, when few, the elements).

mod display;
mod element;
mod fill;
mod huge_pages;
pub(crate) mod math;
pub(crate) mod planned;
mod random;
pub mod recycle;
pub(crate) mod refused;
pub mod shape;
pub(crate) mod storage;
mod strided_copy;
mod summary;
#[cfg(test)]
pub(crate) mod test_util;
mod view;
mod word;

use std::mem::ManuallyDrop;
use std::sync::Arc;

pub use crate::base::DType;
pub use element::{DataType, Element};
pub use fill::Filled;
pub use shape::Dims;
use storage::Buffer;
pub use summary::TensorSummary;
pub(crate) use view::{check_permutation, Strided};
pub(crate) use word::Word;

use crate::base::error::{Error, Result};

/// An immutable n-dimensional array of `f32`, `f64`, `i64`, `bool`, `f16`
/// or `bf16`.
///
/// Cloning is cheap (a reference-count increment, or a copy for scalars) and
/// never copies elements. Nothing can mutate a tensor's elements while they
/// are shared.
///
/// ```
/// use retrograd::{Tensor, DType};
/// let t = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// assert_eq!(t.shape(), &[2, 2]);
/// assert_eq!(t.dtype(), DType::F32);
/// assert_eq!(t.to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0]);
/// assert_eq!(Tensor::scalar(2.5).try_item()?, 2.5);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Tensor {
    repr: Repr,
}

#[derive(Clone)]
pub(crate) enum Repr {
    /// A 0-d f32; every payload is one 8-byte word (see [`Word`] for why).
    F32(Word),
    F64(Word),
    /// A 0-d i64 (not differentiable).
    I64(Word),
    /// A 0-d bool, 0 or 1 in the low byte (not differentiable).
    Bool(Word),
    /// A 0-d f16 in the low 16 bits (storage only).
    F16(Word),
    /// A 0-d bf16 in the low 16 bits (storage only).
    BF16(Word),
    /// Rank >= 1. `ManuallyDrop` because `Tensor`'s `Drop` releases it (out
    /// of line), so the drop glue of a 0-d tensor inlined everywhere is one
    /// test of the tag.
    Dense(ManuallyDrop<Arc<Dense>>),
}

impl Repr {
    #[inline(always)]
    pub(crate) fn dense(dense: Arc<Dense>) -> Repr {
        Repr::Dense(ManuallyDrop::new(dense))
    }
}

pub(crate) struct Dense {
    shape: Dims,
    buf: Buffer,
    /// `Some` when this tensor is a strided view of `buf` (see [`view`]).
    view: Option<Box<view::View>>,
}

impl Drop for Tensor {
    /// The last owner of a small dense tensor hands its storage to the
    /// recycling pool (see [`recycle`]).
    #[inline(always)]
    fn drop(&mut self) {
        if let Repr::Dense(dense) = &mut self.repr {
            // SAFETY: the tensor is being dropped: `dense` is never read
            // again, and being `ManuallyDrop` it has no drop glue to run twice.
            release(unsafe { ManuallyDrop::take(dense) });
        }
    }
}

/// Drops one owner of dense storage; the last one recycles it. Out of
/// line, so a 0-d tensor's drop stays one tag test (ARCHITECTURE.md, PERF).
#[inline(never)]
fn release(dense: Arc<Dense>) {
    if Arc::strong_count(&dense) == 1 {
        drop(recycle::recycle(dense));
    }
}

/// The shape of a 0-d tensor. It points into a real static rather than at a
/// dangling address: libc's AVX-512 `memcmp` does a masked load even for zero
/// bytes, and a masked load from an unmapped page costs a microcode assist of
/// hundreds of cycles (measured: half the time of a scalar graph's backward).
static SCALAR_STORAGE: [usize; 1] = [0];

#[inline(always)]
fn scalar_shape() -> &'static [usize] {
    &SCALAR_STORAGE[..0]
}

/// The element count of a shape already known to be valid; a zero-sized
/// shape may have other dimensions whose product alone would overflow.
#[inline(always)]
fn element_count(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        0
    } else {
        shape.iter().product()
    }
}

impl Tensor {
    #[inline(always)]
    pub(crate) fn from_repr(repr: Repr) -> Self {
        Tensor { repr }
    }

    #[inline(always)]
    pub(crate) fn repr(&self) -> &Repr {
        &self.repr
    }

    #[inline(always)]
    pub(crate) fn repr_mut(&mut self) -> &mut Repr {
        &mut self.repr
    }

    /// Builds a tensor from a shared buffer whose length matches `shape`.
    #[inline]
    pub(crate) fn from_buffer<T: DataType>(shape: Dims, data: Arc<[T]>) -> Self {
        debug_assert_eq!(element_count(&shape), data.len());
        if shape.is_empty() {
            return data[0].scalar_tensor();
        }
        Tensor {
            repr: Repr::dense(Arc::new(Dense {
                shape,
                buf: T::wrap_buffer(data),
                view: None,
            })),
        }
    }

    /// A 0-d tensor holding `value`; `Tensor::scalar(3.0)` is f64, `Tensor::scalar(3.0f32)` is f32,
    /// `Tensor::scalar(3i64)` is i64 and `Tensor::scalar(true)` is bool.
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// assert_eq!(Tensor::scalar(3.0).dtype(), DType::F64);
    /// assert_eq!(Tensor::scalar(3.0f32).dtype(), DType::F32);
    /// assert_eq!(Tensor::scalar(3i64).dtype(), DType::I64);
    /// assert_eq!(Tensor::scalar(true).to_vec::<bool>()?, vec![true]);
    /// assert_eq!(Tensor::scalar(3.0).shape(), &[] as &[usize]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[inline(always)]
    pub fn scalar<T: DataType>(value: T) -> Self {
        value.scalar_tensor()
    }

    /// A 0-d tensor of `dtype` holding `value` (rounded to f32, f16 or
    /// bf16 if needed; cast as by [`to_dtype`](Self::to_dtype) for i64 and
    /// bool).
    #[inline(always)]
    pub fn scalar_of(value: f64, dtype: DType) -> Self {
        match dtype {
            DType::F32 => (value as f32).scalar_tensor(),
            DType::F64 => value.scalar_tensor(),
            DType::I64 => i64::cast_from_f64(value).scalar_tensor(),
            DType::Bool => bool::cast_from_f64(value).scalar_tensor(),
            DType::F16 => half::f16::cast_from_f64(value).scalar_tensor(),
            DType::BF16 => half::bf16::cast_from_f64(value).scalar_tensor(),
        }
    }

    /// A tensor of `shape` holding `data` in row-major order.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert!(Tensor::from_vec(vec![1.0, 2.0], &[3]).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    ///
    /// Any [`DataType`]: `i64` token ids and `bool` masks too.
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// let ids = Tensor::from_vec(vec![3i64, 0, 7], &[3])?;
    /// assert_eq!(ids.dtype(), DType::I64);
    /// assert_eq!(ids.to_vec::<i64>()?, vec![3, 0, 7]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn from_vec<T: DataType>(data: Vec<T>, shape: &[usize]) -> Result<Self> {
        Self::from_slice(&data, shape)
    }

    /// A tensor of `shape` holding a copy of `data` in row-major order.
    pub fn from_slice<T: DataType>(data: &[T], shape: &[usize]) -> Result<Self> {
        let n = shape::checked_numel("from_vec", shape)?;
        if n != data.len() {
            return Err(Error::ElementCount {
                op: "from_vec",
                len: data.len(),
                shape: shape.to_vec(),
            });
        }
        Ok(Self::from_buffer(
            Dims::from_slice(shape),
            storage::from_slice(data),
        ))
    }

    /// A 1-d tensor holding `data`.
    pub fn vector<T: DataType>(data: &[T]) -> Self {
        Self::from_buffer(Dims::from_slice(&[data.len()]), storage::from_slice(data))
    }

    /// A tensor of `shape` filled with `value` (cast to `dtype` as by
    /// [`to_dtype`](Self::to_dtype): truncated for i64, `value != 0` for bool).
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// let t = Tensor::full(&[2], 7.0, DType::F32)?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![7.0, 7.0]);
    /// assert_eq!(Tensor::full(&[2], 1.0, DType::Bool)?.to_vec::<bool>()?, vec![true, true]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn full(shape: &[usize], value: f64, dtype: DType) -> Result<Self> {
        Self::filled("full", shape, value, dtype)
    }

    /// A tensor of `shape` filled with zeros.
    pub fn zeros(shape: &[usize], dtype: DType) -> Result<Self> {
        Self::filled("zeros", shape, 0.0, dtype)
    }

    /// A tensor of `shape` filled with ones.
    pub fn ones(shape: &[usize], dtype: DType) -> Result<Self> {
        Self::filled("ones", shape, 1.0, dtype)
    }

    /// `full` with errors naming `op`; a shape too large to allocate is
    /// `Error::ShapeOverflow`, not an allocator abort.
    fn filled(op: &'static str, shape: &[usize], value: f64, dtype: DType) -> Result<Self> {
        let n = shape::checked_numel(op, shape)?;
        Ok(crate::with_any_dtype!(dtype, T => Self::from_buffer(
            Dims::from_slice(shape),
            Arc::from(storage::try_filled(op, shape, n, T::cast_from_f64(value))?),
        )))
    }

    /// Zeros with the shape and dtype of `self`.
    pub fn zeros_like(&self) -> Self {
        match self.repr {
            Repr::F32(_) => Tensor::scalar(0.0f32),
            Repr::F64(_) => Tensor::scalar(0.0f64),
            Repr::I64(_) => Tensor::scalar(0i64),
            Repr::Bool(_) => Tensor::scalar(false),
            Repr::F16(_) => Tensor::scalar(half::f16::ZERO),
            Repr::BF16(_) => Tensor::scalar(half::bf16::ZERO),
            Repr::Dense(_) => Self::full(self.shape(), 0.0, self.dtype())
                .expect("an existing tensor's shape has a valid element count"),
        }
    }

    /// Ones with the shape and dtype of `self`.
    pub fn ones_like(&self) -> Self {
        Self::full(self.shape(), 1.0, self.dtype())
            .expect("an existing tensor's shape has a valid element count")
    }

    /// `[start, start + step, ...]` up to but excluding `end`, as a 1-d tensor.
    ///
    /// For `DType::I64`, `start`, `end` and `step` must be whole numbers
    /// (then it is [`arange_i64`](Self::arange_i64)); `DType::Bool` is
    /// `Error::WrongDType`; for f16 and bf16 the values are computed in f64
    /// and rounded once.
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// let t = Tensor::arange(0.0, 2.0, 0.5, DType::F64)?;
    /// assert_eq!(t.to_f64_vec(), vec![0.0, 0.5, 1.0, 1.5]);
    /// let i = Tensor::arange(0.0, 3.0, 1.0, DType::I64)?;
    /// assert_eq!(i.to_vec::<i64>()?, vec![0, 1, 2]);
    /// assert!(Tensor::arange(0.0, 3.0, 0.5, DType::I64).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn arange(start: f64, end: f64, step: f64, dtype: DType) -> Result<Self> {
        match dtype {
            DType::Bool => {
                return Err(Error::WrongDType {
                    op: "arange",
                    expected: DType::I64,
                    found: DType::Bool,
                })
            }
            DType::I64 => {
                let whole = |v: f64| v.fract() == 0.0 && v.abs() < 9.2e18;
                if !(whole(start) && whole(end) && whole(step)) {
                    return Err(Error::invalid(
                        "arange",
                        format!(
                            "an i64 arange needs whole numbers: start {start}, end {end}, step {step}"
                        ),
                    ));
                }
                return Self::arange_i64(start as i64, end as i64, step as i64);
            }
            DType::F32 | DType::F64 | DType::F16 | DType::BF16 => {}
        }
        if !(start.is_finite() && end.is_finite() && step.is_finite()) || step == 0.0 {
            return Err(Error::invalid(
                "arange",
                format!("start {start}, end {end} and step {step} must be finite, step nonzero"),
            ));
        }
        let count = ((end - start) / step).ceil();
        let n = if count > 0.0 { count as usize } else { 0 };
        if n > (isize::MAX as usize) / 8 {
            return Err(Error::ShapeOverflow {
                op: "arange",
                shape: vec![n],
            });
        }
        let mut values: Vec<f64> = storage::try_with_capacity("arange", &[n], n)?;
        values.extend((0..n).map(|i| start + step * i as f64));
        Self::from_f64_slice(&values, &[n], dtype)
    }

    /// `[start, start + step, ...]` up to but excluding `end`, as a 1-d i64
    /// tensor (PyTorch's `torch.arange(start, end, step)` on integers). A
    /// zero step is an error.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// assert_eq!(Tensor::arange_i64(0, 5, 2)?.to_vec::<i64>()?, vec![0, 2, 4]);
    /// assert_eq!(Tensor::arange_i64(3, 0, -1)?.to_vec::<i64>()?, vec![3, 2, 1]);
    /// assert_eq!(Tensor::arange_i64(3, 0, 1)?.numel(), 0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn arange_i64(start: i64, end: i64, step: i64) -> Result<Self> {
        if step == 0 {
            return Err(Error::invalid("arange", "step must be nonzero"));
        }
        let span = i128::from(end) - i128::from(start);
        let step_wide = i128::from(step);
        let count = if (span > 0) == (step > 0) && span != 0 {
            (span + step_wide - step_wide.signum()) / step_wide
        } else {
            0
        };
        let n = usize::try_from(count).unwrap_or(usize::MAX);
        if n > (isize::MAX as usize) / 8 {
            return Err(Error::ShapeOverflow {
                op: "arange",
                shape: vec![n],
            });
        }
        let mut values: Vec<i64> = storage::try_with_capacity("arange", &[n], n)?;
        values.extend((0..n as i64).map(|i| start + step * i));
        Self::from_slice(&values, &[n])
    }

    /// A tensor of `dtype` and `shape` from f64 values (rounded for f32,
    /// f16 and bf16, cast as by [`to_dtype`](Self::to_dtype) for i64 and
    /// bool).
    pub fn from_f64_slice(data: &[f64], shape: &[usize], dtype: DType) -> Result<Self> {
        if dtype == DType::F64 {
            return Self::from_slice(data, shape);
        }
        crate::with_any_dtype!(dtype, T => {
            let v: Vec<T> = data.iter().map(|&x| T::cast_from_f64(x)).collect();
            Tensor::from_slice(&v, shape)
        })
    }

    /// The dimensions.
    #[inline(always)]
    pub fn shape(&self) -> &[usize] {
        match &self.repr {
            Repr::Dense(d) => &d.shape,
            _ => scalar_shape(),
        }
    }

    /// The number of dimensions.
    #[inline(always)]
    pub fn rank(&self) -> usize {
        self.shape().len()
    }

    /// The element type.
    #[inline(always)]
    pub fn dtype(&self) -> DType {
        match &self.repr {
            Repr::F32(_) => DType::F32,
            Repr::F64(_) => DType::F64,
            Repr::I64(_) => DType::I64,
            Repr::Bool(_) => DType::Bool,
            Repr::F16(_) => DType::F16,
            Repr::BF16(_) => DType::BF16,
            Repr::Dense(d) => d.buf.dtype(),
        }
    }

    /// The number of elements.
    #[inline(always)]
    pub fn numel(&self) -> usize {
        match &self.repr {
            Repr::Dense(d) => match &d.view {
                None => d.buf.len(),
                Some(v) => v.numel(),
            },
            _ => 1,
        }
    }

    /// Whether both tensors have the same shape (cheap for scalars).
    #[inline(always)]
    pub fn same_shape(&self, other: &Tensor) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Dense(a), Repr::Dense(b)) => shape::same_dims(&a.shape, &b.shape),
            (Repr::Dense(_), _) | (_, Repr::Dense(_)) => false,
            _ => true,
        }
    }

    /// `self += other` when both are 0-d of the same dtype; returns whether it applied.
    #[inline(always)]
    pub(crate) fn add_scalar_in_place(&mut self, other: &Tensor) -> bool {
        match (&mut self.repr, &other.repr) {
            (Repr::F32(a), Repr::F32(b)) => *a = Word::from_f32(a.f32() + b.f32()),
            (Repr::F64(a), Repr::F64(b)) => *a = Word::from_f64(a.f64() + b.f64()),
            _ => return false,
        }
        true
    }

    /// Whether this is a 0-d tensor.
    #[inline(always)]
    pub fn is_scalar(&self) -> bool {
        !matches!(self.repr, Repr::Dense(_))
    }

    /// The value of a one-element tensor (of any rank), as f64 (a bool is 0
    /// or 1); an error naming the shape otherwise.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// assert_eq!(Tensor::from_vec(vec![4.0f32], &[1, 1])?.try_item()?, 4.0);
    /// assert!(Tensor::from_vec(vec![1.0, 2.0], &[2])?.try_item().is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn try_item(&self) -> Result<f64> {
        match &self.repr {
            Repr::F32(v) => Ok(f64::from(v.f32())),
            Repr::F64(v) => Ok(v.f64()),
            Repr::I64(v) => Ok(v.i64() as f64),
            Repr::Bool(v) => Ok(v.bool().cast_to_f64()),
            Repr::F16(v) => Ok(v.f16().to_f64()),
            Repr::BF16(v) => Ok(v.bf16().to_f64()),
            Repr::Dense(d) if d.view.is_some() && self.numel() == 1 => Ok(self.to_f64_vec()[0]),
            Repr::Dense(d) if d.view.is_none() && d.buf.len() == 1 => Ok(match &d.buf {
                Buffer::F32(b) => b[0] as f64,
                Buffer::F64(b) => b[0],
                Buffer::I64(b) => b[0] as f64,
                Buffer::Bool(b) => b[0].cast_to_f64(),
                Buffer::F16(b) => b[0].to_f64(),
                Buffer::BF16(b) => b[0].to_f64(),
            }),
            Repr::Dense(d) => Err(Error::NotAScalar {
                op: "item",
                shape: d.shape.to_vec(),
            }),
        }
    }

    /// The value of a one-element tensor, as f64; panics at the caller's
    /// line for any other (see [`try_item`](Self::try_item)).
    ///
    /// ```
    /// use retrograd::Tensor;
    /// assert_eq!(Tensor::scalar(2.5).item(), 2.5);
    /// ```
    #[track_caller]
    pub fn item(&self) -> f64 {
        match self.try_item() {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    /// All elements, converted to f64, in row-major order (a bool is 0 or 1).
    pub fn to_f64_vec(&self) -> Vec<f64> {
        fn widen<T: DataType>(t: &Tensor) -> Vec<f64> {
            t.as_slice_of::<T>()
                .iter()
                .map(|&v| v.cast_to_f64())
                .collect()
        }
        crate::with_any_dtype!(self.dtype(), T => widen::<T>(self))
    }

    /// All elements in row-major order; `T` must be the tensor's dtype.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let t = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0]);
    /// assert!(t.to_vec::<f64>().is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn to_vec<T: DataType>(&self) -> Result<Vec<T>> {
        match self.try_slice::<T>() {
            Some(s) => Ok(s.to_vec()),
            None => Err(Error::WrongDType {
                op: "to_vec",
                expected: T::DTYPE,
                found: self.dtype(),
            }),
        }
    }

    /// Borrows the elements in row-major order; `T` must be the tensor's dtype.
    pub fn as_slice<T: DataType>(&self) -> Result<&[T]> {
        self.try_slice::<T>().ok_or(Error::WrongDType {
            op: "as_slice",
            expected: T::DTYPE,
            found: self.dtype(),
        })
    }

    /// The elements as `&[T]`, or `None` if the dtype differs.
    #[inline(always)]
    pub(crate) fn try_slice<T: DataType>(&self) -> Option<&[T]> {
        match &self.repr {
            Repr::Dense(d) => match &d.view {
                None => T::unwrap_buffer(&d.buf).map(|a| &a[..]),
                Some(v) => d.view_slice(v),
            },
            _ => T::scalar_ref(self).map(std::slice::from_ref),
        }
    }

    /// The elements as `&[T]`; the caller has checked the dtype.
    #[inline(always)]
    pub fn as_slice_of<T: DataType>(&self) -> &[T] {
        self.try_slice::<T>()
            .expect("dtype was checked by the caller")
    }

    /// Mutable access to the elements if this tensor is their only owner
    /// (copy-on-write support for in-place updates).
    pub(crate) fn unique_slice_mut<T: DataType>(&mut self) -> Option<&mut [T]> {
        if self.is_scalar() {
            return T::scalar_mut(self).map(std::slice::from_mut);
        }
        match &mut self.repr {
            // A view shares (part of) a buffer: never written in place.
            Repr::Dense(d) if d.view.is_some() => None,
            Repr::Dense(d) => {
                let dense = storage::unique_mut(d)?;
                T::unwrap_buffer_mut(&mut dense.buf).and_then(storage::unique_mut)
            }
            _ => None,
        }
    }

    /// Gives this tensor `shape` (of its own element count) in place, when
    /// it is the only owner of a dense, unviewed buffer; returns whether it
    /// did. A compiled step reuses one planned buffer for values of
    /// different shapes this way, without allocating.
    pub(crate) fn reshape_unique(&mut self, shape: &[usize]) -> bool {
        match &mut self.repr {
            Repr::Dense(d)
                if d.view.is_none() && element_count(shape) == element_count(&d.shape) =>
            {
                match storage::unique_mut(d) {
                    Some(dense) => {
                        if dense.shape.as_slice() != shape {
                            dense.shape = Dims::from_slice(shape);
                        }
                        true
                    }
                    None => false,
                }
            }
            _ => false,
        }
    }

    /// Mutable access to the elements, copying them first if the storage is
    /// shared (copy on write, like `Arc::make_mut`): shared storage is never
    /// written. `T` must be the tensor's dtype.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let mut b = a.clone();
    /// b.make_mut::<f32>()?[0] = 5.0;
    /// assert_eq!(a.to_vec::<f32>()?, vec![1.0, 2.0]);   // untouched
    /// assert_eq!(b.to_vec::<f32>()?, vec![5.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn make_mut<T: DataType>(&mut self) -> Result<&mut [T]> {
        if self.dtype() != T::DTYPE {
            return Err(Error::WrongDType {
                op: "make_mut",
                expected: T::DTYPE,
                found: self.dtype(),
            });
        }
        if self.unique_slice_mut::<T>().is_none() {
            let copy = Self::from_buffer(
                Dims::from_slice(self.shape()),
                storage::from_slice(self.as_slice_of::<T>()),
            );
            *self = copy;
        }
        Ok(self
            .unique_slice_mut::<T>()
            .expect("a fresh copy has one owner"))
    }

    /// The same elements with another shape of equal element count, sharing storage.
    pub fn reshape(&self, shape: &[usize]) -> Result<Self> {
        let n = shape::checked_numel("reshape", shape)?;
        if n != self.numel() {
            return Err(Error::ElementCount {
                op: "reshape",
                len: self.numel(),
                shape: shape.to_vec(),
            });
        }
        if shape == self.shape() {
            return Ok(self.clone());
        }
        Ok(match &self.repr {
            Repr::Dense(d) if d.view.is_some() => self.reshape_view(shape),
            Repr::Dense(d) if !shape.is_empty() => Tensor {
                repr: Repr::dense(planned::new_dense(
                    Dims::from_slice(shape),
                    d.buf.clone(),
                    None,
                )),
            },
            Repr::Dense(d) => match &d.buf {
                Buffer::F32(b) => Tensor::scalar(b[0]),
                Buffer::F64(b) => Tensor::scalar(b[0]),
                Buffer::I64(b) => Tensor::scalar(b[0]),
                Buffer::Bool(b) => Tensor::scalar(b[0]),
                Buffer::F16(b) => Tensor::scalar(b[0]),
                Buffer::BF16(b) => Tensor::scalar(b[0]),
            },
            Repr::F32(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.f32()][..])),
            Repr::F64(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.f64()][..])),
            Repr::I64(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.i64()][..])),
            Repr::Bool(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.bool()][..])),
            Repr::F16(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.f16()][..])),
            Repr::BF16(v) => Self::from_buffer(Dims::from_slice(shape), Arc::from(&[v.bf16()][..])),
        })
    }

    /// A copy converted to `dtype` (the same tensor, shared, if it already
    /// has it). Every pair of dtypes converts, as PyTorch's `.to(dtype)`:
    /// float to float (f64, f32, f16, bf16) rounds to nearest, ties to
    /// even, once (out of range is infinity; NaN stays NaN); float to i64
    /// truncates toward zero (saturating at the i64 range, NaN to 0); i64
    /// to float rounds to nearest; to bool is `value != 0` (NaN is true);
    /// bool to a number is 0 or 1. (On a `Var`,
    /// [`to_dtype`](crate::Var::to_dtype) is differentiable between f32
    /// and f64.)
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// let x = Tensor::from_vec(vec![-1.7, 0.0, 2.5], &[3])?;
    /// assert_eq!(x.to_dtype(DType::I64).to_vec::<i64>()?, vec![-1, 0, 2]);
    /// assert_eq!(x.to_dtype(DType::Bool).to_vec::<bool>()?, vec![true, false, true]);
    /// let m = Tensor::from_vec(vec![true, false], &[2])?;
    /// assert_eq!(m.to_dtype(DType::F32).to_vec::<f32>()?, vec![1.0, 0.0]);
    /// // bf16 keeps 8 significant bits: 1 + 2^-8 ties to even (1), 1 + 3 * 2^-8 to 1 + 2^-6.
    /// let b = Tensor::from_vec(vec![1.0 + 1.0 / 256.0, 1.0 + 3.0 / 256.0], &[2])?.to_dtype(DType::BF16);
    /// assert_eq!(b.to_dtype(DType::F64).to_f64_vec(), vec![1.0, 1.0 + 1.0 / 64.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn to_dtype(&self, dtype: DType) -> Self {
        if dtype == self.dtype() {
            return self.clone();
        }
        fn from_src<S: DataType>(t: &Tensor, dtype: DType) -> Tensor {
            let shape = Dims::from_slice(t.shape());
            let src = t.as_slice_of::<S>();
            crate::with_any_dtype!(dtype, D => {
                Tensor::from_exact_iter(shape, src.iter().map(|&s| cast_to::<S, D>(s)))
            })
        }
        crate::with_any_dtype!(self.dtype(), S => from_src::<S>(self, dtype))
    }

    /// A tensor of the same shape and dtype with `f` applied to every element
    /// (computed in f64; a convenience for tests, hooks and small tensors).
    pub fn map_f64(&self, f: impl Fn(f64) -> f64) -> Tensor {
        let v: Vec<f64> = self.to_f64_vec().into_iter().map(f).collect();
        Tensor::from_f64_slice(&v, self.shape(), self.dtype()).expect("same element count as self")
    }

    /// Whether both tensors share the same storage (or are equal scalars).
    pub fn shares_storage_with(&self, other: &Tensor) -> bool {
        match (&self.repr, &other.repr) {
            (Repr::Dense(a), Repr::Dense(b)) => a.buf.ptr_eq(&b.buf),
            _ => false,
        }
    }

    /// Whether every element is finite (no NaN, no infinity); always true
    /// for i64 and bool.
    pub fn all_finite(&self) -> bool {
        match self.dtype() {
            DType::F32 => self.as_slice_of::<f32>().iter().all(|v| v.is_finite()),
            DType::F64 => self.as_slice_of::<f64>().iter().all(|v| v.is_finite()),
            DType::F16 => self
                .as_slice_of::<half::f16>()
                .iter()
                .all(|v| v.is_finite()),
            DType::BF16 => self
                .as_slice_of::<half::bf16>()
                .iter()
                .all(|v| v.is_finite()),
            DType::I64 | DType::Bool => true,
        }
    }

    /// Whether the dtype is a float one (see [`DType::is_float`]).
    #[inline(always)]
    pub fn is_float(&self) -> bool {
        self.dtype().is_float()
    }

    /// `Ok` for a float tensor (f32, f64), `Error::NotFloat` naming `op`
    /// otherwise (f16 and bf16 included: they are cast first).
    #[inline]
    pub(crate) fn expect_float(&self, op: &'static str) -> Result<()> {
        match self.dtype() {
            DType::F32 | DType::F64 => Ok(()),
            found => Err(Error::NotFloat { op, found }),
        }
    }

    /// Whether `self` and `other` have the same shape and every pair of
    /// elements satisfies `|a - b| <= atol + rtol * |b|` (NaNs never match).
    pub fn allclose(&self, other: &Tensor, rtol: f64, atol: f64) -> bool {
        self.shape() == other.shape()
            && self
                .to_f64_vec()
                .iter()
                .zip(other.to_f64_vec())
                .all(|(&a, b)| (a - b).abs() <= atol + rtol * b.abs())
    }
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Tensor({self}, shape={:?}, dtype={})",
            self.shape(),
            self.dtype()
        )
    }
}

impl PartialEq for Tensor {
    /// Equal shape, dtype and elements (so NaN != NaN).
    fn eq(&self, other: &Tensor) -> bool {
        if self.shape() != other.shape() || self.dtype() != other.dtype() {
            return false;
        }
        crate::with_any_dtype!(self.dtype(), T => {
            self.as_slice_of::<T>() == other.as_slice_of::<T>()
        })
    }
}

impl From<i64> for Tensor {
    fn from(v: i64) -> Self {
        Tensor::scalar(v)
    }
}

impl From<bool> for Tensor {
    fn from(v: bool) -> Self {
        Tensor::scalar(v)
    }
}

/// One element converted from `S` to `D`, as [`Tensor::to_dtype`] does.
#[inline(always)]
pub(crate) fn cast_to<S: DataType, D: DataType>(s: S) -> D {
    match S::DTYPE {
        // Exact through i64 (an f64 would round above 2^53).
        DType::I64 => D::cast_from_i64(s.cast_to_i64()),
        _ => D::cast_from_f64(s.cast_to_f64()),
    }
}

/// Calls `$body` with `$T` bound to the float element type of `$dtype`.
///
/// Float ops dispatch through this. An `i64`, `bool`, `f16` or `bf16`
/// dtype returns `Err(Error::NotFloat { op: $op, .. })` from the enclosing
/// function (which must return `Result`): never a panic. (The half dtypes
/// are storage only; the error says to cast with `to_dtype` first.)
#[macro_export]
#[doc(hidden)]
macro_rules! with_dtype {
    ($op:expr, $dtype:expr, $T:ident => $body:expr) => {
        $crate::match_dtype!($dtype, $T => $body; [F32: f32, F64: f64]
            found @ ($crate::DType::I64
            | $crate::DType::Bool
            | $crate::DType::F16
            | $crate::DType::BF16) => {
                return ::core::result::Result::Err($crate::Error::NotFloat { op: $op, found })
            }
        )
    };
}

/// Calls `$body` with `$T` bound to the element type of `$dtype`, any of
/// the six ([`DataType`]): for kernels that only move elements (copies,
/// gathers, selections by mask).
#[macro_export]
#[doc(hidden)]
macro_rules! with_any_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::match_dtype!($dtype, $T => $body; [
            F32: f32,
            F64: f64,
            I64: i64,
            Bool: bool,
            F16: ::half::f16,
            BF16: ::half::bf16
        ])
    };
}

/// The match [`with_dtype!`] and [`with_any_dtype!`] share: for each listed
/// `Variant: type`, an arm binding `$T` to the type around `$body`; the
/// arms after the list (the dtypes left out) close it.
#[macro_export]
#[doc(hidden)]
macro_rules! match_dtype {
    ($dtype:expr, $T:ident => $body:expr; [$($variant:ident: $ty:ty),*] $($rest:tt)*) => {
        match $dtype {
            $($crate::DType::$variant => {
                type $T = $ty;
                $body
            })*
            $($rest)*
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_inline_and_sized_small() {
        assert_eq!(std::mem::size_of::<Tensor>(), 16);
        assert_eq!(std::mem::size_of::<Option<Tensor>>(), 16);
        let t = Tensor::scalar(1.5f32);
        assert!(t.is_scalar());
        assert_eq!(t.numel(), 1);
    }

    #[test]
    fn reshape_shares_storage() {
        let t = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[4]).unwrap();
        let r = t.reshape(&[2, 2]).unwrap();
        assert!(r.shares_storage_with(&t));
        assert!(t.reshape(&[3]).is_err());
        assert_eq!(t.reshape(&[1, 4]).unwrap().shape(), &[1, 4]);
        let one = Tensor::from_vec(vec![5.0], &[1]).unwrap();
        assert!(one.reshape(&[]).unwrap().is_scalar());
    }

    #[test]
    fn copy_on_write_only_when_unique() {
        let mut t = Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap();
        assert!(t.unique_slice_mut::<f32>().is_some());
        let shared = t.clone();
        assert!(t.unique_slice_mut::<f32>().is_none());
        drop(shared);
        t.unique_slice_mut::<f32>().unwrap()[0] = 9.0;
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![9.0, 2.0]);
    }

    #[test]
    fn scalars_are_viewed_and_written_in_place() {
        let mut a = Tensor::scalar(1.5f32);
        assert_eq!(a.try_slice::<f32>(), Some(&[1.5f32][..]));
        assert!(a.try_slice::<f64>().is_none());
        assert!(a.unique_slice_mut::<f64>().is_none());
        a.unique_slice_mut::<f32>().unwrap()[0] += 1.0;
        assert_eq!(a.item(), 2.5);
        let mut b = Tensor::scalar(-4.0f64);
        assert!(b.try_slice::<f32>().is_none());
        b.make_mut::<f64>().unwrap()[0] *= 2.0;
        assert_eq!(b.as_slice::<f64>().unwrap(), &[-8.0]);
        assert!(b.add_scalar_in_place(&Tensor::scalar(1.0f64)));
        assert_eq!(b.item(), -7.0);
    }

    #[test]
    fn constructors_reject_bad_shapes() {
        assert!(matches!(
            Tensor::zeros(&[usize::MAX, 3], DType::F32),
            Err(Error::ShapeOverflow { .. })
        ));
        assert!(Tensor::arange(0.0, 1.0, 0.0, DType::F32).is_err());
        assert_eq!(Tensor::zeros(&[0, 3], DType::F32).unwrap().numel(), 0);
    }

    #[test]
    fn i64_and_bool_tensors_are_stored_compared_and_shown() {
        let s = Tensor::scalar(-3i64);
        assert!(s.is_scalar() && !s.is_float());
        assert_eq!(s.dtype(), DType::I64);
        assert_eq!(s.try_item().unwrap(), -3.0);
        let b = Tensor::scalar(true);
        assert_eq!((b.dtype(), b.try_item().unwrap()), (DType::Bool, 1.0));
        assert_eq!(b.to_string(), "true");
        let mut m = Tensor::from_vec(vec![true, false, true, true], &[2, 2]).unwrap();
        assert_eq!(m.to_string(), "[[true, false], [true, true]]");
        let shared = m.clone();
        m.make_mut::<bool>().unwrap()[1] = true;
        assert_eq!(
            shared.to_vec::<bool>().unwrap(),
            vec![true, false, true, true]
        );
        assert_eq!(m.to_vec::<bool>().unwrap(), vec![true; 4]);
        let i = Tensor::from_vec(vec![1i64, 2, 3, 4], &[4]).unwrap();
        assert_eq!(i.to_string(), "[1, 2, 3, 4]");
        assert!(i.reshape(&[2, 2]).unwrap().shares_storage_with(&i));
        let one = Tensor::from_vec(vec![9i64], &[1]).unwrap();
        assert_eq!(one.reshape(&[]).unwrap(), Tensor::scalar(9i64));
        assert_eq!(
            Tensor::scalar(true).reshape(&[1, 1]).unwrap().shape(),
            &[1, 1]
        );
        assert_ne!(i, i.to_dtype(DType::F64));
        assert_eq!(i.to_dtype(DType::F64).to_dtype(DType::I64), i);
        assert!(i.as_slice::<f64>().is_err());
        assert_eq!(
            Tensor::zeros(&[2], DType::Bool)
                .unwrap()
                .to_vec::<bool>()
                .unwrap(),
            vec![false; 2]
        );
        assert_eq!(Tensor::scalar(5i64).zeros_like(), Tensor::scalar(0i64));
        assert!(i.all_finite());
        // i64 beyond 2^53 converts exactly between i64 tensors.
        let big = Tensor::scalar(i64::MAX - 1);
        assert_eq!(
            big.to_dtype(DType::Bool).to_dtype(DType::I64),
            Tensor::scalar(1i64)
        );
        assert_eq!(big.to_vec::<i64>().unwrap(), vec![i64::MAX - 1]);
        assert_eq!(
            Tensor::arange_i64(i64::MAX - 2, i64::MAX, 1)
                .unwrap()
                .numel(),
            2
        );
        assert_eq!(
            Tensor::arange_i64(0, 10, 3)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![0, 3, 6, 9]
        );
        assert_eq!(
            Tensor::arange_i64(0, -7, -3)
                .unwrap()
                .to_vec::<i64>()
                .unwrap(),
            vec![0, -3, -6]
        );
        assert!(Tensor::arange_i64(0, 3, 0).is_err());
        assert!(Tensor::arange(0.0, 3.0, 1.0, DType::Bool).is_err());
        assert!(Tensor::randn(&[2], DType::Bool, 0).is_err());
    }

    #[test]
    fn half_tensors_are_stored_cast_and_compared() {
        use half::{bf16, f16};
        for dtype in [DType::F16, DType::BF16] {
            let t = Tensor::from_vec(vec![1.5, -2.0, 0.0, 1e6], &[2, 2])
                .unwrap()
                .to_dtype(dtype);
            assert_eq!((t.dtype(), t.shape()), (dtype, &[2usize, 2][..]));
            assert!(!t.is_float() && t.dtype().is_half());
            // 1e6 is beyond f16 (max 65504): infinity; bf16 rounds it.
            let want_last = if dtype == DType::F16 {
                f64::INFINITY
            } else {
                999424.0
            };
            assert_eq!(t.to_f64_vec(), vec![1.5, -2.0, 0.0, want_last]);
            assert_eq!(t.all_finite(), dtype == DType::BF16);
            let s = Tensor::scalar_of(0.5, dtype);
            assert!(s.is_scalar());
            assert_eq!((s.dtype(), s.try_item().unwrap()), (dtype, 0.5));
            assert_eq!(s.zeros_like(), Tensor::scalar_of(0.0, dtype));
            assert_eq!(s.reshape(&[1]).unwrap().reshape(&[]).unwrap(), s);
            assert!(t.reshape(&[4]).unwrap().shares_storage_with(&t));
            assert_eq!(
                Tensor::ones(&[3], dtype).unwrap().to_f64_vec(),
                vec![1.0; 3]
            );
            assert_eq!(
                Tensor::arange(0.0, 1.0, 0.25, dtype).unwrap().to_f64_vec(),
                vec![0.0, 0.25, 0.5, 0.75]
            );
            assert_eq!(
                t.to_dtype(DType::I64).to_vec::<i64>().unwrap()[..3],
                [1, -2, 0]
            );
            assert_eq!(
                t.to_dtype(DType::Bool).to_vec::<bool>().unwrap(),
                vec![true, true, false, true]
            );
            assert_eq!(t, t.clone());
            assert_ne!(t, t.to_dtype(DType::F32));
            assert!(t.as_slice::<f32>().is_err());
        }
        let mut h = Tensor::from_vec(vec![f16::from_f32(1.0), f16::from_f32(2.0)], &[2]).unwrap();
        let shared = h.clone();
        h.make_mut::<f16>().unwrap()[0] = f16::from_f32(7.0);
        assert_eq!(shared.to_f64_vec(), vec![1.0, 2.0]);
        assert_eq!(
            h.to_vec::<f16>().unwrap(),
            vec![f16::from_f32(7.0), f16::from_f32(2.0)]
        );
        assert_eq!(Tensor::scalar(bf16::from_f32(3.0)).to_string(), "3");
        let mut b = Tensor::scalar(bf16::from_f32(3.0));
        b.make_mut::<bf16>().unwrap()[0] = bf16::from_f32(-1.0);
        assert_eq!(b.item(), -1.0);
    }

    #[test]
    fn casts_to_half_round_once_to_nearest_even() {
        use half::{bf16, f16};
        // Every f16 and bf16 value survives f64 and f32 and back, bit for bit.
        for bits in 0..=u16::MAX {
            for (dtype, t) in [
                (DType::F16, Tensor::scalar(f16::from_bits(bits))),
                (DType::BF16, Tensor::scalar(bf16::from_bits(bits))),
            ] {
                if t.item().is_nan() {
                    assert!(t.to_dtype(DType::F32).item().is_nan());
                    continue;
                }
                for wide in [DType::F32, DType::F64] {
                    assert_eq!(
                        t.to_dtype(wide).to_dtype(dtype),
                        t,
                        "{dtype} bits {bits:#x}"
                    );
                }
            }
        }
        // Ties go to even; one ulp above a tie goes up. bf16's ulp at 1 is
        // 2^-7, f16's 2^-10.
        let cases = [
            (DType::BF16, 1.0 + 2f64.powi(-8), 1.0),
            (DType::BF16, 1.0 + 3.0 * 2f64.powi(-8), 1.0 + 2f64.powi(-6)),
            (
                DType::BF16,
                1.0 + 2f64.powi(-8) + 2f64.powi(-40),
                1.0 + 2f64.powi(-7),
            ),
            (DType::F16, 1.0 + 2f64.powi(-11), 1.0),
            (
                DType::F16,
                1.0 + 2f64.powi(-11) + 2f64.powi(-40),
                1.0 + 2f64.powi(-10),
            ),
            (DType::F16, 65520.0, f64::INFINITY),
            (DType::F16, 2f64.powi(-25), 0.0),
            (
                DType::F16,
                2f64.powi(-25) * (1.0 + 2f64.powi(-40)),
                2f64.powi(-24),
            ),
            (DType::BF16, f64::MAX, f64::INFINITY),
            (DType::BF16, -1e300, f64::NEG_INFINITY),
            (DType::BF16, 1e-300, 0.0),
            (DType::F16, 2f64.powi(-24), 2f64.powi(-24)),
        ];
        for (dtype, x, want) in cases {
            assert_eq!(
                Tensor::scalar(x).to_dtype(dtype).item(),
                want,
                "{x} to {dtype}"
            );
        }
        // From f32, the same rounding (a tie at f32 precision too).
        let x = Tensor::scalar(1.0f32 + 2f32.powi(-8) + 2f32.powi(-20));
        assert_eq!(x.to_dtype(DType::BF16).item(), 1.0 + 2f64.powi(-7));
        // i64 above 2^53 rounds once: this one is just above a bf16 tie,
        // and `as f64` would round it onto the tie and then down to even.
        let big = (1i64 << 62) + (1i64 << 54) + 1;
        let t = Tensor::scalar(big).to_dtype(DType::BF16);
        assert_eq!(t.item(), ((1i64 << 62) + (1i64 << 55)) as f64);
        assert_eq!(
            Tensor::scalar(-big).to_dtype(DType::BF16).item(),
            -(((1i64 << 62) + (1i64 << 55)) as f64)
        );
        assert_eq!(
            Tensor::scalar(i64::MIN).to_dtype(DType::BF16).item(),
            -(2f64.powi(63))
        );
        assert_eq!(
            Tensor::scalar(f64::NAN)
                .to_dtype(DType::F16)
                .to_dtype(DType::I64)
                .item(),
            0.0
        );
    }

    #[test]
    fn dtype_conversion() {
        let t = Tensor::from_vec(vec![1.5f64, 2.5], &[2]).unwrap();
        assert_eq!(
            t.to_dtype(DType::F32).to_vec::<f32>().unwrap(),
            vec![1.5, 2.5]
        );
    }
}
