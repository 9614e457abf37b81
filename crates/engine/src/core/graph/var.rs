//! [`Var`]: a value taking part in differentiation, with the graph it
//! records into.

use std::fmt;

use super::{Graph, NO_SLOT};
use crate::tensor::{DType, Tensor};

/// A handle to a value in a [`Graph`]: the value itself, its id in the graph
/// (the textbook chapter's `grad_fn_index` for op outputs), and the graph to record into.
///
/// Ops on `Var`s record through the graph reference, so `&x * &y + &x`
/// records two nodes with no `&mut graph` in sight. The lifetime ties every
/// handle to its graph: a graph can never be kept alive by a stray handle.
#[derive(Clone)]
pub struct Var<'g> {
    graph: &'g Graph,
    value: Tensor,
    id: u32,
    requires_grad: bool,
}

impl<'g> Var<'g> {
    #[inline(always)]
    pub(crate) fn from_parts(
        graph: &'g Graph,
        value: Tensor,
        id: u32,
        requires_grad: bool,
    ) -> Self {
        Var {
            graph,
            value,
            id,
            requires_grad,
        }
    }

    /// A constant with no slot: it enters the graph only if a node uses it.
    #[inline(always)]
    pub fn constant_in(graph: &'g Graph, value: Tensor) -> Self {
        Var {
            graph,
            value,
            id: NO_SLOT,
            requires_grad: false,
        }
    }

    /// The value.
    #[inline(always)]
    pub fn value(&self) -> &Tensor {
        &self.value
    }

    /// The value, consuming the handle.
    #[inline(always)]
    pub fn into_value(self) -> Tensor {
        self.value
    }

    /// The value's shape.
    #[inline(always)]
    pub fn shape(&self) -> &[usize] {
        self.value.shape()
    }

    /// The value's dtype.
    #[inline(always)]
    pub fn dtype(&self) -> DType {
        self.value.dtype()
    }

    /// Whether gradients flow to this value: a variable, or the output of a
    /// recorded op.
    #[inline(always)]
    pub fn requires_grad(&self) -> bool {
        self.requires_grad
    }

    /// The graph this value belongs to.
    #[inline(always)]
    pub fn graph(&self) -> &'g Graph {
        self.graph
    }

    /// The value id of this handle in its graph: the index that
    /// [`GraphState`](super::GraphState)'s tables (values, producers, names)
    /// are read at.
    #[inline(always)]
    pub fn slot(&self) -> u32 {
        self.id
    }

    /// The value's id in the graph, or `None` for a constant no node has used.
    pub fn value_id(&self) -> Option<usize> {
        (self.id != NO_SLOT).then_some(self.id as usize)
    }

    /// The index of the node that produced this value (the textbook chapter's
    /// `grad_fn_index`), or `None` for leaves and constants.
    pub fn node_index(&self) -> Option<usize> {
        if self.id == NO_SLOT {
            return None;
        }
        let p = self.graph.state.borrow().producers[self.id as usize];
        (p < super::LEAF_CONSTANT).then_some(p as usize)
    }

    /// Whether this value is a leaf (a variable or constant, not an op output).
    pub fn is_leaf(&self) -> bool {
        self.node_index().is_none()
    }

    /// Gives this value a name for traces and pictures; returns it for chaining.
    pub fn named(self, name: &str) -> Self {
        let this = self.ensure_slot();
        this.graph.set_name(this.id, name);
        this
    }

    /// The value's name, if it was given one.
    pub fn name(&self) -> Option<String> {
        if self.id == NO_SLOT {
            return None;
        }
        self.graph.state.borrow().names.get(&self.id).cloned()
    }

    /// The same value as a constant: gradients do not flow through it.
    pub fn detach(&self) -> Var<'g> {
        Var::constant_in(self.graph, self.value.clone())
    }

    /// A constant of this value's dtype holding `v`, in the same graph.
    #[inline(always)]
    pub(crate) fn scalar_like(&self, v: f64) -> Var<'g> {
        Var::constant_in(self.graph, Tensor::scalar_of(v, self.dtype()))
    }

    /// Gives an unslotted constant a slot so it can be named or referred to.
    pub(crate) fn ensure_slot(self) -> Self {
        if self.id != NO_SLOT {
            return self;
        }
        let id = self
            .graph
            .state
            .borrow_mut()
            .push_value(self.value.clone(), super::LEAF_CONSTANT);
        Var { id, ..self }
    }
}

impl fmt::Debug for Var<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Var(")?;
        if let Some(name) = self.name() {
            write!(f, "{name} = ")?;
        }
        write!(
            f,
            "{}, shape={:?}, dtype={}, requires_grad={})",
            self.value,
            self.shape(),
            self.dtype(),
            self.requires_grad
        )
    }
}

impl fmt::Display for Var<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.value, f)
    }
}
