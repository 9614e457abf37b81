//! Building a kernel's output without a zeroing pass: [`Tensor::build`]
//! and the [`Filled`] proof its fill closure returns.
//!
//! `Tensor::build(shape, fill)` hands `fill` the output's storage (fresh, or
//! a recycled buffer from [`recycle`](super::recycle)) as
//! `&mut [MaybeUninit<T>]`, and only makes it a [`Tensor`] once `fill`
//! returns a [`Filled`] for that slice, which says every element was
//! written. There are two ways to get one:
//!
//! - [`write_exact`] (or [`Tensor::from_exact_iter`]) is safe: it writes
//!   values in order and panics unless there were exactly as many as slots.
//!   Kernels that produce their output in order on one thread use it; the
//!   count check costs nothing measurable.
//! - `unsafe` [`Filled::assume`] is for kernels that write in any order, in
//!   parallel chunks, with SIMD or through gemm's raw pointer; the caller's
//!   `// SAFETY:` comment says why every slot was written. Only that one call
//!   is `unsafe`, not the kernel code around it.
//!
//! A `Filled<'a>` is branded with the lifetime of the slice it vouches for
//! and is invariant in it, so a fill closure (which must work for any `'a`)
//! can only return a proof made from the slice it was given, never one kept
//! from another build. If `fill` panics, the storage is freed without being
//! read.

use std::marker::PhantomData;
use std::mem::MaybeUninit;

use super::{element_count, recycle, storage, DataType, Dims, Repr, Tensor};

/// Proof that every element of the slice borrowed for `'a` was written.
/// Kernels that fill an output slice return one; only this crate can make
/// one, so holding it says nothing outside `Tensor::build`.
#[must_use = "a fill closure returns its `Filled` to `Tensor::build`"]
pub struct Filled<'a> {
    /// Invariant in `'a`: a proof for one borrow is never one for another.
    brand: PhantomData<fn(&'a ()) -> &'a ()>,
}

impl<'a> Filled<'a> {
    /// Vouches that every element of `slots` has been written.
    ///
    /// # Safety
    ///
    /// Every element of `slots` must have been given a value (by
    /// `MaybeUninit::write`, or a store of `MaybeUninit::new(v)`) since
    /// `Tensor::build` handed the slice over. A recycled buffer holds old
    /// values, but a fresh one is uninitialised memory: reading an element
    /// that was never written is undefined behaviour, not merely a stale
    /// value.
    #[inline(always)]
    pub(crate) unsafe fn assume<T>(slots: &'a mut [MaybeUninit<T>]) -> Self {
        let _ = slots;
        Filled { brand: PhantomData }
    }
}

/// Writes `values` into `slots` in order, proving them all written.
///
/// # Panics
///
/// If `values` does not yield exactly `slots.len()` items.
#[inline(always)]
pub(crate) fn write_exact<'a, T>(
    slots: &'a mut [MaybeUninit<T>],
    values: impl IntoIterator<Item = T>,
) -> Filled<'a> {
    let mut values = values.into_iter();
    let len = slots.len();
    let mut written = 0;
    // `zip` polls `slots` first, so `values` is not advanced past the end.
    for (slot, v) in slots.iter_mut().zip(&mut values) {
        slot.write(v);
        written += 1;
    }
    assert!(
        written == len && values.next().is_none(),
        "{len} elements written from a different number of values"
    );
    // SAFETY: the loop wrote slots `0..written` in order, and `written == len`.
    unsafe { Filled::assume(slots) }
}

