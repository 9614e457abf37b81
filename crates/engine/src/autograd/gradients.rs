//! [`Gradients`]: what a backward pass returns (the textbook chapter's `x.grad`, kept
//! outside the tensors).

use crate::base::fallible::fallible;
use std::collections::HashMap;

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::store::GradSlot;
use crate::tensor::Tensor;

/// Gradients of one backward pass, indexed by value id: dense, allocated on
/// first contribution, and independent of the graph's lifetime (they can be
/// kept, sent to another thread, or handed to an optimizer).
///
/// ```
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::scalar(3.0));
/// let y = g.variable(Tensor::scalar(4.0));
/// let unused = g.variable(Tensor::scalar(1.0));
/// let grads = (&x * &y).backward()?;
/// assert_eq!(grads.wrt(&x).try_item()?, 4.0);
/// assert_eq!(grads.wrt(&unused).try_item()?, 0.0);   // unreached reads as zero
/// assert!(grads.get(&unused).is_none());
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Gradients {
    graph_id: u64,
    slots: Vec<GradSlot>,
    /// Gradients of the parameters brought into the graph, by parameter id.
    params: HashMap<u64, Tensor>,
}

impl Gradients {
    pub(crate) fn new(graph_id: u64, slots: Vec<GradSlot>, params: &HashMap<u64, u32>) -> Self {
        let params = params
            .iter()
            .filter_map(|(&pid, &vid)| match slots.get(vid as usize) {
                Some(GradSlot::Grad(t)) => Some((pid, t.clone())),
                _ => None,
            })
            .collect();
        Gradients {
            graph_id,
            slots,
            params,
        }
    }

    /// Parameter gradients only, filled by their owner (a compiled step
    /// keeps one and refills its map every run, without allocating).
    pub(crate) fn for_params(graph_id: u64) -> Self {
        Gradients {
            graph_id,
            slots: Vec::new(),
            params: HashMap::new(),
        }
    }

    /// The parameter gradients by parameter id, to refill.
    pub(crate) fn params_mut(&mut self) -> &mut HashMap<u64, Tensor> {
        &mut self.params
    }

    /// The gradient of the parameter with id `param_id`, if one was
    /// accumulated. `nn` reads it through [`Gradients::of`] and
    /// [`Gradients::get_param`], which take the `Parameter` itself.
    pub fn param_grad(&self, param_id: u64) -> Option<&Tensor> {
        self.params.get(&param_id)
    }

    /// Makes `grad` the gradient of the parameter with id `param_id`, held
    /// in this pass's graph at value `value_id` (data-parallel training
    /// puts the averaged gradients here, where optimizers and `wrt` read).
    pub fn set_param_grad(&mut self, param_id: u64, value_id: Option<usize>, grad: Tensor) {
        if let Some(slot) = value_id.and_then(|id| self.slots.get_mut(id)) {
            *slot = GradSlot::Grad(grad.clone());
        }
        self.params.insert(param_id, grad);
    }

    /// The parameter gradients, by parameter id.
    pub fn param_grads(&self) -> impl Iterator<Item = (u64, &Tensor)> {
        self.params.iter().map(|(&id, t)| (id, t))
    }

