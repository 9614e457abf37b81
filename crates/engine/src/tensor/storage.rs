//! Tensor storage: `Arc`-shared, immutable while shared.
//!
//! The textbook chapter's `RefCountedBuffer`. A buffer is an `Arc<[T]>`: cloning a tensor
//! (into a graph node, a `Var`, a gradient) shares it; nothing writes into a
//! buffer unless it is the only owner (`Arc::get_mut`), which is how an
//! optimizer can update weights in place without ever corrupting a graph that
//! still holds the old values (copy on write).

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::element::DataType;
use super::fill::Filled;
use crate::base::error::{Error, Result};
use crate::base::DType;

/// `Arc::get_mut` without its atomic read-modify-write.
///
/// `Arc::get_mut` locks the weak count with a compare-and-swap (about 20
/// cycles) to exclude a racing `Weak::upgrade`; tensor storage never has weak
/// references (this crate never downgrades one: `clippy.toml` disallows
/// `Arc::downgrade`, and no storage `Arc` is reachable from outside the
/// crate), so one strong reference and no weak ones already mean nobody else
/// can reach the value, now or later: a new reference could only be cloned
/// from ours, which is borrowed mutably.
/// Measured on W1v: two such checks per recycled tensor and one per in-place
/// accumulation.
#[inline(always)]
pub(crate) fn unique_mut<T: ?Sized>(arc: &mut Arc<T>) -> Option<&mut T> {
    if Arc::strong_count(arc) == 1 && Arc::weak_count(arc) == 0 {
        // Pairs with the release decrement of the last other owner's drop,
        // so its accesses happen before ours.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Acquire);
        // SAFETY: `arc` is the only strong reference and there is no `Weak`
        // that could upgrade to another (see above), and `arc` is borrowed
        // mutably for the result's lifetime, so the access is unique; the
        // fence orders every earlier owner's accesses before it. The pointer
        // is valid and aligned for the value's lifetime (it is kept alive by
        // `arc`) and, as in `Arc::get_mut`, derived from the `Arc`'s own
        // allocation pointer, so writing through it is allowed.
        Some(unsafe { &mut *(Arc::as_ptr(arc) as *mut T) })
    } else {
        None
    }
}

/// Dtype-tagged shared storage of a dense tensor.
#[derive(Clone)]
pub enum Buffer {
    /// `f32` elements.
    F32(Arc<[f32]>),
    /// `f64` elements.
    F64(Arc<[f64]>),
    /// `i64` elements.
    I64(Arc<[i64]>),
    /// `bool` elements.
    Bool(Arc<[bool]>),
    /// `half::f16` elements.
    F16(Arc<[half::f16]>),
    /// `half::bf16` elements.
    BF16(Arc<[half::bf16]>),
}

impl Buffer {
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F64(_) => DType::F64,
            Buffer::I64(_) => DType::I64,
            Buffer::Bool(_) => DType::Bool,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Buffer::F32(d) => d.len(),
            Buffer::F64(d) => d.len(),
            Buffer::I64(d) => d.len(),
            Buffer::Bool(d) => d.len(),
            Buffer::F16(d) => d.len(),
            Buffer::BF16(d) => d.len(),
        }
    }

    /// Whether this is the only owner of its elements.
    pub(crate) fn is_unique(&mut self) -> bool {
        match self {
            Buffer::F32(d) => unique_mut(d).is_some(),
            Buffer::F64(d) => unique_mut(d).is_some(),
            Buffer::I64(d) => unique_mut(d).is_some(),
            Buffer::Bool(d) => unique_mut(d).is_some(),
            Buffer::F16(d) => unique_mut(d).is_some(),
            Buffer::BF16(d) => unique_mut(d).is_some(),
        }
    }

    /// Whether two buffers are the same allocation.
    pub(crate) fn ptr_eq(&self, other: &Buffer) -> bool {
        match (self, other) {
            (Buffer::F32(a), Buffer::F32(b)) => Arc::ptr_eq(a, b),
            (Buffer::F64(a), Buffer::F64(b)) => Arc::ptr_eq(a, b),
            (Buffer::I64(a), Buffer::I64(b)) => Arc::ptr_eq(a, b),
            (Buffer::Bool(a), Buffer::Bool(b)) => Arc::ptr_eq(a, b),
            (Buffer::F16(a), Buffer::F16(b)) => Arc::ptr_eq(a, b),
            (Buffer::BF16(a), Buffer::BF16(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// Allocates a buffer of `len` elements that `fill` writes, proving it with
/// the [`Filled`] it returns.
///
/// Writing through `MaybeUninit` avoids zeroing memory that is about to be
/// overwritten, which matters for bandwidth-bound kernels.
#[inline]
pub(crate) fn build<T: DataType>(
    len: usize,
    fill: impl for<'a> FnOnce(&'a mut [MaybeUninit<T>]) -> Filled<'a>,
) -> Arc<[T]> {
    let mut data = Arc::<[T]>::new_uninit_slice(len);
    // A freshly allocated Arc has exactly one owner.
    let slots = Arc::get_mut(&mut data).expect("fresh Arc is unique");
    super::huge_pages::advise(slots);
    let _proof = fill(slots);
    // SAFETY: `fill` proved every element written.
    unsafe { data.assume_init() }
}

/// An empty vector with room for `n` elements, allocated fallibly: a request
/// the allocator refuses is `Error::ShapeOverflow` naming `op` and `shape`
/// (the tensor it is for), not an abort.
pub(crate) fn try_with_capacity<T>(op: &'static str, shape: &[usize], n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| Error::ShapeOverflow {
        op,
        shape: shape.to_vec(),
    })?;
    Ok(v)
}

/// `n` copies of `value`, allocated fallibly (see [`try_with_capacity`]).
pub(crate) fn try_filled<T: Clone>(
    op: &'static str,
    shape: &[usize],
    n: usize,
    value: T,
) -> Result<Vec<T>> {
    let mut v = try_with_capacity(op, shape, n)?;
    v.resize(n, value);
    Ok(v)
}

/// Copies a slice into a new shared buffer.
pub(crate) fn from_slice<T: DataType>(src: &[T]) -> Arc<[T]> {
    Arc::from(src)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_mut_only_for_the_only_owner() {
        let mut a: Arc<[f32]> = Arc::from(&[1.0f32, 2.0][..]);
        unique_mut(&mut a).unwrap()[0] = 5.0;
        let b = a.clone();
        assert!(unique_mut(&mut a).is_none());
        drop(b);
        unique_mut(&mut a).unwrap()[1] = 6.0;
        assert_eq!(&a[..], &[5.0, 6.0]);
    }

    #[test]
    fn unique_mut_after_another_thread_drops_its_clone() {
        let mut a: Arc<[f64]> = Arc::from(&[1.0f64; 4][..]);
        let b = a.clone();
        std::thread::spawn(move || assert_eq!(b.iter().sum::<f64>(), 4.0))
            .join()
            .unwrap();
        // The other owner's reads happen before this write (the fence in `unique_mut`).
        unique_mut(&mut a).unwrap().fill(2.0);
        assert_eq!(a.iter().sum::<f64>(), 8.0);
    }
}
