//! The [`Module`] trait: a layer or a model, a differentiable function of its
//! input and its named [`Parameter`]s.

use crate::error::Result;
use crate::graph::Var;
use crate::nn::{Parameter, StateDict};

/// A layer or a model. Its parameters outlive any graph: each forward pass
/// brings them into the input's graph (`x.graph().param(&p)`), so one model
/// serves any number of training steps, each with a fresh [`Graph`](crate::Graph).
///
/// Parameters are named like PyTorch's `state_dict` keys: a field's name,
/// joined to its parent's by a dot (`"0.weight"`, `"encoder.2.bias"`).
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

    /// Switches training behaviour (dropout) on or off, in this module and
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

    /// The total number of scalar parameters.
    fn num_parameters(&self) -> usize {
        let mut n = 0;
        self.visit_parameters("", &mut |_, p| n += p.numel());
        n
    }

    /// The parameters' current values by name.
    fn state_dict(&self) -> StateDict {
        super::state_dict(&self.parameters())
    }

    /// Loads values saved by [`state_dict`](Self::state_dict), strictly (see
    /// [`load_state_dict`](super::load_state_dict)); on error nothing changes.
    fn load_state_dict(&self, state: &StateDict) -> Result<()> {
        super::load_state_dict(&self.parameters(), state)
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
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
}
