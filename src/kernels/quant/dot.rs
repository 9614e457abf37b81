//! Dot products of one quantized weight row with one 8-bit activation row
//! ([`Q8Row`]), on integers within each block of 32: the portable loops,
//! and the AVX2 ones where the CPU has AVX2 and FMA (`maddubs` multiplies
//! unsigned by signed bytes and adds pairs, as llama.cpp's `ggml_vec_dot`
//! kernels do). The two paths compute the same integer sums per block and
//! differ only in the order of the float additions across blocks.
//!
//! Weight blocks are read from bytes at any alignment (a memory-mapped
//! GGUF file gives 18- or 20-byte blocks): Q4_0 `[d: f16, qs: 16 bytes]`,
//! value `d·(q − 8)`; Q4_1 `[d: f16, m: f16, qs: 16 bytes]`, value
//! `d·q + m`; in both, byte `j` holds element `j` in its low nibble and
//! element `j + 16` in its high one. Q8_0 `[d: f16, qs: 32 × i8]`, value
//! `d·q`.

use half::f16;

use super::q8_rows::{Q8Row, Q8_BLOCK};

/// Bytes of one block of each format.
pub const Q4_0_BYTES: usize = 18;
/// Bytes of one Q4_1 block.
pub const Q4_1_BYTES: usize = 20;
/// Bytes of one Q8_0 block.
pub const Q8_0_BYTES: usize = 34;

/// The weight formats with an integer dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DotFormat {
    /// 4-bit, one scale, offset 8.
    Q4_0,
    /// 4-bit, a scale and a minimum.
    Q4_1,
    /// 8-bit, one scale.
    Q8_0,
}

impl DotFormat {
    /// Bytes of one block of 32 weights.
    pub fn block_bytes(self) -> usize {
        match self {
            DotFormat::Q4_0 => Q4_0_BYTES,
            DotFormat::Q4_1 => Q4_1_BYTES,
            DotFormat::Q8_0 => Q8_0_BYTES,
        }
    }
}

#[inline(always)]
fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// `Σ w·a` over one row: `w` holds `a.d.len()` blocks of `format`.
pub fn dot(format: DotFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    debug_assert_eq!(w.len(), a.d.len() * format.block_bytes());
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::simd::has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA (checked above); the lengths of
        // `w` and `a` agree (the caller's contract, asserted in debug).
        return unsafe { avx2::dot(format, w, a) };
    }
    dot_portable(format, w, a)
}

