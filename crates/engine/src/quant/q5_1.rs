//! Q5_1: blocks of 32 values as an f16 scale, an f16 minimum and 5-bit
//! quants (the fifth bits in a 32-bit word), value = d * q + m. The
//! quantizer is ggml's reference (`quantize_row_q5_1_ref`): m is the
//! block's minimum, d its range over 31.

use half::f16;

use super::{min_max, Block, GgmlType, QuantizeBlock};

/// One Q5_1 block (24 bytes), laid out as ggml's `block_q5_1`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ5_1 {
    /// The scale.
    pub d: f16,
    /// The minimum (the value of quant 0).
    pub m: f16,
    /// The fifth bits: bit `j` of this little-endian word belongs to value `j`.
    pub qh: [u8; 4],
    /// The low four bits: the low nibble of `qs[j]` is value `j`, the high
    /// nibble value `j + 16`.
    pub qs: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_1>() == 24);

impl Block for BlockQ5_1 {
    const TYPE: GgmlType = GgmlType::Q5_1;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ5_1 {
            d: f16::from_le_bytes([b[0], b[1]]),
            m: f16::from_le_bytes([b[2], b[3]]),
            qh: b[4..8].try_into().unwrap(),
            qs: b[8..24].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..8].copy_from_slice(&self.qh);
        out[8..24].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out.split_at_mut(16);
        for (j, ((&q, lo), hi)) in self.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            *lo = ((q & 0x0F) as u32 | h0) as f32 * d + m;
            *hi = ((q >> 4) as u32 | h1) as f32 * d + m;
        }
    }
}

impl QuantizeBlock for BlockQ5_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (mut qs, mut qh) = ([0u8; 16], 0u32);
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (((x[j] - min) * id + 0.5) as i8).min(31) as u8;
            let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(31) as u8;
            *q = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= ((x0 as u32 & 0x10) >> 4) << j;
            qh |= ((x1 as u32 & 0x10) >> 4) << (j + 16);
        }
        BlockQ5_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qh: qh.to_le_bytes(),
            qs,
        }
    }
}

row_functions!(BlockQ5_1, "Q5_1", "32 values per 24 bytes", "q5_1");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_of_thirty_two_steps_is_exact() {
        let x: Vec<f32> = (0..32).map(|i| i as f32 - 3.0).collect();
        let b = BlockQ5_1::quantize(&x);
        assert_eq!((b.d.to_f32(), b.m.to_f32()), (1.0, -3.0));
        let mut out = [0.0f32; 32];
        b.dequantize(&mut out);
        assert_eq!(out.to_vec(), x);
    }
}
