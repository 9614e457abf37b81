//! The quantized matrix product `out[m, n] = Σ_k x[m, k] · W[n, k]`:
//! weights stay in their blocks (a row of `W` is read straight from its
//! bytes, from a memory map or not), activations are quantized to 8 bits
//! per block once ([`Q8Rows`]), and every output is one integer dot
//! product per block ([`dot`]). Nothing dequantizes the matrix.
//!
//! Threads split `W`'s rows: each part reads its rows once and takes them
//! through every activation row while they are in cache. With several
//! activation rows the parts write `outᵀ` (their rows are contiguous
//! there), transposed into `out` at the end.

use rayon::prelude::*;

use super::dot::{dot, dot4, DotFormat};
use super::q8_rows::Q8Rows;

/// Activation rows taken through a part's weight rows at a time.
const ACTIVATION_BLOCK: usize = 64;

/// Multiply-adds below which the product stays on the calling thread.
const PARALLEL_WORK: usize = 1 << 17;

/// `out` (`a.rows() × n`, row-major) `= x · Wᵀ`, `W` the `n` rows of
/// `format` blocks in `w`, each `a.blocks()` blocks long.
pub fn product(format: DotFormat, w: &[u8], n: usize, a: &Q8Rows, out: &mut [f32]) {
    let m = a.rows();
    let row_bytes = a.blocks() * format.block_bytes();
    assert_eq!(w.len(), n * row_bytes, "quantized product: weight bytes");
    assert_eq!(out.len(), m * n, "quantized product: output length");
    if m == 0 || n == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    let parallel = threads > 1 && m * n * a.blocks() * 32 >= PARALLEL_WORK;
    // Rows of W per task: a few tasks per thread balance uneven cores.
    let rows_per_task = if parallel {
        n.div_ceil(threads * 4).max(8)
    } else {
        n
    };
    let fill = |first: usize, part: &mut [f32]| {
        // A block of activation rows at a time against every weight row of
        // the part: both stay in cache (a long prompt's rows alone are
        // larger than L2).
        for start in (0..m).step_by(ACTIVATION_BLOCK) {
            let end = (start + ACTIVATION_BLOCK).min(m);
            for (i, out_row) in part.chunks_exact_mut(m).enumerate() {
                let r = first + i;
                let wr = &w[r * row_bytes..(r + 1) * row_bytes];
                // Four activation rows at a time share each unpacked block.
                let mut k = start;
                while k + 4 <= end {
                    let four = dot4(
                        format,
                        wr,
                        [a.row(k), a.row(k + 1), a.row(k + 2), a.row(k + 3)],
                    );
                    out_row[k..k + 4].copy_from_slice(&four);
                    k += 4;
                }
                for (j, o) in out_row.iter_mut().enumerate().take(end).skip(k) {
                    *o = dot(format, wr, a.row(j));
                }
            }
        }
    };
    let run = |target: &mut [f32]| {
        if parallel {
            target
                .par_chunks_mut(rows_per_task * m)
                .enumerate()
                .for_each(|(t, part)| fill(t * rows_per_task, part));
        } else {
            fill(0, target);
        }
    };
    if m == 1 {
        run(out);
    } else {
        let mut transposed = vec![0.0f32; m * n];
        run(&mut transposed);
        for (r, col) in transposed.chunks_exact(m).enumerate() {
            for (k, &v) in col.iter().enumerate() {
                out[k * n + r] = v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use half::f16;

    use super::*;
    use crate::kernels::quant::Q8Rows;

    #[test]
    fn every_output_is_the_row_dot() {
        // Q8_0 weights, 6 blocks per row (a group of four and two single
        // ones), 37 rows; 70 activation rows (two activation blocks, the
        // second one ending in single rows).
        let (n, blocks, m) = (37usize, 6usize, 70usize);
        let mut w = Vec::new();
        for r in 0..n {
            for b in 0..blocks {
                w.extend(
                    f16::from_f32(0.01 * (1 + r % 5) as f32)
                        .to_bits()
                        .to_le_bytes(),
                );
                w.extend((0..32).map(|j| ((j * 7 + r * 3 + b) % 200) as i32 as i8 as u8));
            }
        }
        let x: Vec<f32> = (0..m * blocks * 32)
            .map(|i| (i % 17) as f32 - 8.0)
            .collect();
        let a = Q8Rows::quantize(&x, m, blocks * 32);
        let mut out = vec![0.0; m * n];
        product(DotFormat::Q8_0, &w, n, &a, &mut out);
        let row_bytes = blocks * 34;
        for k in 0..m {
            for r in 0..n {
                let want = dot(
                    DotFormat::Q8_0,
                    &w[r * row_bytes..(r + 1) * row_bytes],
                    a.row(k),
                );
                assert_eq!(out[k * n + r], want, "row {k}, column {r}");
            }
        }
    }
}
