//! Dot products of quantized weight rows with 8-bit activation rows
//! ([`Q8Row`]), on integers within each block of 32: the portable loop,
//! and the AVX2 one where the CPU has AVX2, FMA and F16C (`maddubs`
//! multiplies unsigned by signed bytes and adds pairs, as llama.cpp's
//! kernels do).
//!
//! The AVX2 kernel ([`dot_eight`]) takes eight weight rows at once, one
//! per 32-bit lane: four bytes of each row side by side meet the same four
//! activation bytes broadcast, so a block's eight steps leave each lane
//! holding its row's exact integer block sum, and one fused multiply-add
//! per block and activation row scales all eight. Each unpacked weight
//! block serves every activation row taken with it (several sequences
//! decoded together, a short prompt), and one activation row (decoding)
//! still pays one multiply-add per block for eight weight rows.
//!
//! Every path computes each output the same way, so its bits depend on
//! nothing else in the product (how many activation rows, which weight
//! rows beside it, which path): per block, the exact integer sum `s`, then
//! `acc = fma(d_w·d_a, s, acc)` and the offset term `acc = fma(o, Σa, acc)`
//! (`o = m` for Q4_1, `-8·d_w` for Q4_0), blocks in order ([`dot`]).
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

/// Weight rows [`dot_eight`] takes at once, one per 32-bit lane of an AVX2
/// register.
pub const WEIGHT_ROWS: usize = 8;

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

/// `Σ w·a` over one row: `w` holds `a.d.len()` blocks of `format`. The
/// loop every other path reproduces bit for bit (see the module docs).
pub fn dot(format: DotFormat, w: &[u8], a: Q8Row<'_>) -> f32 {
    check(format, w, &a);
    let bytes = format.block_bytes();
    let mut acc = 0.0f32;
    for (b, wb) in w.chunks_exact(bytes).enumerate() {
        let aq = &a.qs[b * Q8_BLOCK..(b + 1) * Q8_BLOCK];
        let d = half_at(wb, 0);
        let s: i32 = match format {
            DotFormat::Q4_0 | DotFormat::Q4_1 => {
                let qs = &wb[bytes - 16..];
                (0..16)
                    .map(|j| {
                        (qs[j] & 0x0F) as i32 * aq[j] as i32
                            + (qs[j] >> 4) as i32 * aq[j + 16] as i32
                    })
                    .sum()
            }
            DotFormat::Q8_0 => wb[2..]
                .iter()
                .zip(aq)
                .map(|(&w, &x)| w as i8 as i32 * x as i32)
                .sum(),
        };
        // `s` is exact in f32: at most 32 · 128 · 127 in size.
        acc = (d * a.d[b]).mul_add(s as f32, acc);
        match format {
            DotFormat::Q4_0 => acc = (d * -8.0).mul_add(a.sums[b], acc),
            DotFormat::Q4_1 => acc = half_at(wb, 2).mul_add(a.sums[b], acc),
            DotFormat::Q8_0 => {}
        }
    }
    acc
}

