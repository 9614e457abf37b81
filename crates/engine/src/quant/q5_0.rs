//! Q5_0: blocks of 32 values as an f16 scale and 5-bit quants (the low
//! four bits in nibbles, the fifth bits in a 32-bit word), value =
//! d * (q - 16). The quantizer is ggml's reference (`quantize_row_q5_0_ref`):
//! the scale is the value of largest magnitude over -16.

use half::f16;

use super::{signed_absmax, Block, GgmlType, QuantizeBlock};

/// One Q5_0 block (22 bytes), laid out as ggml's `block_q5_0`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ5_0 {
    /// The scale.
    pub d: f16,
    /// The fifth bits: bit `j` of this little-endian word belongs to value `j`.
    pub qh: [u8; 4],
    /// The low four bits: the low nibble of `qs[j]` is value `j`, the high
    /// nibble value `j + 16`.
    pub qs: [u8; 16],
}

const _: () = assert!(std::mem::size_of::<BlockQ5_0>() == 22);

impl Block for BlockQ5_0 {
    const TYPE: GgmlType = GgmlType::Q5_0;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ5_0 {
            d: f16::from_le_bytes([b[0], b[1]]),
            qh: b[2..6].try_into().unwrap(),
            qs: b[6..22].try_into().unwrap(),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..2].copy_from_slice(&self.d.to_le_bytes());
        out[2..6].copy_from_slice(&self.qh);
        out[6..22].copy_from_slice(&self.qs);
    }

    fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        let qh = u32::from_le_bytes(self.qh);
        let (lo, hi) = out.split_at_mut(16);
        for (j, ((&q, lo), hi)) in self.qs.iter().zip(lo).zip(hi).enumerate() {
            let h0 = ((qh >> j) << 4) & 0x10;
            let h1 = (qh >> (j + 12)) & 0x10;
            *lo = (((q & 0x0F) as u32 | h0) as i32 - 16) as f32 * d;
            *hi = (((q >> 4) as u32 | h1) as i32 - 16) as f32 * d;
        }
    }
}

impl QuantizeBlock for BlockQ5_0 {
    fn quantize(x: &[f32]) -> Self {
        let (_, max) = signed_absmax(x);
        let d = max / -16.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        let (mut qs, mut qh) = ([0u8; 16], 0u32);
        for (j, q) in qs.iter_mut().enumerate() {
            let x0 = ((x[j] * id + 16.5) as i8).min(31) as u8;
            let x1 = ((x[j + 16] * id + 16.5) as i8).min(31) as u8;
            *q = (x0 & 0x0F) | ((x1 & 0x0F) << 4);
            qh |= ((x0 as u32 & 0x10) >> 4) << j;
            qh |= ((x1 as u32 & 0x10) >> 4) << (j + 16);
        }
        BlockQ5_0 {
            d: f16::from_f32(d),
            qh: qh.to_le_bytes(),
            qs,
        }
    }
}

row_functions!(BlockQ5_0, "Q5_0", "32 values per 22 bytes", "q5_0");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fifth_bits_come_from_the_word() {
        // d = -16 / -16 = 1: value 0 is -16 (q 0), value 17 is 15 (q 31).
        let mut x = [0.0f32; 32];
        x[0] = -16.0;
        x[17] = 15.0;
        let b = BlockQ5_0::quantize(&x);
        assert_eq!(b.d.to_f32(), 1.0);
        let qh = u32::from_le_bytes(b.qh);
        assert_eq!(qh & 1, 0);
        assert_eq!((qh >> 17) & 1, 1);
        let mut out = [0.0f32; 32];
        b.dequantize(&mut out);
        assert_eq!(out.to_vec(), x.to_vec());
    }
}
