//! Spare gradient slots: the slot vector of dropped [`Gradients`](crate::Gradients) is kept,
//! emptied, for the next backward pass on the same thread, as the graph's
//! arena is by [`graph::pool`](crate::core::graph::pool), and under the same limit
//! ([`MAX_SPARE_BYTES`], arena and slots together).

use std::cell::RefCell;

use crate::core::graph::pool::{self as arena_pool, MAX_SPARE_BYTES};
use crate::core::graph::Graph;
use crate::core::store::GradSlot;

thread_local! {
    static SPARE_SLOTS: RefCell<Option<Vec<GradSlot>>> = const { RefCell::new(None) };
}

/// `n` unreached gradient slots, in this thread's spare vector if it has one.
pub(crate) fn take_slots(n: usize) -> Vec<GradSlot> {
    let mut slots = SPARE_SLOTS
        .try_with(|s| s.borrow_mut().take())
        .ok()
        .flatten()
        .unwrap_or_default();
    arena_pool::set_other_bytes(0);
    slots.resize(n, GradSlot::Unreached);
    slots
}

/// Keeps `slots`, emptied, for the next backward pass on this thread, unless
/// the thread already keeps a larger vector or it would pass the limit.
pub(crate) fn give_back_slots(mut slots: Vec<GradSlot>) {
    slots.clear();
    let _ = SPARE_SLOTS.try_with(|s| {
        let mut s = s.borrow_mut();
        let current = s.as_ref().map_or(0, |v| capacity_bytes(v.capacity()));
        let incoming = capacity_bytes(slots.capacity());
        if incoming > current && arena_pool::arena_bytes() + incoming <= MAX_SPARE_BYTES {
            *s = Some(slots);
            arena_pool::set_other_bytes(incoming);
        }
    });
}

fn capacity_bytes(capacity: usize) -> usize {
    capacity * std::mem::size_of::<GradSlot>()
}

// Defined here rather than in `graph`, which knows nothing of gradients.
impl Graph {
    /// Frees the buffers this thread keeps for its next graphs: the arena of
    /// its last dropped graph (see [`graph::pool`](crate::core::graph::pool)), the
    /// slots of its last dropped [`Gradients`](crate::Gradients) and its recycled small
    /// tensors (see [`tensor::recycle`](crate::tensor::recycle)), then
    /// asks the C allocator (glibc's) to return its free memory to the
    /// system: it keeps freed blocks in per-thread arenas, so without this
    /// large buffers freed on one pool thread stay resident while another
    /// allocates afresh. For a program that is done with large graphs and
    /// wants the memory back.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// {
    ///     let g = Graph::new();
    ///     let x = g.variable(Tensor::scalar(2.0));
    ///     let _ = (&x * &x).backward()?;
    /// } // the graph's buffers are kept for the next graph on this thread...
    /// Graph::release_spare_buffers(); // ...until released
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn release_spare_buffers() {
        let _ = SPARE_SLOTS.try_with(|s| *s.borrow_mut() = None);
        arena_pool::set_other_bytes(0);
        arena_pool::release();
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        // SAFETY: `malloc_trim` only returns free memory to the system; it
        // touches no live allocation and may be called from any thread.
        unsafe {
            libc::malloc_trim(0);
        }
    }
}
