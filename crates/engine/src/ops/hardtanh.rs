//! `hardtanh`, a clamp with PyTorch's activation semantics: one rule (see
//! [`rule`](super::rule)).

use super::rule::{unary_method, Cmp, Num, SlopeOf, Unary, UnaryRule, KINK_MARGIN};
use super::{OpAttributes, OpRegistry};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::tensor::Element;

/// `x` clamped into `[min_val, max_val]` (PyTorch's `hardtanh`, default
/// [-1, 1]). Unlike `clamp`, the gradient is 1 only strictly inside the
/// range and 0 at its ends, as in PyTorch's `hardtanh_backward`.
#[derive(Clone, Copy, Debug)]
pub struct Hardtanh {
    /// The lower end.
    pub min_val: f64,
    /// The upper end.
    pub max_val: f64,
}

impl Default for Hardtanh {
    fn default() -> Self {
        Hardtanh {
            min_val: -1.0,
            max_val: 1.0,
        }
    }
}

impl UnaryRule for Hardtanh {
    fn attributes(self) -> OpAttributes {
        OpAttributes::new()
            .float("min_val", self.min_val)
            .float("max_val", self.max_val)
    }
    const NAME: &'static str = "hardtanh";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    fn check(self) -> Result<()> {
        if self.min_val.is_nan() || self.max_val.is_nan() || self.min_val > self.max_val {
            return Err(Error::invalid(
                "hardtanh",
                format!(
                    "min_val ({}) must not be NaN or greater than max_val ({})",
                    self.min_val, self.max_val
                ),
            ));
        }
        Ok(())
    }
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        let (lo, hi) = (T::from_f64(self.min_val), T::from_f64(self.max_val));
        if x < lo {
            lo
        } else if x > hi {
            hi
        } else {
            x
        }
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        let zero = g.lit(0.0);
        let below_max = x.select(Cmp::Lt, &x.lit(self.max_val), g, &zero);
        x.select(Cmp::Gt, &x.lit(self.min_val), &below_max, &zero)
    }
    fn domain(x: f64) -> bool {
        (x.abs() - 1.0).abs() > KINK_MARGIN
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Hardtanh::default()));
}

impl<'g> Var<'g> {
    unary_method! {
        /// Hardtanh into [-1, 1].
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-2.0, -1.0, 0.5, 3.0], &[4])?);
        /// let y = x.hardtanh();
        /// assert_eq!(y.value().to_f64_vec(), vec![-1.0, -1.0, 0.5, 1.0]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.0, 0.0, 1.0, 0.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_hardtanh / hardtanh => Hardtanh::default()
    }

    unary_method! {
        /// Hardtanh into `[min_val, max_val]`; an error for a NaN end or
        /// `min_val > max_val`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![-2.0, 0.5, 3.0], &[3])?);
        /// assert_eq!(x.try_hardtanh_with(0.0, 2.0)?.value().to_f64_vec(), vec![0.0, 0.5, 2.0]);
        /// assert!(x.try_hardtanh_with(1.0, -1.0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_hardtanh_with / hardtanh_with(min_val: f64, max_val: f64) => Hardtanh { min_val, max_val }
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(
            &[-2.1, -0.3, 0.2, 0.9, 3.1],
            &[
                |x| Ok(x.hardtanh()),
                |x| Ok(x.hardtanh_with(-0.5, 2.0)),
                |x| Ok(&x.hardtanh() * x),
            ],
        );
    }
}
