//! Activation functions as modules (no parameters).

use crate::error::Result;
use crate::graph::Var;
use crate::nn::{Module, Parameter};

/// An elementwise activation, usable as a layer.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{Activation, Module}};
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![-1.0, 2.0], &[2])?);
/// assert_eq!(Activation::Relu.forward(&x)?.value().to_f64_vec(), vec![0.0, 2.0]);
/// assert_eq!("tanh".parse::<Activation>()?, Activation::Tanh);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Activation {
    /// `max(x, 0)`.
    #[default]
    Relu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `x` unchanged.
    Identity,
}

impl Activation {
    /// Every activation, in declaration order.
    pub const ALL: &'static [Activation] = &[
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Identity,
    ];

    /// The lower-case name (`"relu"`, ...), as accepted by `parse`.
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::Identity => "identity",
        }
    }

    /// Applies the activation to `x`.
    pub fn apply<'g>(self, x: &Var<'g>) -> Result<Var<'g>> {
        Ok(match self {
            Activation::Relu => x.relu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Identity => x.clone(),
        })
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Activation {
    type Err = crate::Error;

    fn from_str(s: &str) -> Result<Self> {
        let lower = s.to_ascii_lowercase();
        Activation::ALL
            .iter()
            .copied()
            .find(|a| a.name() == lower)
            .ok_or_else(|| {
                let names: Vec<&str> = Activation::ALL.iter().map(|a| a.name()).collect();
                crate::Error::invalid(
                    "Activation",
                    format!("unknown activation `{s}` (one of {})", names.join(", ")),
                )
            })
    }
}

impl Module for Activation {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.apply(x)
    }

    fn visit_parameters(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Parameter)) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, Tensor};

    #[test]
    fn values_and_gradients_flow() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![-2.0, 0.5], &[2]).unwrap());
        for a in Activation::ALL {
            let y = a.forward(&x).unwrap();
            let want: Vec<f64> = [-2.0f64, 0.5]
                .iter()
                .map(|&v| match a {
                    Activation::Relu => v.max(0.0),
                    Activation::Tanh => v.tanh(),
                    Activation::Sigmoid => 1.0 / (1.0 + (-v).exp()),
                    Activation::Identity => v,
                })
                .collect();
            assert!(y
                .value()
                .allclose(&Tensor::from_vec(want, &[2]).unwrap(), 1e-12, 0.0));
            assert_eq!(a.name().parse::<Activation>().unwrap(), *a);
        }
        assert!("swish2".parse::<Activation>().is_err());
    }
}
