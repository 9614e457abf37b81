//! The [`Module`] trait: a layer or a model, with its named [`Parameter`]s
//! and [`Buffer`]s (state that is saved but not trained) and a training
//! mode; and [`Forward`], the modules that map one input to one output.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::{Buffer, Parameter, RandomStream, StateDict};

/// A layer or a model: named parameters and buffers, and a training mode.
/// Its parameters outlive any graph: each forward pass brings them into the
/// input's graph (`x.graph().param(&p)`), so one model serves any number of
/// training steps, each with a fresh [`Graph`](crate::Graph).
///
/// The forward pass is not part of this trait, so a model's may take any
/// inputs (tokens and a mask, two images) and return anything; a module of
/// one input and one output also implements [`Forward`], which
/// [`Sequential`](crate::nn::Sequential) chains.
///
/// Parameters and buffers are named like PyTorch's `state_dict` keys: a
/// field's name, joined to its parent's by a dot (`"0.weight"`,
/// `"encoder.2.bias"`, `"1.running_mean"`). `#[derive(Module)]` writes the
/// three visiting methods from the struct's fields, in declaration order
/// (see [`Visit`] for the field types it understands):
///
/// ```
/// use retrograd::{Graph, Result, Tensor, Var};
/// use retrograd::nn::{Forward, Linear, Module, Parameter};
///
/// /// y = scale * (W2 relu(W1 x)) + shift, shift optional.
/// #[derive(Module)]
/// struct Net {
///     layers: Vec<Linear>,
///     scale: Parameter,
///     shift: Option<Parameter>,
///     width: usize, // a plain setting: visits nothing
/// }
///
/// impl Net {
///     fn forward<'g>(&self, x: &Var<'g>, shift: bool) -> Result<Var<'g>> {
///         let h = self.layers[0].forward(x)?.relu();
///         let y = self.layers[1].forward(&h)?.try_mul(&x.graph().param(&self.scale))?;
///         match (&self.shift, shift) {
///             (Some(b), true) => y.try_add(&x.graph().param(b)),
///             _ => Ok(y),
///         }
///     }
/// }
///
/// let net = Net {
///     layers: vec![Linear::new(3, 4)?, Linear::new(4, 2)?],
///     scale: Parameter::new(Tensor::ones(&[], retrograd::DType::F32)?),
///     shift: None,
///     width: 4,
/// };
/// let names: Vec<String> = net.parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "scale"]);
/// let g = Graph::new();
/// let y = net.forward(&g.constant(Tensor::ones(&[5, 3], retrograd::DType::F32)?), true)?;
/// assert_eq!(y.shape(), &[5, 2]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait Module: Send + Sync {
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

    /// Calls `f` with each [`RandomStream`] inside (a dropout layer's
    /// masks) and its full name, in a fixed order: state that decides the
    /// next step without being a tensor, which a training state saves and
    /// state dicts leave out. The default visits nothing.
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
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

    /// The parameters that are not frozen
    /// ([`Parameter::requires_grad`]), with their names: what an optimizer
    /// of a partly frozen model takes.
    fn trainable_parameters(&self) -> Vec<(String, Parameter)> {
        let mut out = Vec::new();
        self.visit_parameters("", &mut |name, p| {
            if p.requires_grad() {
                out.push((name.to_string(), p.clone()))
            }
        });
        out
    }

    /// Freezes (`false`) or unfreezes (`true`) every parameter.
    fn set_requires_grad(&self, on: bool) {
        self.visit_parameters("", &mut |_, p| p.set_requires_grad(on));
    }

    /// Every buffer with its name, in visiting order.
    fn buffers(&self) -> Vec<(String, Buffer)> {
        let mut out = Vec::new();
        self.visit_buffers("", &mut |name, b| out.push((name.to_string(), b.clone())));
        out
    }

    /// Every random stream with its name, in visiting order.
    ///
    /// ```
    /// use retrograd::nn::{Mlp, Module};
    /// let mlp = Mlp::builder(&[4, 8, 2]).dropout(0.1).build()?;
    /// let names: Vec<String> = mlp.random_streams().into_iter().map(|(n, _)| n).collect();
    /// assert_eq!(names, ["2"]); // the dropout after the first activation
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    fn random_streams(&self) -> Vec<(String, RandomStream)> {
        let mut out = Vec::new();
        self.visit_random_streams("", &mut |name, s| out.push((name.to_string(), s.clone())));
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

/// A module of one input and one output: a layer such as
/// [`Linear`](crate::nn::Linear), or a [`Sequential`](crate::nn::Sequential)
/// chain of them.
///
/// ```
/// use retrograd::{Graph, Result, Tensor, Var};
/// use retrograd::nn::{Forward, Module, Parameter};
///
/// /// y = a * x, with a learnable scalar a.
/// #[derive(Module)]
/// struct Scale { a: Parameter }
///
/// impl Forward for Scale {
///     fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
///         x.try_mul(&x.graph().param(&self.a))
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
pub trait Forward: Module {
    /// The output for input `x`, recorded into `x`'s graph.
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>>;
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
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        (**self).visit_parameters(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        (**self).visit_buffers(prefix, f)
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        (**self).visit_random_streams(prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        (**self).set_training(training)
    }
}

impl<M: Forward + ?Sized> Forward for Box<M> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        (**self).forward(x)
    }
}
