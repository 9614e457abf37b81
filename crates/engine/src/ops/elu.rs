//! `elu`, the exponential linear unit: one rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::{OpAttributes, OpRegistry};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::tensor::Element;

/// `x` for `x > 0`, else `α (e^x - 1)` (PyTorch's `elu`, default α = 1);
/// the derivative below 0 is `α e^x`.
#[derive(Clone, Copy, Debug)]
pub struct Elu {
    /// α, the value approached as `x → -∞` is `-α`.
    pub alpha: f64,
}

impl Default for Elu {
    fn default() -> Self {
        Elu { alpha: 1.0 }
    }
}

impl UnaryRule for Elu {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new().float("alpha", self.alpha)
    }
    const NAME: &'static str = "elu";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    fn check(self) -> Result<()> {
        if self.alpha.is_finite() {
            Ok(())
        } else {
            Err(Error::invalid(
                "elu",
                format!("alpha must be finite, got {}", self.alpha),
            ))
        }
    }
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        if x > T::zero() {
            x
        } else {
            T::from_f64(self.alpha) * x.exp_m1()
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        x.select(Cmp::Gt, &x.lit(0.0), g, &g.mul(&x.exp().scale(self.alpha)))
    }
    fn domain(x: f64) -> bool {
        x.abs() > KINK_MARGIN && x < 20.0
    }
    fn example() -> Self {
        Elu { alpha: 0.7 }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Elu::default()));
}

impl<'g> Var<'g> {
    unary_method! {
        /// ELU with α = 1: `x` above 0, `e^x - 1` below.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-2.0, 1.5], &[2])?);
        /// let y = x.elu();
        /// assert!((y.value().to_f64_vec()[0] + 0.8646647167633873).abs() < 1e-15);
        /// let d = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// assert!((d[0] - (-2f64).exp()).abs() < 1e-15);
        /// assert_eq!(d[1], 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_elu / elu => Elu::default()
    }

    unary_method! {
        /// ELU with a chosen α; an error for an infinite or NaN α.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(-1.0));
        /// let y = x.try_elu_with(0.5)?;
        /// assert!((y.value().try_item()? - 0.5 * (-1f64).exp_m1()).abs() < 1e-15);
        /// assert!(x.try_elu_with(f64::NAN).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_elu_with / elu_with(alpha: f64) => Elu { alpha }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{close, every_path_agrees_at, values_at};

    #[test]
    fn values_match_python() {
        // x if x > 0 else math.expm1(x)
        let value = [-0.8646647167633873, -0.3934693402873666, 0.3, 1.7];
        let got = values_at(|x| x.elu(), &[-2.0, -0.5, 0.3, 1.7]);
        assert!(close(&got, &value, 1e-15));
    }

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-2.1, -0.3, 0.2, 0.9, 3.1],
            &[
                |x| Ok(x.elu()),
                |x| Ok(x.elu_with(0.4)),
                |x| Ok(x.elu_with(1.3)),
            ],
        );
    }
}
