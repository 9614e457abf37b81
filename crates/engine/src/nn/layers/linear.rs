//! [`Linear`]: `y = x W^T + b`, with PyTorch's layout and initialisation.

use rand::Rng;

use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::nn::init::{self, FanMode, Nonlinearity};
use crate::nn::setters::setters;
use crate::nn::{Forward, Module, Parameter};
use crate::tensor::DType;

/// A fully connected layer, `y = x W^T + b`, over the last dimension of `x`.
///
/// The weight is stored `[out_features, in_features]`, as in PyTorch's
/// `nn.Linear`, so checkpoints carry over to and from PyTorch unchanged;
/// the product reads `W` transposed through the matmul kernel's strides, so
/// no transposed copy is ever made. Initialisation matches PyTorch:
/// `W ~ kaiming_uniform(a = sqrt(5))`, that is `U(-1/sqrt(in), 1/sqrt(in))`,
/// and `b ~ U(-1/sqrt(in), 1/sqrt(in))`.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, Graph, Tensor, nn::{Linear, Forward, Module}};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let layer = Linear::builder(3, 2).dtype(DType::F32).build_with(&mut rng)?;
/// assert_eq!(layer.weight().shape(), vec![2, 3]);
/// let names: Vec<String> = layer.parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// let g = Graph::new();
/// let y = layer.forward(&g.constant(Tensor::zeros(&[5, 3], DType::F32)?))?;
/// assert_eq!(y.shape(), &[5, 2]);                 // a batch of 5
/// assert_eq!(y.value().to_f64_vec()[..2], layer.bias().unwrap().value().to_f64_vec()[..]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct Linear {
    weight: Parameter,
    bias: Option<Parameter>,
}

impl Linear {
    /// A layer from `in_features` to `out_features` with a bias, f32,
    /// initialised as in PyTorch from the default generator
    /// ([`manual_seed`](crate::nn::manual_seed)). Other settings come
    /// through [`builder`](Self::builder).
    pub fn new(in_features: usize, out_features: usize) -> Result<Self> {
        Self::builder(in_features, out_features).build()
    }

    /// Configures a layer: bias, dtype, and the generator of its weights.
    ///
    /// ```
    /// use rand::SeedableRng;
    /// use retrograd::{DType, nn::Linear};
    /// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    /// let layer = Linear::builder(3, 2).bias(false).dtype(DType::F64).build_with(&mut rng)?;
    /// assert!(layer.bias().is_none());
    /// assert_eq!(layer.weight().dtype(), DType::F64);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn builder(in_features: usize, out_features: usize) -> LinearBuilder {
        LinearBuilder {
            in_features,
            out_features,
            bias: true,
            dtype: DType::F32,
        }
    }

    /// A layer around existing parameters: `weight` `[out, in]`, `bias` `[out]`.
    pub fn from_parameters(weight: Parameter, bias: Option<Parameter>) -> Result<Self> {
        let ws = weight.shape();
        if ws.len() != 2 {
            return Err(Error::invalid(
                "Linear",
                format!("the weight must be [out, in], found shape {ws:?}"),
            ));
        }
        if let Some(b) = &bias {
            if b.shape() != [ws[0]] {
                return Err(Error::shape_mismatch("Linear", &ws, &b.shape()));
            }
            check_dtypes("Linear", weight.dtype(), b.dtype())?;
        }
        Ok(Linear { weight, bias })
    }

    /// The weight, `[out_features, in_features]`.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The bias, `[out_features]`, if any.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }

    /// Input features.
    pub fn in_features(&self) -> usize {
        self.weight.shape()[1]
    }

    /// Output features.
    pub fn out_features(&self) -> usize {
        self.weight.shape()[0]
    }

    /// Redraws the weight `N(0, std)` from `rng` and zeroes the bias
    /// (GPT-2's initialisation of its linear layers).
    pub fn init_normal<R: Rng + ?Sized>(&self, std: f64, rng: &mut R) -> Result<()> {
        let w = &self.weight;
        w.set(init::normal(&w.shape(), 0.0, std, w.dtype(), rng)?)?;
        if let Some(b) = &self.bias {
            b.set(b.value().zeros_like())?;
        }
        Ok(())
    }
}

impl Forward for Linear {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let y = x.try_matmul_transposed(&graph.param(&self.weight), false, true)?;
        match &self.bias {
            Some(b) => y.try_add(&graph.param(b)),
            None => Ok(y),
        }
    }
}

/// Settings of a [`Linear`] layer; see [`Linear::builder`].
#[derive(Clone, Copy, Debug)]
pub struct LinearBuilder {
    in_features: usize,
    out_features: usize,
    bias: bool,
    dtype: DType,
}

