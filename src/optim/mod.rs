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
//! graph still holds the old value, [`Tensor::make_mut`] copies first, so that
//! graph is never changed.

mod adam;
mod adam_update;
mod clip;
mod group;
mod schedule;
mod sgd;

use std::collections::HashSet;

pub use adam::{Adam, AdamConfig};
pub use clip::{clip_grad_norm, clip_grad_value, grad_norm};
pub use group::{decay_groups, split_by_rank, NamedParameters, ParamGroup};
pub use schedule::{
    ConstantLr, CosineAnnealingLr, ExponentialLr, LinearLr, LrSchedule, LrScheduler, MultiStepLr,
    StepLr, WarmupCosineLr, WarmupLr,
};
pub use sgd::{Sgd, SgdConfig};

use crate::error::{Error, Result, TensorProblem};
use crate::nn::{check_like, Parameter};
use crate::tensor::Tensor;
use crate::Gradients;

pub use crate::nn::StateDict;

/// An optimizer: updates its parameters from one step's gradients.
///
/// Object safe, so a program can pick one at run time (`Box<dyn Optimizer>`).
pub trait Optimizer: Send {
    /// Applies one update from `grads` to every parameter that has a gradient.
    fn step(&mut self, grads: &Gradients) -> Result<()>;

    /// The current learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate (schedules call this between steps).
    fn set_lr(&mut self, lr: f64);

    /// The parameters this optimizer updates, with their names.
    fn parameters(&self) -> &[(String, Parameter)];

    /// A short name of the algorithm (`"sgd"`, `"adam"`, `"adamw"`), stored in
    /// checkpoints so state is never loaded into the wrong kind of optimizer.
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

/// The gradient of `p` in `grads`, checked to match its shape and dtype.
pub(crate) fn grad_of<'a>(
    op: &'static str,
    name: &str,
    p: &Parameter,
    value: &Tensor,
    grads: &'a Gradients,
) -> Result<Option<&'a Tensor>> {
    let Some(g) = grads.get_param(p) else {
        return Ok(None);
    };
    check_like(op, name, g, value)?;
    Ok(Some(g))
}

/// Which state fields each parameter has, read from a state dict: checks that
/// every key belongs to a known `"{param}.{field}"`, and that a parameter's
/// fields are all there or all absent. Returns, per parameter, whether it has state.
pub(crate) fn state_presence(
    context: &str,
    params: &[(String, Parameter)],
    fields: &[&str],
    state: &StateDict,
) -> Result<Vec<bool>> {
    let mut known = HashSet::new();
    let mut present = Vec::with_capacity(params.len());
    for (name, _) in params {
        let keys: Vec<String> = fields.iter().map(|f| format!("{name}.{f}")).collect();
        let count = keys.iter().filter(|k| state.contains_key(*k)).count();
        if count != 0 && count != keys.len() {
            let missing = keys.iter().find(|k| !state.contains_key(*k)).cloned();
            return Err(Error::TensorMismatch {
                context: context.to_string(),
                name: missing.unwrap_or_default(),
                problem: TensorProblem::Missing,
            });
        }
        present.push(count != 0);
        known.extend(keys);
    }
    if let Some(extra) = state.keys().find(|k| !known.contains(*k)) {
        return Err(Error::TensorMismatch {
            context: context.to_string(),
            name: extra.clone(),
            problem: TensorProblem::Unexpected,
        });
    }
    Ok(present)
}

/// Reads a step counter saved as a 0-d tensor.
pub(crate) fn read_step(context: &str, name: &str, t: &Tensor) -> Result<u64> {
    let bad = |why: String| Error::TensorMismatch {
        context: context.to_string(),
        name: name.to_string(),
        problem: TensorProblem::Value(why),
    };
    let v = t.try_item().map_err(|_| {
        bad(format!(
            "expected a 0-d step count, found shape {:?}",
            t.shape()
        ))
    })?;
    if !(v >= 0.0 && v.fract() == 0.0 && v < 2f64.powi(53)) {
        return Err(bad(format!("step count {v} is not a whole number >= 0")));
    }
    Ok(v as u64)
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
