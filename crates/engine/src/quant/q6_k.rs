//! Q6_K: super-blocks of 256 values in 16 sub-blocks of 16. An f16
//! super-scale `d`, an i8 scale per sub-block, and 6-bit quants (the low
//! four bits in `ql`, the top two in `qh`): value = d * scale * (q - 32).
//!
//! The quantizer is ggml's reference (`quantize_row_q6_K_ref`): each
//! sub-block's scale is searched for the least error weighted by the
//! squared values (`make_qx_quants`), the scales quantized to i8 against
//! the largest, and the values quantized again with the rounded scales.

use half::f16;

use super::q4_k::nearest_int;
use super::{signed_absmax, Block, GgmlType, QuantizeBlock, QK_K};

/// One Q6_K super-block (210 bytes), laid out as ggml's `block_q6_K`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlockQ6K {
    /// The low four bits of the quants: for each 128 values, `ql[64 * h + l]`
    /// holds value `128 * h + l` in its low nibble and `128 * h + 64 + l` in
    /// its high, and `ql[64 * h + 32 + l]` values `+ 32` and `+ 96`.
    pub ql: [u8; QK_K / 2],
    /// The top two bits: `qh[32 * h + l]` holds, from bit 0 up, those of
    /// values `128 * h + l`, `+ 32`, `+ 64` and `+ 96`.
    pub qh: [u8; QK_K / 4],
    /// The scale of each sub-block of 16.
    pub scales: [i8; QK_K / 16],
    /// The super-block scale.
    pub d: f16,
}

const _: () = assert!(std::mem::size_of::<BlockQ6K>() == 210);

impl Block for BlockQ6K {
    const TYPE: GgmlType = GgmlType::Q6K;

    fn from_bytes(b: &[u8]) -> Self {
        BlockQ6K {
            ql: b[0..128].try_into().unwrap(),
            qh: b[128..192].try_into().unwrap(),
            scales: std::array::from_fn(|j| b[192 + j] as i8),
            d: f16::from_le_bytes([b[208], b[209]]),
        }
    }

    fn write_bytes(&self, out: &mut [u8]) {
        out[0..128].copy_from_slice(&self.ql);
        out[128..192].copy_from_slice(&self.qh);
        for (o, &s) in out[192..208].iter_mut().zip(&self.scales) {
            *o = s as u8;
        }
        out[208..210].copy_from_slice(&self.d.to_le_bytes());
    }

    fn dequantize(&self, out: &mut [f32]) {
        let d = self.d.to_f32();
        for (h, y) in out.chunks_exact_mut(128).enumerate() {
            let ql = &self.ql[64 * h..64 * h + 64];
            let qh = &self.qh[32 * h..32 * h + 32];
            let sc = &self.scales[8 * h..8 * h + 8];
            for l in 0..32 {
                let is = l / 16;
                let q1 = ((ql[l] & 0x0F) | ((qh[l] & 3) << 4)) as i32 - 32;
                let q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) as i32 - 32;
                let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i32 - 32;
                let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i32 - 32;
                y[l] = d * sc[is] as f32 * q1 as f32;
                y[l + 32] = d * sc[is + 2] as f32 * q2 as f32;
                y[l + 64] = d * sc[is + 4] as f32 * q3 as f32;
                y[l + 96] = d * sc[is + 6] as f32 * q4 as f32;
            }
        }
    }
}

/// ggml's `GROUP_MAX_EPS`: a group whose largest magnitude is below it is all zero.
const GROUP_MAX_EPS: f32 = 1e-15;

