//! State dicts: a model's tensors by name, and the strict, all-or-nothing
//! loading of them into named parameters and buffers.

use std::collections::BTreeMap;

use crate::base::error::{Error, Result, TensorProblem};
use crate::nn::{Buffer, Module, Parameter, RandomStream};
use crate::tensor::Tensor;

/// Tensors by name (parameters, optimizer state): what is saved and loaded.
pub type StateDict = BTreeMap<String, Tensor>;

/// Named parameters and buffers: what a checkpoint saves and loads
/// ([`save_checkpoint`](crate::io::save_checkpoint)). Every [`Module`] is
/// one (its parameters and buffers); so is a plain list of named
/// parameters (no buffers), for models that are not modules.
pub trait NamedTensors {
    /// The parameters with their names, in a fixed order.
    fn named_parameters(&self) -> Vec<(String, Parameter)>;
    /// The buffers with their names, in a fixed order (none by default).
    fn named_buffers(&self) -> Vec<(String, Buffer)> {
        Vec::new()
    }
    /// The random streams with their names, in a fixed order (none by
    /// default): saved by training states, not by state dicts.
    fn named_random_streams(&self) -> Vec<(String, RandomStream)> {
        Vec::new()
    }
}

impl<M: Module + ?Sized> NamedTensors for M {
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.parameters()
    }
    fn named_buffers(&self) -> Vec<(String, Buffer)> {
        self.buffers()
    }
    fn named_random_streams(&self) -> Vec<(String, RandomStream)> {
        self.random_streams()
    }
}

impl NamedTensors for [(String, Parameter)] {
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.to_vec()
    }
}

impl<const N: usize> NamedTensors for [(String, Parameter); N] {
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.to_vec()
    }
}

impl NamedTensors for Vec<(String, Parameter)> {
    fn named_parameters(&self) -> Vec<(String, Parameter)> {
        self.clone()
    }
}

/// The current values of `params`, by name (sharing storage; cheap). A
/// module's [`state_dict`](crate::nn::Module::state_dict) holds its buffers too.
pub fn state_dict(params: &[(String, Parameter)]) -> StateDict {
    params
        .iter()
        .map(|(name, p)| (name.clone(), p.value()))
        .collect()
}

/// Loads `state` into `params`: every parameter must be present with its
/// shape and dtype, and `state` must hold nothing else. On error (an
/// [`Error::TensorMismatch`] naming the tensor) no parameter is changed.
///
/// ```
/// use retrograd::{Tensor, nn::{load_state_dict, state_dict, Parameter}};
/// let w = Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
/// let params = vec![("w".to_string(), w.clone())];
/// let saved = state_dict(&params);
/// w.set(Tensor::from_vec(vec![0.0, 0.0], &[2])?)?;
/// load_state_dict(&params, &saved)?;
/// assert_eq!(w.value().to_f64_vec(), vec![1.0, 2.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn load_state_dict(params: &[(String, Parameter)], state: &StateDict) -> Result<()> {
    let values = check_state_dict("load_state_dict", params, state)?;
    for ((_, p), v) in params.iter().zip(values) {
        p.set(v)?;
    }
    Ok(())
}

/// Checks `state` against `params` (names, shapes, dtypes, no extras) and
/// returns the values in the order of `params`.
pub(crate) fn check_state_dict(
    context: &str,
    params: &[(String, Parameter)],
    state: &StateDict,
) -> Result<Vec<Tensor>> {
    check_module_state(context, params, &[], state).map(|(p, _)| p)
}

/// Checks `state` against `params` and `buffers` together (names, shapes,
/// dtypes, no extras) and returns their values, each in the given order.
pub(crate) fn check_module_state(
    context: &str,
    params: &[(String, Parameter)],
    buffers: &[(String, Buffer)],
    state: &StateDict,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let mismatch = |name: &str, problem| Error::TensorMismatch {
        context: context.to_string(),
        name: name.to_string(),
        problem,
    };
    let find = |name: &str, like: &Tensor| -> Result<Tensor> {
        let t = state
            .get(name)
            .ok_or_else(|| mismatch(name, TensorProblem::Missing))?;
        check_like(context, name, t, like)?;
        Ok(t.clone())
    };
    let p = params
        .iter()
        .map(|(name, p)| find(name, &p.value()))
        .collect::<Result<Vec<_>>>()?;
    let b = buffers
        .iter()
        .map(|(name, b)| find(name, &b.value()))
        .collect::<Result<Vec<_>>>()?;
    let known: std::collections::HashSet<&str> = params
        .iter()
        .map(|(name, _)| name.as_str())
        .chain(buffers.iter().map(|(name, _)| name.as_str()))
        .collect();
    if let Some(extra) = state.keys().find(|k| !known.contains(k.as_str())) {
        return Err(mismatch(extra, TensorProblem::Unexpected));
    }
    Ok((p, b))
}

/// Loads `state` into `params` and `buffers` (a module's state dict):
/// every one must be present with its shape and dtype, and `state` must
/// hold nothing else. On error (an [`Error::TensorMismatch`] naming the
/// tensor) nothing is changed.
pub fn load_module_state(
    params: &[(String, Parameter)],
    buffers: &[(String, Buffer)],
    state: &StateDict,
) -> Result<()> {
    let (pv, bv) = check_module_state("load_state_dict", params, buffers, state)?;
    for ((_, p), v) in params.iter().zip(pv) {
        p.set(v)?;
    }
    for ((_, b), v) in buffers.iter().zip(bv) {
        b.set(v)?;
    }
    Ok(())
}

/// `t` must have the shape and dtype of `like` (the parameter's value): the
/// check of a loaded state dict, shared with the optimizers' state.
pub(crate) fn check_like(context: &str, name: &str, t: &Tensor, like: &Tensor) -> Result<()> {
    if t.shape() != like.shape() {
        return Err(Error::TensorMismatch {
            context: context.to_string(),
            name: name.to_string(),
            problem: TensorProblem::Shape {
                expected: like.shape().to_vec(),
                found: t.shape().to_vec(),
            },
        });
    }
    if t.dtype() != like.dtype() {
        return Err(Error::TensorMismatch {
            context: context.to_string(),
            name: name.to_string(),
            problem: TensorProblem::DType {
                expected: like.dtype(),
                found: t.dtype(),
            },
        });
    }
    Ok(())
}
