//! `erfc`, the complementary error function: one rule (see
//! [`rule`](super::rule)). The exact GELU's derivative is written with it.

use super::rule::{unary_method, Block, Num, SlopeOf, Unary, UnaryRule};
use super::OpRegistry;
use crate::core::graph::Var;
use crate::tensor::math::{erfc_f32, erfc_f32_block};
use crate::tensor::{DType, Element};

/// `2/√π`
const FRAC_2_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// `erfc` in the element's own precision: for f32 the branch-free
/// [`erfc_f32`] (vectorises; within 6 ulp of libm), for f64 libm's.
#[inline(always)]
pub(crate) fn erfc<T: Element>(x: T) -> T {
    if T::DTYPE == DType::F32 {
        T::from_f64(f64::from(erfc_f32(x.to_f64() as f32)))
    } else {
        T::from_f64(libm::erfc(x.to_f64()))
    }
}

/// `erfc x = 1 - erf x`; `erfc' = -2/√π e^(-x²)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct Erfc;

impl UnaryRule for Erfc {
    const NAME: &'static str = "erfc";
    const SLOPE_OF: SlopeOf = SlopeOf::Input;
    #[inline(always)]
    fn value<T: Element>(self, x: T) -> T {
        erfc(x)
    }
    const BLOCKS: bool = true;
    #[inline(always)]
    fn value_block(self, x: Block) -> Block {
        erfc_f32_block(x)
    }
    #[inline(always)]
    fn grad<N: Num>(self, g: &N, x: &N) -> N {
        g.mul(&x.mul(x).neg().exp().scale(-FRAC_2_SQRT_PI))
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Unary(Erfc));
}

impl<'g> Var<'g> {
    unary_method! {
        /// The complementary error function `1 - erf(x)` (PyTorch's `erfc`),
        /// accurate where `1 - erf` would cancel.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![0.0, 1.0], &[2])?);
        /// let y = x.erfc();
        /// assert_eq!(y.value().to_f64_vec()[0], 1.0);
        /// assert!((y.value().to_f64_vec()[1] - 0.15729920705028513).abs() < 1e-16);
        /// // erfc'(0) = -2/√π
        /// let d = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// assert!((d[0] + 1.1283791670955126).abs() < 1e-15);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        try_erfc / erfc => Erfc
    }
}

#[cfg(test)]
mod tests {
    use crate::ops::testing::every_path_agrees_at;

    #[test]
    fn every_derived_path_agrees() {
        every_path_agrees_at(&[-2.1, -0.3, 0.2, 0.9, 3.1], &[|x| Ok(x.erfc())]);
    }
}
