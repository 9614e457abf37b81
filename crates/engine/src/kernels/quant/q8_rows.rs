//! Activations quantized to 8 bits per block of 32, the left operand of the
//! quantized matrix product (llama.cpp's `block_q8_0`/`block_q8_1`: one
//! scale per block, `x ≈ d·q` with `q` in `[-127, 127]`).
//!
//! Each block also keeps `d · Σ q` (llama.cpp's `s`): a 4-bit weight
//! format with an offset (Q4_1's `m`, or Q4_0's implied `-8`) needs it to
//! turn the integer dot product of the raw nibbles into the dot product of
//! the values, without a second pass over the block.

use half::f16;

/// The elements one activation block scales together.
pub const Q8_BLOCK: usize = 32;

/// Rows of activations quantized per block of [`Q8_BLOCK`]: row `r`'s
/// block `b` is `qs[(r·blocks + b)·32 ..][..32]` scaled by `d[r·blocks + b]`.
#[derive(Clone, Debug, Default)]
pub struct Q8Rows {
    rows: usize,
    blocks: usize,
    d: Vec<f32>,
    sums: Vec<f32>,
    qs: Vec<i8>,
}

impl Q8Rows {
    /// Quantizes `x`, `rows` rows of `cols` values each (`cols` a multiple
    /// of [`Q8_BLOCK`], checked by the caller), as llama.cpp's reference
    /// `quantize_row_q8_0`: `d = max|x| / 127`, `q = round(x / d)` (half
    /// away from zero).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Self {
        debug_assert_eq!(x.len(), rows * cols);
        debug_assert_eq!(cols % Q8_BLOCK, 0);
        let blocks = cols / Q8_BLOCK;
        let n = rows * blocks;
        let mut out = Q8Rows {
            rows,
            blocks,
            d: vec![0.0; n],
            sums: vec![0.0; n],
            qs: vec![0; rows * cols],
        };
        for (((xb, qb), d), sum) in x
            .chunks_exact(Q8_BLOCK)
            .zip(out.qs.chunks_exact_mut(Q8_BLOCK))
            .zip(&mut out.d)
            .zip(&mut out.sums)
        {
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let scale = amax / 127.0;
            let inv = if scale != 0.0 { 1.0 / scale } else { 0.0 };
            let mut s = 0i32;
            for (q, &v) in qb.iter_mut().zip(xb) {
                // |v·inv| <= 127 by construction: the cast cannot saturate.
                *q = (v * inv).round() as i8;
                s += *q as i32;
            }
            // Stored as llama.cpp stores them, in f16 (the values were
            // quantized with the exact scale): products then match its
            // kernels' to the rounding of their own f32 sums.
            *d = f16::from_f32(scale).to_f32();
            *sum = f16::from_f32(scale * s as f32).to_f32();
        }
        out
    }

    /// Rows quantized.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Row `r`: its scales, block sums and quantized values.
    pub fn row(&self, r: usize) -> Q8Row<'_> {
        let b = r * self.blocks;
        Q8Row {
            d: &self.d[b..b + self.blocks],
            sums: &self.sums[b..b + self.blocks],
            qs: &self.qs[b * Q8_BLOCK..(b + self.blocks) * Q8_BLOCK],
        }
    }
}

/// One quantized activation row (see [`Q8Rows`]).
#[derive(Clone, Copy, Debug)]
pub struct Q8Row<'a> {
    /// Scale of each block.
    pub d: &'a [f32],
    /// `d · Σ q` of each block.
    pub sums: &'a [f32],
    /// The quantized values, 32 per block.
    pub qs: &'a [i8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_as_the_reference_and_keeps_sums() {
        let x: Vec<f32> = (0..64).map(|i| ((i as f32) * 0.37).sin() * 3.0).collect();
        let q = Q8Rows::quantize(&x, 1, 64);
        let row = q.row(0);
        for b in 0..2 {
            let xb = &x[b * 32..(b + 1) * 32];
            let amax = xb.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert_eq!(row.d[b], f16::from_f32(amax / 127.0).to_f32());
            let qb = &row.qs[b * 32..(b + 1) * 32];
            let exact_sum = (amax / 127.0) * qb.iter().map(|&v| v as i32).sum::<i32>() as f32;
            assert_eq!(f16::from_f32(exact_sum).to_f32(), row.sums[b]);
            assert!(qb.iter().any(|&v| v.abs() == 127));
            for (&v, &qv) in xb.iter().zip(qb) {
                // Half a step, and the f16 rounding of the scale over 127 steps.
                assert!((v - row.d[b] * qv as f32).abs() <= row.d[b] * 0.6 + 1e-6);
            }
        }
        let zeros = Q8Rows::quantize(&[0.0; 32], 1, 32);
        assert_eq!((zeros.row(0).d[0], zeros.row(0).sums[0]), (0.0, 0.0));
    }
}
