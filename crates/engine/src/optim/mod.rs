//! Optimizers, gradient clipping and learning-rate schedules.
//!
//! An optimizer owns its list of named [`Parameter`]s (like PyTorch's
//! `optimizer = SGD(model.parameters(), ...)`) and keeps its state (momentum
//! buffers, Adam moments, step counts) per parameter. Each training step
//! hands it the [`Gradients`] of that step's backward pass:
//!
//! ```
//! use retrograd::{Graph, Tensor, nn::Parameter, optim::{Optimizer, Sgd, SgdConfig}};
//! let w = Parameter::new(Tensor::from_vec(vec![1.0, -2.0], &[2])?);
//! let mut opt = Sgd::new([w.clone()], SgdConfig::new(0.1))?;
//! for _ in 0..100 {
//!     let grads = {
//!         let g = Graph::new();
//!         let x = g.param(&w);
//!         (&x * &x).sum().backward()?   // minimise |w|^2
//!     };
//!     opt.step(&grads)?;
//! }
//! assert!(w.value().to_f64_vec().iter().all(|v| v.abs() < 1e-8));
//! # Ok::<(), retrograd::Error>(())
//! ```
//!
//! Gradient accumulation is explicit: run several micro-batches, add their
//! gradients with [`Gradients::accumulate`], rescale with
//! [`Gradients::scale`], then take one step. With each micro-batch loss a
//! mean over its examples, this equals one step on the whole batch:
//!
//! ```
//! use retrograd::{Graph, Tensor, nn::Parameter, optim::{Optimizer, Sgd, SgdConfig}};
//! let w = Parameter::new(Tensor::scalar(1.0));
//! let micro_batch = |xs: &[f64]| {
//!     let g = Graph::new();
//!     let x = g.constant(Tensor::from_vec(xs.to_vec(), &[xs.len()])?);
//!     (&x * &g.param(&w)).mean().backward()     // d/dw = mean(x)
//! };
//! let mut grads = micro_batch(&[1.0, 2.0])?;
//! grads.accumulate(&micro_batch(&[3.0, 6.0])?)?;
//! grads.scale(0.5);                              // two micro-batches
//! assert_eq!(grads.of(&w).try_item()?, 3.0);         // the mean over all four
//! Sgd::new([&w], SgdConfig::new(0.1))?.step(&grads)?;
//! assert!((w.value().try_item()? - 0.7).abs() < 1e-12);
//! # Ok::<(), retrograd::Error>(())
//! ```
//!
//! A parameter that received no gradient in a step is skipped (its state does
//! not advance), as PyTorch skips parameters whose `.grad` is `None`.
//!
//! Updates are in place: once the step's graph is gone the optimizer is the
//! only owner of the parameter's storage and writes into it directly; if a
//! graph still holds the old value, [`Tensor::make_mut`](crate::Tensor::make_mut) copies first, so that
//! graph is never changed.
//!
//! # The shape: optimizers as rules
//!
//! - [`Optimizer`] (`mod.rs`) is what the rest of the crate uses: `step`,
//!   [`step_with_closure`](Optimizer::step_with_closure) (PyTorch's
//!   `step(closure)`), the learning rate, `kind`, `state_dict` and
//!   `load_state_dict`.
//! - A per-parameter optimizer is an [`UpdateRule`] on its config (one file:
//!   `sgd.rs`, `adam.rs`, `rmsprop.rs`, `adagrad.rs`): the state one
//!   parameter keeps ([`StateField`]s: PyTorch's names, a step count, tensors
//!   shaped like the parameter) and the update of one parameter from its
//!   gradient. [`RuleOptimizer`] (`rule.rs`) does the rest once for all of
//!   them: the parameter loop, the gradient lookup, lazy state, the step
//!   count, parameter groups ([`ParamGroup`], `group.rs`), and state dicts
//!   keyed `"{parameter}.{field}"` with strict, typed loading (`state.rs`).
//!   `Adam` is `RuleOptimizer<AdamConfig>`, and so on.
//! - A whole-vector optimizer implements [`Optimizer`] itself with the same
//!   parameter list and state reading: [`LBFGS`] (`lbfgs.rs`, its memory in
//!   `lbfgs_memory.rs`, the strong-Wolfe line search in `line_search.rs`).
//! - The registry (`registry.rs`, and the `optimizers!` list below) names
//!   every kind: what [`Optimizer::kind`] returns and checkpoints record (a
//!   checkpoint refuses to load into another kind), what the training
//!   examples' `--optimizer` takes ([`optimizer_kind`], built from
//!   [`OptimizerSettings`]), and what `tests/optimizer_kinds.rs` iterates.
//!
//! # How to add an optimizer (followed for RMSprop)
//!
//! 1. `src/optim/<name>.rs`: its config in one `hyperparameters!` list
//!    (`rule.rs`: each field's doc, type, PyTorch's default, with
//!    `=> check_non_negative` its check, and with `set "doc"` its builder
//!    method); `impl UpdateRule for <Name>Config` (`rule_basics!("<Name>",
//!    kind = KINDS[0].name)` for `NAMES`, `kind` and the learning rate;
//!    `validate`: `check_declared` and any check of its own, one typed
//!    error per setting; `state_fields` with PyTorch's state names;
//!    `update(&self, step: Step<'_, T>)`, its loop in `step.each_chunk`,
//!    which hands it the parameter, gradient and state tensors as slices,
//!    chunked in parallel for large parameters, and starting from
//!    `Direction` where it begins with the gradient plus an L2 penalty);
//!    `pub type <Name> = RuleOptimizer<<Name>Config>;` with the rule written
//!    out in its docs; `pub(super) const KINDS` (its name, summary, and how
//!    [`OptimizerSettings`] map onto its config, built with
//!    `RuleOptimizer::boxed`).
//! 2. One line in the `optimizers!` list below: `<name>::{<Name>, <Name>Config}`.
//! 3. Its cases in `tests/reference/optim_reference.py` (rerun it) and their
//!    configs in `tests/optim_reference.rs`. The registry-driven tests
//!    (`tests/optimizer_kinds.rs`) pick it up by themselves.
//!
//! Where things are: optimizers as rules (the module's `//!` docs have the
//! shape and the recipe "how to add an optimizer"): the `Optimizer` trait
//! and the `optimizers!` registration list (`mod.rs`); `rule.rs`:
//! `UpdateRule` (a per-parameter update over declared `StateField`s) and
//! `RuleOptimizer`, which does the parameter loop, gradient lookup, lazy
//! state, step counts, groups and state dicts for every rule; the rules
//! `sgd.rs`, `adam.rs` (Adam and AdamW, element loops in `adam_update.rs`),
//! `rmsprop.rs`, `adagrad.rs`; `lbfgs.rs` (closure form, memory in
//! `lbfgs_memory.rs`, strong-Wolfe search in `line_search.rs`);
//! `registry.rs` (`optimizer_kinds`, `optimizer_kind`, `OptimizerSettings`:
//! what `--optimizer` takes); `state.rs` (strict state-dict reading);
//! `group.rs` (`ParamGroup`, `split_by_rank`/`decay_groups`); `clip.rs`;
//! `schedule.rs` (LR schedules, `LrScheduler`); every rule matches
//! `torch.optim` (`tests/optim_reference.rs`) and every kind resumes from a
//! checkpoint bit for bit (`tests/optimizer_kinds.rs`).

