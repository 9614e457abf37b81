//! [`Mlp`]: a multi-layer perceptron built from sizes, an activation and a
//! dropout rate.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{Activation, Dropout, Linear, Sequential};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::setters::setters;
use crate::nn::{Forward, Module, Parameter};
use crate::tensor::DType;

/// A multi-layer perceptron: `Linear`, activation (and `Dropout` when its
/// rate is above zero) for each hidden layer, then a final `Linear`. The
/// layers sit in a [`Sequential`], so parameters are named as in the
/// equivalent PyTorch `nn.Sequential`: `"0.weight"`, `"0.bias"`,
/// `"2.weight"`, ...
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Activation, Mlp, Forward, Module}};
/// let mlp = Mlp::builder(&[64, 32, 10]).activation(Activation::Tanh).seed(1).build()?;
/// let names: Vec<String> = mlp.parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// assert_eq!(mlp.num_parameters(), 64 * 32 + 32 + 32 * 10 + 10);
/// let g = Graph::new();
/// let logits = mlp.forward(&g.constant(Tensor::zeros(&[8, 64], DType::F32)?))?;
/// assert_eq!(logits.shape(), &[8, 10]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Mlp {
    sizes: Vec<usize>,
    net: Sequential,
}

/// Configures an [`Mlp`]; see [`Mlp::builder`].
#[derive(Clone, Debug)]
pub struct MlpBuilder {
    sizes: Vec<usize>,
    activation: Activation,
    dropout: f64,
    dtype: DType,
    seed: u64,
}

impl Mlp {
    /// A builder for an MLP with layer `sizes` (input, hidden..., output).
    /// Defaults: ReLU, no dropout, f32, seed 0.
    pub fn builder(sizes: &[usize]) -> MlpBuilder {
        MlpBuilder {
            sizes: sizes.to_vec(),
            activation: Activation::Relu,
            dropout: 0.0,
            dtype: DType::F32,
            seed: 0,
        }
    }

    /// The layer sizes, input first.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }

    /// The layers.
    pub fn layers(&self) -> &Sequential {
        &self.net
    }
}

setters! {
    impl MlpBuilder {
        /// The activation after each hidden layer.
        activation(activation: Activation);
        /// Dropout after each hidden activation (0 for none).
        dropout(dropout: f64);
        /// The parameters' dtype.
        dtype(dtype: DType);
        /// The seed of the initial weights and of the dropout masks.
        seed(seed: u64);
    }
}

impl MlpBuilder {
    /// Builds the MLP; at least an input and an output size are needed.
    pub fn build(self) -> Result<Mlp> {
        if self.sizes.len() < 2 {
            return Err(Error::invalid(
                "Mlp",
                format!("need at least input and output sizes, got {:?}", self.sizes),
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let mut net = Sequential::new();
        let last = self.sizes.len() - 2;
        for (i, pair) in self.sizes.windows(2).enumerate() {
            net.push(
                Linear::builder(pair[0], pair[1])
                    .dtype(self.dtype)
                    .build_with(&mut rng)?,
            );
            if i < last {
                net.push(self.activation);
                if self.dropout > 0.0 {
                    net.push(Dropout::new(
                        self.dropout,
                        self.seed.wrapping_add(i as u64 + 1),
                    )?);
                }
            }
        }
        Ok(Mlp {
            sizes: self.sizes,
            net,
        })
    }
}

impl Module for Mlp {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        self.net.visit_parameters(prefix, f)
    }

    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &crate::nn::Buffer)) {
        self.net.visit_buffers(prefix, f)
    }

    fn visit_random_streams(
        &self,
        prefix: &str,
        f: &mut dyn FnMut(&str, &crate::nn::RandomStream),
    ) {
        self.net.visit_random_streams(prefix, f)
    }

    fn set_training(&mut self, training: bool) {
        self.net.set_training(training)
    }
}

impl Forward for Mlp {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.net.forward(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, Tensor};

    #[test]
    fn dropout_layers_shift_names_and_respect_eval_mode() {
        let mut mlp = Mlp::builder(&[4, 8, 8, 2])
            .dropout(0.5)
            .seed(3)
            .build()
            .unwrap();
        let names: Vec<String> = mlp.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            ["0.weight", "0.bias", "3.weight", "3.bias", "6.weight", "6.bias"]
        );
        let g = Graph::new();
        let x = g.constant(Tensor::ones(&[3, 4], DType::F32).unwrap());
        let train_a = mlp.forward(&x).unwrap().value().clone();
        let train_b = mlp.forward(&x).unwrap().value().clone();
        assert_ne!(train_a, train_b, "fresh masks each pass");
        mlp.set_training(false);
        let eval_a = mlp.forward(&x).unwrap().value().clone();
        assert_eq!(eval_a, mlp.forward(&x).unwrap().value().clone());
    }

    #[test]
    fn same_seed_same_model() {
        let a = Mlp::builder(&[5, 3, 2])
            .seed(9)
            .dtype(DType::F64)
            .build()
            .unwrap();
        let b = Mlp::builder(&[5, 3, 2])
            .seed(9)
            .dtype(DType::F64)
            .build()
            .unwrap();
        let c = Mlp::builder(&[5, 3, 2])
            .seed(10)
            .dtype(DType::F64)
            .build()
            .unwrap();
        assert_eq!(a.state_dict(), b.state_dict());
        assert_ne!(a.state_dict(), c.state_dict());
        assert!(Mlp::builder(&[5]).build().is_err());
        assert!(Mlp::builder(&[5, 2, 1]).dropout(1.0).build().is_err());
    }
}
