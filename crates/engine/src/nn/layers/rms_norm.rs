//! [`RMSNorm`]: root-mean-square normalisation over the trailing
//! dimensions, with a learnable elementwise scale.

use super::layer_norm::check_normalized_shape;
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::tensor::{DType, Tensor};

/// PyTorch's `nn.RMSNorm(normalized_shape, eps=None, elementwise_affine=True)`:
/// each slice over the trailing `normalized_shape` dimensions is divided by
/// `sqrt(mean(x²) + eps)`, then scaled by `weight` (initially ones). `eps:
/// None` is the input dtype's machine epsilon, as in PyTorch.
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Forward, Module, RMSNorm}};
/// let norm = RMSNorm::new(&[2], DType::F64)?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![3.0, 4.0], &[1, 2])?);
/// let y = norm.forward(&x)?.value().to_f64_vec();
/// let r = 12.5f64.sqrt();
/// assert!((y[0] - 3.0 / r).abs() < 1e-12 && (y[1] - 4.0 / r).abs() < 1e-12);
/// assert_eq!(norm.parameters().len(), 1);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct RMSNorm {
    normalized_shape: Vec<usize>,
    eps: Option<f64>,
    weight: Option<Parameter>,
}

impl RMSNorm {
    /// RMS norm over `normalized_shape` with the default `eps` and a
    /// learnable weight (PyTorch's defaults).
    pub fn new(normalized_shape: &[usize], dtype: DType) -> Result<Self> {
        Self::with_options(normalized_shape, None, true, dtype)
    }

    /// RMS norm with a chosen `eps` (`None`: the dtype's machine epsilon)
    /// and, if `elementwise_affine`, a learnable weight.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: Option<f64>,
        elementwise_affine: bool,
        dtype: DType,
    ) -> Result<Self> {
        check_normalized_shape("RMSNorm", normalized_shape)?;
        if let Some(e) = eps
            && !(e.is_finite() && e >= 0.0)
        {
            return Err(Error::invalid(
                "RMSNorm",
                format!("eps must be >= 0, got {e}"),
            ));
        }
        let weight = elementwise_affine
            .then(|| Tensor::ones(normalized_shape, dtype).map(Parameter::new))
            .transpose()?;
        Ok(RMSNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight,
        })
    }

    /// The normalised trailing shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// The scale, if learnable.
    pub fn weight(&self) -> Option<&Parameter> {
        self.weight.as_ref()
    }
}

impl Forward for RMSNorm {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let weight = self.weight.as_ref().map(|w| x.graph().param(w));
        x.try_rms_norm(&self.normalized_shape, weight.as_ref(), self.eps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    #[test]
    fn normalises_learns_and_checks() {
        let norm = RMSNorm::with_options(&[3], Some(1e-6), true, DType::F64).unwrap();
        norm.weight()
            .unwrap()
            .set(Tensor::from_vec(vec![2.0, 1.0, -1.0], &[3]).unwrap())
            .unwrap();
        let g = Graph::new();
        let x = g.constant(Tensor::from_vec(vec![1.0, 2.0, 2.0, 0.0, 3.0, 4.0], &[2, 3]).unwrap());
        let y = norm.forward(&x).unwrap().value().to_f64_vec();
        let (r1, r2) = ((3.0f64 + 1e-6).sqrt(), (25.0f64 / 3.0 + 1e-6).sqrt());
        let want = [2.0 / r1, 2.0 / r1, -2.0 / r1, 0.0, 3.0 / r2, -4.0 / r2];
        assert!(
            y.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{y:?}"
        );
        let grads = norm.forward(&x).unwrap().sum().backward().unwrap();
        assert_eq!(grads.of(norm.weight().unwrap()).shape(), &[3]);
        let names: Vec<String> = norm.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, vec!["weight"]);
        assert!(RMSNorm::with_options(&[3], None, false, DType::F32)
            .unwrap()
            .parameters()
            .is_empty());
        assert!(RMSNorm::new(&[], DType::F32).is_err());
        assert!(RMSNorm::with_options(&[2], Some(-1.0), true, DType::F32).is_err());
    }
}
