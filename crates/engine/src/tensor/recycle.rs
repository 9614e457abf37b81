//! Recycling of dense tensors: when the last owner of a tensor
//! drops it, its allocations (the header with the shape, and the element
//! buffer) go to a per-thread pool instead of the allocator, and the next
//! kernel output of the same dtype and length is written into them.
//!
//! A graph of many small ops (W1v of the benchmarks: length-64 vectors)
//! makes two allocations per op output and as many per gradient; the
//! allocator's slow paths were a third of its instructions. Buffers are only
//! pooled when nothing else shares them, so a recycled buffer can never be
//! seen through another tensor; a pooled buffer's old contents are always
//! overwritten in full before it is seen again.
//!
//! The pool keeps at most [`MAX_RECYCLED_BYTES`] per thread, of tensors of at
//! most [`MAX_RECYCLED_ELEMENTS`] elements, in at most [`MAX_SIZE_CLASSES`]
//! (dtype, length) classes. A new class takes the place of one not drawn
//! from since the last such sweep (the CLOCK approximation of least recently
//! used: one flag per class, set on every draw), so sizes a program has
//! stopped using (an earlier batch size, a finished evaluation) cannot keep
//! the ones it uses now out;
//! [`Graph::release_spare_buffers`](crate::Graph::release_spare_buffers)
//! empties it.

use std::cell::RefCell;
use std::mem::MaybeUninit;
use std::sync::Arc;

use super::fill::Filled;
use super::storage::unique_mut;
use super::{DType, DataType, Dense, Dims};

/// The largest tensor (in elements) that is recycled: 128 MiB of f32. Large
/// outputs (a CNN's activations, megabytes each; a BERT's feed-forward
/// activations at batch 32, 25 MB each; per-sample gradients, the batch
/// times the model: 108 MB for the README's CNN at 64 examples) are freed
/// and made again every step; from the allocator each is a fresh mapping
/// whose pages the kernel zeroes on first write (ARCHITECTURE.md, PERF).
pub const MAX_RECYCLED_ELEMENTS: usize = 1 << 25;
/// The most bytes of recycled tensors one thread keeps.
pub const MAX_RECYCLED_BYTES: usize = 256 << 20;
/// The most distinct (dtype, length) classes one thread keeps. A CNN
/// step builds a size class per activation and per parameter shape; with
/// 16 classes and no eviction, those of a first batch size (W3 at 64) kept
/// a second one's megabyte activations out for good, each then a fresh,
/// page-faulting allocation every step.
pub const MAX_SIZE_CLASSES: usize = 64;

struct SizeClass {
    dtype: DType,
    len: usize,
    free: Vec<Arc<Dense>>,
    /// Whether a build asked for this class since the sweep last passed it.
    used: bool,
    //// Outputs of this class the pool could not serve. The pool keeps at most
    /// this many: tensors made elsewhere (copies, constructors) still come
    /// back here when dropped, and without this bound a loop making them
    /// would grow the pool by their number every step.
    fresh: usize,
}

pub(super) struct Pool {
    classes: Vec<SizeClass>,
    bytes: usize,
    /// Where the next sweep for a class to replace starts.
    hand: usize,
    /// Buffers lent to the next builds on this thread (`planned.rs`).
    pub(super) lent: Vec<Arc<Dense>>,
    /// Headers lent to the next views made on this thread (`planned.rs`).
    pub(super) lent_headers: Vec<Arc<Dense>>,
}

thread_local! {
    pub(super) static POOL: RefCell<Pool> = const {
        RefCell::new(Pool {
            classes: Vec::new(),
            bytes: 0,
            hand: 0,
            lent: Vec::new(),
            lent_headers: Vec::new(),
        })
    };
}

impl Pool {
    /// Adds an empty class, in the place of one not drawn from since the
    /// sweep last passed it when the pool is full (its tensors are freed
    /// here: pooled tensors are plain buffers, their views forgotten, so
    /// freeing them does not re-enter the pool); returns its index. Out of line: the draw path stays as short as it
    /// was before classes could be replaced (the instruction-count gate's
    /// W1v).
    #[cold]
    #[inline(never)]
    fn add_class(&mut self, dtype: DType, len: usize) -> usize {
        let class = SizeClass {
            dtype,
            len,
            free: Vec::new(),
            used: true,
            fresh: 0,
        };
        if self.classes.len() < MAX_SIZE_CLASSES {
            self.classes.push(class);
            return self.classes.len() - 1;
        }
        // Clear flags until a class without one comes up: at most one lap,
        // since the lap clears them all.
        let mut at = self.hand % self.classes.len();
        while std::mem::replace(&mut self.classes[at].used, false) {
            at = (at + 1) % self.classes.len();
        }
        self.hand = at + 1;
        let old = std::mem::replace(&mut self.classes[at], class);
        self.bytes -= old.free.len() * footprint(old.dtype, old.len);
        at
    }
}

