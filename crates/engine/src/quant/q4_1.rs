//! Q4_1: blocks of 32 values as an f16 scale, an f16 minimum and 4-bit
//! quants, value = d * q + m. The quantizer is ggml's reference
//! (`quantize_row_q4_1_ref`): m is the block's minimum, d its range over 15.

use half::f16;

use super::{min_max, Block, GgmlType, QuantizeBlock};

/// One Q4_1 block (20 bytes), laid out as ggml's `block_q4_1`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ4_1 {
    /// The scale.
    pub d: f16,
    /// The minimum (the value of quant 0).
    pub m: f16,
    /// The quants: the low nibble of `qs[j]` is value `j`, the high nibble
    /// value `j + 16`.
    pub qs: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_1>() == 20);

impl Block for BlockQ4_1 {
    const TYPE: GgmlType = GgmlType::Q4_1;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ4_1 {
            d: f16::from_le_bytes([b[0], b[1]]),
            m: f16::from_le_bytes([b[2], b[3]]),
            qs: b[4..20].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..4].copy_from_slice(&self.m.to_le_bytes());
        out[4..20].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let (d, m) = (self.d.to_f32(), self.m.to_f32());
        let (lo, hi) = out.split_at_mut(16);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = (q & 0x0F) as f32 * d + m;
            *hi = (q >> 4) as f32 * d + m;
        }
    }
}

impl QuantizeBlock for BlockQ4_1 {
    fn quantize(x: &[f32]) -> Self {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
            let x1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
            *q = x0 | (x1 << 4);
        }
        BlockQ4_1 {
            d: f16::from_f32(d),
            m: f16::from_f32(min),
            qs,
        }
    }
}

row_functions!(BlockQ4_1, "Q4_1", "32 values per 20 bytes", "q4_1");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_of_sixteen_steps_is_exact() {
        // Values -1, 0, ..., 14, then 14 down to -1: min -1, range 15, d = 1.
        let x: Vec<f32> = (0..32)
            .map(|i| {
                if i < 16 {
                    i as f32 - 1.0
                } else {
                    30.0 - i as f32
                }
            })
            .collect();
        let b = BlockQ4_1::quantize(&x);
        assert_eq!((b.d.to_f32(), b.m.to_f32()), (1.0, -1.0));
        let mut out = [0.0f32; 32];
        b.dequantize(&mut out);
        assert_eq!(out.to_vec(), x);
        let mut bytes = [0u8; 20];
        b.write_bytes(&mut bytes);
        assert_eq!(BlockQ4_1::from_bytes(&bytes), b);
    }
}