/// The dot products of `rows` weight rows (one to [`WEIGHT_ROWS`],
/// consecutive in `w`, each `blocks` blocks of `format`) with each
/// activation row of `a`: `out[k·8 + i]` is weight row `i` against `a[k]`,
/// with the bits of [`dot`]; the lanes from `rows` on repeat the last row.
pub fn dot_eight(format: DotFormat, w: &[u8], rows: usize, a: &[Q8Row<'_>], out: &mut [f32]) {
    assert!(
        (1..=WEIGHT_ROWS).contains(&rows) && !a.is_empty(),
        "quantized dot: {rows} weight rows against {} activation rows",
        a.len()
    );
    assert_eq!(out.len(), a.len() * WEIGHT_ROWS, "quantized dot: outputs");
    let row = w.len() / rows;
    assert_eq!(w.len(), rows * row, "quantized dot: weight rows");
    for r in a {
        check(format, &w[..row], r);
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); each of
        // the `rows` rows of `w` holds as many blocks of `format` as every
        // row of `a`, and `out` holds eight values per row of `a` (checked).
        unsafe { avx2::dot_eight(format, w, rows, a, out) };
        return;
    }
    for (k, &ak) in a.iter().enumerate() {
        for i in 0..WEIGHT_ROWS {
            let r = i.min(rows - 1);
            out[k * WEIGHT_ROWS + i] = dot(format, &w[r * row..(r + 1) * row], ak);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{DotFormat, Q8Row, Q8_BLOCK, WEIGHT_ROWS};

    /// Activation rows taken through each unpacked block at a time: their
    /// accumulators and the eight weight vectors fill the registers.
    const ACTIVATION_ROWS: usize = 8;

    /// [`super::dot_eight`]: the match on the format outside the loops.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `w` holds `rows` (one to eight)
    /// rows of as many blocks of `format` as every row of `a`, and `out`
    /// eight values per row of `a` (checked by the caller).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot_eight(
        format: DotFormat,
        w: &[u8],
        rows: usize,
        a: &[Q8Row<'_>],
        out: &mut [f32],
    ) {
        // SAFETY: forwarded contract.
        unsafe {
            match format {
                DotFormat::Q4_0 => by_rows::<0>(w, rows, a, out),
                DotFormat::Q4_1 => by_rows::<1>(w, rows, a, out),
                DotFormat::Q8_0 => by_rows::<2>(w, rows, a, out),
            }
        }
    }

    /// The activation rows a few at a time, in the format `F` (0 Q4_0,
    /// 1 Q4_1, 2 Q8_0).
    ///
    /// # Safety
    /// As [`dot_eight`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn by_rows<const F: u8>(w: &[u8], rows: usize, a: &[Q8Row<'_>], out: &mut [f32]) {
        let row = w.len() / rows;
        // Missing rows repeat the last one: their lanes are computed and
        // ignored, so the loop has one shape.
        // SAFETY: `i.min(rows - 1) < rows` rows start inside `w`.
        let w: [*const u8; WEIGHT_ROWS] =
            std::array::from_fn(|i| unsafe { w.as_ptr().add(i.min(rows - 1) * row) });
        for (a, out) in a
            .chunks(ACTIVATION_ROWS)
            .zip(out.chunks_mut(ACTIVATION_ROWS * WEIGHT_ROWS))
        {
            // SAFETY: forwarded contract, for these activation rows.
            unsafe {
                match a.len() {
                    1 => eight::<1, F>(w, a, out),
                    2 => eight::<2, F>(w, a, out),
                    3 => eight::<3, F>(w, a, out),
                    4 => eight::<4, F>(w, a, out),
                    5 => eight::<5, F>(w, a, out),
                    6 => eight::<6, F>(w, a, out),
                    7 => eight::<7, F>(w, a, out),
                    _ => eight::<8, F>(w, a, out),
                }
            }
        }
    }

    /// The scales (and for Q4_1 the minimums) of block `at` of the eight
    /// rows, one per lane.
    ///
    /// # Safety
    /// 4 bytes are readable at `w[i] + at` for each row.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn scales(w: &[*const u8; WEIGHT_ROWS], at: usize) -> (__m256, __m256) {
        // SAFETY: the caller's contract.
        let head = |i: usize| unsafe { (w[i].add(at) as *const i32).read_unaligned() };
        let v = _mm256_setr_epi32(
            head(0),
            head(1),
            head(2),
            head(3),
            head(4),
            head(5),
            head(6),
            head(7),
        );
        // Each lane is `[d, m]` as two f16: gather the `d`s, then the `m`s.
        let split = _mm256_setr_epi8(
            0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2, 3,
            6, 7, 10, 11, 14, 15,
        );
        let v = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(v, split), 0b11_01_10_00);
        (
            _mm256_cvtph_ps(_mm256_castsi256_si128(v)),
            _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1)),
        )
    }

    /// The weights of block `at` of the eight rows as eight vectors: vector
    /// `j` holds, in lane `i`, row `i`'s elements `4j..4j + 4` as bytes
    /// (unsigned nibbles for Q4_0 and Q4_1, signed for Q8_0).
    ///
    /// # Safety
    /// The block's values (16 or 32 bytes at `w[i] + at`) are readable.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn weights<const F: u8>(w: &[*const u8; WEIGHT_ROWS], at: usize) -> [__m256i; 8] {
        if F == 2 {
            // SAFETY: 32 bytes are readable at each row's `at`.
            let y: [__m256i; 8] = std::array::from_fn(|i| unsafe {
                _mm256_loadu_si256(w[i].add(at) as *const __m256i)
            });
            // An 8 x 8 transpose of 32-bit words.
            let lo32 = |p: usize, q: usize| _mm256_unpacklo_epi32(y[p], y[q]);
            let hi32 = |p: usize, q: usize| _mm256_unpackhi_epi32(y[p], y[q]);
            let (a0, a1, a2, a3) = (lo32(0, 1), hi32(0, 1), lo32(2, 3), hi32(2, 3));
            let (a4, a5, a6, a7) = (lo32(4, 5), hi32(4, 5), lo32(6, 7), hi32(6, 7));
            let b = [
                _mm256_unpacklo_epi64(a0, a2),
                _mm256_unpackhi_epi64(a0, a2),
                _mm256_unpacklo_epi64(a1, a3),
                _mm256_unpackhi_epi64(a1, a3),
                _mm256_unpacklo_epi64(a4, a6),
                _mm256_unpackhi_epi64(a4, a6),
                _mm256_unpacklo_epi64(a5, a7),
                _mm256_unpackhi_epi64(a5, a7),
            ];
            [
                _mm256_permute2x128_si256(b[0], b[4], 0x20),
                _mm256_permute2x128_si256(b[1], b[5], 0x20),
                _mm256_permute2x128_si256(b[2], b[6], 0x20),
                _mm256_permute2x128_si256(b[3], b[7], 0x20),
                _mm256_permute2x128_si256(b[0], b[4], 0x31),
                _mm256_permute2x128_si256(b[1], b[5], 0x31),
                _mm256_permute2x128_si256(b[2], b[6], 0x31),
                _mm256_permute2x128_si256(b[3], b[7], 0x31),
            ]
        } else {
            // SAFETY: 16 bytes are readable at each row's `at`.
            let x = |i: usize| unsafe { _mm_loadu_si128(w[i].add(at) as *const __m128i) };
            // Rows `i` and `i + 4` in the two halves, then a 4 x 4 transpose
            // of 32-bit words in each half.
            let y: [__m256i; 4] = std::array::from_fn(|i| _mm256_set_m128i(x(i + 4), x(i)));
            let (t0, t1) = (
                _mm256_unpacklo_epi32(y[0], y[1]),
                _mm256_unpacklo_epi32(y[2], y[3]),
            );
            let (t2, t3) = (
                _mm256_unpackhi_epi32(y[0], y[1]),
                _mm256_unpackhi_epi32(y[2], y[3]),
            );
            let p = [
                _mm256_unpacklo_epi64(t0, t1),
                _mm256_unpackhi_epi64(t0, t1),
                _mm256_unpacklo_epi64(t2, t3),
                _mm256_unpackhi_epi64(t2, t3),
            ];
            // Byte `j` holds element `j` low and `j + 16` high.
            let low = _mm256_set1_epi8(0x0F);
            let high = |v: __m256i| _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
            [
                _mm256_and_si256(p[0], low),
                _mm256_and_si256(p[1], low),
                _mm256_and_si256(p[2], low),
                _mm256_and_si256(p[3], low),
                high(p[0]),
                high(p[1]),
                high(p[2]),
                high(p[3]),
            ]
        }
    }

    /// The block loop: eight weight rows against `R` activation rows, in
    /// the format `F`; `out[k·8 + i]` is weight row `i` against `a[k]`.
    ///
    /// # Safety
    /// As [`dot_eight`], with `R == a.len()` and `w` the eight rows'
    /// starts.
    // `r` indexes the activation rows and their accumulators together.
    #[allow(clippy::needless_range_loop)]
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn eight<const R: usize, const F: u8>(
        w: [*const u8; WEIGHT_ROWS],
        a: &[Q8Row<'_>],
        out: &mut [f32],
    ) {
        let bytes = [18usize, 20, 34][F as usize];
        let blocks = a[0].d.len();
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..blocks {
            // SAFETY: block `b` of each weight row (its `bytes` bytes) and
            // of each activation row (32 values, a scale and a sum) is in
            // bounds: the caller checked the lengths.
            unsafe {
                let at = b * bytes;
                let (d, m) = scales(&w, at);
                let wv = weights::<F>(&w, at + bytes - if F == 2 { 32 } else { 16 });
                // Four activation bytes, the same in every lane.
                let act = |r: usize, j: usize| {
                    _mm256_set1_epi32(
                        (a[r].qs.as_ptr().add(b * Q8_BLOCK + 4 * j) as *const i32).read_unaligned(),
                    )
                };
                let mut sums = [_mm256_setzero_si256(); R];
                if F == 2 {
                    // Signed weights: their sizes against the activations
                    // carrying both signs; each pair sum can reach 32,512,
                    // so widen at every step.
                    for (j, &wj) in wv.iter().enumerate() {
                        let wu = _mm256_sign_epi8(wj, wj);
                        for r in 0..R {
                            let p = _mm256_maddubs_epi16(wu, _mm256_sign_epi8(act(r, j), wj));
                            sums[r] = _mm256_add_epi32(sums[r], _mm256_madd_epi16(p, ones));
                        }
                    }
                } else {
                    // Nibbles: each pair sum is at most 2 · 15 · 127, so the
                    // eight steps add up in 16 bits (30,480 at most) and
                    // widen once.
                    let mut pairs = [_mm256_setzero_si256(); R];
                    for (j, &wj) in wv.iter().enumerate() {
                        for r in 0..R {
                            pairs[r] =
                                _mm256_add_epi16(pairs[r], _mm256_maddubs_epi16(wj, act(r, j)));
                        }
                    }
                    for r in 0..R {
                        sums[r] = _mm256_madd_epi16(pairs[r], ones);
                    }
                }
                let offset = match F {
                    0 => _mm256_mul_ps(d, _mm256_set1_ps(-8.0)),
                    _ => m,
                };
                for r in 0..R {
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(*a[r].d.get_unchecked(b)));
                    acc[r] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums[r]), acc[r]);
                    if F != 2 {
                        let sum = _mm256_set1_ps(*a[r].sums.get_unchecked(b));
                        acc[r] = _mm256_fmadd_ps(offset, sum, acc[r]);
                    }
                }
            }
        }
        for r in 0..R {
            // SAFETY: `out` holds eight values per activation row.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(r * WEIGHT_ROWS), acc[r]) };
        }
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

    /// Each row of `a` against each of the `rows` weight rows in `w`
    /// through `dot_eight`, checked bit for bit against `dot`.
    fn eight_matches_dot(format: DotFormat, w: &[u8], rows: usize, a: &[Q8Row<'_>]) {
        let mut out = vec![0.0f32; a.len() * WEIGHT_ROWS];
        dot_eight(format, w, rows, a, &mut out);
        let row = w.len() / rows;
        for (k, &ak) in a.iter().enumerate() {
            for i in 0..rows {
                let want = dot(format, &w[i * row..(i + 1) * row], ak);
                let got = out[k * WEIGHT_ROWS + i];
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{format:?} {rows} rows: {k}, {i}"
                );
            }
        }
    }

    #[test]
    fn eight_rows_give_each_output_the_bits_of_its_own_dot() {
        for format in [DotFormat::Q4_0, DotFormat::Q4_1, DotFormat::Q8_0] {
            let n = 9;
            let (w, _) = blocks(format, WEIGHT_ROWS * n, 5);
            let x: Vec<f32> = (0..7 * n * 32)
                .map(|i| ((i * 11 % 23) as f32 - 11.0) * 0.2 + (i / 97) as f32 * 0.1)
                .collect();
            let q = Q8Rows::quantize(&x, 7, n * 32);
            let all: Vec<_> = (0..7).map(|r| q.row(r)).collect();
            let row = n * format.block_bytes();
            // Every count of weight rows and of activation rows (one, a
            // full set of four, four and three).
            for rows in 1..=WEIGHT_ROWS {
                for m in [1, 4, 7] {
                    eight_matches_dot(format, &w[..rows * row], rows, &all[..m]);
                }
            }
        }
    }

    #[test]
    fn sums_at_the_limits_stay_exact() {
        // Largest nibbles against +-127 activations: the 16-bit pair sums
        // of Q4 reach their bound, and Q8_0's -128 weights their size.
        for format in [DotFormat::Q4_0, DotFormat::Q4_1, DotFormat::Q8_0] {
            let bytes = format.block_bytes();
            let mut w = Vec::new();
            for r in 0..WEIGHT_ROWS {
                for _ in 0..2 {
                    let mut block = vec![0u8; bytes];
                    block[..2].copy_from_slice(&f16::from_f32(0.5).to_bits().to_le_bytes());
                    let fill = if format == DotFormat::Q8_0 {
                        [0x80u8, 0x7F][r % 2]
                    } else {
                        0xFF
                    };
                    let start = bytes - if format == DotFormat::Q8_0 { 32 } else { 16 };
                    block[start..].iter_mut().for_each(|v| *v = fill);
                    w.extend(block);
                }
            }
            let x: Vec<f32> = (0..2 * 64)
                .map(|i| if (i / 64) == 0 { 1.0 } else { -1.0 })
                .collect();
            let q = Q8Rows::quantize(&x, 2, 64);
            let a = [q.row(0), q.row(1)];
            eight_matches_dot(format, &w, WEIGHT_ROWS, &a);
            // And the value is the exact one: 2 blocks · 32 · 15 (or the
            // Q8_0 byte) · 127 · scales.
            let mut out = vec![0.0f32; 2 * WEIGHT_ROWS];
            dot_eight(format, &w, WEIGHT_ROWS, &a, &mut out);
            let wq = match format {
                DotFormat::Q8_0 => -128.0,
                _ => 15.0,
            };
            let d = q.row(0).d[0];
            let exact = 64.0 * wq * 127.0 * 0.5 * d;
            let offset = match format {
                DotFormat::Q4_0 => -8.0 * 0.5 * q.row(0).sums[0] * 2.0,
                // Q4_1's minimum is the zero of the bytes left at zero.
                DotFormat::Q4_1 => 0.0,
                DotFormat::Q8_0 => 0.0,
            };
            let (got, want) = (out[0] as f64, (exact + offset) as f64);
            assert!(
                (got - want).abs() <= 1e-3 * want.abs(),
                "{format:?}: {got} vs {want}"
            );
        }
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
            let rows: Vec<_> = (0..4).map(|r| a.row(r)).collect();
            let mut four = [0.0f32; 4 * WEIGHT_ROWS];
            dot_eight(format, &w, 1, &rows, &mut four);
            for (r, &row) in rows.iter().enumerate() {
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
                    ("dot", dot(format, &w, row)),
                    ("dot_eight", four[r * WEIGHT_ROWS]),
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
