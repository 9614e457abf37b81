//! Dot products of one K-quant weight row (Q4_K, Q5_K, Q6_K: super-blocks
//! of 256 weights) with 8-bit activation rows ([`Q8KRow`]), on integers
//! within each super-block, as llama.cpp's `ggml_vec_dot_q{4,5,6}_K_q8_K`:
//! the portable loop, and the AVX2 one where the CPU has AVX2, FMA and
//! F16C (`maddubs` multiplies the unsigned quants by the signed
//! activations and adds pairs; `madd` applies the sub-block scales).
//! [`dot_k4`] takes four activation rows at once, unpacking each weight
//! super-block once for all four.
//!
//! Per super-block `b` of the weights (`d`, and for Q4_K/Q5_K `dmin`) and
//! of the activations (`a.d`), both paths form eight integer lanes, lane
//! `i` summing `scale · q · a` over elements `4i..4i + 4` of every 32, as
//! the AVX2 kernel's `madd` lanes do, and accumulate `(a.d·d) · lane` by a
//! fused multiply-add into eight float lanes; the minimums enter as
//! `−a.d·dmin · Σ min · (sum of the sub-block's activations)`, from the
//! activations' group sums: for Q4_K in four float lanes (pairs of
//! sub-blocks), for Q5_K in one. The lanes are added at the end as
//! llama.cpp's `hsum_float_8` adds them. The integer sums are exact and
//! the float operations the same in the same order, so the portable and
//! the AVX2 paths give the same bits, those of llama.cpp's AVX2 kernels as
//! GCC builds them (its Q5_K `summs += dmin * sum` contracted to a fused
//! multiply-add, GCC's default in GNU C; without contraction that kernel
//! differs from these in the last bits).
//!
//! Weight super-blocks are read from bytes at any alignment (a
//! memory-mapped GGUF file): Q4_K `[d: f16, dmin: f16, scales: 12, qs:
//! 128]` (144 bytes), value `d·scale·q − dmin·min`, 4-bit `q`; Q5_K
//! `[d, dmin, scales: 12, qh: 32, qs: 128]` (176 bytes), `q` with a fifth
//! bit from `qh`; Q6_K `[ql: 128, qh: 64, scales: 16 × i8, d: f16]` (210
//! bytes), value `d·scale·(q − 32)`, 6-bit `q` (see `quant::q4_k`,
//! `q5_k` and `q6_k` for the bit layouts). Q6_K's `−32` is taken off per
//! pair of products (`maddubs(32, a)`), as llama.cpp's AVX2 kernel does,
//! so that its lanes are that kernel's.

use half::f16;

use super::has_avx2;
use super::q8k_rows::{Q8KRow, Q8K_BLOCK, Q8K_GROUP};

/// Bytes of one Q4_K super-block.
pub const Q4_K_BYTES: usize = 144;
/// Bytes of one Q5_K super-block.
pub const Q5_K_BYTES: usize = 176;
/// Bytes of one Q6_K super-block.
pub const Q6_K_BYTES: usize = 210;

/// Groups of [`Q8K_GROUP`] activations per super-block.
const GROUPS: usize = Q8K_BLOCK / Q8K_GROUP;

/// The K-quant weight formats with an integer dot product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KDotFormat {
    /// 4-bit quants, 6-bit scales and minimums per 32.
    Q4K,
    /// 5-bit quants, 6-bit scales and minimums per 32.
    Q5K,
    /// 6-bit quants centred on 32, 8-bit signed scales per 16.
    Q6K,
}

impl KDotFormat {
    /// Bytes of one super-block of 256 weights.
    pub fn block_bytes(self) -> usize {
        match self {
            KDotFormat::Q4K => Q4_K_BYTES,
            KDotFormat::Q5K => Q5_K_BYTES,
            KDotFormat::Q6K => Q6_K_BYTES,
        }
    }
}

#[inline(always)]
fn half_at(bytes: &[u8], at: usize) -> f32 {
    f16::from_bits(u16::from_le_bytes([bytes[at], bytes[at + 1]])).to_f32()
}

