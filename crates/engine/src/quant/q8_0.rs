//! Q8_0: blocks of 32 values as an f16 scale and i8 quants, value = d * q.
//! The quantizer is ggml's reference (`quantize_row_q8_0_ref`): d is the
//! largest magnitude over 127, quants rounded half away from zero.

use half::f16;

use super::{Block, GgmlType, QuantizeBlock};

/// One Q8_0 block (34 bytes), laid out as ggml's `block_q8_0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ8_0 {
    /// The scale.
    pub d: f16,
    /// The quants, one per value.
    pub qs: [i8; 32],
}

const _: () = assert!(std::mem::size_of::<BlockQ8_0>() == 34);

impl Block for BlockQ8_0 {
    const TYPE: GgmlType = GgmlType::Q8_0;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ8_0 {
            d: f16::from_le_bytes([b[0], b[1]]),
            qs: std::array::from_fn(|j| b[2 + j] as i8),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        for (o, &q) in out[2..34].iter_mut().zip(&self.qs) {
            *o = q as u8;
        }
    }

    fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (o, &q) in out.iter_mut().zip(&self.qs) {
            *o = q as f32 * d;
        }
    }
}

impl QuantizeBlock for BlockQ8_0 {
    fn quantize(x: &[f32]) -> Self {
        let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        BlockQ8_0 {
            d: f16::from_f32(d),
            // `round` is C's roundf: halves away from zero.
            qs: std::array::from_fn(|j| (x[j] * id).round() as i8),
        }
    }
}

row_functions!(BlockQ8_0, "Q8_0", "32 values per 34 bytes", "q8_0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quants_round_half_away_from_zero() {
        let mut x = [0.0f32; 32];
        x[0] = 127.0; // d = 1
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = -127.0;
        let b = BlockQ8_0::quantize(&x);
        assert_eq!(b.d.to_f32(), 1.0);
        assert_eq!(&b.qs[..4], &[127, 3, -3, -127]);
        let mut bytes = [0u8; 34];
        b.write_bytes(&mut bytes);
        assert_eq!(BlockQ8_0::from_bytes(&bytes), b);
    }
}
