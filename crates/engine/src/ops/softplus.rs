//! `softplus`, a smooth ReLU, `ln(1 + e^(βx)) / β`: one rule (see
//! [`rule`](super::rule)).

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule};
use super::{OpAttributes, OpRegistry};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::tensor::Element;

/// `ln(1 + e^(βx)) / β`, and `x` itself where `βx > threshold` (PyTorch's
/// `softplus`, whose defaults are β = 1, threshold = 20); the derivative
/// is `σ(βx)`, and 1 above the threshold.
#[derive(Clone, Copy, Debug)]
pub struct Softplus {
    /// β, the sharpness.
    pub beta: f64,
    /// Above `βx > threshold` the op is linear.
    pub threshold: f64,
}

impl Default for Softplus {
    fn default() -> Self {
        Softplus {
            beta: 1.0,
            threshold: 20.0,
        }
    }
}

impl UnaryRule for Softplus {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new()
            .float("beta", self.beta)
            .float("threshold", self.threshold)
    }
    const NAME: &'static str = "softplus";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    fn check(self) -> Result<()> {
        if self.beta == 0.0 || !self.beta.is_finite() || self.threshold.is_nan() {
            return Err(Error::invalid(
                "softplus",
                format!(
                    "beta must be finite and nonzero and threshold not NaN, got beta {} and threshold {}",
                    self.beta, self.threshold
                ),
            ));
        }
        Ok(())
    }
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let beta = T::from_f64(self.beta);
        let bx = x * beta;
        if bx > T::from_f64(self.threshold) {
            x
        } else {
            bx.exp().ln_1p() / beta
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let bx = x.scale(self.beta);
        bx.select(Cmp::Gt, &x.lit(self.threshold), g, &g.mul(&bx.sigmoid()))
    }
    // Away from the switch to the linear branch at βx = threshold (20).
    fn domain(x: f64) -> bool {
        x < 19.0
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Softplus::default()));
}

impl<'g> Var<'g> {
    unary_method! {
        /// Softplus with PyTorch's defaults (β = 1, threshold = 20):
        /// `ln(1 + e^x)`, whose derivative is the sigmoid.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-2.0, 0.3, 30.0], &[3])?);
        /// let y = x.softplus();
        /// let v = y.value().to_f64_vec();
        /// assert!((v[0] - 0.1269280110429725).abs() < 1e-15);
        /// assert_eq!(v[2], 30.0); // linear above the threshold
        /// let d = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// assert!((d[1] - 0.574442516811659).abs() < 1e-15);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_softplus / softplus => Softplus::default()
    }

    unary_method! {
        /// Softplus with a chosen β and threshold; an error for β zero, infinite
        /// or NaN, or a NaN threshold.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.3));
        /// let y = x.try_softplus_with(2.0, 20.0)?;
        /// assert!((y.value().try_item()? - 0.5187439752429428).abs() < 1e-15);
        /// assert!(x.try_softplus_with(0.0, 20.0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_softplus_with / softplus_with(beta: f64, threshold: f64) => Softplus { beta, threshold }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{close, every_path_agrees_at, t};
    use crate::Graph;

    #[test]
    fn values_and_derivatives_match_python() {
        let g = Graph::new();
        let x = g.variable(t(&[-2.0, -0.5, 0.3, 1.7]));
        let y = x.softplus();
        // math.log1p(math.exp(x)) and 1 / (1 + math.exp(-x))
        let value = [
            0.1269280110429725,
            0.4740769841801067,
            0.8543552444685272,
            1.867786029386266,
        ];
        let slope = [
            0.11920292202211755,
            0.3775406687981454,
            0.574442516811659,
            0.8455347349164652,
        ];
        assert!(close(&y.value().to_f64_vec(), &value, 1e-15));
        let d = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert!(close(&d, &slope, 1e-15));
    }

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-2.1, -0.3, 0.2, 0.9, 3.1],
            &[
                |x| Ok(x.softplus()),
                |x| Ok(x.softplus_with(1.5, 2.0)),
                |x| Ok(x.softplus_with(0.7, 20.0)),
            ],
        );
    }
}
