//! What the normalisations (`layer_norm`, `rms_norm`, `batch_norm`, `group_norm`)
//! share: the optional affine inputs that follow the input and any fixed
//! statistics ([`Affine`], each input's [`Role`]), and the `eps` check.

use crate::core::OpAttributes;
use crate::error::{Error, Result};
use crate::graph::Var;
use crate::ops::StructuredOp;
use crate::tensor::Tensor;

/// Which affine parameters follow the input (and, in eval-mode batch norm,
/// the running statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Affine {
    /// Inferred from the input count: none, weight, weight and bias.
    #[default]
    FromInputs,
    /// As given.
    Given { weight: bool, bias: bool },
}

/// What one input of a normalisation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    /// The input normalised.
    Input,
    /// A fixed statistic (eval-mode batch norm's running mean or variance).
    Stat,
    /// The weight.
    Weight,
    /// The bias.
    Bias,
}

impl Affine {
    /// `attrs` with `weight` and `bias` listed when they were given (an op
    /// that infers them from its input count lists neither).
    pub(crate) fn attributes(self, attrs: OpAttributes) -> OpAttributes {
        match self {
            Affine::FromInputs => attrs,
            Affine::Given { weight, bias } => attrs.bool("weight", weight).bool("bias", bias),
        }
    }

    /// `(has_weight, has_bias)` for `n_inputs` inputs, `fixed` of them
    /// before the affine ones.
    pub(crate) fn resolve(self, op: &str, fixed: usize, n_inputs: usize) -> Result<(bool, bool)> {
        let extra = n_inputs.saturating_sub(fixed);
        let (w, b) = match self {
            Affine::FromInputs => (extra >= 1, extra == 2),
            Affine::Given { weight, bias } => (weight, bias),
        };
        let expected = fixed + usize::from(w) + usize::from(b);
        if n_inputs != expected || (self == Affine::FromInputs && extra > 2) {
            return Err(Error::Arity {
                op: op.to_string(),
                expected: expected.min(fixed + 2),
                got: n_inputs,
            });
        }
        Ok((w, b))
    }

    /// The weight and bias among `inputs` (of any type: values, tangents).
    pub(crate) fn split<'a, V>(
        self,
        op: &str,
        fixed: usize,
        inputs: &'a [V],
    ) -> Result<(Option<&'a V>, Option<&'a V>)> {
        let (has_w, has_b) = self.resolve(op, fixed, inputs.len())?;
        let last = inputs.len().saturating_sub(1);
        Ok((has_w.then(|| &inputs[fixed]), has_b.then(|| &inputs[last])))
    }

    /// What input `i` of `n_inputs` is.
    pub(crate) fn role(self, op: &str, fixed: usize, n_inputs: usize, i: usize) -> Result<Role> {
        let (has_w, _) = self.resolve(op, fixed, n_inputs)?;
        Ok(match i {
            0 => Role::Input,
            i if i < fixed => Role::Stat,
            i if i == fixed && has_w => Role::Weight,
            _ => Role::Bias,
        })
    }
}

/// What the normalisations' backward ops (`layer_norm_backward`,
/// `rms_norm_backward`, `batch_norm_backward`) share, inside their `impl
/// StructuredOp`: the inputs `g`, `x` and, when `has_weight`, the weight;
/// settings only; the gradient is the weight times a map of `g`, linear in
/// `g` and in the weight.
macro_rules! norm_backward_rules {
    () => {
        const INPUTS: &'static [&'static str] = &["grad", "input", "weight"];
        const HOLDS: crate::Holds = crate::Holds::Settings;
        const LINEAR: &'static [usize] = &[0, 2];
        fn arity(&self) -> Option<usize> {
            Some(2 + usize::from(self.has_weight))
        }
    };
}
pub(crate) use norm_backward_rules;

/// Records the normalisation `make` builds (given which affine inputs
/// come) on `x`, followed by the weight and the bias that are given.
pub(crate) fn record_affine<'g, O: StructuredOp>(
    x: &Var<'g>,
    weight: Option<&Var<'g>>,
    bias: Option<&Var<'g>>,
    make: impl FnOnce(Affine) -> O,
) -> Result<Var<'g>> {
    let op = make(Affine::Given {
        weight: weight.is_some(),
        bias: bias.is_some(),
    });
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    x.graph().record(op, &inputs)
}

/// The input normalised: the first of `inputs` (an arity error for none).
pub(crate) fn first_input<'a>(op: &str, inputs: &[&'a Tensor]) -> Result<&'a Tensor> {
    inputs.first().copied().ok_or(Error::Arity {
        op: op.to_string(),
        expected: 1,
        got: 0,
    })
}

/// `eps` must be finite and >= 0.
pub(crate) fn check_eps(op: &'static str, eps: f64) -> Result<()> {
    if eps.is_finite() && eps >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_follow_the_inputs() {
        let given = Affine::Given {
            weight: false,
            bias: true,
        };
        assert_eq!(given.role("op", 1, 2, 1).unwrap(), Role::Bias);
        assert_eq!(Affine::FromInputs.role("op", 3, 5, 2).unwrap(), Role::Stat);
        assert_eq!(
            Affine::FromInputs.role("op", 3, 5, 3).unwrap(),
            Role::Weight
        );
        assert_eq!(
            Affine::FromInputs.role("op", 1, 2, 1).unwrap(),
            Role::Weight
        );
        assert!(Affine::FromInputs.role("op", 1, 4, 0).is_err());
        assert!(check_eps("op", f64::NAN).is_err() && check_eps("op", 0.0).is_ok());
    }
}