fn footprint(dtype: DType, len: usize) -> usize {
    len * dtype.size_in_bytes() + std::mem::size_of::<Dense>()
}

/// A tensor of `shape` (with `len` elements of `T`) whose elements `fill`
/// writes, in recycled storage; `shape` and `fill` back when the pool has
/// none of that size.
#[inline]
pub(crate) fn build_recycled<T: DataType, F>(
    shape: Dims,
    len: usize,
    fill: F,
) -> Result<Arc<Dense>, (Dims, F)>
where
    F: for<'a> FnOnce(&'a mut [MaybeUninit<T>]) -> Filled<'a>,
{
    let taken = POOL
        .try_with(|p| {
            let mut p = p.borrow_mut();
            let p = &mut *p;
            if !p.lent.is_empty()
                && let Some(dense) = super::planned::take(&mut p.lent, T::DTYPE, len)
            {
                return Some(dense);
            }
            let index = match p
                .classes
                .iter()
                .position(|c| c.len == len && c.dtype == T::DTYPE)
            {
                Some(i) => i,
                None => p.add_class(T::DTYPE, len),
            };
            let class = &mut p.classes[index];
            class.used = true;
            match class.free.pop() {
                Some(dense) => {
                    p.bytes -= footprint(T::DTYPE, len);
                    Some(dense)
                }
                None => {
                    class.fresh += 1;
                    None
                }
            }
        })
        .ok()
        .flatten();
    let Some(dense) = taken else {
        return Err((shape, fill));
    };
    Ok(fill_lent(dense, shape, fill))
}

/// `dense` (a pooled or lent tensor: one owner, a plain buffer of `T`
/// of `shape`'s length) given `shape` and filled by `fill`.
#[inline(always)]
pub(crate) fn fill_lent<T: DataType, F>(mut dense: Arc<Dense>, shape: Dims, fill: F) -> Arc<Dense>
where
    F: for<'a> FnOnce(&'a mut [MaybeUninit<T>]) -> Filled<'a>,
{
    let inner = unique_mut(&mut dense).expect("pooled tensors have one owner");
    inner.shape = shape;
    let elements = T::unwrap_buffer_mut(&mut inner.buf)
        .and_then(unique_mut)
        .expect("pooled buffers have one owner and the class's dtype");
    // SAFETY: `MaybeUninit<T>` has `T`'s size, alignment and ABI, and
    // `elements` is borrowed uniquely for the view's lifetime (one owner, and
    // `dense` is ours). The view lets `fill` store an uninitialised value,
    // which the `Filled` it must return rules out (`Filled::assume`'s
    // contract: every slot given a value), so the buffer holds valid `T`s
    // when it is seen as `[T]` again. If `fill` panics instead, `dense` is
    // dropped and freed without its elements being read (`T`, f32 or f64,
    // has no drop glue).
    let slots = unsafe { &mut *(elements as *mut [T] as *mut [MaybeUninit<T>]) };
    let _proof = fill(slots);
    dense
}

/// Offers a dropped tensor's storage to the pool; returns it if the pool
/// does not take it (shared, too big, or the pool is full).
#[inline(never)]
pub(crate) fn recycle(mut dense: Arc<Dense>) -> Option<Arc<Dense>> {
    let Some(inner) = unique_mut(&mut dense) else {
        return Some(dense);
    };
    let (dtype, len) = (inner.buf.dtype(), inner.buf.len());
    if len > MAX_RECYCLED_ELEMENTS || len == 0 || !inner.buf.is_unique() {
        return Some(dense);
    }
    // The last view of a buffer hands the whole buffer back (its packed
    // copy, a tensor of its own, is recycled as it drops here).
    inner.forget_view();
    let cost = footprint(dtype, len);
    let refused = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        if p.bytes + cost > MAX_RECYCLED_BYTES {
            return Some(dense);
        }
        let Some(index) = p
            .classes
            .iter()
            .position(|c| c.len == len && c.dtype == dtype && c.free.len() < c.fresh)
        else {
            return Some(dense);
        };
        p.classes[index].free.push(dense);
        p.bytes += cost;
        None
    });
    // Without a pool (the thread is exiting) the closure, and with it the
    // tensor, was dropped: freed as usual.
    refused.unwrap_or(None)
}

/// Frees every recycled tensor of this thread.
pub(crate) fn release() {
    let _ = POOL.try_with(|p| {
        let mut p = p.borrow_mut();
        p.classes = Vec::new();
        p.bytes = 0;
    });
}
