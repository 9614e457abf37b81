//! Q5_K: super-blocks of 256 values in 8 sub-blocks of 32, as Q4_K with a
//! fifth bit per quant: value = d * scale * q - dmin * min, q in 0..32.
//! The quantizer is ggml's reference (`quantize_row_q5_K_ref`), Q4_K's
//! search with 31 steps.

use half::f16;

use super::q4_k::{for_each_chunk, k_requantize, k_scales};
use super::{Block, GgmlType, QuantizeBlock, QK_K};

/// One Q5_K super-block (176 bytes), laid out as ggml's `block_q5_K`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ5K {
    /// The super-block scale of the sub-block scales.
    pub d: f16,
    /// The super-block scale of the sub-block minimums.
    pub dmin: f16,
    /// Eight 6-bit scales and minimums, packed as Q4_K's
    /// ([`scale_min`](super::q4_k::scale_min)).
    pub scales: [u8; 12],
    /// The fifth bits: bit `s` of `qh[l]` belongs to value `l` of sub-block `s`.
    pub qh: [u8; QK_K / 8],
    /// The low four bits, packed as Q4_K's quants.
    pub qs: [u8; QK_K / 2],
}

const _: () = assert!(std::mem::size_of::<BlockQ5K>() == 176);

impl Block for BlockQ5K {
    const TYPE: GgmlType = GgmlType::Q5K;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ5K {
            d: f16::from_le_bytes([b[0], b[1]]),
            dmin: f16::from_le_bytes([b[2], b[3]]),
            scales: b[4..16].try_into().unwrap(),
            qh: b[16..48].try_into().unwrap(),
            qs: b[48..176].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.dmin.to_le_bytes());
        out[4..16].copy_from_slice(&self.scales);
        out[16..48].copy_from_slice(&self.qh);
        out[48..176].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let block = (self.d, self.dmin, &self.scales, &self.qs);
        for_each_chunk(block, out, |c, ql, [(d1, m1), (d2, m2)], y| {
            let (u1, u2) = (1u8 << (2 * c), 2u8 << (2 * c));
            let (lo, hi) = y.split_at_mut(32);
            for (((&q, &h), lo), hi) in ql.iter().zip(&self.qh).zip(lo).zip(hi) {
                let h1 = if h & u1 != 0 { 16 } else { 0 };
                let h2 = if h & u2 != 0 { 16 } else { 0 };
                *lo = d1 * ((q & 0x0F) + h1) as f32 - m1;
                *hi = d2 * ((q >> 4) + h2) as f32 - m2;
            }
        });
    }
}

impl QuantizeBlock for BlockQ5K {
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut l = [0u8; QK_K];
        let (d, dmin, scales) = k_scales(x, &mut l, 31, -0.5, 15);
        k_requantize(x, &mut l, 31, d, dmin, &scales);
        let (mut qh, mut qs) = ([0u8; QK_K / 8], [0u8; QK_K / 2]);
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for (i, q) in q.iter_mut().enumerate() {
                let (mut l1, mut l2) = (l[64 * c + i], l[64 * c + 32 + i]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[i] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[i] |= m2;
                }
                *q = l1 | (l2 << 4);
            }
        }
        BlockQ5K {
            d,
            dmin,
            scales,
            qh,
            qs,
        }
    }
}

row_functions!(BlockQ5K, "Q5_K", "256 values per 176 bytes", "q5_K");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fifth_bit_adds_sixteen() {
        let mut b = BlockQ5K {
            d: f16::from_f32(1.0),
            dmin: f16::from_f32(0.0),
            scales: [1; 12],
            qh: [0; 32],
            qs: [0; 128],
        };
        b.qs[0] = 0x21;
        b.qh[0] = 0b0000_0110; // sub-blocks 1 (value 32) and 2 (value 64)
        let mut out = [0.0f32; 256];
        b.dequantize(&mut out);
        assert_eq!((out[0], out[32], out[64], out[96]), (1.0, 18.0, 16.0, 0.0));
    }
}
