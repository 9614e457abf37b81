//! A vectorisable `exp` over slices.
//!
//! `f32::exp` and `f64::exp` call libm one element at a time, which the
//! compiler cannot vectorise; softmax and cross-entropy spend most of their
//! time there. [`NnFloat::exp_in_place`] runs [`exp_f32`]/[`exp_f64`],
//! Cephes' algorithm written without branches or calls (in `tensor::math`,
//! with its accuracy tests), over a slice, which compiles to SIMD.

use crate::kernels::simd::wide;
use crate::tensor::Element;

pub use crate::tensor::math::{exp_f32, exp_f64};

/// Element types with the vectorised math the nn kernels use.
pub trait NnFloat: Element {
    /// Replaces every element `x` of `xs` with `e^x`.
    fn exp_in_place(xs: &mut [Self]);
}

// The loops run through `kernels::simd::wide`: compiled for AVX-512 or AVX2
// when the CPU has it, with the same scalar code (so the same bits) at
// every width.
fn exp_slice_f32(xs: &mut [f32]) {
    wide(
        #[inline(always)]
        || {
            for v in xs.iter_mut() {
                *v = exp_f32(*v);
            }
        },
    )
}

fn exp_slice_f64(xs: &mut [f64]) {
    wide(
        #[inline(always)]
        || {
            for v in xs.iter_mut() {
                *v = exp_f64(*v);
            }
        },
    )
}

impl NnFloat for f32 {
    fn exp_in_place(xs: &mut [f32]) {
        exp_slice_f32(xs);
    }
}

impl NnFloat for f64 {
    fn exp_in_place(xs: &mut [f64]) {
        exp_slice_f64(xs);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_values() {
        let mut v = vec![
            0.0f32,
            f32::NEG_INFINITY,
            f32::INFINITY,
            f32::NAN,
            -1e4,
            1e4,
            -100.0,
        ];
        f32::exp_in_place(&mut v);
        assert_eq!(v[0], 1.0);
        assert_eq!(v[1], 0.0);
        assert_eq!(v[2], f32::INFINITY);
        assert!(v[3].is_nan());
        assert_eq!(v[4], 0.0);
        assert_eq!(v[5], f32::INFINITY);
        assert!(v[6] > 0.0 && ((v[6] as f64) - (-100f64).exp()).abs() < 1e-45);
        let mut w = vec![
            0.0f64,
            f64::NEG_INFINITY,
            f64::INFINITY,
            f64::NAN,
            -1e4,
            1e4,
        ];
        f64::exp_in_place(&mut w);
        assert_eq!(&w[..3], &[1.0, 0.0, f64::INFINITY]);
        assert!(w[3].is_nan());
        assert_eq!(&w[4..], &[0.0, f64::INFINITY]);
    }

    #[test]
    fn slices_of_every_length_agree_with_the_scalar_form() {
        for n in [0, 1, 63, 64, 65, 200] {
            let mut v: Vec<f32> = (0..n).map(|i| i as f32 * 0.1 - 5.0).collect();
            let expect: Vec<f32> = v.iter().map(|&x| exp_f32(x)).collect();
            f32::exp_in_place(&mut v);
            assert_eq!(v, expect);
        }
    }
}
