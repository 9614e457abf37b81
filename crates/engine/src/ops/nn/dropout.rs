//! `dropout`: zero each element with probability `p` and scale the rest by
//! `1 / (1 - p)`, with the mask drawn from a seed
//! (`kernels::nn::sparse::keeps`). The map is linear with a fixed mask, so
//! the backward and the tangent rule are the same dropout (same seed)
//! applied to the gradient or tangent: nothing is stored, and gradients of
//! gradients come for free. Under `vmap` the mask follows the batch's
//! [`Randomness`]: one mask for every example, or one per example.

use crate::base::fallible::fallible;
use crate::ops::declare_op;

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpAttributes, OpFacts, Randomness};
use crate::kernels::nn::sparse;
use crate::ops::batching::on_leading_axes;
use crate::ops::{Node, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Training-mode dropout with drop probability `p` and mask seed `seed`.
/// The registry holds it with `p = 0.5`, `seed = 0`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dropout {
    /// The probability of zeroing an element, in `[0, 1]`.
    pub p: f64,
    /// The seed the mask is drawn from.
    pub seed: u64,
}

impl Default for Dropout {
    fn default() -> Self {
        Dropout { p: 0.5, seed: 0 }
    }
}

fn check_p(p: f64) -> Result<()> {
    if (0.0..=1.0).contains(&p) {
        Ok(())
    } else {
        Err(Error::invalid(
            "dropout",
            format!("probability must be in [0, 1], got {p}"),
        ))
    }
}

