//! `quantized_matmul`: `x · Wᵀ` with a frozen quantized weight
//! ([`QMatrix`]), the product of a quantized linear layer, and its
//! derivative `quantized_matmul_transposed` (`g · W`).
//!
//! A few activation rows (decoding, short prompts) multiply Q4_0, Q4_1 and
//! Q8_0 weights quantized to 8 bits per block of 32, and Q4_K, Q5_K and
//! Q6_K weights quantized to 8 bits per super-block of 256 (llama.cpp's
//! Q8_K), with integer dot products (`kernels::quant::product` and
//! `product_k`), as llama.cpp does on CPUs; from [`EXACT_ROWS`] rows on
//! (long prompts, training batches), and for the other formats (Q5_0,
//! Q5_1, F16, BF16, F32), the product goes through f32 tiles of a few
//! dequantized rows, which is then both faster and exact. The derivative
//! with respect to `x` reads the same blocks a tile at a time: no f32 copy
//! of the matrix is ever kept, so a quantized model trains adapters in
//! about the memory it runs in. The weight itself is frozen and has no
//! gradient.
//!
//! Both ops are linear in their one input and each is the other's
//! derivative. They hold the weight, which never changes (a `QMatrix` is
//! immutable), so a compiled step may replay them. They are not in the
//! registry: an instance needs its weight.

use std::sync::Arc;

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::OpAttributes;
use crate::kernels::quant::{self as kernel, DotFormat, KDotFormat, Q8KRows, Q8Rows, Q8K_BLOCK};
use crate::ops::{Node, StructuredOp};
use crate::quant::{GgmlType, QMatrix};
use crate::tensor::{DType, Tensor};

/// Activation rows from which the product runs on f32 tiles of the
/// dequantized weight instead of 8-bit activations and integer dots: with
/// this many rows `gemm` on the tiles is the faster of the two, and it is
/// exact, so a training step's forward is the product its gradient (the
/// transposed product, always on tiles) differentiates. Decoding, a few
/// rows at a time, keeps llama.cpp's arithmetic.
pub const EXACT_ROWS: usize = 64;

/// `x · Wᵀ`: `x` is f32 `[..., cols]`, the result `[..., rows]`.
#[derive(Clone, Debug)]
pub struct QuantizedMatmul {
    /// The weight, `[rows, cols]`.
    pub weight: Arc<QMatrix>,
}

/// `g · W`: `g` is f32 `[..., rows]`, the result `[..., cols]`; the
/// derivative of [`QuantizedMatmul`].
#[derive(Clone, Debug)]
pub struct QuantizedMatmulTransposed {
    /// The weight, `[rows, cols]`.
    pub weight: Arc<QMatrix>,
}

fn attributes(w: &QMatrix) -> OpAttributes {
    let [rows, cols] = w.shape();
    OpAttributes::new()
        .str("format", w.ggml_type().name())
        .ints("weight_shape", &[rows as i64, cols as i64])
}

/// The rows of `x` (all leading dims) if its last dim is `inner`.
fn leading_rows(op: &'static str, x: &Tensor, inner: usize, w: &QMatrix) -> Result<usize> {
    if x.dtype() != DType::F32 {
        return Err(Error::WrongDType {
            op,
            expected: DType::F32,
            found: x.dtype(),
        });
    }
    match x.shape().split_last() {
        Some((&last, lead)) if last == inner => Ok(lead.iter().product()),
        _ => Err(Error::ShapeMismatch {
            op,
            lhs: x.shape().to_vec(),
            rhs: w.shape().to_vec(),
        }),
    }
}

fn with_last(shape: &[usize], last: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    if let Some(l) = s.last_mut() {
        *l = last;
    }
    s
}

fn dot_format(ty: GgmlType) -> Option<DotFormat> {
    match ty {
        GgmlType::Q4_0 => Some(DotFormat::Q4_0),
        GgmlType::Q4_1 => Some(DotFormat::Q4_1),
        GgmlType::Q8_0 => Some(DotFormat::Q8_0),
        _ => None,
    }
}

