//! State dicts: a model's tensors by name, and the strict, all-or-nothing
//! loading of them into named parameters.

use std::collections::BTreeMap;

use crate::error::{Error, Result, TensorProblem};
use crate::nn::Parameter;
use crate::tensor::Tensor;

/// Tensors by name (parameters, optimizer state): what is saved and loaded.
pub type StateDict = BTreeMap<String, Tensor>;

/// The current values of `params`, by name (sharing storage; cheap).
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
    let mismatch = |name: &str, problem| Error::TensorMismatch {
        context: context.to_string(),
        name: name.to_string(),
        problem,
    };
    let mut values = Vec::with_capacity(params.len());
    for (name, p) in params {
        let t = state
            .get(name)
            .ok_or_else(|| mismatch(name, TensorProblem::Missing))?;
        check_like(context, name, t, &p.value())?;
        values.push(t.clone());
    }
    let known: std::collections::HashSet<&str> =
        params.iter().map(|(name, _)| name.as_str()).collect();
    if let Some(extra) = state.keys().find(|k| !known.contains(k.as_str())) {
        return Err(mismatch(extra, TensorProblem::Unexpected));
    }
    Ok(values)
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
