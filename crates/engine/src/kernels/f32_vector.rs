//! One f32 vector register as a trait, so a register-tiled kernel is written
//! once and compiled for AVX-512 ([`F32x16`], 32 registers of 16 lanes) and
//! for AVX2 with FMA ([`F32x8`], 16 registers of 8 lanes).
//!
//! Why not [`wide`](super::simd::wide)'s autovectorisation: the direct
//! convolution's tiles hold a dozen or more accumulators and read taps at
//! offsets the compiler cannot prove apart; written as plain loops LLVM
//! neither keeps the accumulators in registers nor masks a row's last
//! vector. Each kernel picks its tile sizes per width (the register count
//! is what bounds them) and its arithmetic per lane is the same.
//!
//! A value of either type exists only inside [`F32Vector::enabled`], after
//! the CPU was checked for the extension ([`F32Vector::available`]), which
//! is what makes the arithmetic methods sound to call on it; the
//! constructors and memory accesses are `unsafe` and say so.

use std::arch::x86_64::*;

/// One vector of f32 lanes and the few operations register tiles need.
///
/// # Safety
/// An implementation's `available` is true only where its intrinsics run,
/// and `enabled` compiles its body with them.
pub(crate) unsafe trait F32Vector: Copy {
    /// f32 lanes in one vector.
    const LANES: usize;

    /// Whether the CPU has the extension, under the instruction-set cap.
    fn available() -> bool;

    /// Runs `body` compiled with the extension enabled, so the intrinsics
    /// of the methods it calls inline into it.
    ///
    /// # Safety
    /// [`available`](Self::available) is true.
    unsafe fn enabled<R>(body: impl FnOnce() -> R) -> R;

    /// Zero in every lane.
    ///
    /// # Safety
    /// [`available`](Self::available) is true.
    unsafe fn zero() -> Self;

    /// `v` in every lane.
    ///
    /// # Safety
    /// [`available`](Self::available) is true.
    unsafe fn splat(v: f32) -> Self;

    /// The `LANES` floats at `p`.
    ///
    /// # Safety
    /// [`available`](Self::available) is true; `LANES` floats from `p` are
    /// readable.
    unsafe fn load(p: *const f32) -> Self;

    /// The first `lanes` floats at `p` (at most `LANES`), zero in the other
    /// lanes, which are not read.
    ///
    /// # Safety
    /// [`available`](Self::available) is true; `lanes` floats from `p` are
    /// readable.
    unsafe fn load_first(p: *const f32, lanes: usize) -> Self;

    /// Writes the `LANES` lanes to `p`.
    ///
    /// # Safety
    /// `LANES` floats from `p` are writable.
    unsafe fn store(self, p: *mut f32);

    /// Writes the first `lanes` lanes (at most `LANES`) to `p`, nothing
    /// past them.
    ///
    /// # Safety
    /// `lanes` floats from `p` are writable.
    unsafe fn store_first(self, p: *mut f32, lanes: usize);

    /// `self * b + c` per lane, rounded once.
    fn mul_add(self, b: Self, c: Self) -> Self;

    fn add(self, o: Self) -> Self;

    /// `Relu`'s rule per lane, `x < 0 ? 0 : x`: NaN and -0 pass (`max`
    /// would turn them into 0).
    fn relu(self) -> Self;

    /// The lanes added (in a fixed order of the implementation's).
    fn sum(self) -> f32;
}

/// One AVX-512 register.
#[derive(Clone, Copy)]
pub(crate) struct F32x16(__m512);

/// The mask of the first `lanes` (at most 16) lanes.
#[inline(always)]
fn mask16(lanes: usize) -> u16 {
    ((1u32 << lanes) - 1) as u16
}

// SAFETY: `available` is `has_avx512`, and `enabled` runs its body under
// `with_avx512`, which enables AVX-512F.
unsafe impl F32Vector for F32x16 {
    const LANES: usize = 16;

