//! Spare buffers: the arena of a dropped graph (and the gradient slots of
//! dropped [`Gradients`](crate::Gradients)) are kept, emptied, for the next
//! graph on the same thread.
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

use super::NodeRecord;
use crate::autograd::GradSlot;
use crate::tensor::Tensor;

/// The most bytes of spare capacity one thread keeps (arena and slots together).
pub const MAX_SPARE_BYTES: usize = 1 << 30;

/// The vectors of a graph's arena that grow with every node.
#[derive(Default)]
pub(crate) struct ArenaBuffers {
    pub(crate) values: Vec<Tensor>,
    pub(crate) producers: Vec<u32>,
    pub(crate) nodes: Vec<NodeRecord>,
    pub(crate) node_inputs: Vec<u32>,
}

impl ArenaBuffers {
    fn capacity_bytes(&self) -> usize {
        use std::mem::size_of;
        self.values.capacity() * size_of::<Tensor>()
            + self.producers.capacity() * size_of::<u32>()
            + self.nodes.capacity() * size_of::<NodeRecord>()
            + self.node_inputs.capacity() * size_of::<u32>()
    }

    fn clear(&mut self) {
        self.values.clear();
        self.producers.clear();
        self.nodes.clear();
        self.node_inputs.clear();
    }
}

#[derive(Default)]
struct Spare {
    arena: Option<ArenaBuffers>,
    slots: Option<Vec<GradSlot>>,
}

impl Spare {
    fn bytes(&self) -> usize {
        self.arena.as_ref().map_or(0, ArenaBuffers::capacity_bytes)
            + self
                .slots
                .as_ref()
                .map_or(0, |s| s.capacity() * std::mem::size_of::<GradSlot>())
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
        let current = s.arena.as_ref().map_or(0, ArenaBuffers::capacity_bytes);
        let incoming = arena.capacity_bytes();
        if incoming > current && s.bytes() - current + incoming <= MAX_SPARE_BYTES {
            s.arena = Some(arena);
        }
    });
}

/// `n` unreached gradient slots, in this thread's spare vector if it has one.
pub(crate) fn take_slots(n: usize) -> Vec<GradSlot> {
    let mut slots = SPARE
        .try_with(|s| s.borrow_mut().slots.take())
        .ok()
        .flatten()
        .unwrap_or_default();
    slots.resize(n, GradSlot::Unreached);
    slots
}

/// Keeps `slots`, emptied, for the next backward pass on this thread (same
/// policy as [`give_back_arena`]).
pub(crate) fn give_back_slots(mut slots: Vec<GradSlot>) {
    slots.clear();
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        let size = std::mem::size_of::<GradSlot>();
        let current = s.slots.as_ref().map_or(0, |v| v.capacity() * size);
        let incoming = slots.capacity() * size;
        if incoming > current && s.bytes() - current + incoming <= MAX_SPARE_BYTES {
            s.slots = Some(slots);
        }
    });
}

/// Frees this thread's spare buffers and recycled tensors.
pub(crate) fn release() {
    let _ = SPARE.try_with(|s| *s.borrow_mut() = Spare::default());
    crate::tensor::recycle::release();
}
