//! Activations quantized to 8 bits per super-block of 256, the left
//! operand of the K-quant products (llama.cpp's `block_q8_K`: one f32
//! scale per super-block, `x ≈ d·q` with `q` in `[-127, 127]`).
//!
//! Each super-block also keeps the sums of its sixteen groups of 16 quants
//! (`bsums`): Q4_K and Q5_K subtract `dmin·min` from every weight of a
//! sub-block, and the sum of the activations it multiplies is then a sum
//! of two of these, not a second pass over the values.
//!
//! The quantizer is llama.cpp's reference, `quantize_row_q8_K_ref`, to the
//! bit: the scale divides by the signed value of largest magnitude (the
//! first such, so `d` carries its sign, negated), quants round half to
//! even, and `d` is stored as `1/iscale`, not as `max/127`.

/// The elements one activation super-block scales together (ggml's `QK_K`).
pub const Q8K_BLOCK: usize = 256;

/// The elements each of a super-block's sums covers.
pub const Q8K_GROUP: usize = 16;

/// Rows of activations quantized per super-block of [`Q8K_BLOCK`]: row
/// `r`'s super-block `b` is `qs[(r·blocks + b)·256 ..][..256]` scaled by
/// `d[r·blocks + b]`, with its group sums at `bsums[(r·blocks + b)·16 ..]`.
#[derive(Clone, Debug, Default)]
pub struct Q8KRows {
    rows: usize,
    blocks: usize,
    d: Vec<f32>,
    bsums: Vec<i16>,
    qs: Vec<i8>,
}

/// ggml's `nearest_int`: `x` rounded to the nearest integer, ties to even,
/// through the bits of `x + 1.5·2²³` (exact for |x| < 2²², which finite
/// scales keep to; other inputs give the integer ggml's gives).
#[inline(always)]
fn nearest_int(x: f32) -> i32 {
    let val = x + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// One super-block of `x` into `qs` and `bsums`; returns its scale.
fn quantize_block(x: &[f32], qs: &mut [i8], bsums: &mut [i16]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        let ax = v.abs();
        if ax > amax {
            amax = ax;
            max = v;
        }
    }
    if amax == 0.0 {
        qs.fill(0);
        bsums.fill(0);
        return 0.0;
    }
    let iscale = -127.0 / max;
    for (q, &v) in qs.iter_mut().zip(x) {
        // `as i8` keeps the low byte, as ggml's store into an int8_t does
        // (only a non-finite scale reaches past [-127, 127]).
        *q = nearest_int(iscale * v).min(127) as i8;
    }
    for (sum, group) in bsums.iter_mut().zip(qs.chunks_exact(Q8K_GROUP)) {
        *sum = group.iter().map(|&q| q as i16).sum();
    }
    1.0 / iscale
}

impl Q8KRows {
    /// Quantizes `x`, `rows` rows of `cols` values each (`cols` a multiple
    /// of [`Q8K_BLOCK`], checked by the caller), as llama.cpp's
    /// `quantize_row_q8_K_ref` does (see the module docs).
    pub fn quantize(x: &[f32], rows: usize, cols: usize) -> Self {
        debug_assert_eq!(x.len(), rows * cols);
        debug_assert_eq!(cols % Q8K_BLOCK, 0);
        let blocks = cols / Q8K_BLOCK;
        let n = rows * blocks;
        let mut out = Q8KRows {
            rows,
            blocks,
            d: vec![0.0; n],
            bsums: vec![0; n * (Q8K_BLOCK / Q8K_GROUP)],
            qs: vec![0; rows * cols],
        };
        for (((xb, qb), d), sums) in x
            .chunks_exact(Q8K_BLOCK)
            .zip(out.qs.chunks_exact_mut(Q8K_BLOCK))
            .zip(&mut out.d)
            .zip(out.bsums.chunks_exact_mut(Q8K_BLOCK / Q8K_GROUP))
        {
            *d = quantize_block(xb, qb, sums);
        }
        out
    }

