//! Q4_K: super-blocks of 256 values in 8 sub-blocks of 32. An f16
//! super-scale `d` and super-minimum `dmin`, per sub-block a 6-bit scale
//! and a 6-bit minimum packed into 12 bytes, and 4-bit quants: value =
//! d * scale * q - dmin * min.
//!
//! The quantizer is ggml's reference (`quantize_row_q4_K_ref`): each
//! sub-block's scale and minimum are searched for the least weighted
//! squared error (`make_qkx2_quants`, shared with Q5_K), the scales and
//! minimums quantized to 6 bits against the largest, and the values
//! quantized again with the rounded scales. Its arithmetic is ggml's, in
//! ggml's order, with no fused multiply-add, so the bytes are ggml's.

use half::f16;

use super::{Block, GgmlType, QuantizeBlock, QK_K};

/// One Q4_K super-block (144 bytes), laid out as ggml's `block_q4_K`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ4K {
    /// The super-block scale of the sub-block scales.
    pub d: f16,
    /// The super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and eight 6-bit minimums (see [`scale_min`]).
    pub scales: [u8; 12],
    /// The quants: for each 64 values, `qs[32 * c + l]` holds value
    /// `64 * c + l` in its low nibble and value `64 * c + 32 + l` in its high.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ4K>() == 144);

/// Sub-block `j`'s 6-bit scale and minimum from the 12 packed bytes
/// (ggml's `get_scale_min_k4`; shared by Q5_K): bytes 0..4 hold scales 0..4
/// in their low six bits, bytes 4..8 the minimums 0..4; bytes 8..12 hold
/// the low four bits of scales and minimums 4..8, whose top two bits are
/// the top bits of bytes 0..8.
#[inline]
pub fn scale_min(j: usize, q: &[u8; 12]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        (
            (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4),
            (q[j + 4] >> 4) | ((q[j] >> 6) << 4),
        )
    }
}

impl Block for BlockQ4K {
    const TYPE: GgmlType = GgmlType::Q4K;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ4K {
            d: f16::from_le_bytes([b[0], b[1]]),
            dmin: f16::from_le_bytes([b[2], b[3]]),
            scales: b[4..16].try_into().unwrap(),
            qs: b[16..144].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        out[4..16].copy_from_slice(&self.scales);
        out[16..144].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let block = (self.d, self.dmin, &self.scales, &self.qs);
        for_each_chunk(block, out, |_, q, [(d1, m1), (d2, m2)], y| {
            let (lo, hi) = y.split_at_mut(32);
            for ((&q, lo), hi) in q.iter().zip(lo).zip(hi) {
                *lo = d1 * (q & 0x0F) as f32 - m1;
                *hi = d2 * (q >> 4) as f32 - m2;
            }
        });
    }
}

/// The dequantization loop of a super-block `(d, dmin, scales, qs)` with
/// Q4_K's scales (shared by Q5_K): runs `chunk(c, q, [(d1, m1), (d2, m2)],
/// y)` for every 64 values `y` of `out`, chunk `c`, whose low four bits are
/// the 32 bytes `q` of `qs`, with `(d * scale, dmin * min)` of its two
/// sub-blocks ([`scale_min`]).
#[inline(always)]
pub(super) fn for_each_chunk(
    (d, dmin, scales, qs): (f16, f16, &[u8; 12], &[u8; QK_K / 2]),
    out: &mut [f32],
    mut chunk: impl FnMut(usize, &[u8], [(f32, f32); 2], &mut [f32]),
) {
    let (d, min) = (d.to_f32(), dmin.to_f32());
    for (c, (q, y)) in qs
        .chunks_exact(32)
        .zip(out.chunks_exact_mut(64))
        .enumerate()
    {
        let (sc1, m1) = scale_min(2 * c, scales);
        let (sc2, m2) = scale_min(2 * c + 1, scales);
        let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
        let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
        chunk(c, q, [(d1, m1), (d2, m2)], y);
    }
}

