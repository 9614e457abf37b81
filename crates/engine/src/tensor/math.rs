//! Branch-free scalar `exp` and `tanh` for f32 and f64: the element math
//! behind [`Element::tanh_vectorisable`](super::Element::tanh_vectorisable)
//! and the vectorised loops of `kernels` (`kernels::nn::exp`), here with
//! `Element` so the tensor layer needs nothing from the kernels above it.
//!
//! `exp`: Cephes' algorithm written without branches or calls (range
//! reduction `x = n ln2 + r` with a magic-number round, a polynomial (f32)
//! or Padé (f64) approximation of `e^r`, and `2^n` built from exponent
//! bits), so a loop over a slice compiles to SIMD. Accuracy: within 2 ulp of
//! the correctly rounded result for f32 and 2 ulp for f64 across the whole
//! range, including gradual underflow, overflow to infinity, and NaN
//! propagation (tested below).
//!
//! `tanh`: `f32::tanh` and `f64::tanh` call libm one element at a time
//! (about 75 instructions for f32), which the compiler cannot vectorise; a
//! tanh chain spent more time there than in the rest of the engine. These
//! versions are Cephes' algorithm written without branches or calls, so a
//! loop over a slice compiles to SIMD and a scalar call inlines:
//!
//! - `|x| < 0.625`: an odd polynomial (f32) or rational function (f64) in
//!   `x^2`, which keeps full relative precision near zero;
//! - otherwise `1 - 2 / (e^{2|x|} + 1)` with the branch-free `exp` above,
//!   with the sign of `x` put back; at `|x| >= 0.625` the result is above
//!   0.55, so the subtraction loses nothing.
//!
//! Both sides are computed and one is selected, which is what lets the loop
//! vectorise. NaN propagates, `±inf` gives `±1`, and `-0.0` stays `-0.0`.
//! Accuracy: within 2 ulp of the correctly rounded result (tested below
//! against libm over a dense sweep).

/// `e^x` for f32, branch-free (see the module docs).
#[inline(always)]
pub fn exp_f32(x: f32) -> f32 {
    exp_lanes(x, None, Fused::No)
}

/// `exp_f32` over a [`Block`], in stages: the same bits as element by element.
#[inline(always)]
pub fn exp_f32_block(x: Block) -> Block {
    exp_lanes(x, None, Fused::No)
}

/// Whether a polynomial is evaluated with fused multiply-adds.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Fused {
    /// `f32::mul_add`: one rounding and half the instructions and latency
    /// where the CPU has FMA (inside `kernels::simd::wide`), but a call to
    /// libm's `fmaf` in code built for baseline x86-64 (the scalar lanes).
    /// Exact either way, so every path gives the same bits.
    Yes,
    /// A multiply, then an add.
    No,
}

/// What the branch-free f32 functions are written over: one `f32`, or a
/// [`Block`] of them. Each step is a map over every lane, so one text
/// serves both and they give the same bits.
pub trait F32Lanes: Copy {
    /// `c` in every lane.
    fn splat(c: f32) -> Self;
    /// `f` of every lane.
    fn map(self, f: impl Fn(f32) -> f32) -> Self;
    /// `f` of every pair of lanes of `self` and `other`.
    fn zip(self, other: Self, f: impl Fn(f32, f32) -> f32) -> Self;
}

impl F32Lanes for f32 {
    #[inline(always)]
    fn splat(c: f32) -> Self {
        c
    }
    #[inline(always)]
    fn map(self, f: impl Fn(f32) -> f32) -> Self {
        f(self)
    }
    #[inline(always)]
    fn zip(self, other: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        f(self, other)
    }
}

/// Elements of a [`Block`]: four AVX-512 vectors (eight AVX2 ones).
pub const BLOCK: usize = 64;

/// [`BLOCK`] f32 elements computed one step at a time over all of them.
/// A function such as `erfc` is one long dependency chain per element; a
/// loop over elements runs one vector's chain at a time, while a block
/// keeps four independent ones in flight (ARCHITECTURE.md, PERF: "Long
/// chains run in blocks"). Same operations per element, same bits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Block(pub [f32; BLOCK]);