/// The portable loop of [`dot`].
pub fn dot_portable(format: DotFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    let bytes = format.block_bytes();
    let mut total = 0.0f32;
    for (b, wb) in w.chunks_exact(bytes).enumerate() {
        let aq = &a.qs[b * Q8_BLOCK..(b + 1) * Q8_BLOCK];
        let d = half_at(wb, 0);
        total += match format {
            DotFormat::Q4_0 | DotFormat::Q4_1 => {
                let qs = &wb[bytes - 16..];
                let mut s = 0i32;
                for j in 0..16 {
                    s += (qs[j] & 0x0F) as i32 * aq[j] as i32;
                    s += (qs[j] >> 4) as i32 * aq[j + 16] as i32;
                }
                if format == DotFormat::Q4_0 {
                    d * a.d[b] * (s - 8 * a.sums[b]) as f32
                } else {
                    d * a.d[b] * s as f32 + half_at(wb, 2) * a.d[b] * a.sums[b] as f32
                }
            }
            DotFormat::Q8_0 => {
                let s: i32 = wb[2..]
                    .iter()
                    .zip(aq)
                    .map(|(&w, &x)| w as i8 as i32 * x as i32)
                    .sum();
                d * a.d[b] * s as f32
            }
        };
    }
    total
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{half_at, DotFormat, Q8Row, Q8_BLOCK};

    /// Sum of the eight lanes.
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// The 32 nibbles of a 4-bit block as 32 unsigned bytes, in element
    /// order (low nibbles are elements 0..16, high ones 16..32).
    ///
    /// # Safety
    /// `qs` has at least 16 bytes.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn nibbles(qs: *const u8) -> __m256i {
        // SAFETY: 16 bytes are readable at `qs` (the caller's contract).
        let raw = unsafe { _mm_loadu_si128(qs as *const __m128i) };
        let low = _mm_set1_epi8(0x0F);
        let lo = _mm_and_si128(raw, low);
        let hi = _mm_and_si128(_mm_srli_epi16(raw, 4), low);
        _mm256_set_m128i(hi, lo)
    }

    /// # Safety
    /// The CPU has AVX2 and FMA; `w` holds `a.d.len()` blocks of `format`
    /// and `a.qs` 32 values per block.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(format: DotFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
        let bytes = format.block_bytes();
        let blocks = a.d.len();
        assert!(w.len() >= blocks * bytes && a.qs.len() >= blocks * Q8_BLOCK);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        let mut offsets = 0.0f32;
        for b in 0..blocks {
            let wb = &w[b * bytes..(b + 1) * bytes];
            // SAFETY: block `b` of `a.qs` is in bounds (asserted above).
            let aq =
                unsafe { _mm256_loadu_si256(a.qs.as_ptr().add(b * Q8_BLOCK) as *const __m256i) };
            let scale = half_at(wb, 0) * a.d[b];
            let pairs = match format {
                DotFormat::Q4_0 | DotFormat::Q4_1 => {
                    // SAFETY: the block's last 16 bytes are its nibbles.
                    let wq = unsafe { nibbles(wb.as_ptr().add(bytes - 16)) };
                    _mm256_maddubs_epi16(wq, aq)
                }
                DotFormat::Q8_0 => {
                    // SAFETY: bytes 2..34 of the block are its 32 values.
                    let wq = unsafe { _mm256_loadu_si256(wb.as_ptr().add(2) as *const __m256i) };
                    // |w| · (a with w's sign) = w · a, with the unsigned
                    // operand first as maddubs needs.
                    _mm256_maddubs_epi16(_mm256_sign_epi8(wq, wq), _mm256_sign_epi8(aq, wq))
                }
            };
            let sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
            acc = _mm256_fmadd_ps(_mm256_set1_ps(scale), sums, acc);
            match format {
                DotFormat::Q4_0 => offsets -= 8.0 * scale * a.sums[b] as f32,
                DotFormat::Q4_1 => offsets += half_at(wb, 2) * a.d[b] * a.sums[b] as f32,
                DotFormat::Q8_0 => {}
            }
        }
        hsum(acc) + offsets
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::Q8Rows;

    /// Random blocks of each format and their dequantized values.
    fn blocks(format: DotFormat, n: usize, seed: u32) -> (Vec<u8>, Vec<f32>) {
        let mut state = seed.wrapping_mul(2654435761).wrapping_add(1);
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            state
        };
        let (mut bytes, mut values) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let d = f16::from_f32((next() % 1000) as f32 / 20000.0 + 0.001);
            let m = f16::from_f32(-((next() % 1000) as f32) / 10000.0);
            bytes.extend(d.to_bits().to_le_bytes());
            match format {
                DotFormat::Q8_0 => {
                    let qs: Vec<i8> = (0..32).map(|_| (next() % 255) as i32 as i8).collect();
                    bytes.extend(qs.iter().map(|&q| q as u8));
                    values.extend(qs.iter().map(|&q| d.to_f32() * q as f32));
                }
                _ => {
                    if format == DotFormat::Q4_1 {
                        bytes.extend(m.to_bits().to_le_bytes());
                    }
                    let qs: Vec<u8> = (0..16).map(|_| next() as u8).collect();
                    bytes.extend(&qs);
                    let value = |q: u8| match format {
                        DotFormat::Q4_0 => d.to_f32() * (q as f32 - 8.0),
                        _ => d.to_f32() * q as f32 + m.to_f32(),
                    };
                    values.extend(qs.iter().map(|&q| value(q & 0x0F)));
                    values.extend(qs.iter().map(|&q| value(q >> 4)));
                }
            }
        }
        (bytes, values)
    }

    #[test]
    fn integer_dots_match_the_dequantized_product() {
        for format in [DotFormat::Q4_0, DotFormat::Q4_1, DotFormat::Q8_0] {
            let n = 7;
            let (w, values) = blocks(format, n, 3);
            let x: Vec<f32> = (0..n * 32)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.3)
                .collect();
            let a = Q8Rows::quantize(&x, 1, n * 32);
            let row = a.row(0);
            // The exact product of the dequantized weights with the
            // quantized activations.
            let mut exact = 0.0f64;
            for (i, &v) in values.iter().enumerate() {
                exact += v as f64 * row.d[i / 32] as f64 * row.qs[i] as f64;
            }
            let portable = dot_portable(format, &w, row);
            let fast = dot(format, &w, row);
            let tol = 1e-4 * exact.abs().max(1.0);
            assert!(
                (portable as f64 - exact).abs() < tol,
                "{format:?}: {portable} vs {exact}"
            );
            assert!(
                (fast as f64 - exact).abs() < tol,
                "{format:?}: {fast} vs {exact}"
            );
        }
    }
}