setters! {
    impl LinearBuilder builds Linear {
        /// Whether the layer adds a learnable bias (default true).
        bias(bias: bool);
        /// The dtype of the parameters (default f32).
        dtype(dtype: DType);
    }
}

impl LinearBuilder {
    /// The layer, initialised as in PyTorch from `rng`:
    /// `W ~ kaiming_uniform(a = sqrt(5))`, `b ~ U(-1/sqrt(in), 1/sqrt(in))`.
    pub fn build_with<R: Rng + ?Sized>(self, rng: &mut R) -> Result<Linear> {
        let LinearBuilder {
            in_features,
            out_features,
            bias,
            dtype,
        } = self;
        if in_features == 0 || out_features == 0 {
            return Err(Error::invalid(
                "Linear",
                format!("features must be > 0, got {in_features} -> {out_features}"),
            ));
        }
        let weight = init::kaiming_uniform(
            &[out_features, in_features],
            FanMode::FanIn,
            Nonlinearity::LeakyRelu(5f64.sqrt()),
            dtype,
            rng,
        )?;
        let bias = if bias {
            let bound = 1.0 / (in_features as f64).sqrt();
            Some(Parameter::new(init::uniform(
                &[out_features],
                -bound,
                bound,
                dtype,
                rng,
            )?))
        } else {
            None
        };
        Ok(Linear {
            weight: Parameter::new(weight),
            bias,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, Graph, Tensor};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn forward_matches_a_hand_product() {
        let w =
            Parameter::new(Tensor::from_vec(vec![1.0, 2.0, 3.0, -1.0, 0.0, 1.0], &[2, 3]).unwrap());
        let b = Parameter::new(Tensor::from_vec(vec![0.5, -0.5], &[2]).unwrap());
        let layer = Linear::from_parameters(w, Some(b)).unwrap();
        let g = Graph::new();
        let x = g.constant(Tensor::from_vec(vec![1.0, 1.0, 1.0, 2.0, 0.0, -1.0], &[2, 3]).unwrap());
        let y = layer.forward(&x).unwrap();
        assert_eq!(y.value().to_f64_vec(), vec![6.5, -0.5, -0.5, -3.5]);
        // A single example (1-d input) works too.
        let v = layer.forward(&g.constant(Tensor::from_vec(vec![1.0, 0.0, 0.0], &[3]).unwrap()));
        assert_eq!(v.unwrap().value().to_f64_vec(), vec![1.5, -1.5]);
    }

    #[test]
    fn gradients_check_against_finite_differences() {
        let x = Tensor::randn(&[4, 3], DType::F64, 1).unwrap();
        let w = Tensor::randn(&[2, 3], DType::F64, 2).unwrap();
        let b = Tensor::randn(&[2], DType::F64, 3).unwrap();
        gradcheck(
            |v| {
                let y = v[0].try_matmul_transposed(&v[1], false, true)? + &v[2];
                Ok((&y * &y).sum())
            },
            &[x, w, b],
        )
        .unwrap();
    }

    #[test]
    fn init_follows_pytorch_bounds() {
        let mut rng = ChaCha8Rng::seed_from_u64(5);
        let layer = Linear::builder(400, 300)
            .dtype(DType::F32)
            .build_with(&mut rng)
            .unwrap();
        let bound = 1.0 / 20.0;
        let w = layer.weight().value().to_f64_vec();
        let max = w.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(max <= bound && max > 0.99 * bound, "{max}");
        let var = w.iter().map(|v| v * v).sum::<f64>() / w.len() as f64;
        assert!((var / (bound * bound / 3.0) - 1.0).abs() < 0.02);
        let b = layer.bias().unwrap().value().to_f64_vec();
        assert!(b.iter().all(|v| v.abs() <= bound));
        let no_bias = Linear::builder(3, 2)
            .bias(false)
            .dtype(DType::F32)
            .build_with(&mut rng)
            .unwrap();
        assert_eq!(no_bias.parameters().len(), 1);
    }

    #[test]
    fn bad_shapes_are_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(Linear::builder(0, 3)
            .dtype(DType::F32)
            .build_with(&mut rng)
            .is_err());
        let w = Parameter::new(Tensor::zeros(&[2, 3], DType::F32).unwrap());
        let b = Parameter::new(Tensor::zeros(&[3], DType::F32).unwrap());
        assert!(Linear::from_parameters(w.clone(), Some(b)).is_err());
        let layer = Linear::from_parameters(w, None).unwrap();
        let g = Graph::new();
        let x = g.constant(Tensor::zeros(&[1, 4], DType::F32).unwrap());
        assert!(layer.forward(&x).is_err());
    }
}