impl StructuredOp for Dropout {
    declare_op!("dropout"(input));
    fn seed(&self) -> Option<u64> {
        Some(self.seed)
    }
    fn forward_seeded(&self, x: &[&Tensor], seed: u64) -> Result<Option<Tensor>> {
        let op = Dropout { p: self.p, seed };
        crate::Differentiable::forward(&op, x).map(Some)
    }
    const LINEAR: &'static [usize] = &[0];
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .float("p", self.p)
            .int("seed", self.seed)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        check_p(self.p)?;
        let x = x[0];
        if self.p == 0.0 {
            return Ok(x.clone());
        }
        if self.p == 1.0 {
            return Ok(x.zeros_like());
        }
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let scale = <T as crate::Element>::from_f64(1.0 / (1.0 - self.p));
            let src = x.as_slice_of::<T>();
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| sparse::dropout(src, self.p, self.seed, scale, out)))
        })
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        // A fixed mask: the backward is the same dropout.
        g.graph().record(*self, &[g])
    }
    /// `Different`: the op over the whole batch, whose mask is drawn over
    /// every element, so each example has its own (the first example's is
    /// the one it would have alone). `Same`: one example's mask, the op on
    /// ones of one example's shape (`0` or `1 / (1 - p)`), times every
    /// example. Its backward and tangent follow from the ops recorded
    /// (the op again over the batch's gradient, or a product with the
    /// mask), with the same masks.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        if ctx.randomness != Randomness::Same {
            return on_leading_axes(self, x);
        }
        let x = &x[0];
        let graph = x.value.graph();
        let ones = graph.constant(Tensor::ones(x.example_shape(), x.value.dtype())?);
        let mask = graph.record(*self, &[&ones])?;
        Ok(Batched::along_batch(x.value.try_mul(&mask)?))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Dropout { p: 0.3, seed: 7 })),
            sample_inputs: Some(|seed| vec![sample_tensor(&[2, 3, 4], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Dropout::default());
}

impl<'g> Var<'g> {
    fallible! {
        /// Dropout: in training, each element is zeroed with probability `p`
        /// and the others are scaled by `1 / (1 - p)`; the mask is a function
        /// of `seed` (the same seed gives the same mask, on any thread count).
        /// When not `training` (or `p == 0`) it is the identity and records
        /// nothing. A `p` outside `[0, 1]` is `Error::InvalidArgument`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::ones(&[1000], retrograd::DType::F32)?);
        /// let y = x.try_dropout(0.5, true, 42)?;
        /// let v = y.value().to_vec::<f32>()?;
        /// assert!(v.iter().all(|&e| e == 0.0 || e == 2.0));
        /// assert_eq!(x.try_dropout(0.5, true, 42)?.value(), y.value()); // same seed, same mask
        /// assert_eq!(x.try_dropout(0.5, false, 42)?.value(), x.value()); // eval mode
        /// let grad = y.sum().backward()?.wrt(&x);
        /// assert_eq!(&grad, y.value()); // the gradient goes through the same mask
        /// assert!(x.try_dropout(1.5, true, 0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_dropout / dropout(&self, p: f64, training: bool, seed: u64) -> Var<'g> {
            check_p(p)?;
            if !training || p == 0.0 {
                return Ok(self.clone());
            }
            self.graph().record(Dropout { p, seed }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, jvpcheck, DType, Graph};

    #[test]
    fn mask_is_the_seeds_and_scaled() {
        let g = Graph::new();
        let x = g.variable(Tensor::arange(1.0, 101.0, 1.0, DType::F64).unwrap());
        let y = x.dropout(0.3, true, 9).value().to_f64_vec();
        for (i, v) in y.iter().enumerate() {
            let expect = if sparse::keeps(9, 0.3, i as u64) {
                (i + 1) as f64 / 0.7
            } else {
                0.0
            };
            assert!((v - expect).abs() < 1e-12);
        }
        assert_ne!(x.dropout(0.3, true, 10).value().to_f64_vec(), y);
        assert_eq!(x.dropout(1.0, true, 1).value().to_f64_vec(), vec![0.0; 100]);
        assert_eq!(g.len(), 3);
        assert_eq!(x.dropout(0.3, false, 1).value(), x.value());
        assert_eq!(g.len(), 3); // eval mode records nothing
    }

    #[test]
    fn gradients_tangents_and_dtypes() {
        let x = Tensor::from_vec((0..20).map(|i| i as f64 * 0.1 - 1.0).collect(), &[4, 5]).unwrap();
        gradcheck(|v| v[0].try_dropout(0.4, true, 5), std::slice::from_ref(&x)).unwrap();
        jvpcheck(|v| v[0].try_dropout(0.4, true, 5), std::slice::from_ref(&x)).unwrap();
        // Two consumers, with different masks.
        gradcheck(
            |v| Ok(&v[0].dropout(0.5, true, 1) * &v[0].dropout(0.5, true, 2)),
            std::slice::from_ref(&x),
        )
        .unwrap();
        let g = Graph::new();
        let a = g.variable(x.clone());
        let b = g.variable(x.to_dtype(DType::F32));
        assert!(b.dropout(0.4, true, 5).value().allclose(
            a.dropout(0.4, true, 5).value(),
            1e-6,
            1e-6
        ));
        assert!(matches!(
            a.try_dropout(-0.1, true, 0),
            Err(Error::InvalidArgument { op: "dropout", .. })
        ));
        assert!(g.apply("dropout", &[&a]).is_ok());
    }

    #[test]
    fn vmap_draws_one_mask_or_one_per_example() {
        use crate::autograd::VMap;
        let g = Graph::new();
        let x = g.variable(Tensor::ones(&[4, 60], DType::F64).unwrap());
        let run = |randomness| {
            VMap::new()
                .randomness(randomness)
                .try_call(|v| Ok(vec![v[0].try_dropout(0.4, true, 3)?]), &[&x])
                .map(|mut out| out.remove(0))
        };
        let rows = |y: &Var<'_>| -> Vec<Vec<f64>> {
            let v = y.value().to_f64_vec();
            v.chunks(60).map(<[f64]>::to_vec).collect()
        };
        let alone = g
            .variable(Tensor::ones(&[60], DType::F64).unwrap())
            .dropout(0.4, true, 3)
            .value()
            .to_f64_vec();
        // Kept values are scaled by 1 / (1 - p), the others zero.
        let scaled = |r: &[f64]| r.iter().all(|&v| v == 0.0 || (v - 1.0 / 0.6).abs() < 1e-12);

        let same = run(Randomness::Same).unwrap();
        assert_eq!(same.shape(), &[4, 60]);
        for r in rows(&same) {
            assert_eq!(r, alone);
        }
        let different = run(Randomness::Different).unwrap();
        let r = rows(&different);
        assert!(r.iter().all(|r| scaled(r)));
        assert!(r[0].contains(&0.0) && r[0].iter().any(|&v| v != 0.0));
        for i in 0..4 {
            for j in 0..i {
                assert_ne!(r[i], r[j], "examples {i} and {j} share a mask");
            }
        }
        // The gradient goes through each example's own mask.
        let grad = different.sum().backward().unwrap().wrt(&x);
        assert_eq!(&grad, different.value());
        let grad = same.sum().backward().unwrap().wrt(&x);
        assert_eq!(&grad, same.value());
        // Without a choice, vmap refuses a random op.
        assert!(run(Randomness::Error).is_err());
    }
}
