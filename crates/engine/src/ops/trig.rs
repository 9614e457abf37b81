//! The trigonometric functions beyond `sin` and `cos`: `tan`, the inverse
//! functions `asin`, `acos`, `atan`, and the hyperbolic `sinh`, `cosh`,
//! `asinh`, `acosh`, `atanh`, each one rule (see [`rule`](super::rule)).

use super::pow::Sqrt;
use super::rule::{unary_method, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// Declares a unary rule: its name, what its slope reads, `value` and
/// `grad` as closures of the element and of `(g, u)`, and its safe domain.
macro_rules! trig_rule {
    ($(#[$doc:meta])* $rule:ident = $name:literal, $slope:ident,
     |$x:ident| $value:expr, |$g:ident, $u:ident| $grad:expr, |$d:ident| $domain:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $rule;

        impl UnaryRule for $rule {
            const NAME: &'static str = $name;
            const SLOPE_OF: SlopeOf = SlopeOf::$slope;
            #[inline(always)]
            fn value<T: Element>(self, $x: T) -> T {
                $value
            }
            #[inline(always)]
            fn grad<N: Num>(self, $g: &N, $u: &N) -> N {
                $grad
            }
            fn domain($d: f64) -> bool {
                $domain
            }
        }
    };
}

trig_rule! {
    /// `tan x` (radians); `tan' = 1 + tan²`, from the output.
    Tan = "tan", Output, |x| x.tan(), |g, y| g.mul(&y.mul(y).add(&y.lit(1.0))), |x| x.abs() < 1.2
}
trig_rule! {
    /// `asin x` (NaN outside [-1, 1]); `asin' = 1 / sqrt(1 - x²)`.
    Asin = "asin", Input, |x| x.asin(), |g, x| g.div(&x.mul(x).rsub(1.0).map(Sqrt)), |x| x.abs() < 0.9
}
trig_rule! {
    /// `acos x` (NaN outside [-1, 1]); `acos' = -1 / sqrt(1 - x²)`.
    Acos = "acos", Input, |x| x.acos(), |g, x| g.div(&x.mul(x).rsub(1.0).map(Sqrt)).neg(), |x| x.abs() < 0.9
}
trig_rule! {
    /// `atan x`; `atan' = 1 / (1 + x²)`.
    Atan = "atan", Input, |x| x.atan(), |g, x| g.div(&x.mul(x).add(&x.lit(1.0))), |_x| true
}
trig_rule! {
    /// `sinh x`; `sinh' = cosh`.
    Sinh = "sinh", Input, |x| x.sinh(), |g, x| g.mul(&x.map(Cosh)), |x| x.abs() < 3.0
}
trig_rule! {
    /// `cosh x`; `cosh' = sinh`.
    Cosh = "cosh", Input, |x| x.cosh(), |g, x| g.mul(&x.map(Sinh)), |x| x.abs() < 3.0
}
trig_rule! {
    /// `asinh x`; `asinh' = 1 / sqrt(x² + 1)`.
    Asinh = "asinh", Input, |x| x.asinh(), |g, x| g.div(&x.mul(x).add(&x.lit(1.0)).map(Sqrt)), |_x| true
}
trig_rule! {
    /// `acosh x` (NaN below 1); `acosh' = 1 / sqrt(x² - 1)`.
    Acosh = "acosh", Input, |x| x.acosh(), |g, x| g.div(&x.mul(x).sub(&x.lit(1.0)).map(Sqrt)), |x| x > 1.2
}
trig_rule! {
    /// `atanh x` (NaN outside [-1, 1]); `atanh' = 1 / (1 - x²)`.
    Atanh = "atanh", Input, |x| x.atanh(), |g, x| g.div(&x.mul(x).rsub(1.0)), |x| x.abs() < 0.9
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Tan));
    reg.add_builtin(Unary(Asin));
    reg.add_builtin(Unary(Acos));
    reg.add_builtin(Unary(Atan));
    reg.add_builtin(Unary(Sinh));
    reg.add_builtin(Unary(Cosh));
    reg.add_builtin(Unary(Asinh));
    reg.add_builtin(Unary(Acosh));
    reg.add_builtin(Unary(Atanh));
}

impl<'g> Var<'g> {
    unary_method! {
        /// `tan self` (radians).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.tan().value().try_item()?, 0.0);
        /// assert_eq!(x.tan().backward()?.wrt(&x).try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_tan / tan => Tan
    }
    unary_method! {
        /// `asin self` (NaN outside [-1, 1]).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.asin().backward()?.wrt(&x).try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_asin / asin => Asin
    }
    unary_method! {
        /// `acos self` (NaN outside [-1, 1]).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(1.0));
        /// assert_eq!(x.acos().value().try_item()?, 0.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_acos / acos => Acos
    }
    unary_method! {
        /// `atan self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(1.0));
        /// assert_eq!(x.atan().backward()?.wrt(&x).try_item()?, 0.5);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_atan / atan => Atan
    }
    unary_method! {
        /// `sinh self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.sinh().backward()?.wrt(&x).try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sinh / sinh => Sinh
    }
    unary_method! {
        /// `cosh self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(0.0)).cosh().value().try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_cosh / cosh => Cosh
    }
    unary_method! {
        /// `asinh self`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.asinh().backward()?.wrt(&x).try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_asinh / asinh => Asinh
    }
    unary_method! {
        /// `acosh self` (NaN below 1).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// assert_eq!(g.variable(Tensor::scalar(1.0)).acosh().value().try_item()?, 0.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_acosh / acosh => Acosh
    }
    unary_method! {
        /// `atanh self` (NaN outside [-1, 1]).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::scalar(0.0));
        /// assert_eq!(x.atanh().backward()?.wrt(&x).try_item()?, 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_atanh / atanh => Atanh
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-0.7, -0.2, 0.3, 0.8],
            &[
                |x| Ok(x.tan()),
                |x| Ok(x.asin()),
                |x| Ok(x.acos()),
                |x| Ok(x.atan()),
                |x| Ok(x.sinh()),
                |x| Ok(x.cosh()),
                |x| Ok(x.asinh()),
                |x| Ok(x.atanh()),
            ],
        );
        every_path_agrees_at(&[1.3, 2.0, 3.5], &[|x| Ok(x.acosh())]);
    }
}
