//! `layer_norm` over the trailing `normalized_shape` dims, with optional
//! weight and bias: one fused forward kernel; the gradients come from the
//! fused ops of `layer_norm_backward.rs` (input and weight) and a plain
//! `sum_to_size` (bias). Its tangent rule reuses the input-gradient op,
//! since `d x̂ / d x = σ P` is symmetric.

use std::sync::Arc;

use crate::base::fallible::fallible;

use super::batch_norm::sample;
use super::layer_norm_backward::{project, LayerNormBackward, LayerNormWeightBackward};
use super::normalization::{batch_trailing, check_eps, first_input, record_affine, Affine, Role};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels;
use crate::kernels::nn::norm as kernel;
use crate::ops::{FastBackward, Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Layer normalisation over the trailing dims: `(x - mean) / sqrt(var + eps) * weight + bias`,
/// PyTorch's `F.layer_norm`. Inputs: `x`, then the weight and/or bias if
/// present (each of shape `normalized_shape`). The registry holds it
/// normalising the last dim with `eps = 1e-5`, the affine parameters
/// inferred from the input count (2: weight, 3: weight and bias).
#[derive(Clone, Debug, PartialEq)]
pub struct LayerNorm {
    /// The trailing dims normalised over (`None`: the last dim of the input).
    normalized_shape: Option<Dims>,
    eps: f64,
    affine: Affine,
}

impl Default for LayerNorm {
    fn default() -> Self {
        LayerNorm {
            normalized_shape: None,
            eps: 1e-5,
            affine: Affine::FromInputs,
        }
    }
}

/// Checks that `shape` is a suffix of `x`'s shape; returns the row length.
pub(super) fn row_len(op: &'static str, x: &Tensor, shape: &[usize]) -> Result<usize> {
    let xs = x.shape();
    if shape.is_empty() || shape.len() > xs.len() || xs[xs.len() - shape.len()..] != *shape {
        return Err(Error::invalid(
            op,
            format!(
                "normalized_shape {shape:?} must be a non-empty suffix of the input's shape {xs:?}"
            ),
        ));
    }
    Ok(shape.iter().product())
}

/// Checks an affine parameter (or gradient) against the normalised shape and dtype.
pub(super) fn check_param(op: &'static str, p: &Tensor, shape: &[usize], x: &Tensor) -> Result<()> {
    check_dtypes(op, x.dtype(), p.dtype())?;
    if p.shape() != shape {
        return Err(Error::shape_mismatch(op, shape, p.shape()));
    }
    Ok(())
}

/// The normalised shape an op was given, or `x`'s last dim (the
/// registry's instances).
pub(super) fn shape_or_last(shape: &[usize], x: &Tensor) -> Dims {
    if shape.is_empty() {
        Dims::from_slice(&x.shape()[x.rank().saturating_sub(1)..])
    } else {
        Dims::from_slice(shape)
    }
}

impl LayerNorm {
    /// A layer norm over `shape` without affine parameters (`x̂` itself).
    pub(super) fn plain(shape: &[usize], eps: f64) -> Self {
        LayerNorm {
            normalized_shape: Some(Dims::from_slice(shape)),
            eps,
            affine: Affine::Given {
                weight: false,
                bias: false,
            },
        }
    }

    /// `(normalized_shape, has_weight, has_bias)` for these inputs.
    fn resolve(&self, x: &Tensor, n_inputs: usize) -> Result<(Dims, bool, bool)> {
        let shape = match &self.normalized_shape {
            Some(s) => s.clone(),
            None => shape_or_last(&[], x),
        };
        let (weight, bias) = self.affine.resolve("layer_norm", 1, n_inputs)?;
        Ok((shape, weight, bias))
    }

    /// The normalised shape, the weight if the node has one, and which
    /// input `i` is.
    fn param<'a, 'g>(
        &self,
        i: usize,
        n: Node<'a, 'g>,
    ) -> Result<(Dims, Option<&'a Var<'g>>, Role)> {
        let (shape, has_w, _) = self.resolve(n.x(0).value(), n.inputs.len())?;
        let role = self.affine.role("layer_norm", 1, n.inputs.len(), i)?;
        Ok((shape, has_w.then(|| &n.inputs[1]), role))
    }
}

impl StructuredOp for LayerNorm {
    const NAME: &'static str = "layer_norm";
    const INPUTS: &'static [&'static str] = &["input", "weight", "bias"];
    /// One to three inputs, checked against the affine parameters.
    fn arity(&self) -> Option<usize> {
        None
    }
    fn attributes(&self) -> OpAttributes {
        let attrs = match &self.normalized_shape {
            Some(shape) => OpAttributes::new().ints("normalized_shape", shape),
            None => OpAttributes::new(),
        };
        self.affine.attributes(attrs.float("eps", self.eps))
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = first_input(Self::NAME, inputs)?;
        let (shape, has_w, has_b) = self.resolve(x, inputs.len())?;
        let m = row_len(Self::NAME, x, &shape)?;
        check_eps(Self::NAME, self.eps)?;
        let w = has_w.then(|| inputs[1]);
        let b = has_b.then(|| inputs[inputs.len() - 1]);
        for p in w.iter().chain(b.iter()) {
            check_param(Self::NAME, p, &shape, x)?;
        }
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let (xs, ws, bs) = (x.as_slice_of::<T>(), w.map(|t| t.as_slice_of::<T>()), b.map(|t| t.as_slice_of::<T>()));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::layer_norm(xs, m, ws, bs, self.eps, out)))
        })
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (shape, w, param) = self.param(i, n)?;
        let x = n.x(0);
        match param {
            Role::Input => {
                let has_weight = w.is_some();
                let op = LayerNormBackward {
                    normalized_shape: shape,
                    eps: self.eps,
                    has_weight,
                };
                let args: Vec<&Var<'g>> = [g, x].into_iter().chain(w).collect();
                g.graph().record(op, &args)
            }
            Role::Weight => {
                let op = LayerNormWeightBackward {
                    normalized_shape: shape,
                    eps: self.eps,
                };
                g.graph().record(op, &[g, x])
            }
            Role::Bias | Role::Stat => g.sum_to_size(&shape),
        }
    }
    // The input's and the weight's gradients in one sweep over the rows
    // when both are needed (each row's statistics computed once); any other
    // case runs `backward`'s ops, one kernel each anyway.
    fn backward_fast(&self, call: FastBackward<'_>, grads: &mut [Option<Tensor>]) -> Result<bool> {
        const OP: &str = "layer_norm_backward";
        let FastBackward {
            g,
            x: inputs,
            needs,
            ..
        } = call;
        let x = inputs[0];
        let (shape, has_w, has_b) = self.resolve(x, inputs.len())?;
        if !(has_w && needs[0] && needs[1]) {
            return Ok(false);
        }
        let w = inputs[1];
        let m = row_len(OP, x, &shape)?;
        check_param(OP, g, x.shape(), x)?;
        check_param(OP, w, &shape, x)?;
        let (dx, dw) = crate::with_dtype!(OP, x.dtype(), T => {
            let mut dw = Vec::new();
            let (gs, xs, ws) = (g.as_slice_of::<T>(), x.as_slice_of::<T>(), w.as_slice_of::<T>());
            let dx = Tensor::build::<T>(Dims::from_slice(x.shape()), |out| {
                let filled;
                (filled, dw) = kernel::layer_norm_backward_with_weight(gs, xs, m, ws, self.eps, out);
                filled
            });
            (dx, Tensor::from_vec(dw, &shape)?)
        });
        grads[0] = Some(dx);
        grads[1] = Some(dw);
        if has_b && needs[2] {
            grads[2] = Some(kernels::sum_to_shape("sum_to_size", g, &shape)?);
        }
        Ok(true)
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (shape, w, param) = self.param(i, n)?;
        let x = n.x(0);
        match param {
            Role::Input => {
                let d = project(t, x, &shape, self.eps)?;
                match w {
                    Some(w) => d.try_mul(w),
                    None => Ok(d),
                }
            }
            Role::Weight => {
                let plain = LayerNorm::plain(&shape, self.eps);
                x.graph().record(plain, &[x])?.try_mul(t)
            }
            Role::Bias | Role::Stat => Ok(t.clone()),
        }
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let (w, b) = self.affine.split(Self::NAME, 1, x)?;
        let plain = LayerNorm {
            affine: Affine::Given {
                weight: false,
                bias: false,
            },
            ..self.clone()
        };
        batch_trailing(self, &plain, &x[0], w, b)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(LayerNorm {
                normalized_shape: Some(Dims::from_slice(&[2, 3])),
                eps: 1e-3,
                affine: Affine::Given {
                    weight: true,
                    bias: true,
                },
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 2, 3], seed, 0.3, 1.0),
                    sample(&[2, 3], seed + 5, 1.0, 0.5),
                    sample(&[2, 3], seed + 9, 0.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(None)
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(LayerNorm::default());
}

impl<'g> Var<'g> {
    fallible! {
        /// Layer normalisation over the trailing `normalized_shape` dims, with
        /// an optional elementwise `weight` and `bias` (each of shape
        /// `normalized_shape`): PyTorch's `F.layer_norm(x, normalized_shape, weight, bias, eps)`.
        ///
        /// Errors: a `normalized_shape` that is not a suffix of the input's shape,
        /// or parameters of another shape, are `Error::InvalidArgument` /
        /// `Error::ShapeMismatch`; a negative `eps` is `Error::InvalidArgument`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 0.0, 0.0, 3.0], &[2, 3])?);
        /// let w = g.variable(Tensor::from_vec(vec![1.0, 1.0, 2.0], &[3])?);
        /// let b = g.variable(Tensor::from_vec(vec![0.0, 0.0, 0.5], &[3])?);
        /// let y = x.try_layer_norm(&[3], Some(&w), Some(&b), 0.0)?;
        /// // Row 1: mean 2, variance 2/3; row 2: mean 1, variance 2.
        /// let (s, r) = (1.5f64.sqrt(), 0.5f64.sqrt());
        /// let expect = Tensor::from_vec(vec![-s, 0.0, 2.0 * s + 0.5, -r, -r, 4.0 * r + 0.5], &[2, 3])?;
        /// assert!(y.value().allclose(&expect, 1e-12, 1e-12));
        /// let grads = (&y * &y).sum().backward()?;
        /// assert_eq!(grads.wrt(&b).shape(), &[3]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_layer_norm / layer_norm(
        &self,
        normalized_shape: &[usize],
        weight: Option<&Var<'g>>,
        bias: Option<&Var<'g>>,
        eps: f64,
    ) -> Var<'g> {
            record_affine(self, weight, bias, |affine| LayerNorm {
                normalized_shape: Some(Dims::from_slice(normalized_shape)),
                eps,
                affine,
            })
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ops::testing::{fixed, norm_weight};
    use crate::{gradcheck, jvpcheck, DType, Graph};

    /// The input the layer-norm tests (and the backward ops' tests) share.
    pub(in crate::ops::nn) fn x() -> Tensor {
        fixed(&[2, 3, 4])
    }
    /// The weight over its last dim.
    pub(in crate::ops::nn) fn w() -> Tensor {
        norm_weight()
    }
    fn b() -> Tensor {
        Tensor::from_vec(vec![0.1, -0.2, 0.3, 0.0], &[4]).unwrap()
    }

    // NumPy: m = x.mean(axes, keepdims=True); v = ((x - m)**2).mean(axes, keepdims=True);
    // (x - m) / np.sqrt(v + eps) * w + b.
    #[test]
    fn forward_values() {
        let g = Graph::new();
        let (xv, wv, bv) = (g.variable(x()), g.variable(w()), g.variable(b()));
        let y = xv
            .layer_norm(&[4], Some(&wv), Some(&bv), 1e-5)
            .value()
            .to_f64_vec();
        let expect = [
            -0.11821705893449413,
            -0.9637597062707295,
            -1.336627942008706,
            1.3093023536069648,
            0.36210721539198154,
            -0.942637110277281,
            0.4310536076959908,
            2.621072153919816,
        ];
        for (a, e) in y.iter().zip(expect) {
            assert!((a - e).abs() < 1e-14, "{a} vs {e}");
        }
        let y2 = xv
            .layer_norm(&[3, 4], None, None, 1e-3)
            .value()
            .to_f64_vec();
        let expect2 = [
            0.2396743240441806,
            -1.1519830413736423,
            1.6313316894620036,
            1.1674459009893958,
        ];
        for (a, e) in y2.iter().zip(expect2) {
            assert!((a - e).abs() < 1e-14);
        }
        assert!((y2[23] - -0.1836887710472466).abs() < 1e-14);
        // Registry: last dim, eps 1e-5, affine from the input count.
        let via = g.apply("layer_norm", &[&xv, &wv, &bv]).unwrap();
        assert!(via
            .value()
            .allclose(&Tensor::from_vec(y.clone(), &[2, 3, 4]).unwrap(), 0.0, 0.0));
    }

    #[test]
    fn gradients_and_tangents() {
        gradcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x(), w(), b()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x(), w(), b()],
        )
        .unwrap();
        gradcheck(|v| v[0].try_layer_norm(&[3, 4], None, None, 1e-3), &[x()]).unwrap();
        jvpcheck(|v| v[0].try_layer_norm(&[3, 4], None, None, 1e-3), &[x()]).unwrap();
        gradcheck(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), None, 1e-5),
            &[x(), w()],
        )
        .unwrap();
        gradcheck(
            |v| v[0].try_layer_norm(&[4], None, Some(&v[1]), 1e-5),
            &[x(), b()],
        )
        .unwrap();
        // Two consumers of x (and of the weight).
        gradcheck(
            |v| Ok(&v[0].layer_norm(&[4], Some(&v[1]), None, 1e-5).tanh() * &v[0] + &v[1] * 0.5),
            &[x(), w()],
        )
        .unwrap();
    }

    #[test]
    fn fused_backward_matches_the_separate_ops() {
        use crate::ops::testing::fast_path_agrees;
        fast_path_agrees(
            |v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5),
            &[x(), w(), b()],
        )
        .unwrap();
        fast_path_agrees(
            |v| v[0].try_layer_norm(&[3, 4], Some(&v[1]), None, 1e-3),
            &[
                x(),
                Tensor::from_vec((0..12).map(|i| 0.3 * i as f64 - 1.0).collect(), &[3, 4]).unwrap(),
            ],
        )
        .unwrap();
        // Bit for bit in f32, on rows enough to split the weight's sums
        // into blocks across two threads (and on one thread).
        let (rows, m) = (700, 128);
        let xs = Tensor::from_vec(
            (0..rows * m)
                .map(|i| (i as f64 * 0.37).sin() * 3.0 + 1.5)
                .collect(),
            &[rows, m],
        )
        .unwrap()
        .to_dtype(DType::F32);
        let ws = Tensor::from_vec((0..m).map(|i| 1.0 + (i as f64 * 0.1).cos()).collect(), &[m])
            .unwrap()
            .to_dtype(DType::F32);
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let (fast, slow) = pool.install(|| {
                let run = |fast: bool| {
                    let g = Graph::new();
                    let (xv, wv) = (g.variable(xs.clone()), g.variable(ws.clone()));
                    let y = xv.layer_norm(&[m], Some(&wv), None, 1e-5);
                    let loss = (&y * &g.constant(xs.clone())).sum();
                    let grads = loss
                        .backward_with_options(&crate::BackwardOptions::new().fast_path(fast))
                        .unwrap();
                    [grads.wrt(&xv), grads.wrt(&wv)].map(|t| t.to_vec::<f32>().unwrap())
                };
                (run(true), run(false))
            });
            assert_eq!(fast, slow, "{threads} thread(s)");
        }
    }

    #[test]
    fn f32_large_offsets_and_errors() {
        let g = Graph::new();
        // A large common offset: two-pass statistics in f64 keep f32 results accurate.
        let big = x().map_f64(|v| v + 1e4).to_dtype(DType::F32);
        let yb = g.variable(big.clone()).layer_norm(&[4], None, None, 1e-5);
        let exact = g
            .variable(big.to_dtype(DType::F64))
            .layer_norm(&[4], None, None, 1e-5);
        assert!(yb.value().allclose(exact.value(), 1e-6, 1e-6));
        let small = g.variable(x().to_dtype(DType::F32));
        let ys = small.layer_norm(&[4], None, None, 1e-5);
        let x64 = g.variable(x());
        assert!(ys
            .value()
            .allclose(x64.layer_norm(&[4], None, None, 1e-5).value(), 1e-5, 1e-5));
        assert!(matches!(
            x64.try_layer_norm(&[3], None, None, 1e-5),
            Err(Error::InvalidArgument {
                op: "layer_norm",
                ..
            })
        ));
        assert!(x64.try_layer_norm(&[], None, None, 1e-5).is_err());
        let w3 = g.variable(Tensor::ones(&[3], DType::F64).unwrap());
        assert!(matches!(
            x64.try_layer_norm(&[4], Some(&w3), None, 1e-5),
            Err(Error::ShapeMismatch { .. })
        ));
        let w32 = g.variable(Tensor::ones(&[4], DType::F32).unwrap());
        assert!(matches!(
            x64.try_layer_norm(&[4], Some(&w32), None, 1e-5),
            Err(Error::DTypeMismatch { .. })
        ));
        assert!(x64.try_layer_norm(&[4], None, None, -1.0).is_err());
    }
}
