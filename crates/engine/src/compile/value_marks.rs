//! What building one unit's micro-program (a fused group, a scalar
//! program) notes per value: the last member reading it, where it lives
//! (a register, an input, an output), whether the unit reads it from
//! outside or writes it out.
//!
//! One array indexed by value id serves every unit of a lowering. Each
//! unit starts a new epoch, and an entry stamped with an older epoch reads
//! as unset, so starting a unit clears nothing and building it costs its
//! own size, not the graph's. Hash maps keyed by value id did the same
//! job, but their hashing scatters consecutive ids over the whole table:
//! on a graph of millions of values every lookup missed the cache, and a
//! capture of W1 at C = 10,000 spent most of its lowering there.

use super::ir::Arg;

/// One value's marks; valid only while `stamp` is the current epoch.
#[derive(Clone, Copy)]
struct Mark {
    stamp: u32,
    last_read: u32,
    reg: u32,
    arg: Option<Arg>,
    written: bool,
    read: bool,
}

const UNSET: u32 = u32::MAX;

const CLEAR: Mark = Mark {
    stamp: 0,
    last_read: UNSET,
    reg: UNSET,
    arg: None,
    written: false,
    read: false,
};

/// Per-value marks of the unit being built (see the module docs).
pub(crate) struct ValueMarks {
    epoch: u32,
    marks: Vec<Mark>,
}

impl ValueMarks {
    /// Marks for a graph of `values` values, all unset.
    pub(crate) fn new(values: usize) -> Self {
        ValueMarks {
            epoch: 0,
            marks: vec![CLEAR; values],
        }
    }

    /// Starts a unit: every mark reads as unset again.
    pub(crate) fn begin(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
        if self.epoch == 0 {
            // Stamps of four billion units ago could read as current.
            self.marks.fill(CLEAR);
            self.epoch = 1;
        }
    }

    fn get(&self, v: u32) -> Mark {
        let m = self.marks[v as usize];
        if m.stamp == self.epoch {
            m
        } else {
            CLEAR
        }
    }

    fn entry(&mut self, v: u32) -> &mut Mark {
        let epoch = self.epoch;
        let m = &mut self.marks[v as usize];
        if m.stamp != epoch {
            *m = Mark {
                stamp: epoch,
                ..CLEAR
            };
        }
        m
    }

    /// Notes that member `i` of the unit reads `v` (members in order, so
    /// the last note is the last read).
    pub(crate) fn note_read_by(&mut self, v: u32, i: usize) {
        self.entry(v).last_read = i as u32;
    }

    /// The last member reading `v`, if any does.
    pub(crate) fn last_read(&self, v: u32) -> Option<usize> {
        let last = self.get(v).last_read;
        (last != UNSET).then_some(last as usize)
    }

    /// Notes that the unit writes `v` out to its slot.
    pub(crate) fn mark_written(&mut self, v: u32) {
        self.entry(v).written = true;
    }

    pub(crate) fn is_written(&self, v: u32) -> bool {
        self.get(v).written
    }

    /// Notes that the unit reads `v` from outside.
    pub(crate) fn mark_read(&mut self, v: u32) {
        self.entry(v).read = true;
    }

    pub(crate) fn is_read(&self, v: u32) -> bool {
        self.get(v).read
    }

    /// Where a fused group's value lives.
    pub(crate) fn set_arg(&mut self, v: u32, arg: Arg) {
        self.entry(v).arg = Some(arg);
    }

    pub(crate) fn arg(&self, v: u32) -> Option<Arg> {
        self.get(v).arg
    }

    /// The register a scalar program keeps a value in.
    pub(crate) fn set_reg(&mut self, v: u32, reg: u32) {
        self.entry(v).reg = reg;
    }

    pub(crate) fn reg(&self, v: u32) -> Option<u32> {
        let reg = self.get(v).reg;
        (reg != UNSET).then_some(reg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_unit_sees_no_mark_of_the_last() {
        let mut marks = ValueMarks::new(4);
        marks.begin();
        marks.note_read_by(2, 5);
        marks.mark_written(1);
        marks.set_reg(3, 7);
        marks.set_arg(0, Arg::Reg(4));
        assert_eq!(marks.last_read(2), Some(5));
        assert!(marks.is_written(1) && !marks.is_read(1));
        assert_eq!((marks.reg(3), marks.arg(0)), (Some(7), Some(Arg::Reg(4))));
        marks.begin();
        assert_eq!(marks.last_read(2), None);
        assert!(!marks.is_written(1));
        assert_eq!((marks.reg(3), marks.arg(0)), (None, None));
        marks.mark_read(2);
        assert!(marks.is_read(2) && marks.last_read(2).is_none());
    }

    #[test]
    fn the_epoch_wraps_without_stale_marks() {
        let mut marks = ValueMarks::new(2);
        marks.epoch = u32::MAX - 1;
        marks.begin();
        marks.mark_written(1);
        marks.begin();
        assert_eq!(marks.epoch, 1);
        assert!(!marks.is_written(1));
    }
}
