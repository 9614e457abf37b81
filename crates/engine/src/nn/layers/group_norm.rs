//! [`GroupNorm`]: normalisation over groups of channels, per sample.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::tensor::{DType, Tensor};

/// PyTorch's `nn.GroupNorm(num_groups, num_channels, eps, affine)`: the
/// channels of an `[N, C, *]` input split into `num_groups` groups, each
/// `(sample, group)` normalised over its channels and positions (see
/// [`Var::try_group_norm`](crate::Var::try_group_norm)), then a learnable
/// per-channel weight (ones) and bias (zeros). The same in training and
/// eval mode; no buffers.
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{GroupNorm, Forward, Module}};
/// let gn = GroupNorm::new(2, 4, DType::F64)?;
/// let g = Graph::new();
/// let x = g.variable(Tensor::randn(&[2, 4, 3], DType::F64, 1)?);
/// let y = gn.forward(&x)?.value().to_f64_vec();
/// // Each (sample, group) of 2 channels x 3 positions has mean 0.
/// assert!(y[..6].iter().sum::<f64>().abs() < 1e-12);
/// assert!(GroupNorm::new(3, 4, DType::F64).is_err()); // 3 does not divide 4
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct GroupNorm {
    num_groups: usize,
    num_channels: usize,
    eps: f64,
    weight: Option<Parameter>,
    bias: Option<Parameter>,
}

impl GroupNorm {
    /// Group norm with PyTorch's defaults: `eps = 1e-5`, affine.
    pub fn new(num_groups: usize, num_channels: usize, dtype: DType) -> Result<Self> {
        Self::with_options(num_groups, num_channels, 1e-5, true, dtype)
    }

    /// Group norm with a chosen `eps` and, if `affine`, a learnable
    /// per-channel weight and bias. Errors: `num_groups` zero or not
    /// dividing `num_channels`, a negative or non-finite `eps`.
    pub fn with_options(
        num_groups: usize,
        num_channels: usize,
        eps: f64,
        affine: bool,
        dtype: DType,
    ) -> Result<Self> {
        if num_groups == 0 || !num_channels.is_multiple_of(num_groups) {
            return Err(Error::invalid(
                "GroupNorm",
                format!(
                    "num_channels ({num_channels}) must be divisible by num_groups ({num_groups})"
                ),
            ));
        }
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::invalid(
                "GroupNorm",
                format!("eps must be finite and >= 0, got {eps}"),
            ));
        }
        let c = [num_channels];
        let (weight, bias) = if affine {
            (
                Some(Parameter::new(Tensor::ones(&c, dtype)?)),
                Some(Parameter::new(Tensor::zeros(&c, dtype)?)),
            )
        } else {
            (None, None)
        };
        Ok(GroupNorm {
            num_groups,
            num_channels,
            eps,
            weight,
            bias,
        })
    }

    /// The number of groups.
    pub fn num_groups(&self) -> usize {
        self.num_groups
    }

    /// The number of channels.
    pub fn num_channels(&self) -> usize {
        self.num_channels
    }

    /// The per-channel scale, if affine.
    pub fn weight(&self) -> Option<&Parameter> {
        self.weight.as_ref()
    }

    /// The per-channel shift, if affine.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl Forward for GroupNorm {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let weight = self.weight.as_ref().map(|w| graph.param(w));
        let bias = self.bias.as_ref().map(|b| graph.param(b));
        x.try_group_norm(self.num_groups, weight.as_ref(), bias.as_ref(), self.eps)
    }
}
