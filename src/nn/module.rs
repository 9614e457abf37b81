//! The [`Module`] trait: a layer or a model, a differentiable function of its
//! input and its named [`Parameter`]s, with named [`Buffer`]s for state
//! that is saved but not trained.

use crate::error::Result;
use crate::graph::Var;
use crate::nn::{Buffer, Parameter, StateDict};

/// A layer or a model. Its parameters outlive any graph: each forward pass
/// brings them into the input's graph (`x.graph().param(&p)`), so one model
/// serves any number of training steps, each with a fresh [`Graph`](crate::Graph).
///
/// Parameters and buffers are named like PyTorch's `state_dict` keys: a
/// field's name, joined to its parent's by a dot (`"0.weight"`,
/// `"encoder.2.bias"`, `"1.running_mean"`). A container module forwards
/// [`visit_parameters`](Self::visit_parameters),
/// [`visit_buffers`](Self::visit_buffers) and
/// [`set_training`](Self::set_training) to every module inside it.
///
/// ```
/// use retrograd::{Graph, Result, Tensor, Var, nn::{Module, Parameter}};
///
/// /// y = a * x, with a learnable scalar a.
/// struct Scale { a: Parameter }
///
/// impl Module for Scale {
///     fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
///         x.try_mul(&x.graph().param(&self.a))
///     }
///     fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
///         f(&retrograd::nn::join_name(prefix, "a"), &self.a);
///     }
/// }
///
/// let m = Scale { a: Parameter::new(Tensor::scalar(3.0)) };
/// let g = Graph::new();
/// let y = m.forward(&g.constant(Tensor::scalar(2.0)))?;
/// assert_eq!(y.value().try_item()?, 6.0);
/// assert_eq!(m.parameters()[0].0, "a");
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait Module: Send + Sync {
    /// The output for input `x`, recorded into `x`'s graph.
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>>;

    /// Calls `f` with each parameter and its full name (`prefix` joined to
    /// the parameter's own name with [`join_name`]), in a fixed order.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter));

    /// Calls `f` with each buffer (state that is saved and loaded but not
    /// trained, such as batch norm's running statistics) and its full name,
    /// in a fixed order. The default visits nothing: modules without
    /// buffers need not implement it.
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        let _ = (prefix, f);
    }

    /// Switches training behaviour (dropout, batch norm) on or off, in this module and
    /// every module inside it. Modules without such behaviour ignore it.
    fn set_training(&mut self, training: bool) {
        let _ = training;
    }

    /// Every parameter with its name, in visiting order.
    fn parameters(&self) -> Vec<(String, Parameter)> {
        let mut out = Vec::new();
        self.visit_parameters("", &mut |name, p| out.push((name.to_string(), p.clone())));
        out
    }

    /// Every buffer with its name, in visiting order.
    fn buffers(&self) -> Vec<(String, Buffer)> {
        let mut out = Vec::new();
        self.visit_buffers("", &mut |name, b| out.push((name.to_string(), b.clone())));
        out
    }

    /// The total number of scalar parameters.
    fn num_parameters(&self) -> usize {
        let mut n = 0;
        self.visit_parameters("", &mut |_, p| n += p.numel());
        n
    }

    /// The current values of the parameters and buffers, by name.
    fn state_dict(&self) -> StateDict {
        let mut state = super::state_dict(&self.parameters());
        for (name, b) in self.buffers() {
            state.insert(name, b.value());
        }
        state
    }

    /// Loads values saved by [`state_dict`](Self::state_dict) into the
    /// parameters and buffers, strictly (see
    /// [`load_module_state`](super::load_module_state)); on error nothing changes.
    fn load_state_dict(&self, state: &StateDict) -> Result<()> {
        super::load_module_state(&self.parameters(), &self.buffers(), state)
    }
}

/// `prefix.name`, or `name` when the prefix is empty.
///
/// ```
/// use retrograd::nn::join_name;
/// assert_eq!(join_name("", "weight"), "weight");
/// assert_eq!(join_name("0", "weight"), "0.weight");
/// ```
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        (**self).forward(x)
    }
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        (**self).visit_parameters(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        (**self).visit_buffers(prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
}
