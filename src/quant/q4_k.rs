//! Q4_K: super-blocks of 256 values in 8 sub-blocks of 32. An f16
//! super-scale `d` and super-minimum `dmin`, per sub-block a 6-bit scale
//! and a 6-bit minimum packed into 12 bytes, and 4-bit quants: value =
//! d * scale * q - dmin * min.

use half::f16;

use super::{dequantize_blocks, Block, GgmlType, QK_K};

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
        let (d, min) = (self.d.to_f32(), self.dmin.to_f32());
        for (c, (q, y)) in self
            .qs
            .chunks_exact(32)
            .zip(out.chunks_exact_mut(64))
            .enumerate()
        {
            let (sc1, m1) = scale_min(2 * c, &self.scales);
            let (sc2, m2) = scale_min(2 * c + 1, &self.scales);
            let (d1, m1) = (d * sc1 as f32, min * m1 as f32);
            let (d2, m2) = (d * sc2 as f32, min * m2 as f32);
            let (lo, hi) = y.split_at_mut(32);
            for ((&q, lo), hi) in q.iter().zip(lo).zip(hi) {
                *lo = d1 * (q & 0x0F) as f32 - m1;
                *hi = d2 * (q >> 4) as f32 - m2;
            }
        }
    }
}

/// Dequantizes Q4_K `bytes` into `out` (256 values per 144 bytes).
///
/// # Panics
///
/// If `out` is not whole blocks or `bytes` is not their size (the checked
/// form is [`try_dequantize`](super::try_dequantize)).
pub fn dequantize_row(bytes: &[u8], out: &mut [f32]) {
    dequantize_blocks::<BlockQ4K>(bytes, out);
}

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
