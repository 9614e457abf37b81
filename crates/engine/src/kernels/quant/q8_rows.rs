//! Activations quantized to 8 bits per block of 32, the left operand of the
//! quantized matrix product (llama.cpp's `block_q8_0`/`block_q8_1`: one
//! scale per block, `x ≈ d·q` with `q` in `[-127, 127]`).
//!
//! Each block also keeps `d · Σ q` (llama.cpp's `s`): a 4-bit weight
//! format with an offset (Q4_1's `m`, or Q4_0's implied `-8`) needs it to
//! turn the integer dot product of the raw nibbles into the dot product of
//! the values, without a second pass over the block.

use half::f16;

/// The elements one activation block scales together.
pub const Q8_BLOCK: usize = 32;

/// Rows of activations quantized per block of [`Q8_BLOCK`]: row `r`'s
/// block `b` is `qs[(r·blocks + b)·32 ..][..32]` scaled by `d[r·blocks + b]`.
#[derive(Clone, Debug, Default)]
pub struct Q8Rows {
    rows: usize,
    blocks: usize,
    d: Vec<f32>,
    sums: Vec<f32>,
    qs: Vec<i8>,
}

impl Q8Rows {
    /// Quantizes `x`, `rows` rows of `cols` values each (`cols` a multiple
    /// of [`Q8_BLOCK`], checked by the caller), as llama.cpp's reference
    /// `quantize_row_q8_0`: `d = max|x| / 127`, `q = round(x / d)` (half
    /// away from zero).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Self {
        debug_assert_eq!(x.len(), rows * cols);
        debug_assert_eq!(cols % Q8_BLOCK, 0);
        let blocks = cols / Q8_BLOCK;
        let n = rows * blocks;
        let mut out = Q8Rows {
            rows,
            blocks,
            d: vec![0.0; n],
            sums: vec![0.0; n],
            qs: vec![0; rows * cols],
        };
        for (((xb, qb), d), sum) in x
            .chunks_exact(Q8_BLOCK)
            .zip(out.qs.chunks_exact_mut(Q8_BLOCK))
            .zip(&mut out.d)
            .zip(&mut out.sums)
        {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let s = quantize_block(xb, inv, qb);
            // Stored as llama.cpp stores them, in f16 (the values were
            // quantized with the exact scale): products then match its
            // kernels' to the rounding of their own f32 sums.
            *d = f16::from_f32(scale).to_f32();
            *sum = f16::from_f32(scale * s as f32).to_f32();
        }
        out
    }

    /// Rows quantized.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Row `r`: its scales, block sums and quantized values.
    pub fn row(&self, r: usize) -> Q8Row<'_> {
        let b = r * self.blocks;
        Q8Row {
            d: &self.d[b..b + self.blocks],
            sums: &self.sums[b..b + self.blocks],
            qs: &self.qs[b * Q8_BLOCK..(b + self.blocks) * Q8_BLOCK],
        }
    }
}