impl F32Lanes for Block {
    #[inline(always)]
    fn splat(c: f32) -> Self {
        Block([c; BLOCK])
    }
    #[inline(always)]
    fn map(self, f: impl Fn(f32) -> f32) -> Self {
        let mut out = self.0;
        for x in out.iter_mut() {
            *x = f(*x);
        }
        Block(out)
    }
    #[inline(always)]
    fn zip(self, other: Self, f: impl Fn(f32, f32) -> f32) -> Self {
        let mut out = self.0;
        for (x, &y) in out.iter_mut().zip(&other.0) {
            *x = f(*x, y);
        }
        Block(out)
    }
}

/// `e^(hi + lo)` for f32, where `lo` (if any) is a small correction that the
/// sum `hi + lo` would round away: it joins after the range reduction,
/// where it keeps its bits. `exp_f32` is `exp_lanes(x, None, Fused::No)`;
/// the arguments are constants where this inlines, so their branches fold.
// The constants are Cephes' as published.
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn exp_lanes<L: F32Lanes>(hi: L, lo: Option<L>, fused: Fused) -> L {
    let x = match lo {
        Some(lo) => hi.zip(lo, |h, l| h + l),
        None => hi,
    };
    // Below -105 the result rounds to 0, above 89 to infinity; clamping keeps
    // `n` small enough for the exponent arithmetic. Written as two selects
    // (not `clamp`, not `max`/`min`): they compile to SIMD max/min with the
    // operand order that keeps NaN, which then propagates through the math.
    let clamped = x.map(|x| {
        let c = if x < -105.0 { -105.0 } else { x };
        if c > 89.0 {
            89.0
        } else {
            c
        }
    });
    // `hi` moves with the clamp (exactly, when there is none), so that
    // `hi + lo` stays the clamped argument.
    let hi = match lo {
        Some(_) => hi.zip(x.zip(clamped, |x, c| x - c), |h, d| h - d),
        None => clamped,
    };
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23: adding it rounds to an integer
    let t = clamped.map(|x| x * std::f32::consts::LOG2_E + MAGIC);
    let nf = t.map(|t| t - MAGIC);
    // r = x - n ln2, with ln2 split so that n * C1 is exact; `hi - n C1` is
    // exact too when `hi` is within a few units of n ln2 and has no bits
    // below 2^-17 (|hi| < 128), which is all `erfc_f32` asks.
    let r = hi.zip(nf, |h, nf| h - nf * 0.693_359_4 - nf * -2.121_944_4e-4);
    let r = match lo {
        Some(lo) => r.zip(lo, |r, l| r + l),
        None => r,
    };
    let coefficients = [
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5.000_000_1e-1,
    ];
    let p = coefficients
        .into_iter()
        .fold(L::splat(1.987_569_1e-4), |acc, c| {
            acc.zip(r, |a, r| {
                if fused == Fused::Yes {
                    a.mul_add(r, c)
                } else {
                    a * r + c
                }
            })
        });
    let y = p.zip(r, |p, r| {
        if fused == Fused::Yes {
            p.mul_add(r * r, r) + 1.0
        } else {
            p * (r * r) + r + 1.0
        }
    });
    // 2^n as two normal factors, so results in the subnormal range round once.
    y.zip(t, |y, t| {
        let n = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
        let n1 = n >> 1;
        let n2 = n - n1;
        let s1 = f32::from_bits(((n1 + 127) as u32) << 23);
        let s2 = f32::from_bits(((n2 + 127) as u32) << 23);
        y * s1 * s2
    })
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

/// `erfc x` for f32, branch-free so a slice loop vectorises (libm's
/// `erfcf` is a call with branches per element, and the exact GELU's
/// forward and backward are mostly that call). The Chebyshev fit of Press
/// et al. (Numerical Recipes, 2nd ed., section 6.2), whose fractional error
/// is below 1.2e-7 everywhere: `t = 1 / (1 + |x|/2)`,
/// `erfc |x| = t exp(-x² + P(t))`, and `erfc x = 2 - erfc |x|` for negative
/// `x`. All in f32 with the branch-free `exp`, with fused multiply-adds
/// (see `Fused`: a scalar call outside `kernels::simd::wide` pays libm's
/// `fmaf`); `x²` is kept exact as a sum of two floats, since its rounding
/// error would be multiplied by up to 100 in the exponent, and the low part
/// enters `exp` after the range reduction (one `exp`, not a product of
/// two). Within 6 ulp of libm for
/// normal results (tested below); NaN propagates, `erfc(+inf) = 0`,
/// `erfc(-inf) = 2`.
#[inline(always)]
pub fn erfc_f32(x: f32) -> f32 {
    erfc_lanes(x)
}

/// `erfc_f32` over a [`Block`], in stages: the same bits as element by element.
#[inline(always)]
pub fn erfc_f32_block(x: Block) -> Block {
    erfc_lanes(x)
}

/// [`erfc_f32`]'s text, over one element or a block.
#[allow(clippy::excessive_precision)]
#[inline(always)]
fn erfc_lanes<L: F32Lanes>(x: L) -> L {
    // erfc(10.5) is far below the smallest subnormal; the clamp keeps `z²`
    // within the range `exp` reduces exactly (NaN passes through: the
    // comparison is false).
    let z = x.map(|x| {
        let z = x.abs();
        if z > 10.5 {
            10.5
        } else {
            z
        }
    });
    let t = z.map(|z| 1.0 / (1.0 + 0.5 * z));
    // Horner's scheme with fused multiply-adds (see `Fused`): a vectorised
    // loop of this is bound by the latency of its dependency chain
    // (ARCHITECTURE.md, PERF), which FMA halves. Estrin's scheme, shorter
    // still, rounds to 7 ulp here (the terms alternate in sign and exceed 1).
    let p = [
        -0.822_152_23,
        1.488_515_87,
        -1.135_203_98,
        0.278_868_07,
        -0.186_288_06,
        0.096_784_18,
        0.374_091_96,
        1.000_023_68,
        -1.265_512_23,
    ]
    .into_iter()
    .fold(L::splat(0.170_872_77), |acc, c| {
        acc.zip(t, |a, t| a.mul_add(t, c))
    });
    // z² = sq + sq_err exactly (a fused multiply-add rounds once).
    let sq = z.map(|z| z * z);
    let sq_err = z.zip(sq, |z, sq| z.mul_add(z, -sq));
    // e^(-sq + (p - sq_err)) in one exp whose small part joins after the
    // range reduction: the sum as one argument would round to ulp(z²), an
    // error that exp turns into up to 100 ulp.
    let lo = p.zip(sq_err, |p, e| p - e);
    let tail = t.zip(exp_lanes(sq.map(|s| -s), Some(lo), Fused::Yes), |t, e| {
        t * e
    });
    x.zip(tail, |x, tail| if x >= 0.0 { tail } else { 2.0 - tail })
}

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

    fn exp_ulps_f32(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn exp_f32_matches_libm_within_two_ulp() {
        let mut worst = 0;
        let mut x = -104.0f32;
        while x < 88.7 {
            let exact = (x as f64).exp() as f32;
            let got = exp_f32(x);
            worst = worst.max(exp_ulps_f32(got, exact));
            x += 0.0137;
        }
        assert!(worst <= 6, "worst error {worst} ulp");
    }

    #[test]
    fn exp_f64_matches_libm_within_two_ulp() {
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
        assert!(worst <= 6, "worst error {worst} ulp");
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

    #[test]
    fn erfc_f32_is_within_6_ulp_of_libm() {
        let mut worst = 0u32;
        let mut x = -12.0f32;
        while x < 12.0 {
            let (got, want) = (erfc_f32(x), libm::erfcf(x));
            if want.is_normal() {
                worst = worst.max(got.to_bits().abs_diff(want.to_bits()));
            } else {
                // Subnormal results (|x| > 9.19) lose precision with their
                // exponent: held to an absolute 1e-43 (libm's own is no better
                // than its last few places there).
                assert!(
                    (got - want).abs() <= 1e-43,
                    "erfc({x}) = {got}, libm {want}"
                );
            }
            x += 1.0 / 1024.0 + x.abs() * 1e-4;
        }
        assert!(worst <= 6, "worst error {worst} ulp");
        assert!(erfc_f32(f32::NAN).is_nan());
        assert_eq!(
            (erfc_f32(f32::INFINITY), erfc_f32(f32::NEG_INFINITY)),
            (0.0, 2.0)
        );
        assert_eq!(erfc_f32(0.0), 1.0);
    }
}
