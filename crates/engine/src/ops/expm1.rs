//! `expm1`, `e^x - 1` accurate near 0: one rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// `e^x - 1` without the cancellation of `exp(x) - 1` for small `x`; the
/// derivative is `e^x = y + 1`, from the output.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expm1;

impl UnaryRule for Expm1 {
    const NAME: &'static str = "expm1";
    const SLOPE_OF: SlopeOf = SlopeOf::Output;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.exp_m1()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, y: &N) -> N {
        g.mul(&y.add(&y.lit(1.0)))
    }
    fn domain(x: f64) -> bool {
        x < 3.0
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Expm1));
}

impl<'g> Var<'g> {
    unary_method! {
        /// `e^self - 1`, accurate for small values.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1e-10, 0.0], &[2])?);
        /// let y = x.expm1();
        /// assert_eq!(y.value().to_f64_vec()[0], 1.00000000005e-10);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec()[1], 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_expm1 / expm1 => Expm1
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{close, every_path_agrees_at, values_at};

    #[test]
    fn values_match_python() {
        // math.expm1(x)
        let value = [
            -0.8646647167633873,
            -0.3934693402873666,
            0.3498588075760031,
            4.473947391727199,
        ];
        let got = values_at(|x| x.expm1(), &[-2.0, -0.5, 0.3, 1.7]);
        assert!(close(&got, &value, 1e-15));
    }

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(&[-2.1, -0.3, 0.2, 0.9, 2.1], &[|x| Ok(x.expm1())]);
    }
}