/// ggml's `nearest_int`: `x` rounded to the nearest integer, ties to even,
/// by adding 1.5 * 2^23 (exact for |x| < 2^22, which every caller keeps to;
/// other inputs give some integer, as in ggml).
#[inline]
pub(super) fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// ggml's `make_qkx2_quants`: quants `l` in `0..=nmax` of the values `x`
/// (at most 32) and the scale and minimum with the least weighted error
/// (squared, or absolute with `use_mad`) over `nstep + 1` trial scales
/// `(nmax + rmin + rdelta * is) / (max - min)`. Returns `(scale, -min)`,
/// the minimum being at most 0.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    l: &mut [u8],
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l[..n].fill(0);
        return (0.0, -min);
    }
    let error = |diff: f32| if use_mad { diff.abs() } else { diff * diff };
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        l[i] = nearest_int(iscale * (x[i] - min)).clamp(0, nmax) as u8;
        let diff = scale * l[i] as f32 + min - x[i];
        best_error += weights[i] * error(diff);
    }
    if nstep < 1 {
        return (scale, -min);
    }
    let mut laux = [0u8; 32];
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let q = nearest_int(iscale * (x[i] - min)).clamp(0, nmax);
            laux[i] = q as u8;
            let (w, q) = (weights[i], q as f32);
            sum_l += w * q;
            sum_l2 += w * q * q;
            sum_xl += w * q * x[i];
        }
        let d = sum_w * sum_l2 - sum_l * sum_l;
        if d > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / d;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / d;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * laux[i] as f32 + this_min - x[i];
                cur_error += weights[i] * error(diff);
            }
            if cur_error < best_error {
                l[..n].copy_from_slice(&laux[..n]);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// The first half of ggml's Q4_K and Q5_K quantizers: each sub-block of 32
/// searched by [`make_qkx2_quants`] with quants up to `nmax` (their quants
/// written to `l`), then the eight scales and minimums quantized to 6 bits
/// against the largest and packed. Returns `(d, dmin, scales)`.
pub(super) fn k_scales(
    x: &[f32],
    l: &mut [u8; QK_K],
    nmax: i32,
    rmin: f32,
    nstep: i32,
) -> (f16, f16, [u8; 12]) {
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    let mut weights = [0.0f32; 32];
    for j in 0..QK_K / 32 {
        let xs = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for &v in xs {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, &v) in weights.iter_mut().zip(xs) {
            *w = av_x + v.abs();
        }
        let (scale, min) = make_qkx2_quants(
            nmax,
            xs,
            &weights,
            &mut l[32 * j..32 * j + 32],
            rmin,
            0.1,
            nstep,
            false,
        );
        (scales[j], mins[j]) = (scale, min);
        if scale > max_scale {
            max_scale = scale;
        }
        if min > max_min {
            max_min = min;
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut packed = [0u8; 12];
    for j in 0..QK_K / 32 {
        // ggml stores the int in a uint8_t (mod 256) before the minimum.
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0x0F) | ((lm & 0x0F) << 4);
            packed[j - 4] |= (ls >> 4) << 6;
            packed[j] |= (lm >> 4) << 6;
        }
    }
    (
        f16::from_f32(max_scale / 63.0),
        f16::from_f32(max_min / 63.0),
        packed,
    )
}

/// The second half of ggml's Q4_K and Q5_K quantizers: each value quantized
/// again, to `0..=nmax`, with its sub-block's rounded scale and minimum (a
/// sub-block whose scale rounded to 0 keeps its first quants).
pub(super) fn k_requantize(
    x: &[f32],
    l: &mut [u8; QK_K],
    nmax: i32,
    d: f16,
    dmin: f16,
    scales: &[u8; 12],
) {
    for j in 0..QK_K / 32 {
        let (sc, m) = scale_min(j, scales);
        let d = d.to_f32() * sc as f32;
        if d == 0.0 {
            continue;
        }
        let dm = dmin.to_f32() * m as f32;
        for i in 32 * j..32 * j + 32 {
            l[i] = nearest_int((x[i] + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

impl QuantizeBlock for BlockQ4K {
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut l = [0u8; QK_K];
        let (d, dmin, scales) = k_scales(x, &mut l, 15, -1.0, 20);
        k_requantize(x, &mut l, 15, d, dmin, &scales);
        let mut qs = [0u8; QK_K / 2];
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            for (i, q) in q.iter_mut().enumerate() {
                *q = l[64 * c + i] | (l[64 * c + 32 + i] << 4);
            }
        }
        BlockQ4K {
            d,
            dmin,
            scales,
            qs,
        }
    }
}

row_functions!(BlockQ4K, "Q4_K", "256 values per 144 bytes", "q4_K");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_and_minimums_unpack_as_ggml() {
        // Scale j = j + 1 and minimum j = 60 - j, packed by hand.
        let (sc, mn): (Vec<u8>, Vec<u8>) = (0..8).map(|j| (j + 1, 60 - j)).unzip();
        let mut q = [0u8; 12];
        for j in 0..4 {
            q[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
            q[j + 4] = mn[j] | ((mn[j + 4] >> 4) << 6);
            q[j + 8] = (sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4);
        }
        for j in 0..8 {
            assert_eq!(scale_min(j, &q), (sc[j], mn[j]), "sub-block {j}");
        }
    }

    #[test]
    fn values_are_scale_times_quant_minus_min() {
        let mut b = BlockQ4K {
            d: f16::from_f32(0.5),
            dmin: f16::from_f32(0.25),
            scales: [0; 12],
            qs: [0; 128],
        };
        b.scales[0] = 2; // sub-block 0: scale 2 -> d1 = 1
        b.scales[4] = 4; // minimum 4 -> m1 = 1
        b.scales[1] = 3; // sub-block 1: d2 = 1.5, minimum 0
        b.qs[0] = 0x27; // value 0: 1 * 7 - 1 = 6; value 32: 1.5 * 2 = 3
        let mut out = [0.0f32; 256];
        b.dequantize(&mut out);
        assert_eq!((out[0], out[32], out[1]), (6.0, 3.0, -1.0));
        assert_eq!(out[64], 0.0);
    }
}