/// Declares each optimizer file, re-exports its types and lists its kinds
/// (each file's `KINDS`): the one registration.
macro_rules! optimizers {
    ($(#[$doc:meta])* static $list:ident; $($file:ident :: { $($item:ident),* $(,)? }),* $(,)?) => {
        $(mod $file; pub use $file::{$($item),*};)*

        $(#[$doc])*
        static $list: &[&[OptimizerKind]] = &[$($file::KINDS),*];
    };
}

mod adam_update;
mod clip;
mod group;
mod lbfgs_memory;
mod line_search;
pub mod privacy;
mod registry;
mod rule;
mod schedule;
mod state;
#[cfg(test)]
mod testing;

optimizers! {
    /// The kinds of every optimizer file, in order ([`optimizer_kinds`]).
    static REGISTERED;
    sgd::{Sgd, SgdConfig},
    adam::{Adam, AdamConfig},
    rmsprop::{RMSprop, RMSpropConfig},
    adagrad::{Adagrad, AdagradConfig},
    lbfgs::{LineSearch, LBFGS, LBFGSConfig},
}

use std::collections::HashSet;

pub use clip::{clip_grad_norm, clip_grad_value, grad_norm};
pub use group::{decay_groups, split_by_rank, NamedParameters, ParamGroup};
pub use registry::{optimizer_kind, optimizer_kinds, OptimizerKind, OptimizerSettings};
pub use rule::{ParamState, RuleNames, RuleOptimizer, StateField, Step, UpdateContext, UpdateRule};
pub use schedule::{
    ConstantLr, CosineAnnealingLr, ExponentialLr, LinearLr, LrSchedule, LrScheduler, MultiStepLr,
    StepLr, WarmupCosineLr, WarmupLr,
};

use crate::base::error::{Error, Result};
use crate::nn::Parameter;
use crate::Gradients;

pub use crate::nn::StateDict;

/// An optimizer: updates its parameters from one step's gradients.
///
/// Object safe, so a program can pick one at run time (`Box<dyn Optimizer>`).
pub trait Optimizer: Send {
    /// Applies one update from `grads` to every parameter that has a gradient.
    fn step(&mut self, grads: &Gradients) -> Result<()>;

    /// One step in the closure form of PyTorch's `optimizer.step(closure)`:
    /// `closure` builds a graph from the current parameters, runs backward
    /// and returns the loss and the [`Gradients`]. Returns the loss of the
    /// first evaluation. Most optimizers evaluate it once and [`step`](Self::step);
    /// [`LBFGS`] evaluates it as often as its iterations and line search need.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, nn::Parameter, optim::{Optimizer, Sgd, SgdConfig}};
    /// let w = Parameter::new(Tensor::scalar(3.0));
    /// let mut opt = Sgd::new([&w], SgdConfig::new(0.25))?;
    /// let loss = opt.step_with_closure(&mut || {
    ///     let g = Graph::new();
    ///     let x = g.param(&w);
    ///     let loss = &x * &x;
    ///     Ok((loss.value().try_item()?, loss.backward()?))
    /// })?;
    /// assert_eq!((loss, w.value().try_item()?), (9.0, 1.5));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    fn step_with_closure(&mut self, closure: &mut Closure<'_>) -> Result<f64> {
        let (loss, grads) = closure()?;
        self.step(&grads)?;
        Ok(loss)
    }

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (schedules call this between steps).
    fn set_lr(&mut self, lr: f64);

    /// The parameters this optimizer updates, with their names.
    fn parameters(&self) -> &[(String, Parameter)];

    /// The registered name of the algorithm (`"sgd"`, `"adam"`, `"adamw"`,
    /// ...: [`optimizer_kinds`]), stored in checkpoints so state is never
    /// loaded into the wrong kind of optimizer.
    fn kind(&self) -> &'static str;

    /// The optimizer's state, one tensor per `"{parameter name}.{field}"`
    /// (fields as in PyTorch: `momentum_buffer`, `step`, `exp_avg`, ...).
    /// Parameters that have never been stepped have no entries.
    fn state_dict(&self) -> StateDict;

    /// Restores state saved by [`state_dict`](Self::state_dict). Every entry
    /// must belong to one of this optimizer's parameters and match its shape
    /// and dtype; a parameter's fields come all together or not at all. On
    /// error nothing is changed.
    fn load_state_dict(&mut self, state: &StateDict) -> Result<()>;
}

/// What [`Optimizer::step_with_closure`] calls: it evaluates the loss at the
/// current parameters and returns it with its gradients.
pub type Closure<'a> = dyn FnMut() -> Result<(f64, Gradients)> + 'a;

/// Something an optimizer can take a parameter from: a bare [`Parameter`]
/// (named by its position, `"0"`, `"1"`, ... as in PyTorch's optimizer
/// state), or a `(name, Parameter)` pair as `Module::parameters` returns.
pub trait NamedParameter {
    /// The name and the parameter; `index` is its position in the list.
    fn into_named(self, index: usize) -> (String, Parameter);

    /// The name, if it has one (a bare parameter has none: it is named by
    /// its position once an optimizer holds it), and the parameter.
    fn into_parts(self) -> (Option<String>, Parameter)
    where
        Self: Sized,
    {
        let (name, p) = self.into_named(0);
        (Some(name), p)
    }
}

impl NamedParameter for Parameter {
    fn into_named(self, index: usize) -> (String, Parameter) {
        (index.to_string(), self)
    }
    fn into_parts(self) -> (Option<String>, Parameter) {
        (None, self)
    }
}

impl NamedParameter for &Parameter {
    fn into_named(self, index: usize) -> (String, Parameter) {
        (index.to_string(), self.clone())
    }
    fn into_parts(self) -> (Option<String>, Parameter) {
        (None, self.clone())
    }
}

impl NamedParameter for (String, Parameter) {
    fn into_named(self, _: usize) -> (String, Parameter) {
        self
    }
}

impl NamedParameter for &(String, Parameter) {
    fn into_named(self, _: usize) -> (String, Parameter) {
        self.clone()
    }
}

impl NamedParameter for (&str, Parameter) {
    fn into_named(self, _: usize) -> (String, Parameter) {
        (self.0.to_string(), self.1)
    }
}

/// Collects named parameters, rejecting a parameter or a name listed twice
/// (a parameter updated twice per step is always a bug).
pub(crate) fn collect_named<P: NamedParameter>(
    op: &'static str,
    params: impl IntoIterator<Item = P>,
) -> Result<Vec<(String, Parameter)>> {
    let named: Vec<(String, Parameter)> = params
        .into_iter()
        .enumerate()
        .map(|(i, p)| p.into_named(i))
        .collect();
    let mut ids = HashSet::new();
    let mut names = HashSet::new();
    for (name, p) in &named {
        if !ids.insert(p.id()) {
            return Err(Error::invalid(
                op,
                format!("parameter `{name}` appears more than once"),
            ));
        }
        if !names.insert(name.as_str()) {
            return Err(Error::invalid(
                op,
                format!("two parameters are named `{name}`"),
            ));
        }
    }
    Ok(named)
}

/// Checks a hyperparameter is finite and at least zero.
pub(crate) fn check_non_negative(op: &'static str, what: &str, v: f64) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{what} must be finite and >= 0, got {v}"),
        ))
    }
}

