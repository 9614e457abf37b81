//! `Graph::record`: run an op forward and append a node only if some input
//! requires grad (the textbook chapter's `ComputationGraph.record`).

use std::panic::Location;
use std::sync::Arc;

use smallvec::SmallVec;

use super::{Graph, GraphState, InlineInputs, NodeRecord, OpId, OpTable, Var, NO_SLOT};
use crate::base::error::{Error, Result};
use crate::core::Differentiable;
use crate::tensor::{refused, Tensor};

impl Graph {
    /// Runs `op` forward on `inputs` and records a node if any input requires
    /// grad (and recording is not suspended). When every input is frozen, no
    /// node is created and a plain constant comes back: constant folding.
    ///
    /// This is the textbook chapter's `record`; every op method on [`Var`] calls it.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::{arith::Mul, rule::Binary}};
    /// let g = Graph::new();
    /// let x = g.constant(Tensor::scalar(3.0));
    /// let y = g.constant(Tensor::scalar(4.0));
    /// let z = g.record(Binary(Mul), &[&x, &y])?;
    /// assert_eq!(g.len(), 0);          // both frozen: no node
    /// assert!(!z.requires_grad());
    /// assert_eq!(z.value().try_item()?, 12.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    #[inline(always)]
    pub fn record<'g, O: Differentiable>(&'g self, op: O, inputs: &[&Var<'g>]) -> Result<Var<'g>> {
        let output = self.forward_checked(&op, inputs)?;
        Ok(self.record_forwarded(op, inputs, output))
    }

    /// [`record`](Self::record) for operator sugar: panics with the error's
    /// message at the caller's location. The `Var` comes back directly, not
    /// inside a `Result`: moving it out of one copied it through the stack
    /// with 16-byte loads of the smaller stores that built it (see
    /// `tensor/word.rs`), once per recorded op.
    #[track_caller]
    #[inline(always)]
    pub(crate) fn record_or_panic<'g, O: Differentiable>(
        &'g self,
        op: O,
        inputs: &[&Var<'g>],
    ) -> Var<'g> {
        let output = crate::base::error::or_panic(self.forward_checked(&op, inputs));
        self.record_forwarded(op, inputs, output)
    }