fn k_dot_format(ty: GgmlType) -> Option<KDotFormat> {
    match ty {
        GgmlType::Q4K => Some(KDotFormat::Q4K),
        GgmlType::Q5K => Some(KDotFormat::Q5K),
        GgmlType::Q6K => Some(KDotFormat::Q6K),
        _ => None,
    }
}

impl StructuredOp for QuantizedMatmul {
    const NAME: &'static str = "quantized_matmul";
    const INPUTS: &'static [&'static str] = &["input"];
    const HOLDS: crate::Holds = crate::Holds::Settings;
    const LINEAR: &'static [usize] = &[0];
    fn attributes(&self) -> OpAttributes {
        attributes(&self.weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let [rows, cols] = self.weight.shape();
        let m = leading_rows(Self::NAME, x[0], cols, &self.weight)?;
        let input = x[0].contiguous();
        let xs = input.as_slice_of::<f32>();
        let mut out = vec![0.0f32; m * rows];
        let ty = self.weight.ggml_type();
        match (dot_format(ty), k_dot_format(ty)) {
            (Some(format), _) if m < EXACT_ROWS => {
                let a = Q8Rows::quantize(xs, m, cols);
                kernel::product(format, self.weight.bytes(), rows, &a, &mut out);
            }
            (_, Some(format)) if m < EXACT_ROWS && cols % Q8K_BLOCK == 0 => {
                let a = Q8KRows::quantize(xs, m, cols);
                kernel::product_k(format, self.weight.bytes(), rows, &a, &mut out);
            }
            _ => kernel::product_by_tiles(&self.weight, xs, m, &mut out)?,
        }
        Tensor::from_vec(out, &with_last(input.shape(), rows))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        g.graph().record(
            QuantizedMatmulTransposed {
                weight: self.weight.clone(),
            },
            &[g],
        )
    }
}

impl StructuredOp for QuantizedMatmulTransposed {
    const NAME: &'static str = "quantized_matmul_transposed";
    const INPUTS: &'static [&'static str] = &["grad"];
    const HOLDS: crate::Holds = crate::Holds::Settings;
    const LINEAR: &'static [usize] = &[0];
    fn attributes(&self) -> OpAttributes {
        attributes(&self.weight)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let [rows, cols] = self.weight.shape();
        let m = leading_rows(Self::NAME, x[0], rows, &self.weight)?;
        let g = x[0].contiguous();
        let mut out = vec![0.0f32; m * cols];
        kernel::transposed_product_by_tiles(&self.weight, g.as_slice_of::<f32>(), m, &mut out)?;
        Tensor::from_vec(out, &with_last(g.shape(), cols))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        g.graph().record(
            QuantizedMatmul {
                weight: self.weight.clone(),
            },
            &[g],
        )
    }
}

