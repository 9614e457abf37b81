//! `rsqrt`, `1 / sqrt(x)`: one rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// `1 / sqrt(x)` (the normalisers' inverse standard deviation); the
/// derivative `-x^(-3/2) / 2 = -y³ / 2`, from the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rsqrt;

impl UnaryRule for Rsqrt {
    const NAME: &'static str = "rsqrt";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        T::one() / x.sqrt()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.mul(&y.mul(y).mul(y).scale(-0.5))
    }
    fn domain(x: f64) -> bool {
        x > 0.2
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Rsqrt));
}

impl<'g> Var<'g> {
    unary_method! {
        /// `1 / sqrt(self)` elementwise (NaN below 0, +inf at 0).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![0.25, 4.0], &[2])?);
        /// let y = x.rsqrt();
        /// assert_eq!(y.value().to_f64_vec(), vec![2.0, 0.5]);
        /// // -x^(-3/2) / 2
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![-4.0, -0.0625]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_rsqrt / rsqrt => Rsqrt
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(&[0.3, 0.9, 1.7, 3.1], &[|x| Ok(x.rsqrt())]);
    }
}