    #[inline(always)]
    fn available() -> bool {
        super::simd::has_avx512()
    }
    #[inline(always)]
    unsafe fn enabled<R>(body: impl FnOnce() -> R) -> R {
        // SAFETY: the caller checked `available`.
        unsafe { super::simd::with_avx512(body) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller checked `available`.
        unsafe { F32x16(_mm512_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the caller checked `available`.
        unsafe { F32x16(_mm512_set1_ps(v)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract.
        unsafe { F32x16(_mm512_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, lanes: usize) -> Self {
        // SAFETY: the caller's contract; masked-off lanes are not read.
        unsafe { F32x16(_mm512_maskz_loadu_ps(mask16(lanes), p)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's contract; a value exists only where
        // AVX-512F does.
        unsafe { _mm512_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, lanes: usize) {
        // SAFETY: as for `store`; masked-off lanes are not written.
        unsafe { _mm512_mask_storeu_ps(p, mask16(lanes), self.0) }
    }
    #[inline(always)]
    fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: a value exists only where AVX-512F does.
        unsafe { F32x16(_mm512_fmadd_ps(self.0, b.0, c.0)) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: as for `mul_add`.
        unsafe { F32x16(_mm512_add_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn relu(self) -> Self {
        // SAFETY: as for `mul_add`.
        unsafe {
            let zero = _mm512_setzero_ps();
            let negative = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, zero);
            F32x16(_mm512_mask_mov_ps(self.0, negative, zero))
        }
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        // SAFETY: as for `mul_add`.
        unsafe { _mm512_reduce_add_ps(self.0) }
    }
}

/// One AVX2 register (on CPUs with FMA too).
#[derive(Clone, Copy)]
pub(crate) struct F32x8(__m256);

/// All ones in the first `lanes` (at most 8) 32-bit lanes: the mask of
/// AVX2's masked loads and stores.
#[inline(always)]
unsafe fn mask8(lanes: usize) -> __m256i {
    // SAFETY: the caller checked AVX2.
    unsafe {
        _mm256_cmpgt_epi32(
            _mm256_set1_epi32(lanes as i32),
            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
        )
    }
}

// SAFETY: `available` is `has_avx2_fma`, and `enabled` runs its body under
// `with_avx2`, which enables AVX2 and FMA.
unsafe impl F32Vector for F32x8 {
    const LANES: usize = 8;

    #[inline(always)]
    fn available() -> bool {
        super::simd::has_avx2_fma()
    }
    #[inline(always)]
    unsafe fn enabled<R>(body: impl FnOnce() -> R) -> R {
        // SAFETY: the caller checked `available`.
        unsafe { super::simd::with_avx2(body) }
    }
    #[inline(always)]
    unsafe fn zero() -> Self {
        // SAFETY: the caller checked `available`.
        unsafe { F32x8(_mm256_setzero_ps()) }
    }
    #[inline(always)]
    unsafe fn splat(v: f32) -> Self {
        // SAFETY: the caller checked `available`.
        unsafe { F32x8(_mm256_set1_ps(v)) }
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self {
        // SAFETY: the caller's contract.
        unsafe { F32x8(_mm256_loadu_ps(p)) }
    }
    #[inline(always)]
    unsafe fn load_first(p: *const f32, lanes: usize) -> Self {
        // SAFETY: the caller's contract; masked-off lanes are not read
        // (and cannot fault).
        unsafe { F32x8(_mm256_maskload_ps(p, mask8(lanes))) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut f32) {
        // SAFETY: the caller's contract; a value exists only where AVX2
        // does.
        unsafe { _mm256_storeu_ps(p, self.0) }
    }
    #[inline(always)]
    unsafe fn store_first(self, p: *mut f32, lanes: usize) {
        // SAFETY: as for `store`; masked-off lanes are not written.
        unsafe { _mm256_maskstore_ps(p, mask8(lanes), self.0) }
    }
    #[inline(always)]
    fn mul_add(self, b: Self, c: Self) -> Self {
        // SAFETY: a value exists only where AVX2 and FMA do.
        unsafe { F32x8(_mm256_fmadd_ps(self.0, b.0, c.0)) }
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        // SAFETY: as for `mul_add`.
        unsafe { F32x8(_mm256_add_ps(self.0, o.0)) }
    }
    #[inline(always)]
    fn relu(self) -> Self {
        // SAFETY: as for `mul_add`.
        unsafe {
            let zero = _mm256_setzero_ps();
            let negative = _mm256_cmp_ps::<_CMP_LT_OQ>(self.0, zero);
            F32x8(_mm256_blendv_ps(self.0, zero, negative))
        }
    }
    #[inline(always)]
    fn sum(self) -> f32 {
        // SAFETY: as for `mul_add`.
        unsafe {
            let halves = _mm_add_ps(
                _mm256_castps256_ps128(self.0),
                _mm256_extractf128_ps::<1>(self.0),
            );
            let pairs = _mm_add_ps(halves, _mm_movehl_ps(halves, halves));
            _mm_cvtss_f32(_mm_add_ss(pairs, _mm_movehdup_ps(pairs)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every method on a vector of distinct values, at each width the CPU
    /// has: loads and stores of a partial vector touch only their lanes.
    fn check<V: F32Vector>() {
        if !V::available() {
            return;
        }
        let n = V::LANES;
        let src: Vec<f32> = (0..n).map(|i| i as f32 - 2.5).collect();
        // SAFETY: `available` is true; every pointer covers `n` floats.
        unsafe {
            V::enabled(|| {
                let v = V::load(src.as_ptr());
                let mut out = vec![7.0f32; n];
                v.mul_add(V::splat(2.0), V::splat(1.0))
                    .store(out.as_mut_ptr());
                assert_eq!(out, src.iter().map(|x| x * 2.0 + 1.0).collect::<Vec<_>>());
                let relu: Vec<f32> = src.iter().map(|&x| if x < 0.0 { 0.0 } else { x }).collect();
                v.relu().store(out.as_mut_ptr());
                assert_eq!(out, relu);
                assert_eq!(v.add(V::zero()).sum(), src.iter().sum::<f32>());
                for lanes in 0..=n {
                    let mut out = vec![7.0f32; n];
                    V::load_first(src.as_ptr(), lanes).store(out.as_mut_ptr());
                    let want: Vec<f32> = (0..n)
                        .map(|i| if i < lanes { src[i] } else { 0.0 })
                        .collect();
                    assert_eq!(out, want, "load_first {lanes}");
                    let mut out = vec![7.0f32; n];
                    v.store_first(out.as_mut_ptr(), lanes);
                    let want: Vec<f32> = (0..n)
                        .map(|i| if i < lanes { src[i] } else { 7.0 })
                        .collect();
                    assert_eq!(out, want, "store_first {lanes}");
                }
                let nan = V::splat(f32::NAN).relu();
                nan.store(out.as_mut_ptr());
                assert!(out.iter().all(|x| x.is_nan()));
                V::splat(-0.0).relu().store(out.as_mut_ptr());
                assert!(out.iter().all(|x| x.to_bits() == (-0.0f32).to_bits()));
            })
        }
    }

    #[test]
    fn both_widths_compute_lane_by_lane() {
        check::<F32x16>();
        check::<F32x8>();
    }
}
