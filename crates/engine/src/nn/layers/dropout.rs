//! [`Dropout`]: zeroes elements at random while training.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::{Forward, Module, Parameter, RandomStream};

/// Zeroes each element with probability `p` and scales the rest by
/// `1 / (1 - p)` in training mode; the identity in evaluation mode
/// (`set_training(false)`). Starts in training mode, as in PyTorch.
///
/// Masks are reproducible: the `k`-th forward pass uses a mask seeded from
/// `(seed, k)` (the layer's [`RandomStream`], which a training state saves),
/// so a run with the same seed drops the same elements, and so does a run
/// resumed from a checkpoint.
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Dropout, Forward, Module}};
/// let mut drop = Dropout::new(0.5, 7)?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::ones(&[1000], DType::F32)?);
/// let y = drop.forward(&x)?.value().to_vec::<f32>()?;
/// assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
/// drop.set_training(false);
/// assert_eq!(drop.forward(&x)?.value(), x.value());
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Debug)]
pub struct Dropout {
    p: f64,
    stream: RandomStream,
    training: bool,
}

impl Dropout {
    /// Dropout with probability `p` in `[0, 1)` and masks seeded by `seed`.
    pub fn new(p: f64, seed: u64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::invalid(
                "Dropout",
                format!("p must be in [0, 1), got {p}"),
            ));
        }
        Ok(Dropout {
            p,
            stream: RandomStream::new(seed),
            training: true,
        })
    }

    /// The drop probability.
    pub fn p(&self) -> f64 {
        self.p
    }

    /// Whether the layer is in training mode.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// The seed of the next mask, or `None` when nothing is dropped (eval
    /// mode or `p = 0`): for layers that hand dropout to a fused op
    /// (attention's `dropout_p`) with this layer's schedule of seeds.
    pub fn next_seed(&self) -> Option<u64> {
        if !self.training || self.p == 0.0 {
            return None;
        }
        Some(self.stream.next_seed())
    }
}

/// A clone draws its own masks, starting where this layer's stream is.
impl Clone for Dropout {
    fn clone(&self) -> Self {
        Dropout {
            p: self.p,
            stream: self.stream.fork(),
            training: self.training,
        }
    }
}

impl Module for Dropout {
    fn visit_parameters(&self, _prefix: &str, _f: &mut dyn FnMut(&str, &Parameter)) {}

    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        f(prefix, &self.stream)
    }

    fn set_training(&mut self, training: bool) {
        self.training = training;
    }
}

impl Forward for Dropout {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        match self.next_seed() {
            Some(seed) => x.try_dropout(self.p, true, seed),
            None => Ok(x.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Graph, Tensor};

    fn mask(d: &Dropout) -> Vec<f32> {
        let g = Graph::new();
        let x = g.constant(Tensor::ones(&[256], DType::F32).unwrap());
        d.forward(&x).unwrap().value().to_vec::<f32>().unwrap()
    }

    #[test]
    fn masks_change_per_call_and_repeat_per_seed() {
        let (a, b) = (
            Dropout::new(0.3, 11).unwrap(),
            Dropout::new(0.3, 11).unwrap(),
        );
        let (a1, a2) = (mask(&a), mask(&a));
        assert_ne!(a1, a2);
        assert_eq!(mask(&b), a1);
        assert_eq!(mask(&b), a2);
        let kept = a1.iter().filter(|&&v| v != 0.0).count();
        assert!((140..220).contains(&kept), "{kept} of 256 kept at p = 0.3");
    }

    #[test]
    fn gradient_flows_through_the_kept_elements() {
        let d = Dropout::new(0.5, 3).unwrap();
        let g = Graph::new();
        let x = g.variable(Tensor::ones(&[64], DType::F64).unwrap());
        let y = d.forward(&x).unwrap();
        let grad = y.sum().backward().unwrap().wrt(&x);
        assert_eq!(&grad, y.value());
    }

    #[test]
    fn invalid_probability() {
        assert!(Dropout::new(1.0, 0).is_err());
        assert!(Dropout::new(-0.1, 0).is_err());
        assert!(Dropout::new(f64::NAN, 0).is_err());
    }
}
