//! Planned buffers: storage a caller lends to the kernel outputs built
//! next on this thread, so that an op writes its output where a memory
//! plan says, with no change to the op.
//!
//! A compiled step's replay (`compile/replay.rs`) owns one buffer per
//! entry of its memory plan. Before it runs a non-elementwise op (a
//! matmul, a fused nn op, a fast backward rule) it [`lend`]s the buffers
//! planned for that step's outputs; [`Tensor::build`](super::Tensor) takes
//! a lent buffer of the output's dtype and length before it asks the
//! recycling pool or the allocator; afterwards [`Lending::finish`] hands
//! back whatever no build took. Every op builds its outputs through
//! `Tensor::build`, so this needs nothing of the ops, and a buffer is only
//! ever lent while nothing else holds it (the checks in [`lend`]), so an
//! op that builds a temporary of the same size first gets a correct, if
//! unplanned, buffer: the replay keeps whatever tensor the step returned
//! as that slot's buffer for the next run.
//!
//! A value that views another's storage (a reshape, a transpose, a slice)
//! owns no buffer but still a header (its shape, and its strides in a
//! boxed `View`): the replay keeps a view's header when its value dies,
//! with the storage let go ([`Header`]), and lends it to the next view
//! made on this thread ([`new_dense`]), so views allocate nothing either.
//!
//! The lent lists live in the recycling pool's thread-local (the draw that
//! every small build already makes), so eager code pays one test of an
//! empty list per build, and one per view it makes.

use std::mem::ManuallyDrop;
use std::sync::{Arc, LazyLock};

use super::recycle::POOL;
use super::storage::{unique_mut, Buffer};
use super::view::View;
use super::{DType, Dense, Dims, Repr, Tensor};

/// Takes a lent buffer of `dtype` and `len` elements out of `lent`, if any.
#[inline]
pub(super) fn take(lent: &mut Vec<Arc<Dense>>, dtype: DType, len: usize) -> Option<Arc<Dense>> {
    let i = lent
        .iter()
        .position(|d| d.buf.len() == len && d.buf.dtype() == dtype)?;
    Some(lent.swap_remove(i))
}

/// Takes a lent buffer for a build of a large tensor (beyond the pool's
/// sizes, which do not go through the pool's draw).
#[cold]
pub(super) fn take_large(dtype: DType, len: usize) -> Option<Arc<Dense>> {
    POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.lent.is_empty() {
            return None;
        }
        take(&mut p.lent, dtype, len)
    })
    .ok()
    .flatten()
}

/// The storage a kept header points at while it waits to be lent: empty,
/// shared by every kept header, so keeping one lets its value's storage go.
static NO_STORAGE: LazyLock<Buffer> = LazyLock::new(|| Buffer::F32(Arc::<[f32]>::from(&[][..])));

/// The header of a view whose value died: its allocation (and its `View`
/// box) without the storage, kept to be lent to the next view made.
pub(crate) struct Header(Arc<Dense>);

impl Header {
    /// `t`'s header if `t` is a view (or reshape) of storage held
    /// elsewhere too and nothing else holds `t`; else `t` back.
    pub(crate) fn keep(t: Tensor) -> Result<Header, Tensor> {
        let held_alone = match &t.repr {
            Repr::Dense(d) => Arc::strong_count(d) == 1 && Arc::weak_count(d) == 0,
            _ => false,
        };
        if !held_alone {
            return Err(t);
        }
        let mut t = ManuallyDrop::new(t);
        let mut dense = match &mut t.repr {
            // SAFETY: as in `into_lendable`: `t` is never used again.
            Repr::Dense(d) => unsafe { ManuallyDrop::take(d) },
            _ => unreachable!("checked above"),
        };
        // Storage it holds alone goes to the recycling pool as it drops,
        // header and all: only a view of storage held elsewhere is kept.
        let viewer = unique_mut(&mut dense).is_some_and(|inner| !inner.buf.is_unique());
        if !viewer {
            return Err(Tensor::from_repr(Repr::dense(dense)));
        }
        let inner = unique_mut(&mut dense).expect("checked just above");
        // The storage is let go (another owner keeps it): a kept header
        // never holds elements.
        drop(std::mem::replace(&mut inner.buf, NO_STORAGE.clone()));
        if let Some(view) = &mut inner.view {
            view.forget_packed();
        }
        Ok(Header(dense))
    }
}

/// A dense tensor's header: a lent one if this thread has one (only a
/// replay lends them), else a new allocation.
#[inline]
pub(super) fn new_dense(shape: Dims, buf: Buffer, view: Option<View>) -> Arc<Dense> {
    let lent = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            if p.lent_headers.is_empty() {
                None
            } else {
                p.lent_headers.pop()
            }
        })
        .ok()
        .flatten();
    match lent {
        Some(mut dense) => {
            let inner = unique_mut(&mut dense).expect("a lent header has one owner");
            inner.shape = shape;
            inner.buf = buf;
            match (&mut inner.view, view) {
                (Some(kept), Some(view)) => **kept = view,
                (slot, view) => *slot = view.map(Box::new),
            }
            dense
        }
        None => Arc::new(Dense {
            shape,
            buf,
            view: view.map(Box::new),
        }),
    }
}

