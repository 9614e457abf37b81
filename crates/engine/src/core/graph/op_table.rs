//! [`OpTable`]: the ops a graph's nodes run, each named by a 4-byte [`OpId`].
//!
//! A node record names its op by index rather than by a 16-byte `&dyn`
//! reference, which keeps the record at 20 bytes (W1's memory per node, see
//! BENCHMARKS.md). Built-in ops without state (zero-sized types) are
//! interned: the first node of each op type adds an entry, and later ones
//! find it through a small cache keyed by the type's `TypeId`, which the
//! compiler folds to a constant at each call site. Ops with state (a
//! reduction's axes, a registered user op) get an entry of their own, held
//! for as long as the graph.

use std::any::TypeId;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use crate::core::Differentiable;

/// Where a node's op is in its graph's [`OpTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OpId(u32);

/// One op of the table.
#[derive(Clone)]
pub(crate) enum OpEntry {
    /// A built-in op without state, shared by every node of its type.
    Static(&'static dyn Differentiable),
    /// An op with state, with the name it was recorded under when that
    /// differs from the op's own.
    Owned {
        name: Option<Arc<str>>,
        op: Arc<dyn Differentiable>,
    },
}

/// Cache slots for interned op types; a graph rarely uses more kinds of
/// stateless op, and a collision only costs a duplicate entry.
const INTERN_SLOTS: usize = 16;

pub(crate) struct OpTable {
    entries: Vec<OpEntry>,
    /// Interned op types by cache slot; a vacant slot holds [`Vacant`]'s
    /// type, which no op has (a sentinel rather than an `Option` saves
    /// the tag test on every recorded node).
    interned: [(TypeId, OpId); INTERN_SLOTS],
}

/// The type a vacant cache slot holds: not an op, so no lookup matches it.
struct Vacant;

impl Default for OpTable {
    fn default() -> Self {
        Self::with_buffer(Vec::new())
    }
}

impl OpTable {
    /// A table that appends to `entries` (a pooled, empty vector).
    pub(crate) fn with_buffer(entries: Vec<OpEntry>) -> Self {
        debug_assert!(entries.is_empty());
        OpTable {
            entries,
            interned: [(TypeId::of::<Vacant>(), OpId(0)); INTERN_SLOTS],
        }
    }

    /// The entries' vector, for the next graph (`pool` empties it).
    pub(crate) fn into_buffer(self) -> Vec<OpEntry> {
        self.entries
    }

    /// The id of the zero-sized op `op`: its type's entry, added the first
    /// time the type is seen.
    #[inline(always)]
    pub(crate) fn intern<O: Differentiable>(&mut self, op: O) -> OpId {
        // Not a `const` assertion: callers monomorphise this in the branch
        // that a zero size rules out for ops with state.
        assert!(
            std::mem::size_of::<O>() == 0,
            "only stateless ops are interned"
        );
        let key = TypeId::of::<O>();
        let slot = slot_of(key);
        match self.interned[slot] {
            (k, id) if k == key => id,
            // A zero-sized op has no state: leaking a box of it allocates
            // nothing and gives the `'static` reference the entry holds.
            _ => self.add_interned(slot, key, Box::leak(Box::new(op))),
        }
    }

    #[inline(never)]
    fn add_interned(&mut self, slot: usize, key: TypeId, op: &'static dyn Differentiable) -> OpId {
        let id = self.push(OpEntry::Static(op));
        self.interned[slot] = (key, id);
        id
    }

    /// A new entry for an op with state.
    pub(crate) fn own(&mut self, name: Option<Arc<str>>, op: Arc<dyn Differentiable>) -> OpId {
        self.push(OpEntry::Owned { name, op })
    }

    fn push(&mut self, entry: OpEntry) -> OpId {
        // A graph runs out of value ids (u32) long before it could hold
        // 2^32 ops: every entry belongs to a node, and every node has a value.
        let id = OpId(u32::try_from(self.entries.len()).expect("fewer ops than values"));
        self.entries.push(entry);
        id
    }

    #[inline(always)]
    pub(crate) fn entry(&self, id: OpId) -> &OpEntry {
        &self.entries[id.0 as usize]
    }

    /// The op `id` names.
    #[inline(always)]
    pub(crate) fn op(&self, id: OpId) -> &dyn Differentiable {
        match self.entry(id) {
            OpEntry::Static(op) => *op,
            OpEntry::Owned { op, .. } => &**op,
        }
    }

    /// The name op `id` was recorded under.
    pub(crate) fn name(&self, id: OpId) -> &str {
        match self.entry(id) {
            OpEntry::Static(op) => op.name(),
            OpEntry::Owned { name, op } => name.as_deref().unwrap_or_else(|| op.name()),
        }
    }
}

/// The cache slot of an op type: the low bits of its `TypeId`, which is
/// already a hash.
#[inline(always)]
fn slot_of(key: TypeId) -> usize {
    let mut bits = LowBits(0);
    key.hash(&mut bits);
    bits.0 as usize % INTERN_SLOTS
}

/// A hasher that keeps what it is given, folded into 64 bits.
struct LowBits(u64);

impl Hasher for LowBits {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 ^= n;
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::graph::never_run::NeverRun;

    type First = NeverRun<0>;
    type Second = NeverRun<1>;
    const FIRST: First = NeverRun;
    const SECOND: Second = NeverRun;

    #[test]
    fn an_op_type_is_interned_once_and_owned_ops_each_get_an_entry() {
        let mut table = OpTable::default();
        // The two types' `TypeId`s may share a cache slot (they change with
        // the crate's build), so each is looked up again before the other.
        let a = table.intern(FIRST);
        assert_eq!(table.intern(FIRST), a);
        let b = table.intern(SECOND);
        assert_eq!(table.intern(SECOND), b);
        assert_ne!(a, b);
        let interned = table.entries.len();
        let owned: Arc<dyn Differentiable> = Arc::new(FIRST);
        let c = table.own(Some("renamed".into()), owned.clone());
        let d = table.own(None, owned);
        assert_ne!(c, d);
        assert_eq!(table.entries.len(), interned + 2);
        let names: Vec<&str> = [a, b, c, d].iter().map(|&id| table.name(id)).collect();
        assert_eq!(names, ["first", "second", "renamed", "first"]);
        assert_eq!(table.op(c).name(), "first");
    }

    #[test]
    fn a_colliding_slot_costs_an_entry_not_a_wrong_op() {
        let mut table = OpTable::default();
        let a = table.intern(FIRST);
        // Force Second into First's slot, as a collision would.
        let slot = slot_of(TypeId::of::<First>());
        let b = table.add_interned(slot, TypeId::of::<Second>(), &SECOND);
        assert_eq!(table.op(b).name(), "second");
        let again = table.intern(FIRST);
        assert_ne!(again, a, "the evicted type gets a fresh entry");
        assert_eq!(table.op(again).name(), "first");
        assert_eq!(table.op(a).name(), "first");
    }
}