/// The eight 6-bit scales (bytes 0..8) and eight 6-bit minimums (bytes
/// 8..16) of a Q4_K or Q5_K super-block, from its 12 packed bytes, unpacked
/// as llama.cpp does, on three little-endian words with `kmask1..3`.
#[inline(always)]
fn scales_mins(packed: &[u8]) -> [u8; 16] {
    const KMASK1: u32 = 0x3f3f_3f3f;
    const KMASK2: u32 = 0x0f0f_0f0f;
    const KMASK3: u32 = 0x0303_0303;
    let word = |i: usize| {
        u32::from_le_bytes([
            packed[4 * i],
            packed[4 * i + 1],
            packed[4 * i + 2],
            packed[4 * i + 3],
        ])
    };
    let (u0, u1, u2) = (word(0), word(1), word(2));
    let words = [
        u0 & KMASK1,
        (u2 & KMASK2) | (((u0 >> 6) & KMASK3) << 4),
        u1 & KMASK1,
        ((u2 >> 4) & KMASK2) | (((u1 >> 6) & KMASK3) << 4),
    ];
    let mut out = [0u8; 16];
    for (o, w) in out.chunks_exact_mut(4).zip(words) {
        o.copy_from_slice(&w.to_le_bytes());
    }
    out
}

/// Sum of eight lanes as llama.cpp's `hsum_float_8`: halves, then pairs.
#[inline(always)]
fn hsum8(v: [f32; 8]) -> f32 {
    let s = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    hsum4(s)
}

/// Sum of four lanes as llama.cpp's `movehl`/`movehdup` sequence.
#[inline(always)]
fn hsum4(v: [f32; 4]) -> f32 {
    (v[0] + v[2]) + (v[1] + v[3])
}

fn check(format: KDotFormat, w: &[u8], a: &Q8KRow<'_>) {
    let blocks = a.d.len();
    assert!(
        w.len() == blocks * format.block_bytes()
            && a.qs.len() == blocks * Q8K_BLOCK
            && a.bsums.len() == blocks * GROUPS,
        "quantized K dot: {} weight bytes against {blocks} activation super-blocks",
        w.len()
    );
}

/// `Σ w·a` over one row: `w` holds `a.d.len()` super-blocks of `format`.
pub fn dot_k(format: KDotFormat, w: &[u8], a: Q8KRow<'_>) -> f32 {
    check(format, w, &a);
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU has AVX2, FMA and F16C (checked above); `w` and
        // `a` hold the same number of super-blocks (checked by `check`).
        return unsafe { avx2::dot::<1>(format, w, [a]) }[0];
    }
    dot_k_portable(format, w, a)
}