/// ggml's `make_qx_quants` with `rmse_type` 1 and no importance weights:
/// quants `l` in `0..2 * nmax` (offset by `nmax`) of the values `x` and the
/// scale with the least error weighted by `x * x` over 19 trial scales.
fn make_qx_quants(nmax: i32, x: &[f32], l: &mut [u8]) -> f32 {
    let (amax, max) = signed_absmax(x);
    if amax < GROUP_MAX_EPS {
        l[..x.len()].fill(0);
        return 0.0;
    }
    let quant = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // The weighted sums of x * q and q * q for the quants of `iscale`.
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let (w, q) = (v * v, quant(iscale, v) as f32);
            sumlx += w * v * q;
            suml2 += w * q * q;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (q, &v) in l.iter_mut().zip(x) {
        *q = (quant(iscale, v) + nmax) as u8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in (-9..=9).filter(|&is| is != 0) {
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in l.iter_mut().zip(x) {
                *q = (quant(iscale, v) + nmax) as u8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

impl QuantizeBlock for BlockQ6K {
    fn quantize(x: &[f32]) -> Self {
        let x = &x[..QK_K];
        let mut l = [0u8; QK_K];
        let mut scales = [0.0f32; QK_K / 16];
        let (mut max_scale, mut max_abs_scale) = (0.0f32, 0.0f32);
        for (ib, scale) in scales.iter_mut().enumerate() {
            *scale = make_qx_quants(32, &x[16 * ib..16 * ib + 16], &mut l[16 * ib..16 * ib + 16]);
            if scale.abs() > max_abs_scale {
                max_abs_scale = scale.abs();
                max_scale = *scale;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            return BlockQ6K {
                ql: [0; QK_K / 2],
                qh: [0; QK_K / 4],
                scales: [0; QK_K / 16],
                d: f16::ZERO,
            };
        }
        let iscale = -128.0 / max_scale;
        let d = f16::from_f32(1.0 / iscale);
        // ggml stores the int in an int8_t (wrapping) after the minimum.
        let sc: [i8; QK_K / 16] =
            std::array::from_fn(|ib| nearest_int(iscale * scales[ib]).min(127) as i8);
        for (j, &s) in sc.iter().enumerate() {
            let d = d.to_f32() * s as f32;
            if d == 0.0 {
                continue;
            }
            for i in 16 * j..16 * j + 16 {
                l[i] = (nearest_int(x[i] / d).clamp(-32, 31) + 32) as u8;
            }
        }
        let (mut ql, mut qh) = ([0u8; QK_K / 2], [0u8; QK_K / 4]);
        for h in 0..2 {
            let (l, ql, qh) = (
                &l[128 * h..128 * h + 128],
                &mut ql[64 * h..64 * h + 64],
                &mut qh[32 * h..32 * h + 32],
            );
            for i in 0..32 {
                ql[i] = (l[i] & 0x0F) | ((l[i + 64] & 0x0F) << 4);
                ql[i + 32] = (l[i + 32] & 0x0F) | ((l[i + 96] & 0x0F) << 4);
                qh[i] = (l[i] >> 4)
                    | ((l[i + 32] >> 4) << 2)
                    | ((l[i + 64] >> 4) << 4)
                    | ((l[i + 96] >> 4) << 6);
            }
        }
        BlockQ6K {
            ql,
            qh,
            scales: sc,
            d,
        }
    }
}

row_functions!(BlockQ6K, "Q6_K", "256 values per 210 bytes", "q6_K");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn six_bit_quants_are_centred_on_32() {
        let mut b = BlockQ6K {
            ql: [0; 128],
            qh: [0; 64],
            scales: [1; 16],
            d: f16::from_f32(0.5),
        };
        b.scales[2] = -2; // sub-block 2: values 32..48
        b.ql[0] = 0xF0; // value 0 low bits 0, value 64 low bits 15
        b.qh[0] = 0b0001_1011; // value 0 top 3, value 32 top 2, value 64 top 1
        b.ql[32] = 0x05; // value 32 low bits 5
        let mut out = [0.0f32; 256];
        b.dequantize(&mut out);
        // value 0: 48 - 32 = 16 -> 8; value 32: 37 - 32 = 5, scale -2 -> -5;
        // value 64: 31 - 32 = -1 -> -0.5; value 1: -32 -> -16.
        assert_eq!((out[0], out[32], out[64], out[1]), (8.0, -5.0, -0.5, -16.0));
        let mut bytes = [0u8; 210];
        b.write_bytes(&mut bytes);
        assert_eq!(BlockQ6K::from_bytes(&bytes), b);
    }
}
