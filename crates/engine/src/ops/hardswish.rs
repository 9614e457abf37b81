//! `hard_sigmoid` and `hard_swish`, the piecewise-linear activations of
//! MobileNet v3: one rule each (see [`rule`](super::rule)). As one op each
//! they take one pass over the tensor, where their composition of scale,
//! shift, clamp and product took four.

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::{OpAttributes, OpRegistry};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::tensor::Element;

/// `clamp(alpha · x + beta, 0, 1)`, ONNX's `HardSigmoid` (defaults alpha
/// 0.2, beta 0.5; PyTorch's `hardsigmoid` is alpha 1/6, beta 1/2). The
/// gradient is `alpha` strictly inside the ramp and 0 outside it.
#[derive(Clone, Copy, Debug)]
pub struct HardSigmoid {
    /// The ramp's slope.
    pub alpha: f64,
    /// The ramp's value at 0.
    pub beta: f64,
}

impl Default for HardSigmoid {
    fn default() -> Self {
        HardSigmoid {
            alpha: 0.2,
            beta: 0.5,
        }
    }
}

impl UnaryRule for HardSigmoid {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new()
            .float("alpha", self.alpha)
            .float("beta", self.beta)
    }
    const NAME: &'static str = "hard_sigmoid";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    fn check(self) -> Result<()> {
        if !self.alpha.is_finite() || !self.beta.is_finite() {
            return Err(Error::invalid(
                "hard_sigmoid",
                format!(
                    "alpha and beta must be finite, got {} and {}",
                    self.alpha, self.beta
                ),
            ));
        }
        Ok(())
    }
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let y = x * T::from_f64(self.alpha) + T::from_f64(self.beta);
        if y < T::zero() {
            T::zero()
        } else if y > T::one() {
            T::one()
        } else {
            y
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let zero = g.lit(0.0);
        let y = x.scale(self.alpha).add(&x.lit(self.beta));
        let below_one = y.select(Cmp::Lt, &x.lit(1.0), &g.scale(self.alpha), &zero);
        y.select(Cmp::Gt, &x.lit(0.0), &below_one, &zero)
    }
    // Away from the ramp's ends at x = ±2.5 (the defaults).
    fn domain(x: f64) -> bool {
        (x.abs() - 2.5).abs() > KINK_MARGIN
    }
}

/// `x · relu6(x + 3) / 6` (PyTorch's `hardswish`, ONNX's `HardSwish`): 0
/// below -3, `x` above 3, `x (x + 3) / 6` between. The gradient is
/// PyTorch's: 0 below -3, `x / 3 + 1/2` up to 3 inclusive, 1 above.
#[derive(Clone, Copy, Debug, Default)]
pub struct HardSwish;

impl UnaryRule for HardSwish {
    const NAME: &'static str = "hard_swish";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let three = T::from_f64(3.0);
        if x <= -three {
            T::zero()
        } else if x >= three {
            x
        } else {
            x * (x + three) / T::from_f64(6.0)
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let ramp = g.mul(&x.scale(1.0 / 3.0).add(&x.lit(0.5)));
        let up_to_three = x.select(Cmp::Le, &x.lit(3.0), &ramp, g);
        x.select(Cmp::Lt, &x.lit(-3.0), &g.lit(0.0), &up_to_three)
    }
    fn domain(x: f64) -> bool {
        (x.abs() - 3.0).abs() > KINK_MARGIN
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(HardSigmoid::default()));
    reg.add_builtin(Unary(HardSwish));
}

impl<'g> Var<'g> {
    unary_method! {
        /// HardSigmoid, `clamp(alpha · x + beta, 0, 1)`; an error for a
        /// parameter that is not finite.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-4.0, 0.0, 1.0, 4.0], &[4])?);
        /// let y = x.try_hard_sigmoid(0.2, 0.5)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 0.5, 0.7, 1.0]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0, 0.2, 0.2, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_hard_sigmoid / hard_sigmoid(alpha: f64, beta: f64) => HardSigmoid { alpha, beta }
    }

    unary_method! {
        /// HardSwish, `x · relu6(x + 3) / 6`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-4.0, 0.0, 1.5, 4.0], &[4])?);
        /// let y = x.hard_swish();
        /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 0.0, 1.125, 4.0]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0, 0.5, 1.0, 1.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_hard_swish / hard_swish => HardSwish
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-3.7, -2.9, -0.4, 0.3, 2.2, 3.4],
            &[
                |x| Ok(x.hard_swish()),
                |x| Ok(x.hard_sigmoid(0.2, 0.5)),
                |x| Ok(&x.hard_swish() * x),
            ],
        );
    }
}