/// [`dot_k`] of one weight row with four activation rows.
pub fn dot_k4(format: KDotFormat, w: &[u8], a: [Q8KRow<'_>; 4]) -> [f32; 4] {
    for r in &a {
        check(format, w, r);
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: as in `dot_k`, for each of the four rows.
        return unsafe { avx2::dot::<4>(format, w, a) };
    }
    a.map(|r| dot_k_portable(format, w, r))
}

/// The eight integer lanes of one super-block: lane `i` is
/// `Σ scale · q · a` over elements `4i..4i + 4` of every 32, `scale` the
/// scale of each element's group of 16 (lanes 0..4 the first group of a
/// 32, lanes 4..8 the second).
#[inline(always)]
fn lanes(q: &[i8; Q8K_BLOCK], scales: &[i32; GROUPS], a: &[i8]) -> [i32; 8] {
    let a: &[i8; Q8K_BLOCK] = a.try_into().expect("a super-block of activations");
    let mut lanes = [0i32; 8];
    for c in 0..Q8K_BLOCK / 32 {
        let mut sums = [0i32; 8];
        for (i, sum) in sums.iter_mut().enumerate() {
            for t in 0..4 {
                let e = 32 * c + 4 * i + t;
                *sum += q[e] as i32 * a[e] as i32;
            }
        }
        let (first, second) = (scales[2 * c], scales[2 * c + 1]);
        for (i, (lane, sum)) in lanes.iter_mut().zip(sums).enumerate() {
            *lane += if i < 4 { first } else { second } * sum;
        }
    }
    lanes
}

/// The portable loop of [`dot_k`]: the same bits as the AVX2 one.
pub fn dot_k_portable(format: KDotFormat, w: &[u8], a: Q8KRow<'_>) -> f32 {
    check(format, w, &a);
    let bytes = format.block_bytes();
    let (mut acc, mut acc_m, mut summs) = ([0.0f32; 8], [0.0f32; 4], 0.0f32);
    let mut q = [0i8; Q8K_BLOCK];
    for (b, wb) in w.chunks_exact(bytes).enumerate() {
        let aq = &a.qs[b * Q8K_BLOCK..(b + 1) * Q8K_BLOCK];
        let (xd, scales) = match format {
            KDotFormat::Q4K | KDotFormat::Q5K => {
                let sm = scales_mins(&wb[4..16]);
                let (qh, qs) = if format == KDotFormat::Q5K {
                    (Some(&wb[16..48]), &wb[48..176])
                } else {
                    (None, &wb[16..144])
                };
                for (c, bits) in qs.chunks_exact(32).enumerate() {
                    for (l, &byte) in bits.iter().enumerate() {
                        let (mut lo, mut hi) = (byte & 0x0F, byte >> 4);
                        if let Some(qh) = qh {
                            lo |= ((qh[l] >> (2 * c)) & 1) << 4;
                            hi |= ((qh[l] >> (2 * c + 1)) & 1) << 4;
                        }
                        q[64 * c + l] = lo as i8;
                        q[64 * c + 32 + l] = hi as i8;
                    }
                }
                // Σ min · (activations of its sub-block): sub-block s's sum
                // is group sums 2s and 2s + 1; lane k takes sub-blocks 2k
                // and 2k + 1.
                let bs = &a.bsums[b * GROUPS..(b + 1) * GROUPS];
                let sub = |s: usize| (bs[2 * s] + bs[2 * s + 1]) as i32 * sm[8 + s] as i32;
                let prod: [i32; 4] = std::array::from_fn(|k| sub(2 * k) + sub(2 * k + 1));
                let dmin = -a.d[b] * half_at(wb, 2);
                if format == KDotFormat::Q4K {
                    for (m, &p) in acc_m.iter_mut().zip(&prod) {
                        *m = dmin.mul_add(p as f32, *m);
                    }
                } else {
                    summs = dmin.mul_add(prod.iter().sum::<i32>() as f32, summs);
                }
                (half_at(wb, 0), std::array::from_fn(|g| sm[g / 2] as i32))
            }
            KDotFormat::Q6K => {
                let (ql, qh) = (&wb[..128], &wb[128..192]);
                for h in 0..2 {
                    let (ql, qh) = (&ql[64 * h..64 * h + 64], &qh[32 * h..32 * h + 32]);
                    let y = &mut q[128 * h..128 * h + 128];
                    for l in 0..32 {
                        let six =
                            |low: u8, shift: u32| (low | (((qh[l] >> shift) & 3) << 4)) as i8 - 32;
                        y[l] = six(ql[l] & 0x0F, 0);
                        y[l + 32] = six(ql[l + 32] & 0x0F, 2);
                        y[l + 64] = six(ql[l] >> 4, 4);
                        y[l + 96] = six(ql[l + 32] >> 4, 6);
                    }
                }
                (
                    half_at(wb, 208),
                    std::array::from_fn(|g| wb[192 + g] as i8 as i32),
                )
            }
        };
        let d = a.d[b] * xd;
        for (acc, lane) in acc.iter_mut().zip(lanes(&q, &scales, aq)) {
            *acc = d.mul_add(lane as f32, *acc);
        }
    }
    match format {
        KDotFormat::Q4K => hsum8(acc) + hsum4(acc_m),
        KDotFormat::Q5K => hsum8(acc) + summs,
        KDotFormat::Q6K => hsum8(acc),
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{scales_mins, KDotFormat, Q8KRow, GROUPS, Q8K_BLOCK};

    /// Sum of the eight lanes, as the portable `hsum8`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum8(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        hsum4(s)
    }

    /// Sum of the four lanes, as the portable `hsum4`.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn hsum4(v: __m128) -> f32 {
        let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }

    /// 16 where the bit of `mask` is set in `hbits`, byte by byte: Q5_K's
    /// fifth bit.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn fifth_bit(hbits: __m256i, mask: __m256i, sixteen: __m256i) -> __m256i {
        _mm256_and_si256(
            _mm256_cmpeq_epi8(_mm256_and_si256(hbits, mask), mask),
            sixteen,
        )
    }

    /// The low two bits of each byte of `v` (`m3` = 3 in every byte) moved
    /// to bits 4 and 5: Q6_K's top bits.
    #[inline]
    #[target_feature(enable = "avx2,fma")]
    fn top(v: __m256i, m3: __m256i) -> __m256i {
        _mm256_slli_epi16::<4>(_mm256_and_si256(v, m3))
    }

    /// The f16 at `p`.
    ///
    /// # Safety
    /// 2 bytes are readable at `p`; the CPU has F16C.
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn half(p: *const u8) -> f32 {
        // SAFETY: 2 bytes are readable at `p` (the caller's contract); the
        // read is unaligned.
        let bits = unsafe { (p as *const u16).read_unaligned() };
        _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
    }

    /// The `R` dot products of one weight row (super-blocks of `format`
    /// at `w`) with `R` activation rows.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `w` holds as many super-blocks of
    /// `format` as every row of `a`, and each row's `qs` and `bsums` as
    /// many as its `d` (checked by the callers).
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn dot<const R: usize>(
        format: KDotFormat,
        w: &[u8],
        a: [Q8KRow<'_>; R],
    ) -> [f32; R] {
        // SAFETY: forwarded contract.
        unsafe {
            match format {
                KDotFormat::Q4K => q4_q5::<R, false>(w, a),
                KDotFormat::Q5K => q4_q5::<R, true>(w, a),
                KDotFormat::Q6K => q6::<R>(w, a),
            }
        }
    }

    /// Q4_K (`FIVE` false) or Q5_K (`FIVE` true).
    ///
    /// # Safety
    /// As [`dot`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q4_q5<const R: usize, const FIVE: bool>(w: &[u8], a: [Q8KRow<'_>; R]) -> [f32; R] {
        let bytes = if FIVE { 176 } else { 144 };
        let blocks = a[0].d.len();
        let m4 = _mm256_set1_epi8(0x0F);
        let sixteen = _mm256_set1_epi8(16);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        let mut summs = [0.0f32; R];
        for b in 0..blocks {
            // SAFETY: super-block `b` of `w` (`bytes` bytes: every read
            // below ends at or before its end) and of each activation row
            // (256 quants, 16 group sums, one scale) is in bounds, as the
            // callers checked; all loads are unaligned.
            unsafe {
                let wb = w.as_ptr().add(b * bytes);
                let (xd, xmin) = (half(wb), half(wb.add(2)));
                let sm = scales_mins(w.get_unchecked(b * bytes + 4..b * bytes + 16));
                let mins_scales = _mm256_cvtepu8_epi16(_mm_loadu_si128(sm.as_ptr().cast()));
                let mins = _mm256_extracti128_si256::<1>(mins_scales);
                for r in 0..R {
                    let row = &a[r];
                    let bs = _mm256_loadu_si256(row.bsums.as_ptr().add(b * GROUPS).cast());
                    // Pairs of group sums: the sums of the eight sub-blocks.
                    let q8s = _mm_hadd_epi16(
                        _mm256_castsi256_si128(bs),
                        _mm256_extracti128_si256::<1>(bs),
                    );
                    let prod = _mm_madd_epi16(mins, q8s);
                    let dmin = -*row.d.get_unchecked(b) * xmin;
                    if FIVE {
                        let zero = _mm_setzero_si128();
                        let total = _mm_hadd_epi32(_mm_hadd_epi32(prod, zero), zero);
                        summs[r] = dmin.mul_add(_mm_cvtsi128_si32(total) as f32, summs[r]);
                    } else {
                        acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin), _mm_cvtepi32_ps(prod), acc_m[r]);
                    }
                }
                let hbits = if FIVE {
                    _mm256_loadu_si256(wb.add(16).cast())
                } else {
                    _mm256_setzero_si256()
                };
                let qs = wb.add(if FIVE { 48 } else { 16 });
                let mut sumi = [_mm256_setzero_si256(); R];
                for j in 0..4 {
                    // Bytes 32j.. hold elements 64j + l (low nibbles) and
                    // 64j + 32 + l (high), sub-blocks 2j and 2j + 1.
                    let bits = _mm256_loadu_si256(qs.add(32 * j).cast());
                    let mut lo = _mm256_and_si256(bits, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16::<4>(bits), m4);
                    if FIVE {
                        let (mlo, mhi) = (
                            _mm256_set1_epi8((1u8 << (2 * j)) as i8),
                            _mm256_set1_epi8((2u8 << (2 * j)) as i8),
                        );
                        lo = _mm256_or_si256(lo, fifth_bit(hbits, mlo, sixteen));
                        hi = _mm256_or_si256(hi, fifth_bit(hbits, mhi, sixteen));
                    }
                    let scale_lo = _mm256_set1_epi16(sm[2 * j] as i16);
                    let scale_hi = _mm256_set1_epi16(sm[2 * j + 1] as i16);
                    for r in 0..R {
                        let aq = a[r].qs.as_ptr().add(b * Q8K_BLOCK + 64 * j);
                        let alo = _mm256_loadu_si256(aq.cast());
                        let ahi = _mm256_loadu_si256(aq.add(32).cast());
                        let plo = _mm256_madd_epi16(scale_lo, _mm256_maddubs_epi16(lo, alo));
                        let phi = _mm256_madd_epi16(scale_hi, _mm256_maddubs_epi16(hi, ahi));
                        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(plo, phi));
                    }
                }
                for r in 0..R {
                    let d = *a[r].d.get_unchecked(b) * xd;
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                }
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = if FIVE {
                hsum8(acc[r]) + summs[r]
            } else {
                hsum8(acc[r]) + hsum4(acc_m[r])
            };
        }
        out
    }

    /// Q6_K.
    ///
    /// # Safety
    /// As [`dot`].
    #[inline]
    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn q6<const R: usize>(w: &[u8], a: [Q8KRow<'_>; R]) -> [f32; R] {
        let bytes = 210;
        let blocks = a[0].d.len();
        let m4 = _mm256_set1_epi8(0x0F);
        let m3 = _mm256_set1_epi8(3);
        let m32 = _mm256_set1_epi8(32);
        let mut acc = [_mm256_setzero_ps(); R];
        for b in 0..blocks {
            // SAFETY: as in `q4_q5`: super-block `b` of `w` (210 bytes, the
            // last read ending at byte 210) and of each activation row are
            // in bounds; all loads are unaligned.
            unsafe {
                let wb = w.as_ptr().add(b * bytes);
                let xd = half(wb.add(208));
                // Chunk c (32 elements) has groups 2c and 2c + 1: their
                // scales in the low and the high eight 16-bit lanes.
                let mut scales = [_mm256_setzero_si256(); 8];
                for (c, s) in scales.iter_mut().enumerate() {
                    let g = wb.add(192 + 2 * c) as *const i8;
                    *s = _mm256_set_m128i(
                        _mm_set1_epi16(*g.add(1) as i16),
                        _mm_set1_epi16(*g as i16),
                    );
                }
                let mut sumi = [_mm256_setzero_si256(); R];
                for h in 0..2 {
                    let b1 = _mm256_loadu_si256(wb.add(64 * h).cast());
                    let b2 = _mm256_loadu_si256(wb.add(64 * h + 32).cast());
                    let bh = _mm256_loadu_si256(wb.add(128 + 32 * h).cast());
                    // Elements 128h + 32k + l, k = 0..4.
                    let q = [
                        _mm256_or_si256(_mm256_and_si256(b1, m4), top(bh, m3)),
                        _mm256_or_si256(
                            _mm256_and_si256(b2, m4),
                            top(_mm256_srli_epi16::<2>(bh), m3),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(b1), m4),
                            top(_mm256_srli_epi16::<4>(bh), m3),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16::<4>(b2), m4),
                            top(_mm256_srli_epi16::<6>(bh), m3),
                        ),
                    ];
                    for r in 0..R {
                        let aq = a[r].qs.as_ptr().add(b * Q8K_BLOCK + 128 * h);
                        for (k, &qk) in q.iter().enumerate() {
                            let ak = _mm256_loadu_si256(aq.add(32 * k).cast());
                            // (q − 32)·a per pair: q·a − 32·a.
                            let p = _mm256_sub_epi16(
                                _mm256_maddubs_epi16(qk, ak),
                                _mm256_maddubs_epi16(m32, ak),
                            );
                            let p = _mm256_madd_epi16(scales[4 * h + k], p);
                            sumi[r] = _mm256_add_epi32(sumi[r], p);
                        }
                    }
                }
                for r in 0..R {
                    let d = *a[r].d.get_unchecked(b) * xd;
                    acc[r] =
                        _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
                }
            }
        }
        let mut out = [0.0f32; R];
        for r in 0..R {
            out[r] = hsum8(acc[r]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::Q8KRows;
    use crate::quant::{GgmlType, QMatrix};
    use crate::tensor::Tensor;

    const FORMATS: [(KDotFormat, GgmlType); 3] = [
        (KDotFormat::Q4K, GgmlType::Q4K),
        (KDotFormat::Q5K, GgmlType::Q5K),
        (KDotFormat::Q6K, GgmlType::Q6K),
    ];

    /// `n` values, roughly normal, from `seed`.
    fn values(n: usize, seed: u32) -> Vec<f32> {
        let mut state = seed.wrapping_mul(2654435761).wrapping_add(12345);
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 8) as f32 / (1u32 << 24) as f32
        };
        (0..n)
            .map(|_| (next() + next() + next() + next() - 2.0) * 1.7)
            .collect()
    }

    /// `rows × cols` weights of `ty`, with their dequantized values.
    fn weights(ty: GgmlType, rows: usize, cols: usize, seed: u32) -> (QMatrix, Vec<f32>) {
        let mut x = values(rows * cols, seed);
        // Some rows with an offset, so that Q4_K's and Q5_K's minimums
        // are not all zero or all the same.
        for (r, row) in x.chunks_exact_mut(cols).enumerate() {
            row.iter_mut().for_each(|v| *v += (r % 3) as f32 * 0.9);
        }
        let q = QMatrix::quantize(&Tensor::from_vec(x, &[rows, cols]).unwrap(), ty);
        let full = q.dequantize().to_vec::<f32>().unwrap();
        (q, full)
    }

    /// The f64 product of dequantized weights and dequantized activations,
    /// and the sum of the magnitudes of its terms.
    fn exact(w: &[f32], a: Q8KRow<'_>) -> (f64, f64) {
        let (mut sum, mut size) = (0.0f64, 0.0f64);
        for (k, &v) in w.iter().enumerate() {
            let term = v as f64 * a.d[k / Q8K_BLOCK] as f64 * a.qs[k] as f64;
            sum += term;
            size += term.abs();
        }
        (sum, size)
    }

    fn assert_close(got: f32, (want, size): (f64, f64), what: &str) {
        assert!(
            (got as f64 - want).abs() <= 1e-5 * size + 1e-30,
            "{what}: {got} against {want} (terms' magnitude {size})"
        );
    }

    #[test]
    fn scales_and_minimums_unpack_as_the_block_format_s() {
        let packed: [u8; 12] = std::array::from_fn(|i| (i as u8).wrapping_mul(97).wrapping_add(13));
        let sm = scales_mins(&packed);
        for j in 0..8 {
            assert_eq!(
                (sm[j], sm[8 + j]),
                crate::quant::q4_k::scale_min(j, &packed),
                "sub-block {j}"
            );
        }
    }

    #[test]
    fn integer_dots_match_the_dequantized_product() {
        let (rows, cols) = (5usize, 3 * Q8K_BLOCK);
        for (format, ty) in FORMATS {
            let (q, full) = weights(ty, rows, cols, 7);
            let x = values(4 * cols, 11);
            let a = Q8KRows::quantize(&x, 4, cols);
            let row_bytes = q.row_bytes();
            assert_eq!(row_bytes, 3 * format.block_bytes());
            for n in 0..rows {
                let wr = &q.bytes()[n * row_bytes..(n + 1) * row_bytes];
                let wf = &full[n * cols..(n + 1) * cols];
                let four = dot_k4(format, wr, [a.row(0), a.row(1), a.row(2), a.row(3)]);
                for (r, &from_four) in four.iter().enumerate() {
                    let row = a.row(r);
                    let portable = dot_k_portable(format, wr, row);
                    // The same integers and the same float operations in the
                    // same order: the same bits on every path.
                    assert_eq!(dot_k(format, wr, row).to_bits(), portable.to_bits());
                    assert_eq!(from_four.to_bits(), portable.to_bits(), "{format:?}");
                    assert_close(portable, exact(wf, row), &format!("{format:?} {n} {r}"));
                }
            }
        }
    }

    #[test]
    fn the_avx2_path_is_the_portable_one_bit_for_bit() {
        if !has_avx2() {
            return;
        }
        let cols = 4 * Q8K_BLOCK;
        for (format, ty) in FORMATS {
            let (q, _) = weights(ty, 9, cols, 3);
            let x = values(4 * cols, 5);
            let a = Q8KRows::quantize(&x, 4, cols);
            let rows = [a.row(0), a.row(1), a.row(2), a.row(3)];
            for wr in q.bytes().chunks_exact(q.row_bytes()) {
                // SAFETY: this CPU has AVX2, FMA and F16C (checked above);
                // the row and the activations hold 4 super-blocks each.
                let (one, four) = unsafe {
                    (
                        avx2::dot::<1>(format, wr, [rows[1]])[0],
                        avx2::dot::<4>(format, wr, rows),
                    )
                };
                assert_eq!(one.to_bits(), dot_k_portable(format, wr, rows[1]).to_bits());
                for (r, row) in rows.iter().enumerate() {
                    assert_eq!(
                        four[r].to_bits(),
                        dot_k_portable(format, wr, *row).to_bits()
                    );
                }
            }
        }
    }

    #[test]
    fn rows_of_zeros_and_a_huge_value() {
        let cols = 2 * Q8K_BLOCK;
        for (format, ty) in FORMATS {
            let (q, full) = weights(ty, 2, cols, 13);
            let wr = &q.bytes()[..q.row_bytes()];
            let zeros = Q8KRows::quantize(&vec![0.0; cols], 1, cols);
            assert_eq!(dot_k(format, wr, zeros.row(0)), 0.0);
            assert_eq!(dot_k_portable(format, wr, zeros.row(0)), 0.0);
            // One huge activation: every other one quantizes to zero.
            let mut x = values(cols, 17);
            // Where the weight is largest (little cancellation between
            // Q4_K's scaled quants and minimums).
            let k = (256..512)
                .max_by(|&i, &j| full[i].abs().total_cmp(&full[j].abs()))
                .unwrap();
            x[k] = 3.0e30;
            let a = Q8KRows::quantize(&x, 1, cols);
            assert_eq!(a.row(0).qs[k], -127);
            let got = dot_k(format, wr, a.row(0));
            assert_eq!(
                got.to_bits(),
                dot_k_portable(format, wr, a.row(0)).to_bits()
            );
            assert_close(
                got,
                exact(&full[..cols], a.row(0)),
                &format!("{format:?} huge"),
            );
            assert!(
                (got as f64 / (full[k] as f64 * 3.0e30) - 1.0).abs() < 0.01,
                "{format:?}"
            );
            // A zero weight row and a weight row with one huge value.
            let mut wx = vec![0.0f32; 2 * cols];
            // (As large as the f16 super-block scales allow: 5e4 / 15 steps
            // is a Q4_K sub-block scale of 3333, its f16 `d` about 53.)
            wx[cols + 5] = 5.0e4;
            let wq = QMatrix::quantize(&Tensor::from_vec(wx, &[2, cols]).unwrap(), ty);
            let wfull = wq.dequantize().to_vec::<f32>().unwrap();
            let a = Q8KRows::quantize(&values(cols, 19), 1, cols);
            let (zero, huge) = wq.bytes().split_at(wq.row_bytes());
            assert_eq!(dot_k(format, zero, a.row(0)), 0.0);
            let got = dot_k(format, huge, a.row(0));
            assert_eq!(
                got.to_bits(),
                dot_k_portable(format, huge, a.row(0)).to_bits()
            );
            assert_close(
                got,
                exact(&wfull[cols..], a.row(0)),
                &format!("{format:?} huge weight"),
            );
        }
    }
}
