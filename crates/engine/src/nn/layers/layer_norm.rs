//! [`LayerNorm`]: normalisation over the trailing dimensions, with a
//! learnable elementwise scale and shift.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter};
use crate::tensor::{DType, Tensor};

/// PyTorch's `nn.LayerNorm`: each slice over the trailing
/// `normalized_shape` dimensions is normalised to mean 0 and variance 1
/// (biased variance, `eps` added inside the square root), then scaled by
/// `weight` (initially ones) and shifted by `bias` (initially zeros).
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{LayerNorm, Forward, Module}};
/// let ln = LayerNorm::new(&[4], DType::F64)?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 4])?);
/// let y = ln.forward(&x)?.value().to_f64_vec();
/// assert!(y.iter().sum::<f64>().abs() < 1e-12);
/// assert!((y.iter().map(|v| v * v).sum::<f64>() / 4.0 - 1.0).abs() < 1e-4);
/// assert_eq!(ln.parameters().len(), 2);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct LayerNorm {
    normalized_shape: Vec<usize>,
    eps: f64,
    weight: Option<Parameter>,
    bias: Option<Parameter>,
}

impl LayerNorm {
    /// Layer norm over `normalized_shape` with `eps = 1e-5` and a learnable
    /// weight and bias (PyTorch's defaults).
    pub fn new(normalized_shape: &[usize], dtype: DType) -> Result<Self> {
        Self::with_options(normalized_shape, 1e-5, true, dtype)
    }

    /// Layer norm with a chosen `eps` and, if `elementwise_affine`, a
    /// learnable weight and bias.
    pub fn with_options(
        normalized_shape: &[usize],
        eps: f64,
        elementwise_affine: bool,
        dtype: DType,
    ) -> Result<Self> {
        check_normalized_shape("LayerNorm", normalized_shape)?;
        if !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::invalid(
                "LayerNorm",
                format!("eps must be >= 0, got {eps}"),
            ));
        }
        let (weight, bias) = if elementwise_affine {
            (
                Some(Parameter::new(Tensor::ones(normalized_shape, dtype)?)),
                Some(Parameter::new(Tensor::zeros(normalized_shape, dtype)?)),
            )
        } else {
            (None, None)
        };
        Ok(LayerNorm {
            normalized_shape: normalized_shape.to_vec(),
            eps,
            weight,
            bias,
        })
    }

    /// Layer norm around existing parameters: `weight` and `bias` of the
    /// normalised shape (a loaded checkpoint's), and `eps`.
    pub fn from_parameters(weight: Parameter, bias: Option<Parameter>, eps: f64) -> Result<Self> {
        let shape = weight.shape();
        if let Some(b) = &bias
            && (b.shape() != shape || b.dtype() != weight.dtype())
        {
            return Err(Error::shape_mismatch("LayerNorm", &shape, &b.shape()));
        }
        let mut norm = Self::with_options(&shape, eps, false, weight.dtype())?;
        norm.weight = Some(weight);
        norm.bias = bias;
        Ok(norm)
    }

    /// Keeps (`true`) or drops (`false`) the learnable bias: PyTorch's
    /// `nn.LayerNorm(..., bias=False)` is `LayerNorm::new(shape, dtype)?.with_bias(false)`
    /// (the weight stays). Without a weight (`elementwise_affine = false`)
    /// there is no bias either way.
    ///
    /// ```
    /// use retrograd::{DType, nn::{LayerNorm, Forward, Module}};
    /// let ln = LayerNorm::new(&[8], DType::F32)?.with_bias(false);
    /// assert!(ln.bias().is_none() && ln.weight().is_some());
    /// assert_eq!(ln.parameters().len(), 1);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn with_bias(mut self, bias: bool) -> Self {
        if !bias {
            self.bias = None;
        } else if self.bias.is_none() && self.weight.is_some() {
            let zeros = Tensor::zeros(
                &self.normalized_shape,
                self.weight.as_ref().map_or(DType::F32, Parameter::dtype),
            );
            self.bias = zeros.ok().map(Parameter::new);
        }
        self
    }

    /// The normalised trailing shape.
    pub fn normalized_shape(&self) -> &[usize] {
        &self.normalized_shape
    }

    /// The scale, if learnable.
    pub fn weight(&self) -> Option<&Parameter> {
        self.weight.as_ref()
    }

    /// The shift, if learnable.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

