//! Q4_0: blocks of 32 values as an f16 scale and 4-bit quants,
//! value = d * (q - 8). The quantizer is ggml's reference
//! (`quantize_row_q4_0_ref`): the scale is the value of largest magnitude
//! over -8.

use half::f16;

use super::{signed_absmax, Block, GgmlType, QuantizeBlock};

/// One Q4_0 block (18 bytes), laid out as ggml's `block_q4_0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ4_0 {
    /// The scale.
    pub d: f16,
    /// The quants: the low nibble of `qs[j]` is value `j`, the high nibble
    /// value `j + 16`.
    pub qs: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ4_0>() == 18);

impl Block for BlockQ4_0 {
    const TYPE: GgmlType = GgmlType::Q4_0;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ4_0 {
            d: f16::from_le_bytes([b[0], b[1]]),
            qs: b[2..18].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..18].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        let (lo, hi) = out.split_at_mut(16);
        for ((&q, lo), hi) in self.qs.iter().zip(lo).zip(hi) {
            *lo = ((q & 0x0F) as i32 - 8) as f32 * d;
            *hi = ((q >> 4) as i32 - 8) as f32 * d;
        }
    }
}

impl QuantizeBlock for BlockQ4_0 {
    fn quantize(x: &[f32]) -> Self {
        // The value of largest magnitude (the first, on a tie), with its sign.
        let (_, max) = signed_absmax(x);
        let d = max / -8.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let mut qs = [0u8; 16];
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
            let x1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
            *q = x0 | (x1 << 4);
        }
        BlockQ4_0 {
            d: f16::from_f32(d),
            qs,
        }
    }
}

row_functions!(BlockQ4_0, "Q4_0", "32 values per 18 bytes", "q4_0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn low_nibbles_are_the_first_half() {
        let mut qs = [0u8; 16];
        qs[0] = 0x9F; // value 0: 15 - 8 = 7, value 16: 9 - 8 = 1
        let b = BlockQ4_0 {
            d: f16::from_f32(0.5),
            qs,
        };
        let mut out = [0.0f32; 32];
        b.dequantize(&mut out);
        assert_eq!((out[0], out[16], out[1]), (3.5, 0.5, -4.0));
    }

    #[test]
    fn quantize_scales_by_the_largest_magnitude() {
        let mut x = [0.0f32; 32];
        x[3] = -4.0; // d = -4 / -8 = 0.5, so -4 -> q 0
        x[20] = 2.0; // 2 / 0.5 = 4 -> q 12
        let b = BlockQ4_0::quantize(&x);
        assert_eq!(b.d.to_f32(), 0.5);
        let mut out = [0.0f32; 32];
        b.dequantize(&mut out);
        assert_eq!((out[3], out[20], out[0]), (-4.0, 2.0, 0.0));
        // All zeros: a zero scale, every quant 8.
        let z = BlockQ4_0::quantize(&[0.0; 32]);
        assert_eq!((z.d.to_f32(), z.qs), (0.0, [0x88; 16]));
    }
}
