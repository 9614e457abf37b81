//! Dot products of one quantized weight row with 8-bit activation rows
//! ([`Q8Row`]), on integers within each block of 32: the portable loop,
//! and the AVX2 one where the CPU has AVX2, FMA and F16C (`maddubs`
//! multiplies unsigned by signed bytes and adds pairs, as llama.cpp's
//! `ggml_vec_dot` kernels do). [`dot4`] takes four activation rows at once,
//! unpacking each weight block once for all four (the prompt's products);
//! [`dot_rows`] takes many weight rows against one activation row (the
//! decoding products), each with the bits of its own [`dot`].
//! The paths compute the same integer sums per block and differ only in
//! the order of the float additions across blocks.
//!
//! Weight blocks are read from bytes at any alignment (a memory-mapped
//! GGUF file gives 18- or 20-byte blocks): Q4_0 `[d: f16, qs: 16 bytes]`,
//! value `d·(q − 8)`; Q4_1 `[d: f16, m: f16, qs: 16 bytes]`, value
//! `d·q + m`; in both, byte `j` holds element `j` in its low nibble and
//! element `j + 16` in its high one. Q8_0 `[d: f16, qs: 32 × i8]`, value
//! `d·q`.

use half::f16;

use super::has_avx2;
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

fn check(format: DotFormat, w: &[u8], a: &Q8Row<'_>) {
    let blocks = a.d.len();
    assert!(
        w.len() == blocks * format.block_bytes()
            && a.qs.len() == blocks * Q8_BLOCK
            && a.sums.len() == blocks,
        "quantized dot: {} weight bytes against {blocks} activation blocks",
        w.len()
    );
}

/// `Σ w·a` over one row: `w` holds `a.d.len()` blocks of `format`.
pub fn dot(format: DotFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    check(format, w, &a);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); `w` and
        // `a` hold the same number of blocks (checked by `check`).
        return unsafe { avx2::dot::<1>(format, w, [a]) }[0];
    }
    dot_portable(format, w, a)
}