/// A scope in which buffers are lent to the builds of this thread; what
/// no build took goes back to the lender at [`finish`](Self::finish), and
/// is dropped if the scope ends otherwise (an op's error or panic).
#[must_use = "finish the lending to get the unused buffers back"]
pub(crate) struct Lending {
    _private: (),
}

impl Lending {
    /// Starts lending; nothing is lent yet.
    pub(crate) fn start() -> Self {
        clear();
        Lending { _private: () }
    }

    /// Lends `t`'s storage to the next build of its dtype and length on
    /// this thread. A tensor that is not the only owner of a plain dense
    /// buffer (shared, a view, 0-d or empty) cannot be lent and is given
    /// back.
    pub(crate) fn lend(&self, t: Tensor) -> Option<Tensor> {
        let dense = match into_lendable(t) {
            Ok(dense) => dense,
            Err(t) => return Some(t),
        };
        let refused = POOL.try_with(|p| p.borrow_mut().lent.push(dense));
        // No pool (the thread is exiting): the buffer was dropped with the closure.
        let _ = refused;
        None
    }

    /// Lends a kept header to the next view made on this thread.
    pub(crate) fn lend_header(&self, header: Header) {
        let _ = POOL.try_with(|p| p.borrow_mut().lent_headers.push(header.0));
    }

    /// Ends the lending: every buffer no build took, as a tensor of one
    /// dimension, to `back`, and every header no view took to `back_header`.
    pub(crate) fn finish(self, mut back: impl FnMut(Tensor), mut back_header: impl FnMut(Header)) {
        while let Some(dense) = pop() {
            back(Tensor::from_repr(Repr::dense(dense)));
        }
        while let Some(dense) = pop_header() {
            back_header(Header(dense));
        }
    }
}

fn pop_header() -> Option<Arc<Dense>> {
    POOL.try_with(|p| p.borrow_mut().lent_headers.pop())
        .ok()
        .flatten()
}

impl Drop for Lending {
    fn drop(&mut self) {
        clear();
    }
}

/// One lent buffer back, taken out of the pool's borrow before anything
/// else happens to it (a dropped tensor offers itself to the pool).
fn pop() -> Option<Arc<Dense>> {
    POOL.try_with(|p| p.borrow_mut().lent.pop()).ok().flatten()
}

/// Drops every lent buffer still there (into the pool); the list keeps
/// its capacity, so lending again allocates nothing.
fn clear() {
    while let Some(dense) = pop() {
        drop(Tensor::from_repr(Repr::dense(dense)));
    }
    while let Some(header) = pop_header() {
        drop(header);
    }
}

/// `t`'s dense header, if `t` is the only owner of a plain dense buffer.
fn into_lendable(t: Tensor) -> Result<Arc<Dense>, Tensor> {
    if !is_lendable(&t) {
        return Err(t);
    }
    let mut t = ManuallyDrop::new(t);
    let mut dense = match &mut t.repr {
        // SAFETY: `t` is never used again (it is `ManuallyDrop`, so its
        // `Drop` does not run and the `Arc` is taken out exactly once).
        Repr::Dense(d) => unsafe { ManuallyDrop::take(d) },
        _ => unreachable!("is_lendable checked that it is dense"),
    };
    // Again with the fences of `unique_mut`: what other threads did with
    // the buffer happens before the build that writes it.
    if unique_mut(&mut dense).is_some_and(|inner| inner.buf.is_unique()) {
        Ok(dense)
    } else {
        Err(Tensor::from_repr(Repr::dense(dense)))
    }
}

impl Tensor {
    /// The storage itself, shared (no copy), when this is a plain dense
    /// tensor over its whole buffer of `T`: an op that keeps its indices as
    /// a list reads a step's index tensor without allocating.
    pub(crate) fn shared_elements<T: super::DataType>(&self) -> Option<Arc<[T]>> {
        match &self.repr {
            Repr::Dense(d) if d.view.is_none() => T::unwrap_buffer(&d.buf).cloned(),
            _ => None,
        }
    }

    /// Whether this tensor is the only owner of a plain (unviewed) dense,
    /// non-empty buffer: what a memory plan can keep and lend again.
    pub(crate) fn is_lendable(&self) -> bool {
        is_lendable(self)
    }
}

fn is_lendable(t: &Tensor) -> bool {
    use super::storage::Buffer;
    fn one<T: ?Sized>(a: &Arc<T>) -> bool {
        Arc::strong_count(a) == 1 && Arc::weak_count(a) == 0
    }
    match &t.repr {
        Repr::Dense(d) if one(d) && d.view.is_none() && d.buf.len() > 0 => match &d.buf {
            Buffer::F32(b) => one(b),
            Buffer::F64(b) => one(b),
            Buffer::I64(b) => one(b),
            Buffer::Bool(b) => one(b),
            Buffer::F16(b) => one(b),
            Buffer::BF16(b) => one(b),
        },
        _ => false,
    }
}