    /// Rows quantized.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Super-blocks per row.
    pub fn blocks(&self) -> usize {
        self.blocks
    }

    /// Row `r`: its scales, group sums and quantized values.
    pub fn row(&self, r: usize) -> Q8KRow<'_> {
        let b = r * self.blocks;
        let groups = Q8K_BLOCK / Q8K_GROUP;
        Q8KRow {
            d: &self.d[b..b + self.blocks],
            bsums: &self.bsums[b * groups..(b + self.blocks) * groups],
            qs: &self.qs[b * Q8K_BLOCK..(b + self.blocks) * Q8K_BLOCK],
        }
    }
}

/// One quantized activation row (see [`Q8KRows`]).
#[derive(Clone, Copy, Debug)]
pub struct Q8KRow<'a> {
    /// Scale of each super-block.
    pub d: &'a [f32],
    /// Sum of each 16 quants, 16 per super-block.
    pub bsums: &'a [i16],
    /// The quantized values, 256 per super-block.
    pub qs: &'a [i8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_as_the_reference_to_the_bit() {
        let mut x = vec![0.0f32; 3 * Q8K_BLOCK];
        // Super-block 0: the largest magnitude is 127, positive, so
        // iscale = -1 and d = -1: quants are the negated values, rounded
        // half to even.
        x[..8].copy_from_slice(&[127.0, 3.5, 2.5, -0.5, 1.49, -126.6, 0.5, -2.5]);
        // Super-block 1: the largest magnitude is -254 (its first
        // occurrence: +254 later does not replace it), so iscale = 0.5 and
        // d = 2.
        x[256..264].copy_from_slice(&[3.0, 1.0, 5.0, -254.0, 254.0, -3.0, 7.0, 100.0]);
        x[256 + 16] = 9.0; // in the second group
                           // Super-block 2: all zero.
        let q = Q8KRows::quantize(&x, 1, 3 * Q8K_BLOCK);
        assert_eq!((q.rows(), q.blocks()), (1, 3));
        let row = q.row(0);
        assert_eq!(row.d, &[-1.0, 2.0, 0.0]);
        assert_eq!(&row.qs[..8], &[-127, -4, -2, 0, -1, 127, 0, 2]);
        assert!(row.qs[8..256].iter().all(|&v| v == 0));
        // 1.5 -> 2, 0.5 -> 0, 2.5 -> 2, -127, 127, -1.5 -> -2, 3.5 -> 4, 50.
        assert_eq!(&row.qs[256..264], &[2, 0, 2, -127, 127, -2, 4, 50]);
        assert_eq!(row.qs[256 + 16], 4); // 4.5 -> 4
        assert_eq!(&row.bsums[..2], &[-127 - 4 - 2 - 1 + 127 + 2, 0]);
        assert_eq!(&row.bsums[16..18], &[2 + 2 - 127 + 127 - 2 + 4 + 50, 4]);
        assert!(row.qs[512..].iter().all(|&v| v == 0));
        assert!(row.bsums[32..].iter().all(|&v| v == 0));
        // Rows are independent, and d is stored as 1/iscale, as the
        // reference stores it (not as -max/127).
        let small: Vec<f32> = (0..2 * Q8K_BLOCK)
            .map(|i| if i % 256 == 0 { 1.27 } else { 0.0 })
            .collect();
        let q = Q8KRows::quantize(&small, 2, Q8K_BLOCK);
        let iscale = -127.0f32 / 1.27;
        assert_eq!(q.row(1).d, &[1.0 / iscale]);
        assert_eq!(q.row(1).qs[0], -127);
    }

    #[test]
    fn rounds_through_ggml_s_bits() {
        for (v, want) in [
            (0.5f32, 0),
            (1.5, 2),
            (-2.5, -2),
            (-3.5, -4),
            (126.49, 126),
            (-127.0, -127),
        ] {
            assert_eq!(nearest_int(v), want, "{v}");
        }
    }
}
