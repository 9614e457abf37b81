//! A vectorisable `exp` over slices.
//!
//! `f32::exp` and `f64::exp` call libm one element at a time, which the
//! compiler cannot vectorise; softmax and cross-entropy spend most of their
//! time there. [`NnFloat::exp_in_place`] is Cephes' algorithm written
//! without branches or calls (range reduction `x = n ln2 + r` with a
//! magic-number round, a polynomial (f32) or Padé (f64) approximation of
//! `e^r`, and `2^n` built from exponent bits), so a loop over a slice
//! compiles to SIMD. Accuracy: within 2 ulp of the correctly rounded result
//! for f32 and 2 ulp for f64 across the whole range, including gradual
//! underflow, overflow to infinity, and NaN propagation (tested below).

use crate::kernels::simd::wide;
use crate::tensor::Element;

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

/// `e^x` for f32, branch-free (see the module docs).
// The constants are Cephes' as published.
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    // Below -105 the result rounds to 0, above 89 to infinity; clamping keeps
    // `n` small enough for the exponent arithmetic. Written as two selects
    // (not `clamp`, not `max`/`min`): they compile to SIMD max/min with the
    // operand order that keeps NaN, which then propagates through the math.
    let x = if x < -105.0 { -105.0 } else { x };
    let x = if x > 89.0 { 89.0 } else { x };
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let t = x * std::f32::consts::LOG2_E + MAGIC;
    let nf = t - MAGIC;
    let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    // r = x - n ln2, with ln2 split so that n * C1 is exact.
    let r = x - nf * 0.693_359_4 - nf * -2.121_944_4e-4;
    let r2 = r * r;
    let p = ((((1.987_569_1e-4 * r + 1.398_199_9e-3) * r + 8.333_452e-3) * r + 4.166_579_6e-2) * r
        + 1.666_666_5e-1)
        * r
        + 5.000_000_1e-1;
    let y = p * r2 + r + 1.0;
    // 2^n as two normal factors, so results in the subnormal range round once.
    let n1 = n >> 1;
    let n2 = n - n1;
    let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
    let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
    y * s1 * s2
}

/// `e^x` for f64, branch-free (see the module docs).
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn exp_f64(x: f64) -> f64 {
    let x = if x < -746.0 { -746.0 } else { x };
    let x = if x > 710.0 { 710.0 } else { x };
    const MAGIC: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    let t = x * std::f64::consts::LOG2_E + MAGIC;
    let nf = t - MAGIC;
    let r = x - nf * 6.931_457_519_531_25e-1 - nf * 1.428_606_820_309_417_232_12e-6;
    let r2 = r * r;
    let p = r
        * ((1.261_771_930_748_105_908_78e-4 * r2 + 3.029_944_077_074_419_613e-2) * r2
            + 9.999_999_999_999_999_999_1e-1);
    let q = ((3.001_985_051_386_644_550_42e-6 * r2 + 2.524_483_403_496_841_041_92e-3) * r2
        + 2.272_655_482_081_550_287_66e-1)
        * r2
        + 2.000_000_000_000_000_000_09;
    let y = 1.0 + 2.0 * (p / (q - p));
    // n = n1 + n2 with n1 = round(n / 2), both kept normal; the split is done
    // in floating point because SSE2 has no 64-bit arithmetic shift.
    let t1 = nf * 0.5 + MAGIC;
    let n2f = nf - (t1 - MAGIC);
    let t2 = n2f + MAGIC;
    let n1 = t1.to_bits().wrapping_sub(MAGIC.to_bits());
    let n2 = t2.to_bits().wrapping_sub(MAGIC.to_bits());
    let s1 = f64::from_bits(n1.wrapping_add(1023) << 52);
    let s2 = f64::from_bits(n2.wrapping_add(1023) << 52);
    y * s1 * s2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ulps_f32(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn f32_matches_libm_within_two_ulp() {
        let mut worst = 0;
        let mut x = -104.0f32;
        while x < 88.7 {
            let exact = (x as f64).exp() as f32;
            let got = exp_f32(x);
            worst = worst.max(ulps_f32(got, exact));
            x += 0.0137;
        }
        assert!(worst <= 2, "worst error {worst} ulp");
    }

    #[test]
    fn f64_matches_libm_within_two_ulp() {
        let mut worst = 0i64;
        let mut x = -745.0f64;
        while x < 709.7 {
            let exact = x.exp();
            let got = exp_f64(x);
            if exact >= f64::MIN_POSITIVE {
                worst = worst.max((got.to_bits() as i64 - exact.to_bits() as i64).abs());
            } else {
                // Subnormal results: within two of the smallest steps.
                assert!((got - exact).abs() <= 1e-323, "{x}: {got} vs {exact}");
            }
            x += 0.0731;
        }
        assert!(worst <= 2, "worst error {worst} ulp");
    }

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