impl<'g> Var<'g> {
    /// `self · Wᵀ` with a frozen quantized weight `W` (`[rows, cols]`):
    /// `self` is f32 `[..., cols]`, the result `[..., rows]`. Differentiable
    /// in `self`; `W` has no gradient. Errors name the op and the shapes
    /// (a last dim other than `cols`) or the dtype (not f32).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use retrograd::{Graph, Tensor, quant::{GgmlType, QMatrix}};
    /// let w = Tensor::from_vec((0..64).map(|i| i as f32 / 64.0).collect(), &[2, 32])?;
    /// let q = Arc::new(QMatrix::try_quantize(&w, GgmlType::Q8_0)?);
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0f32; 32], &[1, 32])?);
    /// let y = x.try_quantized_matmul(&q)?;
    /// let exact = [(0..32).map(|i| i as f32 / 64.0).sum::<f32>(), (32..64).map(|i| i as f32 / 64.0).sum()];
    /// let got = y.value().to_vec::<f32>()?;
    /// // 8-bit blocks: within a percent of the exact product.
    /// assert!((0..2).all(|i| (got[i] - exact[i]).abs() < 0.01 * exact[i]));
    /// // The gradient with respect to x is the column sums of W.
    /// let dx = y.sum().backward()?.wrt(&x).to_vec::<f32>()?;
    /// assert!((dx[0] - (0.0 + 32.0) / 64.0).abs() < 0.01);
    /// assert!(x.try_quantized_matmul(&Arc::new(QMatrix::try_quantize(&Tensor::zeros(&[2, 64], retrograd::DType::F32)?, GgmlType::Q8_0)?)).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_quantized_matmul(&self, weight: &Arc<QMatrix>) -> Result<Var<'g>> {
        self.graph().record(
            QuantizedMatmul {
                weight: weight.clone(),
            },
            &[self],
        )
    }

    /// [`try_quantized_matmul`](Self::try_quantized_matmul), panicking at
    /// the caller's line on bad shapes or dtype.
    #[track_caller]
    pub fn quantized_matmul(&self, weight: &Arc<QMatrix>) -> Var<'g> {
        crate::base::error::or_panic(self.try_quantized_matmul(weight))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    #[test]
    fn from_exact_rows_on_the_product_is_the_dequantized_matrix_s() {
        let (rows, cols, m) = (70usize, 64usize, EXACT_ROWS);
        let w = Tensor::from_vec(
            (0..rows * cols)
                .map(|i| ((i * 13 % 29) as f32 - 14.0) / 9.0)
                .collect(),
            &[rows, cols],
        )
        .unwrap();
        let x = Tensor::from_vec(
            (0..m * cols)
                .map(|i| ((i * 5 % 17) as f32 - 8.0) / 7.0)
                .collect(),
            &[m, cols],
        )
        .unwrap();
        let q = Arc::new(QMatrix::quantize(&w, GgmlType::Q4_1));
        let g = Graph::new();
        let got = g
            .constant(x.clone())
            .quantized_matmul(&q)
            .value()
            .to_vec::<f32>()
            .unwrap();
        let want = g
            .constant(x)
            .matmul(&g.constant(q.dequantize()).t())
            .value()
            .to_vec::<f32>()
            .unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "{a} vs {b}");
        }
    }

    #[test]
    fn every_format_agrees_with_the_dequantized_product_and_its_gradient() {
        let (rows, cols) = (5usize, 256usize);
        let data: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 31 % 97) as f32 - 48.0) / 50.0)
            .collect();
        let w = Tensor::from_vec(data, &[rows, cols]).unwrap();
        let xs: Vec<f32> = (0..2 * cols)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 5.0)
            .collect();
        for ty in [
            GgmlType::Q4_0,
            GgmlType::Q4_1,
            GgmlType::Q8_0,
            GgmlType::Q4K,
            GgmlType::Q5K,
            GgmlType::Q6K,
            GgmlType::F16,
            GgmlType::F32,
        ] {
            let q = Arc::new(QMatrix::quantize(&w, ty));
            let full = q.dequantize();
            let g = Graph::new();
            let x = g.variable(Tensor::from_vec(xs.clone(), &[2, cols]).unwrap());
            let y = x.quantized_matmul(&q);
            let want = x.matmul(&g.constant(full.clone()).t());
            let (a, b) = (
                y.value().to_vec::<f32>().unwrap(),
                want.value().to_vec::<f32>().unwrap(),
            );
            // 8-bit activations: within a fraction of a percent of the f32 product.
            let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            assert!(
                a.iter().zip(&b).all(|(p, q)| (p - q).abs() < 0.02 * scale),
                "{ty:?}: {a:?} vs {b:?}"
            );
            let dx = y.sum().backward().unwrap().wrt(&x).to_vec::<f32>().unwrap();
            let want_dx = want
                .sum()
                .backward()
                .unwrap()
                .wrt(&x)
                .to_vec::<f32>()
                .unwrap();
            assert!(
                dx.iter().zip(&want_dx).all(|(p, q)| (p - q).abs() < 1e-4),
                "{ty:?}"
            );
        }
        let q = Arc::new(QMatrix::quantize(&w, GgmlType::Q8_0));
        let g = Graph::new();
        assert!(g
            .variable(Tensor::zeros(&[2, 3], DType::F32).unwrap())
            .try_quantized_matmul(&q)
            .is_err());
        assert!(g
            .variable(Tensor::zeros(&[2, cols], DType::F64).unwrap())
            .try_quantized_matmul(&q)
            .is_err());
    }
}
