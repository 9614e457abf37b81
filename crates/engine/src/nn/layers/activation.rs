//! Activation functions as modules (no parameters).

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::ops::gelu::GeluApproximate;

/// An elementwise activation, usable as a layer.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{Activation, Forward, Module}};
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![-1.0, 2.0], &[2])?);
/// assert_eq!(Activation::Relu.forward(&x)?.value().to_f64_vec(), vec![0.0, 2.0]);
/// assert_eq!("tanh".parse::<Activation>()?, Activation::Tanh);
/// assert_eq!("leaky_relu".parse::<Activation>()?, Activation::LeakyRelu(0.01));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Default)]
pub enum Activation {
    /// `max(x, 0)`.
    #[default]
    Relu,
    /// `x` for `x >= 0`, `slope * x` below (PyTorch's default slope is 0.01).
    LeakyRelu(f64),
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// GELU with the exact normal CDF, `x Φ(x)`.
    Gelu,
    /// GELU with PyTorch's tanh approximation (`approximate="tanh"`).
    GeluTanh,
    /// SiLU (swish), `x sigmoid(x)`.
    Silu,
    /// `x` unchanged.
    Identity,
}

impl Activation {
    /// Every activation, in declaration order.
    /// (`LeakyRelu` with PyTorch's default slope, 0.01.)
    pub const ALL: &'static [Activation] = &[
        Activation::Relu,
        Activation::LeakyRelu(0.01),
        Activation::Tanh,
        Activation::Sigmoid,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
        Activation::Identity,
    ];

    /// The lower-case name (`"relu"`, `"gelu_tanh"`, ...), as accepted by
    /// `parse` (`"leaky_relu"` parses with slope 0.01).
    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::LeakyRelu(_) => "leaky_relu",
            Activation::Tanh => "tanh",
            Activation::Sigmoid => "sigmoid",
            Activation::Gelu => "gelu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::Silu => "silu",
            Activation::Identity => "identity",
        }
    }

    /// Applies the activation to `x`.
    pub fn apply<'g>(self, x: &Var<'g>) -> Result<Var<'g>> {
        Ok(match self {
            Activation::Relu => x.relu(),
            Activation::LeakyRelu(slope) => {
                if !slope.is_finite() {
                    return Err(crate::Error::invalid(
                        "Activation",
                        format!("leaky_relu slope must be finite, got {slope}"),
                    ));
                }
                x.leaky_relu(slope)
            }
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Gelu => x.gelu_with(GeluApproximate::None),
            Activation::GeluTanh => x.gelu_with(GeluApproximate::Tanh),
            Activation::Silu => x.silu(),
            Activation::Identity => x.clone(),
        })
    }
}

impl std::fmt::Display for Activation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Activation::LeakyRelu(slope) if *slope != 0.01 => write!(f, "leaky_relu({slope})"),
            other => f.write_str(other.name()),
        }
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
    fn visit_parameters(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Parameter)) {}
}

impl Forward for Activation {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.apply(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, Tensor};

    #[test]
    fn values_match_pytorch_and_gradients_flow() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![-2.0, 0.5], &[2]).unwrap());
        // torch.nn.functional in float64 at x = -2 and 0.5.
        let expected = |a: &Activation| -> [f64; 2] {
            match a {
                Activation::Relu => [0.0, 0.5],
                Activation::LeakyRelu(_) => [-0.02, 0.5],
                Activation::Tanh => [-0.9640275800758169, 0.4621171572600098],
                Activation::Sigmoid => [0.11920292202211755, 0.6224593312018546],
                Activation::Gelu => [-0.04550026389635842, 0.34573123063700656],
                Activation::GeluTanh => [-0.04540230591222494, 0.34571400982514394],
                Activation::Silu => [-0.2384058440442351, 0.3112296656009273],
                Activation::Identity => [-2.0, 0.5],
            }
        };
        for a in Activation::ALL {
            let y = a.forward(&x).unwrap();
            let want = Tensor::from_vec(expected(a).to_vec(), &[2]).unwrap();
            assert!(
                y.value().allclose(&want, 1e-12, 1e-15),
                "{a}: {:?}",
                y.value()
            );
            assert_eq!(a.name().parse::<Activation>().unwrap(), *a);
            assert!(y.sum().backward().unwrap().wrt(&x).all_finite());
        }
        assert!("swish2".parse::<Activation>().is_err());
        assert_eq!(Activation::LeakyRelu(0.2).to_string(), "leaky_relu(0.2)");
        assert!(Activation::LeakyRelu(f64::NAN).forward(&x).is_err());
    }
}
