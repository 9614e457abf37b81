//! Runs a slice loop compiled for the widest SIMD the CPU has.
//!
//! The crate is built for the baseline x86-64 target (SSE2, four f32 lanes)
//! so that one binary runs everywhere. [`wide`] runs a closure inside a
//! function compiled with AVX-512F (or AVX2) enabled when the CPU reports it
//! at run time; the closure and the element functors it calls are
//! `#[inline(always)]`, so LLVM inlines them there and vectorises the loop at
//! that width. The code is the same scalar code in every version (Rust never
//! contracts `a * b + c` into an FMA), so results are bit-identical whichever
//! version runs. The few fused multiply-adds written out (`f32::mul_add`, in
//! `tensor::math::erfc_f32`) round once in every version: an FMA
//! instruction in both wide ones (AVX-512F implies FMA; the AVX2 version
//! asks for FMA too, which every Intel and AMD CPU with AVX2 has), a call
//! to libm's `fmaf` in the baseline one, slow but exact.

/// Whether the CPU has AVX-512F: [`wide`]'s widest version, and the
/// condition of every hand-written AVX-512 kernel.
#[inline(always)]
pub fn has_avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the CPU has AVX2 and FMA: [`wide`]'s middle version.
#[inline(always)]
pub fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Runs `body`, compiled with the widest vector extension the CPU supports.
#[inline(always)]
pub fn wide<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512() {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { with_avx512(body) };
        }
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { with_avx2(body) };
        }
    }
    body()
}

/// Runs `body` compiled with AVX-512F enabled (for `wide`, and for
/// `f64x8::with_widest_f64x8!`, which picks its lane type first).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn with_avx512<R>(body: impl FnOnce() -> R) -> R {
    body()
}

/// Runs `body` compiled with AVX2 and FMA enabled.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn with_avx2<R>(body: impl FnOnce() -> R) -> R {
    body()
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_the_body_once_and_returns_its_value() {
        let mut calls = 0;
        let v = super::wide(|| {
            calls += 1;
            (0..100).map(|i| i as f32 * 0.5).sum::<f32>()
        });
        assert_eq!(calls, 1);
        assert_eq!(v, 2475.0);
    }
}
