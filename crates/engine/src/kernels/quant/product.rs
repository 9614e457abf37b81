//! The quantized matrix product `out[m, n] = Σ_k x[m, k] · W[n, k]`:
//! weights stay in their blocks (a row of `W` is read straight from its
//! bytes, from a memory map or not), activations are quantized to 8 bits
//! once, per block of 32 ([`Q8Rows`]) for Q4_0, Q4_1 and Q8_0 weights
//! ([`product`]) or per super-block of 256 ([`Q8KRows`]) for Q4_K, Q5_K
//! and Q6_K ([`product_k`]), and every output is one integer dot product
//! per block ([`dot_eight`], [`dot_k`]). Nothing dequantizes the matrix.
//!
//! Threads split `W`'s rows: each part reads its rows once and takes them
//! through every activation row while they are in cache. With several
//! activation rows the parts write `outᵀ` (their rows are contiguous
//! there), transposed into `out` at the end.

use rayon::prelude::*;

use super::dot::{dot_eight, DotFormat, WEIGHT_ROWS};
use super::dot_k::{dot_k, dot_k4, KDotFormat};
use super::q8_rows::{Q8Rows, Q8_BLOCK};
use super::q8k_rows::{Q8KRows, Q8K_BLOCK};

/// Activation rows taken through a part's weight rows at a time.
const ACTIVATION_BLOCK: usize = 64;

/// Multiply-adds below which the product stays on the calling thread.
const PARALLEL_WORK: usize = 1 << 17;

/// `out` (`a.rows() × n`, row-major) `= x · Wᵀ`, `W` the `n` rows of
/// `format` blocks in `w`, each `a.blocks()` blocks long.
pub fn product(format: DotFormat, w: &[u8], n: usize, a: &Q8Rows, out: &mut [f32]) {
    let row_bytes = a.blocks() * format.block_bytes();
    let m = a.rows();
    let shape = Shape {
        m,
        n,
        cols: a.blocks() * Q8_BLOCK,
        row_bytes,
    };
    let rows: Vec<_> = (0..m).map(|k| a.row(k)).collect();
    by_weight_rows(shape, w, out, |first, part| {
        // Eight weight rows at a time against a block of activation rows:
        // `dot_eight` gives eight outputs per activation row.
        // On the stack: a worker thread that allocates gets its own heap
        // arena, which stays in the process's memory.
        let mut eight = [0.0f32; ACTIVATION_BLOCK * WEIGHT_ROWS];
        let count = part.len() / m;
        for start in (0..m).step_by(ACTIVATION_BLOCK) {
            let end = (start + ACTIVATION_BLOCK).min(m);
            let eight = &mut eight[..(end - start) * WEIGHT_ROWS];
            for i in (0..count).step_by(WEIGHT_ROWS) {
                let k = WEIGHT_ROWS.min(count - i);
                let r = first + i;
                let wr = &w[r * row_bytes..(r + k) * row_bytes];
                dot_eight(format, wr, k, &rows[start..end], eight);
                for (j, values) in eight.chunks_exact(WEIGHT_ROWS).enumerate() {
                    for (l, &v) in values[..k].iter().enumerate() {
                        part[(i + l) * m + start + j] = v;
                    }
                }
            }
        }
    });
}

/// [`product`] for the K-quants: `W` the `n` rows of `format`
/// super-blocks in `w`, each `a.blocks()` super-blocks long.
pub fn product_k(format: KDotFormat, w: &[u8], n: usize, a: &Q8KRows, out: &mut [f32]) {
    let row_bytes = a.blocks() * format.block_bytes();
    let m = a.rows();
    let shape = Shape {
        m,
        n,
        cols: a.blocks() * Q8K_BLOCK,
        row_bytes,
    };
    by_weight_rows(shape, w, out, |first, part| {
        // A block of activation rows at a time against every weight row of
        // the part: both stay in cache.
        for start in (0..m).step_by(ACTIVATION_BLOCK) {
            let end = (start + ACTIVATION_BLOCK).min(m);
            for (i, out_row) in part.chunks_exact_mut(m).enumerate() {
                let r = first + i;
                let wr = &w[r * row_bytes..(r + 1) * row_bytes];
                // Four activation rows at a time share each unpacked block.
                let mut k = start;
                while k + 4 <= end {
                    let rows = [a.row(k), a.row(k + 1), a.row(k + 2), a.row(k + 3)];
                    out_row[k..k + 4].copy_from_slice(&dot_k4(format, wr, rows));
                    k += 4;
                }
                for (j, o) in out_row.iter_mut().enumerate().take(end).skip(k) {
                    *o = dot_k(format, wr, a.row(j));
                }
            }
        }
    });
}

