//! Products with a quantized matrix through f32 tiles: a few of its rows
//! dequantized at a time, multiplied by `gemm`. The path of the formats
//! without an integer dot product here, and of `g · W`, the product the
//! gradient with respect to a quantized layer's input needs (its sums run
//! down the matrix's columns, across blocks). Memory stays at one tile.

use crate::base::error::Result;
use crate::kernels::matmul::{gemm_accumulate, gemm_overwrite, MatView};
use crate::quant::QMatrix;

/// Rows of the matrix dequantized at a time.
const TILE_ROWS: usize = 128;

/// Multiply-adds above which `gemm` splits a tile's product across threads.
const THREADED_WORK: usize = 1 << 18;

/// `out[m, n] = Σ_k x[m, k] · W[n, k]`: `x` is `m × cols`, `out` `m × rows`.
pub fn product_by_tiles(w: &QMatrix, x: &[f32], m: usize, out: &mut [f32]) -> Result<()> {
    let [rows, cols] = w.shape();
    assert!(
        x.len() == m * cols && out.len() == m * rows,
        "tiled quantized product: sizes"
    );
    if m == 0 || rows == 0 {
        return Ok(());
    }
    let mut tile = vec![0.0f32; TILE_ROWS.min(rows) * cols];
    for first in (0..rows).step_by(TILE_ROWS) {
        let n = TILE_ROWS.min(rows - first);
        let tile = &mut tile[..n * cols];
        w.try_dequantize_rows(first, tile)?;
        let dst = MatView {
            rows: m,
            cols: n,
            row_stride: rows,
            col_stride: 1,
        };
        let threaded = m * n * cols >= THREADED_WORK;
        gemm_overwrite(
            &mut out[first..],
            dst,
            x,
            MatView::rows(m, cols, cols),
            tile,
            MatView::rows(n, cols, cols).t(),
            threaded,
        );
    }
    Ok(())
}

/// `out[m, k] = Σ_n g[m, n] · W[n, k]`: `g` is `m × rows`, `out` `m × cols`.
pub fn transposed_product_by_tiles(
    w: &QMatrix,
    g: &[f32],
    m: usize,
    out: &mut [f32],
) -> Result<()> {
    let [rows, cols] = w.shape();
    assert!(
        g.len() == m * rows && out.len() == m * cols,
        "tiled quantized product: sizes"
    );
    out.fill(0.0);
    if m == 0 || rows == 0 {
        return Ok(());
    }
    let mut tile = vec![0.0f32; TILE_ROWS.min(rows) * cols];
    for first in (0..rows).step_by(TILE_ROWS) {
        let n = TILE_ROWS.min(rows - first);
        let tile = &mut tile[..n * cols];
        w.try_dequantize_rows(first, tile)?;
        let threaded = m * n * cols >= THREADED_WORK;
        gemm_accumulate(
            out,
            MatView::rows(m, cols, cols),
            &g[first..],
            MatView {
                rows: m,
                cols: n,
                row_stride: rows,
                col_stride: 1,
            },
            tile,
            MatView::rows(n, cols, cols),
            threaded,
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;
    use crate::tensor::Tensor;

    #[test]
    fn tiles_agree_with_the_dequantized_matrix() {
        let (rows, cols, m) = (70usize, 64usize, 3usize);
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
            .collect();
        let w = QMatrix::quantize(
            &Tensor::from_vec(data, &[rows, cols]).unwrap(),
            GgmlType::Q4_1,
        );
        let full = w.dequantize().to_vec::<f32>().unwrap();
        let x: Vec<f32> = (0..m * cols).map(|i| (i % 7) as f32 - 3.0).collect();
        let mut out = vec![0.0; m * rows];
        product_by_tiles(&w, &x, m, &mut out).unwrap();
        for i in 0..m {
            for n in 0..rows {
                let want: f32 = (0..cols)
                    .map(|k| x[i * cols + k] * full[n * cols + k])
                    .sum();
                assert!((out[i * rows + n] - want).abs() < 1e-3, "{i} {n}");
            }
        }
        let g: Vec<f32> = (0..m * rows).map(|i| (i % 5) as f32 - 2.0).collect();
        let mut dx = vec![1.0; m * cols];
        transposed_product_by_tiles(&w, &g, m, &mut dx).unwrap();
        for i in 0..m {
            for k in 0..cols {
                let want: f32 = (0..rows)
                    .map(|n| g[i * rows + n] * full[n * cols + k])
                    .sum();
                assert!((dx[i * cols + k] - want).abs() < 1e-3, "{i} {k}");
            }
        }
    }
}