/// Checks a norm's `normalized_shape`: non-empty, no zero sizes.
pub(super) fn check_normalized_shape(op: &'static str, normalized_shape: &[usize]) -> Result<()> {
    if normalized_shape.is_empty() || normalized_shape.contains(&0) {
        return Err(Error::invalid(
            op,
            format!(
                "normalized_shape must be non-empty with no zero dims, got {normalized_shape:?}"
            ),
        ));
    }
    Ok(())
}

impl Forward for LayerNorm {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let weight = self.weight.as_ref().map(|w| graph.param(w));
        let bias = self.bias.as_ref().map(|b| graph.param(b));
        x.try_layer_norm(
            &self.normalized_shape,
            weight.as_ref(),
            bias.as_ref(),
            self.eps,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    #[test]
    fn normalises_rows_and_learns_scale_and_shift() {
        let ln = LayerNorm::new(&[3], DType::F64).unwrap();
        ln.weight()
            .unwrap()
            .set(Tensor::from_vec(vec![2.0, 2.0, 2.0], &[3]).unwrap())
            .unwrap();
        ln.bias()
            .unwrap()
            .set(Tensor::from_vec(vec![1.0, 1.0, 1.0], &[3]).unwrap())
            .unwrap();
        let g = Graph::new();
        let x = g.constant(Tensor::from_vec(vec![0.0, 3.0, 6.0, 1.0, 1.0, 4.0], &[2, 3]).unwrap());
        let y = ln.forward(&x).unwrap();
        // Row 1: mean 3, biased variance 6; row 2: mean 2, variance 2.
        let (r1, r2) = ((6.0f64 + 1e-5).sqrt(), (2.0f64 + 1e-5).sqrt());
        let want = [
            1.0 - 6.0 / r1,
            1.0,
            1.0 + 6.0 / r1,
            1.0 - 2.0 / r2,
            1.0 - 2.0 / r2,
            1.0 + 4.0 / r2,
        ];
        let v = y.value().to_f64_vec();
        assert!(
            v.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{v:?}"
        );
        let grads = y.sum().backward().unwrap();
        // d(sum y)/d bias = number of rows; d/d weight = sum of x_hat over rows (0 per row sum).
        assert_eq!(
            grads.of(ln.bias().unwrap()).to_f64_vec(),
            vec![2.0, 2.0, 2.0]
        );
        let gw: f64 = grads.of(ln.weight().unwrap()).to_f64_vec().iter().sum();
        assert!(gw.abs() < 1e-9);
    }

    #[test]
    fn options_and_errors() {
        let plain = LayerNorm::with_options(&[2, 2], 1e-6, false, DType::F32).unwrap();
        assert!(plain.parameters().is_empty());
        assert!(LayerNorm::new(&[], DType::F32).is_err());
        assert!(LayerNorm::with_options(&[2], -1.0, true, DType::F32).is_err());
        let g = Graph::new();
        let x = g.constant(Tensor::zeros(&[2, 3], DType::F32).unwrap());
        assert!(plain.forward(&x).is_err());
    }

    #[test]
    fn without_bias_matches_the_functional_form() {
        let ln = LayerNorm::new(&[3], DType::F64).unwrap().with_bias(false);
        assert_eq!(ln.parameters().len(), 1);
        ln.weight()
            .unwrap()
            .set(Tensor::from_vec(vec![2.0, -1.0, 0.5], &[3]).unwrap())
            .unwrap();
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![0.0, 3.0, 7.0, 1.0, -1.0, 4.0], &[2, 3]).unwrap());
        let y = ln.forward(&x).unwrap();
        let w = g.param(ln.weight().unwrap());
        let direct = x.layer_norm(&[3], Some(&w), None, 1e-5);
        assert!(y.value().allclose(direct.value(), 0.0, 0.0));
        let grads = (&y * &y).sum().backward().unwrap();
        assert_eq!(grads.of(ln.weight().unwrap()).shape(), &[3]);
        crate::gradcheck(
            |v| v[0].try_layer_norm(&[3], Some(&v[1]), None, 1e-5),
            &[
                x.value().clone(),
                Tensor::from_vec(vec![2.0, -1.0, 0.5], &[3]).unwrap(),
            ],
        )
        .unwrap();
        let back = ln.with_bias(true);
        assert_eq!(back.parameters().len(), 2);
    }
}
