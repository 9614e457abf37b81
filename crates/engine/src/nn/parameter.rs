//! [`Parameter`]: a trainable tensor that outlives any one graph.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::autograd::Gradients;
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::{Graph, Var};
use crate::tensor::{DType, Tensor};

static NEXT_PARAM_ID: AtomicU64 = AtomicU64::new(1);

/// A trainable tensor with a stable id. Cloning a `Parameter` gives another
/// handle to the same parameter (like `Arc`); it is `Send + Sync`.
///
/// Each training step brings it into a fresh graph with [`Graph::param`];
/// an optimizer then updates it from the step's [`Gradients`](crate::Gradients).
/// Updates are copy-on-write: a graph that still holds the old value keeps
/// it unchanged.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter};
/// let w = Parameter::new(Tensor::scalar(3.0));
/// let graph = Graph::new();
/// let x = graph.param(&w);
/// let y = &x * &x;
/// let grads = y.backward()?;
/// assert_eq!(grads.of(&w).try_item()?, 6.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone)]
pub struct Parameter {
    inner: Arc<ParamInner>,
}

struct ParamInner {
    id: u64,
    value: RwLock<Tensor>,
    requires_grad: AtomicBool,
}

impl Parameter {
    /// A new parameter holding `value`.
    pub fn new(value: Tensor) -> Self {
        Parameter {
            inner: Arc::new(ParamInner {
                id: NEXT_PARAM_ID.fetch_add(1, Ordering::Relaxed),
                value: RwLock::new(value),
                requires_grad: AtomicBool::new(true),
            }),
        }
    }

    /// The process-unique id of this parameter.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The current value (shares storage; cheap).
    pub fn value(&self) -> Tensor {
        self.inner
            .value
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The current value's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.value().shape().to_vec()
    }

    /// The current value's dtype.
    pub fn dtype(&self) -> DType {
        self.value().dtype()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.value().numel()
    }

    /// Replaces the value; the shape and dtype must stay the same.
    pub fn set(&self, value: Tensor) -> Result<()> {
        replace_same_layout("Parameter::set", &self.inner.value, value)
    }

    /// Runs `f` on the value with exclusive access: optimizers update
    /// weights through this. Writes go through [`Tensor::make_mut`], which
    /// copies the storage first if a graph still shares it.
    pub fn update<R>(&self, f: impl FnOnce(&mut Tensor) -> R) -> R {
        let mut guard = self.inner.value.write().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    /// Whether graphs differentiate with respect to it (true from the
    /// start). A frozen parameter enters a graph as a constant: no
    /// gradient is computed for it, so an optimizer leaves it alone. The
    /// flag is shared by every handle, as PyTorch's `requires_grad_` is.
    pub fn requires_grad(&self) -> bool {
        self.inner.requires_grad.load(Ordering::Relaxed)
    }

    /// Freezes (`false`) or unfreezes (`true`) the parameter; see
    /// [`requires_grad`](Self::requires_grad). A compiled step reads a
    /// frozen parameter's value when it is captured.
    pub fn set_requires_grad(&self, on: bool) {
        self.inner.requires_grad.store(on, Ordering::Relaxed)
    }

    /// Whether two handles are the same parameter.
    pub fn same(&self, other: &Parameter) -> bool {
        self.id() == other.id()
    }
}

impl std::fmt::Debug for Parameter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.value();
        write!(
            f,
            "Parameter(id={}, shape={:?}, dtype={})",
            self.id(),
            v.shape(),
            v.dtype()
        )
    }
}

// The parameter accessors of `Gradients` live here, with `Parameter`, so that
// `autograd` knows nothing of `nn` (ARCHITECTURE.md, "Layers").
impl Gradients {
    /// The gradient with respect to parameter `p`, zero-filled when `p` was
    /// not used (or not reached).
    pub fn of(&self, p: &Parameter) -> Tensor {
        match self.param_grad(p.id()) {
            Some(t) => t.clone(),
            None => p.value().zeros_like(),
        }
    }

    /// The gradient with respect to parameter `p`, if one was accumulated.
    pub fn get_param(&self, p: &Parameter) -> Option<&Tensor> {
        self.param_grad(p.id())
    }
}

impl Graph {
    /// Brings `p` into this graph as a leaf that requires grad. Bringing the
    /// same parameter in twice returns the same leaf, so a shared weight used
    /// in several places accumulates one gradient.
    ///
    /// On the inference graph ([`Graph::inference`]) a parameter comes in as
    /// a constant: evaluation records nothing. So does a frozen one
    /// ([`Parameter::set_requires_grad`]).
    pub fn param(&self, p: &Parameter) -> Var<'_> {
        if self.is_inference() || !p.requires_grad() {
            return self.constant(p.value());
        }
        let existing = self.state().params().get(&p.id()).copied();
        match existing {
            Some(id) => {
                let value = self.state().values()[id as usize].clone();
                let requires_grad = self.state().value_requires_grad(id);
                Var::from_parts(self, value, id, requires_grad)
            }
            None => {
                let v = self.variable(p.value());
                self.state_mut().set_param(p.id(), v.slot());
                if self.is_capturing() {
                    let read = p.clone();
                    self.capture_param(p.id(), v.slot(), Box::new(move || read.value()));
                }
                v
            }
        }
    }
}