/// [`dot`] of one weight row with four activation rows.
pub fn dot4(format: DotFormat, w: &[u8], a: [Q8Row<'_>; 4]) -> [f32; 4] {
    for r in &a {
        check(format, w, r);
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: as in `dot`, for each of the four rows.
        return unsafe { avx2::dot::<4>(format, w, a) };
    }
    a.map(|r| dot_portable(format, w, r))
}

/// [`dot`] of each of `out.len()` weight rows (consecutive in `w`, each
/// `a.d.len()` blocks) with one activation row, into `out`: the decoding
/// product's loop, with the checks and the choice of kernel made once
/// instead of per row. Each result has the bits of its row's [`dot`].
pub fn dot_rows(format: DotFormat, w: &[u8], a: Q8Row<'_>, out: &mut [f32]) {
    let row = a.d.len() * format.block_bytes();
    assert_eq!(w.len(), out.len() * row, "quantized dot: weight rows");
    if out.is_empty() {
        return;
    }
    check(format, &w[..row], &a);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); each of
        // the `out.len()` rows of `w` holds as many blocks as `a` (checked).
        unsafe { avx2::dot_rows(format, w, a, out) };
        return;
    }
    for (o, wr) in out.iter_mut().zip(w.chunks_exact(row)) {
        *o = dot_portable(format, wr, a);
    }
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
                    d * a.d[b] * s as f32 - 8.0 * d * a.sums[b]
                } else {
                    d * a.d[b] * s as f32 + half_at(wb, 2) * a.sums[b]
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

    use super::{DotFormat, Q8Row, Q8_BLOCK};

    /// Sum of the eight lanes.
    #[target_feature(enable = "avx2,fma")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    /// The two f16 values at `p` (a block's `d` and, for Q4_1, `m`).
    ///
    /// # Safety
    /// 4 bytes are readable at `p`.
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn halves(p: *const u8) -> (f32, f32) {
        // SAFETY: 4 bytes are readable at `p` (the caller's contract).
        let bits = unsafe { (p as *const i32).read_unaligned() };
        let v = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
        (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps(v, v, 1)))
    }

    /// The `R` dot products of one weight row (`blocks` blocks of
    /// `format` at `w`) with `R` activation rows; the match on `format`
    /// is outside the block loop in each monomorphised copy.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `w` holds as many blocks of
    /// `format` as every row of `a` (checked by the callers).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot<const R: usize>(
        format: DotFormat,
        w: &[u8],
        a: [Q8Row<'_>; R],
    ) -> [f32; R] {
        // SAFETY: forwarded contract; each arm reads the blocks that
        // `check` found in `w` and `a`.
        unsafe {
            match format {
                DotFormat::Q4_0 => rows::<R, 0>(w, a),
                DotFormat::Q4_1 => rows::<R, 1>(w, a),
                DotFormat::Q8_0 => rows::<R, 2>(w, a),
            }
        }
    }

    /// [`dot`] of each weight row of `w` with `a`, into `out`; the match
    /// on `format` outside the row loop, each row through [`rows`].
    ///
    /// # Safety
    /// As [`dot`], for each of the `out.len()` rows of `w`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_rows(format: DotFormat, w: &[u8], a: Q8Row<'_>, out: &mut [f32]) {
        // SAFETY: forwarded contract.
        unsafe {
            match format {
                DotFormat::Q4_0 => each_row::<0>(w, a, out),
                DotFormat::Q4_1 => each_row::<1>(w, a, out),
                DotFormat::Q8_0 => each_row::<2>(w, a, out),
            }
        }
    }

    /// The row loop of [`dot_rows`] for one format.
    ///
    /// # Safety
    /// As [`dot_rows`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn each_row<const F: u8>(w: &[u8], a: Q8Row<'_>, out: &mut [f32]) {
        let row = a.d.len() * [18usize, 20, 34][F as usize];
        for (o, wr) in out.iter_mut().zip(w.chunks_exact(row)) {
            // SAFETY: forwarded contract, for this row.
            *o = unsafe { rows::<1, F>(wr, [a]) }[0];
        }
    }

    /// The block loop of [`dot`] for one format (`F`: 0 Q4_0, 1 Q4_1,
    /// 2 Q8_0).
    ///
    /// # Safety
    /// As [`dot`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn rows<const R: usize, const F: u8>(w: &[u8], a: [Q8Row<'_>; R]) -> [f32; R] {
        let bytes = [18usize, 20, 34][F as usize];
        let blocks = a[0].d.len();
        let ones = _mm256_set1_epi16(1);
        let low = _mm256_set1_epi8(0x0F);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut offsets = [0.0f32; R];
        let wp = w.as_ptr();
        for b in 0..blocks {
            // SAFETY: block `b` of `w` (its `bytes` bytes) and of each
            // activation row (32 values, one scale and sum) is in bounds:
            // the callers checked the lengths.
            unsafe {
                let wb = wp.add(b * bytes);
                let (d, m) = halves(wb);
                // The weights as bytes in element order: unsigned nibbles,
                // or for Q8_0 their absolute values (the signs go to the
                // activations).
                let wq = if F == 2 {
                    _mm256_loadu_si256(wb.add(2) as *const __m256i)
                } else {
                    let raw = _mm_loadu_si128(wb.add(bytes - 16) as *const __m128i);
                    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low)
                };
                let wu = if F == 2 { _mm256_sign_epi8(wq, wq) } else { wq };
                for r in 0..R {
                    let row = &a[r];
                    let aq =
                        _mm256_loadu_si256(row.qs.as_ptr().add(b * Q8_BLOCK) as *const __m256i);
                    let aq = if F == 2 { _mm256_sign_epi8(aq, wq) } else { aq };
                    let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(wu, aq), ones);
                    let scale = _mm256_set1_ps(d * *row.d.get_unchecked(b));
                    acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[r]);
                    let s = *row.sums.get_unchecked(b);
                    match F {
                        0 => offsets[r] -= 8.0 * d * s,
                        1 => offsets[r] += m * s,
                        _ => {}
                    }
                }
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum(acc[r]) + offsets[r];
        }
        out
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
                    let qs: Vec<i8> = (0..32).map(|_| (next() % 256) as u8 as i8).collect();
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
            let x: Vec<f32> = (0..4 * n * 32)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.3 + (i / 200) as f32)
                .collect();
            let a = Q8Rows::quantize(&x, 4, n * 32);
            let four = dot4(format, &w, [a.row(0), a.row(1), a.row(2), a.row(3)]);
            for (r, &from_four) in four.iter().enumerate() {
                let row = a.row(r);
                // A row's bits do not depend on its neighbours.
                assert_eq!(dot(format, &w, row), from_four, "{format:?} row {r}");
                // Nor on the weight rows taken with it.
                let (w3, _) = blocks(format, 3 * n, 11 + r as u32);
                let mut three = [0.0f32; 3];
                dot_rows(format, &w3, row, &mut three);
                for (i, &got) in three.iter().enumerate() {
                    let wi = &w3[i * w.len()..(i + 1) * w.len()];
                    assert_eq!(got, dot(format, wi, row), "{format:?} weight row {i}");
                }
                // The exact product of the dequantized weights with the
                // quantized activations; the block sums are stored in f16
                // as llama.cpp stores them, so allow their rounding.
                let (mut exact, mut size) = (0.0f64, 0.0f64);
                for (i, &v) in values.iter().enumerate() {
                    let term = v as f64 * row.d[i / 32] as f64 * row.qs[i] as f64;
                    exact += term;
                    size += term.abs();
                }
                let tol = 2e-3 * size.max(1.0);
                for (path, got) in [
                    ("portable", dot_portable(format, &w, row)),
                    ("dot", dot(format, &w, row)),
                    ("dot4", from_four),
                ] {
                    assert!(
                        (got as f64 - exact).abs() < tol,
                        "{format:?} {path} row {r}: {got} vs {exact}"
                    );
                }
            }
        }
    }
}