    /// The rest of `record` once `op` has run forward to `output`.
    #[track_caller]
    #[inline(always)]
    fn record_forwarded<'g, O: Differentiable>(
        &'g self,
        op: O,
        inputs: &[&Var<'g>],
        output: Tensor,
    ) -> Var<'g> {
        let constant = !self.needs_node(inputs) || (op.non_float_output() && !output.is_float());
        let op_id = |ops: &mut OpTable| {
            if std::mem::size_of::<O>() == 0 {
                ops.intern(op)
            } else {
                ops.own(None, Arc::new(op))
            }
        };
        if constant {
            if self.tracing.get() {
                return self.trace_constant(op_id, inputs, output);
            }
            return Var::constant_in(self, output);
        }
        self.push_node(op_id, inputs, output)
    }

    /// A constant computed by an op while the graph traces (see
    /// [`Graph::set_tracing`]): when an input is a value of the graph, the
    /// output gets a slot and the side table `traced` keeps its op and
    /// inputs. A constant computed from literals alone stays a literal.
    #[cold]
    #[inline(never)]
    fn trace_constant<'g>(
        &'g self,
        op: impl FnOnce(&mut OpTable) -> OpId,
        inputs: &[&Var<'g>],
        output: Tensor,
    ) -> Var<'g> {
        if inputs.iter().all(|v| v.slot() == NO_SLOT) {
            return Var::constant_in(self, output);
        }
        let mut guard = self.state.borrow_mut();
        let st: &mut GraphState = &mut guard;
        let op = op(&mut st.ops);
        let ids = inputs.iter().map(|v| value_id_in(st, v)).collect();
        let id = st.push_value(output.clone(), super::LEAF_CONSTANT);
        st.traced.insert(id, super::TracedValue { op, inputs: ids });
        drop(guard);
        Var::from_parts(self, output, id, false)
    }

    /// `record` for an op of a recorded graph's table (its built-in or
    /// owned op, under the name it was recorded with): a transform that
    /// reads one graph records its nodes again in another.
    #[track_caller]
    pub(crate) fn record_entry<'g>(
        &'g self,
        entry: &super::OpEntry,
        inputs: &[&Var<'g>],
    ) -> Result<Var<'g>> {
        match entry {
            super::OpEntry::Static(op) => self.record(*op, inputs),
            super::OpEntry::Owned { name, op } => {
                self.record_shared(name.as_deref(), op.clone(), inputs)
            }
        }
    }

    /// `record` for an op already behind an `Arc` (registry ops, user ops).
    #[track_caller]
    pub(crate) fn record_shared<'g>(
        &'g self,
        name: Option<&str>,
        op: Arc<dyn Differentiable>,
        inputs: &[&Var<'g>],
    ) -> Result<Var<'g>> {
        let output = self.forward_checked(&*op, inputs)?;
        let name = name.filter(|n| *n != op.name()).map(Arc::<str>::from);
        let op_id = |ops: &mut OpTable| ops.own(name, op);
        if !self.needs_node(inputs) || !output.is_float() {
            if self.tracing.get() {
                return Ok(self.trace_constant(op_id, inputs, output));
            }
            return Ok(Var::constant_in(self, output));
        }
        Ok(self.push_node(op_id, inputs, output))
    }

    #[inline(always)]
    fn needs_node(&self, inputs: &[&Var<'_>]) -> bool {
        self.is_recording() && inputs.iter().any(|v| v.requires_grad())
    }

    #[track_caller]
    #[inline(always)]
    fn forward_checked<'g, O: Differentiable + ?Sized>(
        &'g self,
        op: &O,
        inputs: &[&Var<'g>],
    ) -> Result<Tensor> {
        for v in inputs {
            if !std::ptr::eq(self, v.graph()) {
                return Err(Error::ForeignVariable {
                    op: op.name().to_string(),
                });
            }
        }
        // A refused output buffer is an error naming the op; PERF: ops that
        // catch it themselves run without this boundary (ARCHITECTURE.md,
        // PERF, "The refused-buffer boundary").
        let output = if op.catches_refused_buffers() {
            run_forward(op, inputs)?
        } else {
            refused::catching(|| op.name().to_string(), || run_forward(op, inputs))?
        };
        if self.anomaly_detection() && !output.all_finite() {
            return Err(self.forward_anomaly(op.name()));
        }
        Ok(output)
    }

    #[cold]
    #[track_caller]
    fn forward_anomaly(&self, op: &str) -> Error {
        Error::Anomaly {
            op: op.to_string(),
            node: self.len(),
            location: Location::caller().to_string(),
            phase: "forward",
        }
    }

    #[track_caller]
    #[inline(always)]
    fn push_node<'g>(
        &'g self,
        op: impl FnOnce(&mut OpTable) -> OpId,
        inputs: &[&Var<'g>],
        output: Tensor,
    ) -> Var<'g> {
        // The common shapes of a node (one or two inputs already in the
        // graph) get straight-line code: this runs once per recorded op.
        match inputs {
            [a] if a.slot() != NO_SLOT => {
                self.push_inline(op, [a.slot()], [a.requires_grad()], output)
            }
            [a, b] if a.slot() != NO_SLOT && b.slot() != NO_SLOT => self.push_inline(
                op,
                [a.slot(), b.slot()],
                [a.requires_grad(), b.requires_grad()],
                output,
            ),
            _ => {
                let op = op(&mut self.state.borrow_mut().ops);
                self.push_general(op, inputs, output)
            }
        }
    }

    /// Appends a node of one or two inputs that all have value ids.
    #[track_caller]
    #[inline(always)]
    fn push_inline<const N: usize>(
        &self,
        op: impl FnOnce(&mut OpTable) -> OpId,
        ids: [u32; N],
        needs: [bool; N],
        output: Tensor,
    ) -> Var<'_> {
        let inputs = InlineInputs::new(ids, needs);
        let mut guard = self.state.borrow_mut();
        let st: &mut GraphState = &mut guard;
        let op = op(&mut st.ops);
        let out_id = self.append_node(st, &output, |out| NodeRecord::with_inputs(op, out, inputs));
        drop(guard);
        Var::from_parts(self, output, out_id, true)
    }

    /// Appends a node of any arity; a constant input without a value id
    /// enters the graph here, the first time a node uses it.
    #[track_caller]
    #[inline(never)]
    fn push_general<'g>(&'g self, op: OpId, inputs: &[&Var<'g>], output: Tensor) -> Var<'g> {
        let mut guard = self.state.borrow_mut();
        let st: &mut GraphState = &mut guard;
        let out_id = match *inputs {
            [a] => self.append_inline(st, op, [a], &output),
            [a, b] => self.append_inline(st, op, [a, b], &output),
            _ => {
                let start = st.node_inputs.len();
                for v in inputs {
                    let id = value_id_in(st, v);
                    st.node_inputs.push(id);
                }
                let count = inputs.len();
                self.append_node(st, &output, |out| {
                    NodeRecord::spilled(op, out, start as u32, count as u32)
                })
            }
        };
        drop(guard);
        Var::from_parts(self, output, out_id, true)
    }

    /// Appends a node whose one or two inputs are held inline, giving a
    /// constant input without a value id a slot first.
    #[track_caller]
    #[inline(always)]
    fn append_inline<const N: usize>(
        &self,
        st: &mut GraphState,
        op: OpId,
        inputs: [&Var<'_>; N],
        output: &Tensor,
    ) -> u32 {
        let ids = inputs.map(|v| value_id_in(st, v));
        let inputs = InlineInputs::new(ids, inputs.map(|v| v.requires_grad()));
        self.append_node(st, output, |out| NodeRecord::with_inputs(op, out, inputs))
    }

    /// Appends `output` as a new value and the node `record` makes from its
    /// value id; returns that id.
    #[track_caller]
    #[inline(always)]
    fn append_node(
        &self,
        st: &mut GraphState,
        output: &Tensor,
        record: impl FnOnce(u32) -> NodeRecord,
    ) -> u32 {
        let node = st.nodes.len() as u32;
        let out_id = st.push_value(output.clone(), node);
        st.nodes.push(record(out_id));
        if self.anomaly_detection() {
            st.locations.insert(node, Location::caller());
        }
        out_id
    }
}

/// `v`'s value id, giving a constant without one a slot.
fn value_id_in(st: &mut GraphState, v: &Var<'_>) -> u32 {
    if v.slot() == NO_SLOT {
        st.push_value(v.value().clone(), super::LEAF_CONSTANT)
    } else {
        v.slot()
    }
}

/// Runs `op`'s forward on the inputs' values. Fixed-size arrays for the
/// common arities keep this allocation-free and let a statically known op's
/// forward inline.
#[inline(always)]
fn run_forward<O: Differentiable + ?Sized>(op: &O, inputs: &[&Var<'_>]) -> Result<Tensor> {
    match inputs {
        [a] => op.forward(&[a.value()]),
        [a, b] => op.forward(&[a.value(), b.value()]),
        [a, b, c] => op.forward(&[a.value(), b.value(), c.value()]),
        _ => {
            let tensors: SmallVec<[&Tensor; 8]> = inputs.iter().map(|v| v.value()).collect();
            op.forward(&tensors)
        }
    }
}
