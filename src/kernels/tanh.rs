//! A vectorisable `tanh`.
//!
//! `f32::tanh` and `f64::tanh` call libm one element at a time (about 75
//! instructions for f32), which the compiler cannot vectorise; a tanh chain
//! spent more time there than in the rest of the engine. These versions are
//! Cephes' algorithm written without branches or calls, so a loop over a
//! slice compiles to SIMD and a scalar call inlines:
//!
//! - `|x| < 0.625`: an odd polynomial (f32) or rational function (f64) in
//!   `x^2`, which keeps full relative precision near zero;
//! - otherwise `1 - 2 / (e^{2|x|} + 1)` with the branch-free `exp` of
//!   [`super::nn::exp`], with the sign of `x` put back; at `|x| >= 0.625`
//!   the result is above 0.55, so the subtraction loses nothing.
//!
//! Both sides are computed and one is selected, which is what lets the loop
//! vectorise. NaN propagates, `±inf` gives `±1`, and `-0.0` stays `-0.0`.
//! Accuracy: within 2 ulp of the correctly rounded result (tested below
//! against libm over a dense sweep).

use super::nn::exp::{exp_f32, exp_f64};

/// `tanh x` for f32, branch-free (see the module docs).
// The constants are Cephes' (tanhf.c) as published.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn tanh_f32(x: f32) -> f32 {
    let a = x.abs();
    let z = x * x;
    let small = ((((-5.704_988_727_45e-3 * z + 2.063_908_879_54e-2) * z - 5.373_971_555_31e-2)
        * z
        + 1.333_144_220_36e-1)
        * z
        - 3.333_328_194_22e-1)
        * z
        * x
        + x;
    let large = (1.0 - 2.0 / (exp_f32(a + a) + 1.0)).copysign(x);
    // copysign keeps tanh(-0) = -0 (the sum above rounds it to +0).
    if a < 0.625 {
        small.copysign(x)
    } else {
        large
    }
}

/// `tanh x` for f64, branch-free (see the module docs).
// The constants are Cephes' (tanh.c) as published.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn tanh_f64(x: f64) -> f64 {
    let a = x.abs();
    let z = x * x;
    let p = (-9.643_991_794_250_522_386_28e-1 * z - 9.928_772_310_019_185_865_64e1) * z
        - 1.614_687_684_417_084_479_52e3;
    let q = ((z + 1.128_116_784_916_329_314_02e2) * z + 2.235_488_390_601_004_485_83e3) * z
        + 4.844_063_053_251_254_860_48e3;
    let small = x + x * z * (p / q);
    let large = (1.0 - 2.0 / (exp_f64(a + a) + 1.0)).copysign(x);
    // copysign keeps tanh(-0) = -0 (the sum above rounds it to +0).
    if a < 0.625 {
        small.copysign(x)
    } else {
        large
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps_f32(a: f32, b: f32) -> u32 {
        let key = |v: f32| {
            let i = v.to_bits() as i32;
            if i < 0 {
                i32::MIN - i
            } else {
                i
            }
        };
        key(a).abs_diff(key(b))
    }

    fn ulps_f64(a: f64, b: f64) -> u64 {
        let key = |v: f64| {
            let i = v.to_bits() as i64;
            if i < 0 {
                i64::MIN - i
            } else {
                i
            }
        };
        key(a).abs_diff(key(b))
    }

    #[test]
    fn f32_within_two_ulp_of_libm_over_a_dense_sweep() {
        let mut worst = (0, 0.0f32);
        // Every 997th f32 bit pattern from 1e-30 up to 20 (and the negatives).
        let (lo, hi) = (1e-30f32.to_bits(), 20f32.to_bits());
        for bits in (lo..hi).step_by(997) {
            for x in [f32::from_bits(bits), -f32::from_bits(bits)] {
                let d = ulps_f32(tanh_f32(x), (x as f64).tanh() as f32);
                if d > worst.0 {
                    worst = (d, x);
                }
            }
        }
        assert!(worst.0 <= 2, "{} ulp at x = {:e}", worst.0, worst.1);
    }

    #[test]
    fn f64_within_two_ulp_of_libm_over_a_sweep() {
        let mut worst = (0, 0.0f64);
        let mut x = 1e-300f64;
        while x < 40.0 {
            for v in [x, -x] {
                let d = ulps_f64(tanh_f64(v), v.tanh());
                if d > worst.0 {
                    worst = (d, v);
                }
            }
            x *= 1.0 + 1.0 / 1024.0;
        }
        assert!(worst.0 <= 2, "{} ulp at x = {:e}", worst.0, worst.1);
    }

    #[test]
    fn special_values() {
        assert!(tanh_f32(f32::NAN).is_nan());
        assert!(tanh_f64(f64::NAN).is_nan());
        assert_eq!(tanh_f32(f32::INFINITY), 1.0);
        assert_eq!(tanh_f32(f32::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f64(f64::INFINITY), 1.0);
        assert_eq!(tanh_f64(f64::NEG_INFINITY), -1.0);
        assert_eq!(tanh_f32(-0.0).to_bits(), (-0.0f32).to_bits());
        assert_eq!(tanh_f64(-0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(tanh_f32(f32::MAX), 1.0);
        assert_eq!(tanh_f64(-f64::MAX), -1.0);
    }
}