    /// Adds `other`'s parameter gradients into these (gradient accumulation
    /// over micro-batches, or summing the gradients of data-parallel workers).
    /// Only parameter gradients are accumulated: values of different graphs
    /// have nothing in common.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, nn::Parameter};
    /// let w = Parameter::new(Tensor::scalar(2.0));
    /// let step = |x: f64| {
    ///     let g = Graph::new();
    ///     (&g.param(&w) * x).backward()
    /// };
    /// let mut total = step(1.0)?;
    /// total.accumulate(&step(3.0)?)?;
    /// assert_eq!(total.of(&w).try_item()?, 4.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn accumulate(&mut self, other: &Gradients) -> Result<()> {
        for (&id, g) in &other.params {
            let merged = match self.params.remove(&id) {
                Some(acc) => crate::kernels::elementwise::zip_assign(
                    "accumulate",
                    acc,
                    g,
                    crate::kernels::functors::Add,
                )?,
                None => g.clone(),
            };
            self.params.insert(id, merged);
        }
        Ok(())
    }

    /// Multiplies every parameter gradient by `factor` (e.g. `1 / micro_batches`).
    pub fn scale(&mut self, factor: f64) {
        for g in self.params.values_mut() {
            *g = crate::kernels::map(g, crate::kernels::functors::Scale(factor))
                .expect("gradients are f32 or f64");
        }
    }

    /// Replaces every parameter gradient `g` with `f` applied elementwise.
    pub(crate) fn map_params(&mut self, f: impl crate::kernels::UnaryFn) {
        for g in self.params.values_mut() {
            *g = crate::kernels::map(g, f).expect("gradients are f32 or f64");
        }
    }

    /// The id of the graph these gradients belong to.
    pub fn graph_id(&self) -> u64 {
        self.graph_id
    }

    fallible! {
        /// The gradient of the root with respect to `var`, zero-filled when
        /// no gradient reached it; an error if `var` belongs to another
        /// graph or is an intermediate whose gradient was not retained, and
        /// `Error::NotDifferentiable` if `var` is an `i64` or `bool` value.
        ///
        /// ```
        /// use retrograd::{Error, Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(2.0));
        /// let ids = g.constant(Tensor::scalar(3i64));
        /// let grads = (&x * &x).backward()?;
        /// assert_eq!(grads.try_wrt(&x)?.try_item()?, 4.0);
        /// assert!(matches!(grads.try_wrt(&ids), Err(Error::NotDifferentiable { .. })));
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_wrt / wrt(&self, var: &Var<'_>) -> Tensor {
            if !var.value().is_float() {
                return Err(Error::NotDifferentiable {
                    op: "wrt",
                    dtype: var.value().dtype(),
                });
            }
            match self.slot_of(var)? {
                Some(GradSlot::Grad(t)) => Ok(t.clone()),
                Some(GradSlot::Released) => Err(Error::GradientNotRetained {
                    value: var.slot() as usize,
                }),
                Some(GradSlot::Unreached) | None => Ok(var.value().zeros_like()),
            }
        }
    }

    /// The gradient with respect to `var` if one was accumulated (and kept).
    pub fn get(&self, var: &Var<'_>) -> Option<&Tensor> {
        match self.slot_of(var) {
            Ok(Some(GradSlot::Grad(t))) => Some(t),
            _ => None,
        }
    }

    /// The gradient of value `id` if one was accumulated (and kept).
    pub fn get_by_id(&self, id: usize) -> Option<&Tensor> {
        match self.slots.get(id) {
            Some(GradSlot::Grad(t)) => Some(t),
            _ => None,
        }
    }

    /// The number of values holding a gradient.
    pub fn len(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| matches!(s, GradSlot::Grad(_)))
            .count()
    }

    /// Whether no value holds a gradient.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn slot_of(&self, var: &Var<'_>) -> Result<Option<&GradSlot>> {
        if var.graph().id() != self.graph_id {
            return Err(Error::ForeignVariable {
                op: "Gradients::wrt".to_string(),
            });
        }
        Ok(var.value_id().and_then(|id| self.slots.get(id)))
    }
}

impl Drop for Gradients {
    /// Hands the slot vector, emptied, to the next backward pass on this
    /// thread (see `autograd::pool`).
    fn drop(&mut self) {
        super::pool::give_back_slots(std::mem::take(&mut self.slots));
    }
}

impl std::fmt::Debug for Gradients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut m = f.debug_map();
        for (i, s) in self.slots.iter().enumerate() {
            if let GradSlot::Grad(t) = s {
                m.entry(&i, t);
            }
        }
        m.finish()
    }
}