/// The factor a rule multiplies each gradient by: -1 to maximise.
/// Multiplying by -1 negates exactly, as PyTorch's `-grad`.
#[inline]
pub(crate) fn gradient_sign<T: crate::Element>(maximize: bool) -> T {
    if maximize {
        -T::one()
    } else {
        T::one()
    }
}

/// Elements per parallel chunk of an update loop, and the size from which
/// optimizers spread the update over rayon's pool.
pub(crate) const UPDATE_CHUNK: usize = 1 << 14;

/// Whether an update over `n` elements should run in parallel.
pub(crate) fn parallel_update(n: usize) -> bool {
    crate::kernels::parallel::should_parallelize(n)
}

/// Runs `f` over matching chunks of a parameter, its gradient and `K` state
/// buffers (all of one length), in parallel when they are large. `f` sees
/// plain slices, so its loop vectorises.
pub(crate) fn update_chunks<T: crate::Element, const K: usize>(
    param: &mut [T],
    grad: &[T],
    state: [&mut [T]; K],
    f: impl Fn(&mut [T], &[T], [&mut [T]; K]) + Sync + Send,
) {
    debug_assert!(grad.len() == param.len() && state.iter().all(|s| s.len() == param.len()));
    if !parallel_update(param.len()) {
        f(param, grad, state);
        return;
    }
    use rayon::prelude::*;
    let mut state_chunks = state.map(|s| s.chunks_mut(UPDATE_CHUNK));
    let mut jobs = Vec::with_capacity(param.len().div_ceil(UPDATE_CHUNK));
    for (p, g) in param
        .chunks_mut(UPDATE_CHUNK)
        .zip(grad.chunks(UPDATE_CHUNK))
    {
        let s: [&mut [T]; K] = std::array::from_fn(|k| {
            state_chunks[k]
                .next()
                .expect("state buffers have the parameter's length")
        });
        jobs.push((p, g, s));
    }
    jobs.into_par_iter().for_each(|(p, g, s)| f(p, g, s));
}