/// `q = round(x · inv)` (half away from zero) for one block, and `Σ q`:
/// eight lanes at a time where the CPU has AVX2, with the bits of the
/// scalar loop (the decoding products quantize every layer's input, so
/// a scalar `round` per value was a tenth of a decode step).
fn quantize_block(xb: &[f32], inv: f32, qb: &mut [i8]) -> i32 {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::simd::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 (checked above); both blocks hold
        // `Q8_BLOCK` values (the chunks of `quantize`).
        return unsafe { avx2::quantize_block(xb, inv, qb) };
    }
    let mut s = 0i32;
    for (q, &v) in qb.iter_mut().zip(xb) {
        // |v·inv| <= 127 by construction: the cast cannot saturate.
        *q = (v * inv).round() as i8;
        s += *q as i32;
    }
    s
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::Q8_BLOCK;

    /// [`super::quantize_block`] on AVX2.
    ///
    /// # Safety
    /// The CPU has AVX2; `xb` and `qb` hold `Q8_BLOCK` values.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_block(xb: &[f32], inv: f32, qb: &mut [i8]) -> i32 {
        debug_assert!(xb.len() == Q8_BLOCK && qb.len() == Q8_BLOCK);
        let inv = _mm256_set1_ps(inv);
        let half = _mm256_set1_ps(0.5);
        let sign = _mm256_set1_ps(-0.0);
        let one = _mm256_set1_ps(1.0);
        let mut q = [_mm256_setzero_si256(); 4];
        for (i, qi) in q.iter_mut().enumerate() {
            // SAFETY: values `8i..8i + 8` of the block are in bounds.
            let v = _mm256_mul_ps(unsafe { _mm256_loadu_ps(xb.as_ptr().add(8 * i)) }, inv);
            // Half away from zero, exactly: the truncation, plus one step
            // away from zero where the dropped part is at least a half
            // (`v - t` is exact for |v| < 2^23).
            let t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
            let step = _mm256_or_ps(_mm256_and_ps(v, sign), one);
            let up = _mm256_and_ps(_mm256_cmp_ps(frac, half, _CMP_GE_OQ), step);
            *qi = _mm256_cvttps_epi32(_mm256_add_ps(t, up));
        }
        let total = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        let s = _mm_add_epi32(
            _mm256_castsi256_si128(total),
            _mm256_extracti128_si256(total, 1),
        );
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        // Narrow to bytes; the packs work per 128-bit half, so put the
        // 32-bit groups back in order.
        let bytes = _mm256_packs_epi16(
            _mm256_packs_epi32(q[0], q[1]),
            _mm256_packs_epi32(q[2], q[3]),
        );
        let ordered = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: `qb` holds 32 bytes.
        unsafe { _mm256_storeu_si256(qb.as_mut_ptr() as *mut __m256i, ordered) };
        _mm_cvtsi128_si32(s)
    }
}

/// One quantized activation row (see [`Q8Rows`]).
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    /// Scale of each block.
    pub d: &'a [f32],
    /// `d · Σ q` of each block.
    pub sums: &'a [f32],
    /// The quantized values, 32 per block.
    pub qs: &'a [i8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_as_the_reference_and_keeps_sums() {
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let q = Q8Rows::quantize(&x, 1, 64);
        let row = q.row(0);
        for b in 0..2 {
            let xb = &x[b * 32..(b + 1) * 32];
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert_eq!(row.d[b], f16::from_f32(amax / 127.0).to_f32());
            let qb = &row.qs[b * 32..(b + 1) * 32];
            let exact_sum = (amax / 127.0) * qb.iter().map(|&v| v as i32).sum::<i32>() as f32;
            assert_eq!(f16::from_f32(exact_sum).to_f32(), row.sums[b]);
            assert!(qb.iter().any(|&v| v.abs() == 127));
            for (&v, &qv) in xb.iter().zip(qb) {
                // Half a step, and the f16 rounding of the scale over 127 steps.
                assert!((v - row.d[b] * qv as f32).abs() <= row.d[b] * 0.6 + 1e-6);
            }
        }
        // Ties round away from zero on every path: with a scale of 1 the
        // values are their own steps.
        let mut ties: Vec<f32> = (0..32).map(|i| i as f32 * 0.5 - 8.0).collect();
        ties[0] = 127.0;
        ties[1] = -2.5;
        ties[2] = 2.5;
        ties[3] = 0.49999997;
        let q = Q8Rows::quantize(&ties, 1, 32);
        for (&v, &got) in ties.iter().zip(q.row(0).qs) {
            assert_eq!(got, v.round() as i8, "{v}");
        }
        let zeros = Q8Rows::quantize(&[0.0; 32], 1, 32);
        assert_eq!((zeros.row(0).d[0], zeros.row(0).sums[0]), (0.0, 0.0));
    }
}