/// The sizes of a product: `m` activation rows, `n` weight rows of
/// `row_bytes` bytes, `cols` values each.
#[derive(Clone, Copy)]
struct Shape {
    m: usize,
    n: usize,
    cols: usize,
    row_bytes: usize,
}

/// The loop of both products: `fill(first, part)` writes the outputs of
/// the weight rows from `first` on, `part.len() / m` of them, into `part`
/// as `outᵀ` (each weight row's `m` outputs together). Parts start at a
/// multiple of eight rows, so `dot_eight`'s groups never straddle two.
fn by_weight_rows(
    Shape {
        m,
        n,
        cols,
        row_bytes,
    }: Shape,
    w: &[u8],
    out: &mut [f32],
    fill: impl Fn(usize, &mut [f32]) + Sync,
) {
    assert_eq!(w.len(), n * row_bytes, "quantized product: weight bytes");
    assert_eq!(out.len(), m * n, "quantized product: output length");
    if m == 0 || n == 0 {
        return;
    }
    let threads = rayon::current_num_threads();
    let parallel = threads > 1 && m * n * cols >= PARALLEL_WORK;
    // Rows of W per task: a few tasks per thread balance uneven cores.
    let rows_per_task = if parallel {
        n.div_ceil(threads * 4)
            .max(WEIGHT_ROWS)
            .next_multiple_of(WEIGHT_ROWS)
    } else {
        n
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
    use crate::kernels::quant::dot::dot;
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

    #[test]
    fn every_k_output_is_the_row_dot_on_any_number_of_threads() {
        use crate::quant::{GgmlType, QMatrix};
        use crate::tensor::Tensor;
        // 37 weight rows of 2 super-blocks; 70 activation rows (two
        // activation blocks, the second one ending in single rows), and 3
        // and 1 (a lone row writes `out` directly).
        let (n, cols) = (37usize, 2 * Q8K_BLOCK);
        let wx: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 30.0 + (i / cols % 3) as f32 * 0.5)
            .collect();
        let wt = Tensor::from_vec(wx, &[n, cols]).unwrap();
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(4)
            .build()
            .unwrap();
        for (format, ty) in [
            (KDotFormat::Q4K, GgmlType::Q4K),
            (KDotFormat::Q5K, GgmlType::Q5K),
            (KDotFormat::Q6K, GgmlType::Q6K),
        ] {
            let q = QMatrix::quantize(&wt, ty);
            for m in [70usize, 3, 1] {
                let x: Vec<f32> = (0..m * cols).map(|i| (i % 17) as f32 - 8.0).collect();
                let a = Q8KRows::quantize(&x, m, cols);
                let (mut one, mut four) = (vec![0.0; m * n], vec![0.0; m * n]);
                rayon::ThreadPoolBuilder::new()
                    .num_threads(1)
                    .build()
                    .unwrap()
                    .install(|| product_k(format, q.bytes(), n, &a, &mut one));
                pool.install(|| product_k(format, q.bytes(), n, &a, &mut four));
                let row_bytes = q.row_bytes();
                for k in 0..m {
                    for r in 0..n {
                        let want = dot_k(
                            format,
                            &q.bytes()[r * row_bytes..(r + 1) * row_bytes],
                            a.row(k),
                        );
                        assert_eq!(
                            one[k * n + r].to_bits(),
                            want.to_bits(),
                            "{format:?} {m}: row {k}, column {r}"
                        );
                        assert_eq!(
                            four[k * n + r].to_bits(),
                            want.to_bits(),
                            "{format:?} {m}: row {k}, column {r}"
                        );
                    }
                }
            }
        }
    }
}
