//! `log1p`, `ln(1 + x)` accurate near 0: one rule (see [`rule`](super::rule)).

use super::rule::{unary_method, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// `ln(1 + x)` without the cancellation of `ln` at `1 + x` for small `x`;
/// the derivative is `1 / (1 + x)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Log1p;

impl UnaryRule for Log1p {
    const NAME: &'static str = "log1p";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        x.ln_1p()
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        g.div(&x.add(&x.lit(1.0)))
    }
    fn domain(x: f64) -> bool {
        x > -0.8
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Log1p));
}

impl<'g> Var<'g> {
    unary_method! {
        /// `ln(1 + self)`, accurate for small values (NaN below -1, -inf at -1).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1e-10, 1.0], &[2])?);
        /// let y = x.log1p();
        /// assert_eq!(y.value().to_f64_vec()[0], 9.999999999500001e-11); // ln(1 + x) would give 1.000000082690371e-10
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec()[1], 0.5);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_log1p / log1p => Log1p
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::{close, every_path_agrees_at, values_at};

    #[test]
    fn values_match_python() {
        // math.log1p(x)
        let value = [
            -std::f64::consts::LN_2,
            0.26236426446749106,
            0.9932517730102834,
        ];
        let got = values_at(|x| x.log1p(), &[-0.5, 0.3, 1.7]);
        assert!(close(&got, &value, 1e-15));
    }

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(&[-0.6, -0.3, 0.2, 0.9, 3.1], &[|x| Ok(x.log1p())]);
    }
}
