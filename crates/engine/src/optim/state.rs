//! Reading an optimizer's state dict strictly: every key must be one the
//! optimizer declared, a parameter's entries come all together or not at
//! all, and every error is an [`Error::TensorMismatch`] naming the entry.

use std::collections::HashSet;

use super::StateDict;
use crate::base::error::{Error, Result, TensorProblem};
use crate::tensor::Tensor;

/// Checks the keys of a state dict against what an optimizer declares.
pub(crate) struct StateReader<'a> {
    context: &'a str,
    state: &'a StateDict,
    known: HashSet<String>,
}

impl<'a> StateReader<'a> {
    pub(crate) fn new(context: &'a str, state: &'a StateDict) -> Self {
        StateReader {
            context,
            state,
            known: HashSet::new(),
        }
    }

    /// Declares the keys `"{owner}.{field}"` for `fields`; returns whether
    /// they are present, and errors (naming the first missing key) if only
    /// some of them are.
    pub(crate) fn all_or_none<'f>(
        &mut self,
        owner: &str,
        fields: impl IntoIterator<Item = &'f str>,
    ) -> Result<bool> {
        let keys: Vec<String> = fields.into_iter().map(|f| format!("{owner}.{f}")).collect();
        let count = keys.iter().filter(|k| self.state.contains_key(*k)).count();
        if count != 0 && count != keys.len() {
            let missing = keys.iter().find(|k| !self.state.contains_key(*k));
            return Err(mismatch(
                self.context,
                missing.expect("some key is missing"),
                TensorProblem::Missing,
            ));
        }
        let present = count != 0;
        self.known.extend(keys);
        Ok(present)
    }

    /// Errors on the first key that was not declared.
    pub(crate) fn finish(self) -> Result<()> {
        match self.state.keys().find(|k| !self.known.contains(*k)) {
            Some(extra) => Err(mismatch(self.context, extra, TensorProblem::Unexpected)),
            None => Ok(()),
        }
    }
}

/// An [`Error::TensorMismatch`] naming `key`.
pub(crate) fn mismatch(context: &str, key: &str, problem: TensorProblem) -> Error {
    Error::TensorMismatch {
        context: context.to_string(),
        name: key.to_string(),
        problem,
    }
}

/// Reads a 0-d tensor's value.
pub(crate) fn read_scalar(context: &str, key: &str, t: &Tensor) -> Result<f64> {
    t.try_item().map_err(|_| {
        mismatch(
            context,
            key,
            TensorProblem::Value(format!("expected a 0-d value, found shape {:?}", t.shape())),
        )
    })
}

/// Reads a count (a step, an iteration or evaluation count) saved as a 0-d
/// tensor: a whole number >= 0, exact in f64.
pub(crate) fn read_step(context: &str, key: &str, t: &Tensor) -> Result<u64> {
    let bad = |why: String| mismatch(context, key, TensorProblem::Value(why));
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
