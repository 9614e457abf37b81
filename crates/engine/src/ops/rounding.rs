//! Piecewise-constant functions: `floor`, `ceil`, `round` (half to even)
//! and `sign`, each one rule (see [`rule`](super::rule)). Their derivative
//! is 0 wherever it exists, so a gradient through them is 0 (as in
//! PyTorch); their safe random inputs keep away from the jumps.

use super::rule::{unary_method, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::Element;

/// How far a safe random input keeps from a jump.
const JUMP_MARGIN: f64 = 0.05;

/// Whether `x` is at least [`JUMP_MARGIN`] from every point `k + at`.
fn away_from(x: f64, at: f64) -> bool {
    let f = (x - at).rem_euclid(1.0);
    f > JUMP_MARGIN && f < 1.0 - JUMP_MARGIN
}

/// Declares a piecewise-constant rule: its name, `value` as a closure of
/// the element, and its safe domain.
macro_rules! step_rule {
    ($(#[$doc:meta])* $rule:ident = $name:literal, |$x:ident| $value:expr, |$d:ident| $domain:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $rule;

        impl UnaryRule for $rule {
            const NAME: &'static str = $name;
            const SLOPE_OF: SlopeOf = SlopeOf::Input;
            #[inline(always)]
            fn value<T: Element>(self, $x: T) -> T {
                $value
            }
            #[inline(always)]
            fn grad<N: Num>(self, g: &N, _x: &N) -> N {
                g.scale(0.0)
            }
            fn domain($d: f64) -> bool {
                $domain
            }
        }
    };
}

step_rule! {
    /// The largest integer at most `x`.
    Floor = "floor", |x| x.floor(), |x| away_from(x, 0.0)
}
step_rule! {
    /// The smallest integer at least `x`.
    Ceil = "ceil", |x| x.ceil(), |x| away_from(x, 0.0)
}
step_rule! {
    /// The nearest integer, halves to the even one (IEEE's and NumPy's
    /// rounding: 0.5 → 0, 1.5 → 2, -2.5 → -2).
    Round = "round", |x| round_half_even(x), |x| away_from(x, 0.5)
}
step_rule! {
    /// -1, 0 or 1 by the sign of `x` (0 at ±0, NaN at NaN).
    Sign = "sign", |x| {
        if x > T::zero() {
            T::one()
        } else if x < T::zero() {
            -T::one()
        } else {
            x
        }
    }, |x| x.abs() > JUMP_MARGIN
}

/// `x` rounded to the nearest integer, halves to the even one.
#[inline(always)]
fn round_half_even<T: Element>(x: T) -> T {
    let r = x.round();
    let half = T::from_f64(0.5);
    if (x - x.trunc()).abs() == half {
        let two = T::from_f64(2.0);
        (x / two).round() * two
    } else {
        r
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Floor));
    reg.add_builtin(Unary(Ceil));
    reg.add_builtin(Unary(Round));
    reg.add_builtin(Unary(Sign));
}

impl<'g> Var<'g> {
    unary_method! {
        /// The largest integer at most each element; its gradient is 0.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-1.5, 2.5], &[2])?);
        /// assert_eq!(x.floor().value().to_f64_vec(), vec![-2.0, 2.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_floor / floor => Floor
    }
    unary_method! {
        /// The smallest integer at least each element; its gradient is 0.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-1.5, 2.5], &[2])?);
        /// assert_eq!(x.ceil().value().to_f64_vec(), vec![-1.0, 3.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_ceil / ceil => Ceil
    }
    unary_method! {
        /// The nearest integer, halves to the even one; its gradient is 0.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![0.5, 1.5, -2.5, 2.6], &[4])?);
        /// assert_eq!(x.round().value().to_f64_vec(), vec![0.0, 2.0, -2.0, 3.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_round / round => Round
    }
    unary_method! {
        /// -1, 0 or 1 by each element's sign; its gradient is 0.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-3.0, 0.0, 0.5], &[3])?);
        /// assert_eq!(x.sign().value().to_f64_vec(), vec![-1.0, 0.0, 1.0]);
        /// assert_eq!(x.sign().sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0; 3]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_sign / sign => Sign
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-1.7, -0.3, 0.2, 2.4],
            &[
                |x| Ok(x.floor()),
                |x| Ok(x.ceil()),
                |x| Ok(x.round()),
                |x| Ok(x.sign()),
            ],
        );
    }
}