impl Graph {
    /// Makes `value` what [`param`](Self::param) returns for `p` in this
    /// graph from now on: how a checkpointed region
    /// ([`Graph::checkpoint`]) that receives a module's parameters among its
    /// inputs makes the module's own `graph.param` calls read those inputs,
    /// so their gradients flow out of the region. A `value` with no slot in
    /// the graph (a constant no node has used) binds nothing: `param` then
    /// reads the parameter itself. A `value` of another graph is an error.
    pub fn try_bind_param(&self, p: &Parameter, value: &Var<'_>) -> Result<()> {
        if !std::ptr::eq(value.graph(), self) {
            return Err(Error::invalid(
                "Graph::bind_param",
                "the value belongs to another graph",
            ));
        }
        if let Some(slot) = value.value_id() {
            self.state_mut().set_param(p.id(), slot as u32);
        }
        Ok(())
    }

    /// [`try_bind_param`](Self::try_bind_param), panicking on a value of
    /// another graph.
    pub fn bind_param(&self, p: &Parameter, value: &Var<'_>) {
        crate::base::error::or_panic(self.try_bind_param(p, value))
    }
}

/// Replaces the tensor in `slot` with `value` if its shape and dtype stay
/// the same (how [`Parameter::set`] and [`Buffer::set`](super::Buffer::set)
/// replace values); errors name `op`.
pub(crate) fn replace_same_layout(
    op: &'static str,
    slot: &RwLock<Tensor>,
    value: Tensor,
) -> Result<()> {
    let mut guard = slot.write().unwrap_or_else(|p| p.into_inner());
    if guard.shape() != value.shape() {
        return Err(Error::shape_mismatch(op, guard.shape(), value.shape()));
    }
    check_dtypes(op, guard.dtype(), value.dtype())?;
    *guard = value;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_parameter_twice_is_one_leaf_and_accumulates() {
        let w = Parameter::new(Tensor::scalar(2.0));
        let g = Graph::new();
        let a = g.param(&w);
        let b = g.param(&w);
        assert_eq!(a.value_id(), b.value_id());
        let y = &a * &b + &a; // w^2 + w
        let grads = y.backward().unwrap();
        assert_eq!(grads.of(&w).item(), 5.0);
    }

    #[test]
    fn updating_a_parameter_leaves_a_live_graph_untouched() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        let g = Graph::new();
        let x = g.param(&w);
        let y = (&x * &x).sum();
        // Update while the graph still holds the old value.
        w.update(|t| {
            t.make_mut::<f32>()
                .unwrap()
                .iter_mut()
                .for_each(|v| *v = 100.0)
        });
        assert_eq!(x.value().to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
        let grads = y.backward().unwrap();
        assert_eq!(grads.of(&w).to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
        assert_eq!(w.value().to_vec::<f32>().unwrap(), vec![100.0, 100.0]);
    }

    #[test]
    fn set_checks_shape_and_dtype() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        assert!(w
            .set(Tensor::from_vec(vec![1.0f32], &[1]).unwrap())
            .is_err());
        assert!(w
            .set(Tensor::from_vec(vec![1.0f64, 2.0], &[2]).unwrap())
            .is_err());
        w.set(Tensor::from_vec(vec![3.0f32, 4.0], &[2]).unwrap())
            .unwrap();
        assert_eq!(w.value().to_vec::<f32>().unwrap(), vec![3.0, 4.0]);
    }

    #[test]
    fn parameters_and_gradients_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Parameter>();
        assert_send_sync::<crate::Gradients>();
        assert_send_sync::<Tensor>();
    }

    #[test]
    fn a_frozen_parameter_gets_no_gradient() {
        let (w, b) = (
            Parameter::new(Tensor::scalar(3.0)),
            Parameter::new(Tensor::scalar(2.0)),
        );
        b.clone().set_requires_grad(false);
        assert!(!b.requires_grad());
        let g = Graph::new();
        let grads = (&g.param(&w) * &g.param(&b)).backward().unwrap();
        assert_eq!(grads.of(&w).item(), 2.0);
        assert!(grads.get_param(&b).is_none());
        b.set_requires_grad(true);
        let g = Graph::new();
        let grads = (&g.param(&w) * &g.param(&b)).backward().unwrap();
        assert_eq!(grads.of(&b).item(), 3.0);
    }

    #[test]
    fn unused_parameter_reads_zero() {
        let w = Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        let unused = Parameter::new(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap());
        let g = Graph::new();
        let grads = g.param(&w).sum().backward().unwrap();
        assert_eq!(grads.of(&unused).to_f64_vec(), vec![0.0; 3]);
        assert!(grads.get_param(&unused).is_none());
    }
}