impl Tensor {
    /// A tensor of `shape` (valid: its element count fits) whose elements
    /// `fill` writes into uninitialised (or recycled) storage, proving it
    /// with the [`Filled`] it returns.
    #[inline]
    pub fn build<T: DataType>(
        shape: Dims,
        fill: impl for<'a> FnOnce(&'a mut [MaybeUninit<T>]) -> Filled<'a>,
    ) -> Self {
        let len = element_count(&shape);
        if shape.is_empty() {
            let mut one = [MaybeUninit::<T>::uninit()];
            let _proof = fill(&mut one);
            // SAFETY: `fill` proved the one slot written.
            return unsafe { one[0].assume_init() }.scalar_tensor();
        }
        if len <= recycle::MAX_RECYCLED_ELEMENTS {
            return match recycle::build_recycled::<T, _>(shape, len, fill) {
                Ok(dense) => Tensor::from_repr(Repr::dense(dense)),
                Err((shape, fill)) => Self::from_buffer(shape, storage::build(len, fill)),
            };
        }
        if let Some(dense) = super::planned::take_large(T::DTYPE, len) {
            return Self::from_repr(Repr::dense(recycle::fill_lent::<T, _>(dense, shape, fill)));
        }
        super::refused::ensure_obtainable::<T>(&shape, len);
        Self::from_buffer(shape, storage::build(len, fill))
    }

    /// The tensor of `shape` holding `values` in row-major order, written
    /// straight into its storage (no intermediate `Vec`).
    ///
    /// # Panics
    ///
    /// If `values` does not yield exactly as many items as `shape` has elements.
    #[inline]
    pub fn from_exact_iter<T: DataType>(shape: Dims, values: impl IntoIterator<Item = T>) -> Self {
        Tensor::build(shape, |out| write_exact(out, values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dims(shape: &[usize]) -> Dims {
        Dims::from_slice(shape)
    }

    #[test]
    fn every_kind_of_storage_is_written_and_finished() {
        // 0-d (inline), small (pooled size), large (never pooled), empty.
        let large = recycle::MAX_RECYCLED_ELEMENTS + 1;
        for shape in [&[][..], &[3, 2], &[large], &[0, 4]] {
            let n = element_count(shape);
            let t = Tensor::build::<f32>(dims(shape), |out| {
                assert_eq!(out.len(), n);
                for (i, slot) in out.iter_mut().enumerate() {
                    slot.write(i as f32);
                }
                // SAFETY: the loop wrote every slot.
                unsafe { Filled::assume(out) }
            });
            assert_eq!(t.shape(), shape);
            let want: Vec<f32> = (0..n).map(|i| i as f32).collect();
            assert_eq!(t.to_vec::<f32>().unwrap(), want);
        }
    }

    #[test]
    fn recycled_storage_is_reused_and_fully_overwritten() {
        // Tests may share a thread (and its pool): start from an empty one.
        recycle::release();
        let shape = [7, 11];
        let first = Tensor::from_exact_iter(dims(&shape), (0..77).map(f64::from));
        let ptr = first.as_slice_of::<f64>().as_ptr();
        drop(first); // back to the pool: one fresh build of this class was made
        let again = Tensor::from_exact_iter(dims(&shape), (0..77).map(|i| -f64::from(i)));
        assert_eq!(
            again.as_slice_of::<f64>().as_ptr(),
            ptr,
            "served from the pool"
        );
        let want: Vec<f64> = (0..77).map(|i| -f64::from(i)).collect();
        assert_eq!(again.to_f64_vec(), want);
        // A reshape shares the buffer, so dropping one handle keeps it out of the pool.
        let view = again.reshape(&[77]).unwrap();
        drop(again);
        let fresh = Tensor::from_exact_iter(dims(&shape), (0..77).map(f64::from));
        assert!(!fresh.shares_storage_with(&view));
        assert_eq!(view.to_f64_vec(), want);
    }

    #[test]
    fn a_new_size_displaces_a_class_not_drawn_from_lately() {
        recycle::release();
        // Sizes used once each take every class.
        for n in 1..=recycle::MAX_SIZE_CLASSES {
            drop(Tensor::from_exact_iter(
                dims(&[n]),
                (0..n).map(|i| i as f32),
            ));
        }
        let n = recycle::MAX_SIZE_CLASSES + 7;
        let first = Tensor::from_exact_iter(dims(&[n]), (0..n).map(|i| i as f32));
        let ptr = first.as_slice_of::<f32>().as_ptr();
        drop(first);
        // Had the drop freed the buffer, an allocation of its size would
        // take that very block, and the next build would get another.
        let decoy: Vec<u8> = Vec::with_capacity(16 + 4 * n);
        let again = Tensor::from_exact_iter(dims(&[n]), (0..n).map(|i| -(i as f32)));
        assert_eq!(
            again.as_slice_of::<f32>().as_ptr(),
            ptr,
            "the new size was pooled"
        );
        drop(decoy);
        let want: Vec<f32> = (0..n).map(|i| -(i as f32)).collect();
        assert_eq!(again.to_vec::<f32>().unwrap(), want);
    }

    #[test]
    fn a_panicking_fill_frees_its_storage_unread() {
        let large = recycle::MAX_RECYCLED_ELEMENTS + 1;
        for shape in [&[5][..], &[large], &[]] {
            let result = std::panic::catch_unwind(|| {
                Tensor::build::<f64>(dims(shape), |out| {
                    out[0].write(1.0);
                    panic!("kernel failed after one element");
                })
            });
            assert!(result.is_err());
        }
        // The pool still serves whole, valid tensors afterwards.
        let t = Tensor::from_exact_iter(dims(&[5]), [1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(t.to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn from_exact_iter_fills_in_order() {
        let t = Tensor::from_exact_iter(dims(&[2, 2]), [1.0f32, 2.0, 3.0, 4.0]);
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        let s = Tensor::from_exact_iter(dims(&[]), [2.5f64]);
        assert!(s.is_scalar());
        assert_eq!(s.item(), 2.5);
        assert_eq!(Tensor::from_exact_iter::<f32>(dims(&[0]), []).numel(), 0);
    }

    #[test]
    #[should_panic(expected = "different number of values")]
    fn from_exact_iter_rejects_too_few_values() {
        let _ = Tensor::from_exact_iter(dims(&[3]), [1.0f32, 2.0]);
    }

    #[test]
    #[should_panic(expected = "different number of values")]
    fn from_exact_iter_rejects_too_many_values() {
        let _ = Tensor::from_exact_iter(dims(&[2]), [1.0f32, 2.0, 3.0]);
    }
}
