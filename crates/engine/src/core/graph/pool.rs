//! Spare buffers: the arena of a dropped graph is kept, emptied, for the
//! next graph on the same thread (as are the gradient slots of dropped
//! [`Gradients`](crate::Gradients), by `autograd`'s pool).
//!
//! A training loop or a benchmark builds a graph of the same size step after
//! step. Without reuse, each step grows its vectors from nothing (copying
//! them as they double) and touches fresh pages the allocator has just
//! returned to the operating system; measured on W1 that was half the time of
//! recording a scalar graph. With reuse, a step writes into memory it already
//! owns. The cost is that a thread keeps its largest recent arena until it
//! exits or calls [`Graph::release_spare_buffers`](crate::Graph::release_spare_buffers),
//! and never more than [`MAX_SPARE_BYTES`].

use std::cell::RefCell;

use super::{NodeRecord, OpEntry};
use crate::tensor::Tensor;

/// The most bytes of spare capacity one thread keeps (arena and gradient
/// slots together).
pub const MAX_SPARE_BYTES: usize = 1 << 30;

/// The vectors of a graph's arena that grow with every node.
#[derive(Default)]
pub(crate) struct ArenaBuffers {
    pub(crate) values: Vec<Tensor>,
    pub(crate) producers: Vec<u32>,
    pub(crate) nodes: Vec<NodeRecord>,
    pub(crate) node_inputs: Vec<u32>,
    pub(crate) ops: Vec<OpEntry>,
}

impl ArenaBuffers {
    fn capacity_bytes(&self) -> usize {
        use std::mem::size_of;
        self.values.capacity() * size_of::<Tensor>()
            + self.producers.capacity() * size_of::<u32>()
            + self.nodes.capacity() * size_of::<NodeRecord>()
            + self.node_inputs.capacity() * size_of::<u32>()
            + self.ops.capacity() * size_of::<OpEntry>()
    }

    fn clear(&mut self) {
        self.values.clear();
        self.producers.clear();
        self.nodes.clear();
        self.node_inputs.clear();
        self.ops.clear();
    }
}

#[derive(Default)]
struct Spare {
    arena: Option<ArenaBuffers>,
    /// What the thread's other spare buffers hold (the gradient slots kept
    /// by `autograd`'s pool, which reports it through [`set_other_bytes`]):
    /// both count against [`MAX_SPARE_BYTES`].
    other_bytes: usize,
}

impl Spare {
    fn arena_bytes(&self) -> usize {
        self.arena.as_ref().map_or(0, ArenaBuffers::capacity_bytes)
    }
}

thread_local! {
    static SPARE: RefCell<Spare> = RefCell::new(Spare::default());
}

/// The spare arena of this thread (empty vectors with capacity), or new ones.
pub(crate) fn take_arena() -> ArenaBuffers {
    SPARE
        .try_with(|s| s.borrow_mut().arena.take())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// Keeps `arena`, emptied, for the next graph on this thread, unless the
/// thread already keeps a larger one or it would pass the limit.
pub(crate) fn give_back_arena(mut arena: ArenaBuffers) {
    arena.clear();
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        let current = s.arena_bytes();
        let incoming = arena.capacity_bytes();
        if incoming > current && s.other_bytes + incoming <= MAX_SPARE_BYTES {
            s.arena = Some(arena);
        }
    });
}

/// The bytes of the spare arena this thread keeps.
pub(crate) fn arena_bytes() -> usize {
    SPARE.try_with(|s| s.borrow().arena_bytes()).unwrap_or(0)
}

/// Records that this thread's other spare buffers now hold `bytes`.
pub(crate) fn set_other_bytes(bytes: usize) {
    let _ = SPARE.try_with(|s| s.borrow_mut().other_bytes = bytes);
}

/// Frees this thread's spare arena and recycled tensors.
pub(crate) fn release() {
    let _ = SPARE.try_with(|s| s.borrow_mut().arena = None);
    crate::tensor::recycle::release();
}
