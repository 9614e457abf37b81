//! [`NodeRecord`]: one node of the arena in 20 bytes.
//!
//! Nearly every node has one or two inputs, so their value ids live in the
//! record itself, with a bit per input saying whether it requires grad: the
//! backward sweep of a scalar graph reads one record per node and nothing
//! else about the node's shape. A node of three or more inputs keeps them in
//! the graph's `node_inputs` list and the record holds where.

use super::OpId;

/// `meta`'s low byte (the inline count) for a node whose inputs are in `node_inputs`.
const SPILLED: usize = 0;

#[derive(Clone, Copy)]
pub struct NodeRecord {
    pub op: OpId,
    /// Value id of the output.
    pub output: u32,
    /// The input ids of a node of one or two inputs; `[start, count]` in
    /// `node_inputs` otherwise.
    ids: [u32; 2],
    /// Low byte: the number of inline inputs (1 or 2), or `SPILLED`.
    /// Bits 8 and 9: whether inline input 0 and 1 require grad.
    meta: u32,
}

/// The inputs of a node of one or two inputs, packed into two plain
/// integers as soon as they are read from the `Var`s. Arrays of ids and
/// flags were kept on the stack a byte or four at a time across the arena
/// pushes and read back eight at a time, a load that stalls on the stores
/// that wrote it (see `tensor/word.rs`).
#[derive(Clone, Copy)]
pub(crate) struct InlineInputs {
    /// Input 0's id in the low half, input 1's (or 0) in the high half.
    ids: u64,
    /// `NodeRecord::meta`.
    meta: u32,
}

impl InlineInputs {
    /// `N` (1 or 2) inputs with whether each requires grad.
    #[inline(always)]
    pub(crate) fn new<const N: usize>(ids: [u32; N], needs: [bool; N]) -> Self {
        const { assert!(N == 1 || N == 2, "one or two inline inputs") };
        let mut packed = 0u64;
        let mut meta = N as u32;
        for k in 0..N {
            packed |= u64::from(ids[k]) << (32 * k);
            meta |= u32::from(needs[k]) << (8 + k);
        }
        InlineInputs { ids: packed, meta }
    }
}

impl NodeRecord {
    /// A node of `N` (1 or 2) inputs, held inline.
    #[cfg(test)]
    pub(crate) fn inline<const N: usize>(
        op: OpId,
        output: u32,
        ids: [u32; N],
        needs: [bool; N],
    ) -> Self {
        Self::with_inputs(op, output, InlineInputs::new(ids, needs))
    }

    /// A node whose one or two inputs are `inputs`, held inline.
    #[inline(always)]
    pub(crate) fn with_inputs(op: OpId, output: u32, inputs: InlineInputs) -> Self {
        NodeRecord {
            op,
            output,
            ids: [inputs.ids as u32, (inputs.ids >> 32) as u32],
            meta: inputs.meta,
        }
    }

    /// A node whose `count` inputs are at `start..start + count` in `node_inputs`.
    #[inline]
    pub(crate) fn spilled(op: OpId, output: u32, start: u32, count: u32) -> Self {
        NodeRecord {
            op,
            output,
            ids: [start, count],
            meta: SPILLED as u32,
        }
    }

    /// The number of inline inputs (1 or 2), or 0 when they are in `node_inputs`.
    #[inline(always)]
    pub(crate) fn inline_count(&self) -> usize {
        (self.meta & 0xff) as usize
    }

    /// The first `N` inline input ids (`N` no more than `inline_count`).
    #[inline(always)]
    pub(crate) fn inline_ids<const N: usize>(&self) -> [u32; N] {
        debug_assert!(N <= self.inline_count());
        std::array::from_fn(|k| self.ids[k])
    }

    /// Whether each of the first `N` inline inputs requires grad.
    #[inline(always)]
    pub(crate) fn inline_needs<const N: usize>(&self) -> [bool; N] {
        debug_assert!(N <= self.inline_count());
        std::array::from_fn(|k| self.meta & (1 << (8 + k)) != 0)
    }

    /// The input ids: from the record, or from `node_inputs` (the graph's
    /// list of spilled inputs).
    #[inline(always)]
    pub(crate) fn inputs<'a>(&'a self, node_inputs: &'a [u32]) -> &'a [u32] {
        match self.inline_count() {
            SPILLED => {
                let [start, count] = self.ids;
                &node_inputs[start as usize..(start + count) as usize]
            }
            n => &self.ids[..n],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::graph::never_run::NeverRun;

    fn op() -> OpId {
        crate::core::graph::OpTable::default().intern(NeverRun::<0>)
    }

    #[test]
    fn a_record_is_20_bytes() {
        assert_eq!(std::mem::size_of::<NodeRecord>(), 20);
    }

    #[test]
    fn inline_inputs_round_trip_with_their_needs() {
        let one = NodeRecord::inline(op(), 7, [3], [true]);
        assert_eq!(one.inline_count(), 1);
        assert_eq!(one.inputs(&[]), &[3]);
        assert_eq!(one.inline_needs::<1>(), [true]);
        let two = NodeRecord::inline(op(), 9, [4, 5], [false, true]);
        assert_eq!(two.inline_count(), 2);
        assert_eq!(two.inputs(&[]), &[4, 5]);
        assert_eq!(two.inline_ids::<2>(), [4, 5]);
        assert_eq!(two.inline_needs::<2>(), [false, true]);
        assert_eq!(two.output, 9);
    }

    #[test]
    fn spilled_inputs_are_read_from_the_list() {
        let list = [10, 11, 12, 13, 14];
        let rec = NodeRecord::spilled(op(), 20, 1, 3);
        assert_eq!(rec.inline_count(), 0);
        assert_eq!(rec.inputs(&list), &[11, 12, 13]);
    }
}
