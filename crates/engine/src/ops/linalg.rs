//! Linear algebra: `matmul` (PyTorch's rules: vectors, matrices, broadcast
//! batches), and the layout ops it pairs with: `transpose`, `permute`, `t`.
//!
//! The matmul op carries two transpose flags, `op(a) @ op(b)`, read by the
//! kernel through strides. Its gradients, `g @ op(b)^T` and `op(a)^T @ g`,
//! are matmuls of the same family with other flags, so backward never
//! materialises a transpose, and being recorded ops themselves, they can be
//! differentiated again. The four flag combinations are four zero-sized
//! types: a recorded matmul costs no allocation for its op.

use crate::base::fallible::fallible;
use crate::ops::OpAttributes;
use smallvec::smallvec;

use super::{expect_inputs, unbroadcast, Differentiable, GradInputs, OpRegistry};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, Node, OpFacts};
use crate::kernels;
use crate::tensor::shape::Dims;
use crate::tensor::Tensor;

/// `op(a) @ op(b)`, where `op` transposes the last two dimensions of a
/// rank >= 2 operand when its flag is set. `MatMulOp<false, false>` is
/// PyTorch's `matmul` ([`MatMul`]); the others (`matmul_nt`, `matmul_tn`,
/// `matmul_tt`) are what its gradients are made of.
#[derive(Clone, Copy, Debug, Default)]
pub struct MatMulOp<const TRANS_A: bool, const TRANS_B: bool>;

/// PyTorch's `matmul`: `a @ b`.
pub type MatMul = MatMulOp<false, false>;

impl<const TA: bool, const TB: bool> Differentiable for MatMulOp<TA, TB> {
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .bool("transpose_a", TA)
            .bool("transpose_b", TB)
    }
    fn name(&self) -> &str {
        match (TA, TB) {
            (false, false) => "matmul",
            (false, true) => "matmul_nt",
            (true, false) => "matmul_tn",
            (true, true) => "matmul_tt",
        }
    }
    fn holds(&self) -> crate::Holds {
        crate::Holds::Settings
    }
    fn arity(&self) -> Option<usize> {
        Some(2)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("matmul", inputs, 2)?;
        kernels::matmul("matmul", inputs[0], inputs[1], TA, TB)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        matmul_backward(TA, TB, g, &inputs[0], &inputs[1])
    }
    fn jvp<'g>(&self, t: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        // d(op(a) op(b)) = op(da) op(b) + op(a) op(db).
        let (a, b) = (node.x(0), node.x(1));
        super::sum_tangents(
            node.output.shape(),
            [
                t[0].as_ref().map(|ta| record_matmul(ta, b, TA, TB)),
                t[1].as_ref().map(|tb| record_matmul(a, tb, TA, TB)),
            ],
        )
    }
    fn batch<'g>(&self, inputs: &[Batched<'g>], _ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_matmul(&inputs[0], &inputs[1], TA, TB)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            // `op(a)` of shape [2, 3] and `op(b)` of shape [3, 4].
            sample_inputs: Some(|seed| {
                let a: &[usize] = if TA { &[3, 2] } else { &[2, 3] };
                let b: &[usize] = if TB { &[4, 3] } else { &[3, 4] };
                vec![sample_tensor(a, seed, 1.0), sample_tensor(b, seed + 7, 1.0)]
            }),
            ..OpFacts::opaque(Some(2))
        }
    }
}

/// `op(a) @ op(b)` for every example of a batch (the op's batching rule).
///
/// Each example is viewed as a product of matrices, as the op does (a
/// vector `a` a row, a vector `b` a column, flags on vectors dropped). A
/// batched operand then gets unit axes after its batch axis up to the
/// other operand's rank, so that broadcasting pairs the examples' own
/// batch axes and never the batch with one of them; a shared operand
/// broadcasts as it is. A shared matrix `b` is thereby folded into the
/// rows of a batched `a` by [`record_matmul`]: one 2-d product, whose
/// weight gradient is one product too (as in PyTorch); a shared matrix `a`
/// times batched matrices is folded the same way, transposed. The axes the
/// vectors added are removed from the result.
fn batch_matmul<'g>(a: &Batched<'g>, b: &Batched<'g>, ta: bool, tb: bool) -> Result<Batched<'g>> {
    let (ra, rb) = (a.example_rank(), b.example_rank());
    let (ta, tb) = (ta && ra >= 2, tb && rb >= 2);
    if !a.batched && rb == 1 && ra <= 2 {
        // A shared matrix (or vector) times a batch of vectors: the vectors
        // are the rows of one product, `V op(a)^T` (`V a` for a vector).
        let out = record_matmul(&b.value, &a.value, false, ra == 2 && !ta)?;
        return Ok(Batched::along_batch(out));
    }
    if !a.batched && ra == 2 && rb >= 2 {
        // A shared matrix times a batch of matrices (the backward of a
        // matrix-vector product sees vectors as [k, 1] columns):
        // `op(a) op(b_i) = (op(b_i)^T op(a)^T)^T`, and the examples'
        // `op(b_i)^T` stacked as rows are one 2-d product with `op(a)^T`,
        // instead of one small product per example.
        let rows = if tb {
            b.value.clone()
        } else {
            b.value.try_transpose(-2, -1)?
        };
        let y = record_matmul(&rows, &a.value, false, !ta)?;
        return Ok(Batched::along_batch(y.try_transpose(-2, -1)?));
    }
    let rank = ra.max(rb).max(2);
    let a2 = as_matrices(a, rank, |k| [1, k])?;
    let b2 = as_matrices(b, rank, |k| [k, 1])?;
    let y = record_matmul(&a2, &b2, ta, tb)?;
    let mut shape = y.shape().to_vec();
    if rb == 1 {
        shape.pop();
    }
    if ra == 1 {
        shape.remove(shape.len() - if rb == 1 { 1 } else { 2 });
    }
    Ok(Batched::along_batch(y.reshape_dims(&shape)?))
}

/// A matmul operand as matrices (a vector through `vector`: a row or a
/// column); when batched, with unit axes after the batch axis up to
/// `rank` example axes.
fn as_matrices<'g>(
    x: &Batched<'g>,
    rank: usize,
    vector: impl Fn(usize) -> [usize; 2],
) -> Result<Var<'g>> {
    let example = x.example_shape();
    let mut dims = Vec::with_capacity(rank + 1);
    if x.batched {
        dims.push(x.value.shape()[0]);
        dims.extend(std::iter::repeat_n(1, rank - example.len().max(2)));
    }
    match example {
        [k] => dims.extend(vector(*k)),
        _ => dims.extend_from_slice(example),
    }
    x.value.reshape_dims(&dims)
}

/// Records `op(a) @ op(b)` with runtime flags (each combination is its own op type).
#[track_caller]
fn record_matmul<'g>(a: &Var<'g>, b: &Var<'g>, ta: bool, tb: bool) -> Result<Var<'g>> {
    // A flag on a vector means nothing; dropping it keeps names and rules simple.
    let (ta, tb) = (ta && a.shape().len() >= 2, tb && b.shape().len() >= 2);
    if !ta && a.shape().len() > 2 && b.shape().len() == 2 {
        // A batch of rows times one matrix (a linear layer on [B, T, E]) is
        // one [B·T, E] product, as in PyTorch: the weight's gradient is then
        // a single product too, instead of B products summed afterwards.
        let (batch, k) = a.shape().split_at(a.shape().len() - 1);
        let rows: usize = batch.iter().product();
        let y = record_matmul(&a.reshape_dims(&[rows, k[0]])?, b, false, tb)?;
        let n = y.shape()[1];
        let shape: Vec<usize> = batch.iter().copied().chain([n]).collect();
        return y.reshape_dims(&shape);
    }
    let graph = a.graph();
    match (ta, tb) {
        (false, false) => graph.record(MatMulOp::<false, false>, &[a, b]),
        (false, true) => graph.record(MatMulOp::<false, true>, &[a, b]),
        (true, false) => graph.record(MatMulOp::<true, false>, &[a, b]),
        (true, true) => graph.record(MatMulOp::<true, true>, &[a, b]),
    }
}

/// Gradients of `c = op(a) @ op(b)`. Vectors are first viewed as matrices
/// (a row for `a`, a column for `b`), so every case is a batched matrix
/// product: `d op(a) = g op(b)^T`, `d op(b) = op(a)^T g`, transposed back
/// where the flag was set, then summed over broadcast batch dimensions.
fn matmul_backward<'g>(
    ta: bool,
    tb: bool,
    g: &Var<'g>,
    a: &Var<'g>,
    b: &Var<'g>,
) -> Result<GradInputs<'g>> {
    let (ta, tb) = (ta && a.shape().len() >= 2, tb && b.shape().len() >= 2);
    let a2 = match a.shape() {
        [k] => a.reshape_dims(&[1, *k])?,
        _ => a.clone(),
    };
    let b2 = match b.shape() {
        [k] => b.reshape_dims(&[*k, 1])?,
        _ => b.clone(),
    };
    let mut g_shape = Dims::from_slice(g.shape());
    if a.shape().len() == 1 {
        g_shape.insert(g_shape.len() - usize::from(b.shape().len() >= 2), 1);
    }
    if b.shape().len() == 1 {
        g_shape.push(1);
    }
    let g2 = g.reshape_dims(&g_shape)?;
    let grad_a = if a.requires_grad() {
        let d = if ta {
            record_matmul(&b2, &g2, tb, true)?
        } else {
            record_matmul(&g2, &b2, false, !tb)?
        };
        Some(unbroadcast(d, &a2)?.reshape_dims(a.shape())?)
    } else {
        None
    };
    let grad_b = if b.requires_grad() {
        let (ar, br) = (a2.shape().len(), b2.shape().len());
        let d = if br == 2 && ar > 2 && !ta {
            // b is shared by every matrix of a batched, untransposed a: fold
            // the batch into the rows, and one product sums over it.
            let k = a2.shape()[ar - 1];
            let n = g2.shape()[g2.shape().len() - 1];
            let af = a2.try_reshape(&[-1, k as isize])?;
            let gf = g2.try_reshape(&[-1, n as isize])?;
            if tb {
                record_matmul(&gf, &af, true, false)?
            } else {
                record_matmul(&af, &gf, true, false)?
            }
        } else if tb {
            record_matmul(&g2, &a2, true, ta)?
        } else {
            record_matmul(&a2, &g2, !ta, false)?
        };
        Some(unbroadcast(d, &b2)?.reshape_dims(b.shape())?)
    } else {
        None
    };
    Ok(smallvec![grad_a, grad_b])
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(MatMulOp::<false, false>);
    reg.add_builtin(MatMulOp::<false, true>);
    reg.add_builtin(MatMulOp::<true, false>);
    reg.add_builtin(MatMulOp::<true, true>);
}

impl<'g> Var<'g> {
    fallible! {
        /// The matrix product `self @ other` under PyTorch's `matmul` rules:
        /// 1-d x 1-d is a dot product (0-d result); a 1-d left (right) operand
        /// is treated as a row (column) and that dimension is removed from the
        /// result; leading dimensions are batch dimensions and broadcast.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
        /// let b = g.variable(Tensor::from_vec(vec![1.0, 1.0], &[2])?);
        /// let c = a.try_matmul(&b)?;
        /// assert_eq!(c.value().to_f64_vec(), vec![3.0, 7.0]);
        /// let grads = c.sum().backward()?;
        /// assert_eq!(grads.wrt(&a).to_f64_vec(), vec![1.0, 1.0, 1.0, 1.0]);
        /// assert_eq!(grads.wrt(&b).to_f64_vec(), vec![4.0, 6.0]);
        /// assert!(a.try_matmul(&g.constant(Tensor::from_vec(vec![1.0; 3], &[3])?)).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_matmul / matmul(&self, other: &Var<'g>) -> Var<'g> {
            self.graph().record(MatMul::default(), &[self, other])
        }
    }

    fallible! {
        /// `op(self) @ op(other)`, where `op` swaps the last two dimensions of a
        /// rank >= 2 operand whose flag is set, without copying it: `x @ w^T`
        /// for a weight stored `[out, in]` is `x.try_matmul_transposed(&w, false, true)`.
        /// Flags on 1-d operands are ignored.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?);
        /// let w = g.variable(Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0], &[3, 2])?);
        /// let y = x.try_matmul_transposed(&w, false, true)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 2.0, 3.0]);
        /// assert_eq!(y.value(), x.try_matmul(&w.try_t()?)?.value());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_matmul_transposed / matmul_transposed(
        &self,
        other: &Var<'g>,
        trans_self: bool,
        trans_other: bool,
    ) -> Var<'g> {
            record_matmul(self, other, trans_self, trans_other)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, jvpcheck, DType, Graph};

    /// Deterministic test values in [-1, 1].
    fn vals(shape: &[usize], seed: usize) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n)
            .map(|i| (((i + 3 * seed) * 37 % 19) as f64 - 9.0) / 9.0)
            .collect();
        Tensor::from_vec(v, shape).unwrap()
    }

    #[test]
    fn forward_values_follow_pytorch_rules() {
        let g = Graph::new();
        let a = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap());
        let b = g.variable(Tensor::from_vec(vec![1.0, 0.0, -1.0, 2.0, 0.5, 1.0], &[3, 2]).unwrap());
        // NumPy: a @ b = [[0.5, 7], [2, 16]].
        assert_eq!(a.matmul(&b).value().to_f64_vec(), vec![0.5, 7.0, 2.0, 16.0]);
        let v = g.variable(Tensor::from_vec(vec![1.0, -1.0, 2.0], &[3]).unwrap());
        let dot = v.matmul(&v);
        assert_eq!(dot.shape(), &[] as &[usize]);
        assert_eq!(dot.value().item(), 6.0);
        assert_eq!(a.matmul(&v).value().to_f64_vec(), vec![5.0, 11.0]);
        assert_eq!(v.matmul(&b).value().to_f64_vec(), vec![3.0, 0.0]);
        // Batch broadcasting: [2, 1, 2, 3] @ [3, 3, 2] -> [2, 3, 2, 2].
        let x = g.variable(vals(&[2, 1, 2, 3], 1));
        let y = g.variable(vals(&[3, 3, 2], 2));
        let c = x.matmul(&y);
        assert_eq!(c.shape(), &[2, 3, 2, 2]);
        let (xv, yv, cv) = (
            x.value().to_f64_vec(),
            y.value().to_f64_vec(),
            c.value().to_f64_vec(),
        );
        for (i, j, r, col) in [(0, 0, 0, 0), (1, 2, 1, 1), (1, 1, 0, 1)] {
            let want: f64 = (0..3)
                .map(|p| xv[i * 6 + r * 3 + p] * yv[j * 6 + p * 2 + col])
                .sum();
            assert!((cv[((i * 3 + j) * 2 + r) * 2 + col] - want).abs() < 1e-12);
        }
    }

    #[test]
    fn transposed_variants_equal_explicit_transposes() {
        let g = Graph::new();
        let a = g.variable(vals(&[2, 4, 3], 1));
        let b = g.variable(vals(&[2, 5, 4], 2));
        let explicit = a.transpose(-1, -2).matmul(&b.transpose(-1, -2));
        let fused = a.matmul_transposed(&b, true, true);
        assert_eq!(fused.value(), explicit.value());
        assert_eq!(
            g.node(fused.node_index().unwrap()).unwrap().op_name(),
            "matmul_tt"
        );
        let m = g.variable(vals(&[5, 3], 3));
        assert_eq!(a.matmul_transposed(&m, false, true).shape(), &[2, 4, 5]);
        assert!(a.try_matmul_transposed(&m, true, true).is_err());
    }

    #[test]
    fn gradients_for_every_rank_combination() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[3], &[3]),
            (&[3], &[3, 2]),
            (&[2, 3], &[3]),
            (&[2, 3], &[3, 4]),
            (&[2, 2, 3], &[3, 2]),
            (&[3], &[2, 3, 2]),
            (&[2, 1, 2, 3], &[3, 3, 2]),
            (&[1, 2, 3], &[2, 3, 1]),
        ];
        for (sa, sb) in cases {
            gradcheck(|v| v[0].try_matmul(&v[1]), &[vals(sa, 1), vals(sb, 2)])
                .unwrap_or_else(|e| panic!("{sa:?} @ {sb:?}: {e}"));
            jvpcheck(|v| v[0].try_matmul(&v[1]), &[vals(sa, 1), vals(sb, 2)])
                .unwrap_or_else(|e| panic!("{sa:?} @ {sb:?}: {e}"));
        }
    }

    #[test]
    fn gradients_of_transposed_variants() {
        let (a, b) = (vals(&[2, 3, 4], 1), vals(&[4, 5], 2));
        let (at, bt) = (vals(&[2, 4, 3], 3), vals(&[5, 4], 4));
        for (x, y, ta, tb) in [
            (&a, &bt, false, true),
            (&at, &b, true, false),
            (&at, &bt, true, true),
            (&bt, &a, false, true),
        ] {
            let inputs = [x.clone(), y.clone()];
            gradcheck(|v| v[0].try_matmul_transposed(&v[1], ta, tb), &inputs).unwrap();
            jvpcheck(|v| v[0].try_matmul_transposed(&v[1], ta, tb), &inputs).unwrap();
        }
    }

    #[test]
    fn a_value_with_two_consumers_and_frozen_operands() {
        let a = vals(&[3, 3], 1);
        gradcheck(
            |v| Ok(v[0].try_matmul(&v[0])?.tanh()),
            std::slice::from_ref(&a),
        )
        .unwrap();
        gradcheck(
            |v| Ok(v[0].try_matmul_transposed(&v[0], true, false)? + &v[0]),
            std::slice::from_ref(&a),
        )
        .unwrap();
        let g = Graph::new();
        let w = g.constant(a.clone());
        let x = g.variable(vals(&[2, 3], 2));
        let grads = x.matmul(&w).sum().backward().unwrap();
        assert_eq!(grads.wrt(&x).shape(), &[2, 3]);
        assert_eq!(grads.wrt(&w).to_f64_vec(), vec![0.0; 9]);
    }

    #[test]
    fn backward_formulas_are_differentiable() {
        // Differentiating the recorded gradient checks second-order support.
        for (ta, tb, sa, sb) in [
            (false, false, &[2, 2, 3][..], &[3, 2][..]),
            (true, false, &[3, 2][..], &[3, 4][..]),
            (false, true, &[3][..], &[4, 3][..]),
        ] {
            let (ga, gb) = (vals(sa, 1), vals(sb, 2));
            let out_shape = kernels::matmul::matmul_shape("matmul", sa, sb, ta, tb).unwrap();
            let gout = vals(&out_shape, 3);
            for which in 0..2 {
                gradcheck(
                    |v| {
                        let grads = matmul_backward(ta, tb, &v[2], &v[0], &v[1])?;
                        Ok(grads[which].clone().unwrap())
                    },
                    &[ga.clone(), gb.clone(), gout.clone()],
                )
                .unwrap();
            }
        }
    }

    /// `vmap` of `op(a) @ op(b)` with each operand batched or shared,
    /// against the product of each example, for vectors, matrices and
    /// batches of matrices of different ranks.
    #[test]
    fn batching_rule_matches_each_example() {
        use crate::autograd::VMap;
        let cases: &[(&[usize], &[usize], bool, bool)] = &[
            (&[3], &[3], false, false),
            (&[3], &[3, 2], false, false),
            (&[3], &[2, 3], true, true),
            (&[2, 3], &[3], false, false),
            (&[3, 2], &[3], true, false),
            (&[2, 3], &[3, 4], false, false),
            (&[2, 3], &[4, 3], false, true),
            (&[3, 2], &[4, 3], true, true),
            (&[2, 2, 3], &[3, 4], false, false),
            (&[2, 3, 2], &[3, 4], true, false),
            (&[3], &[2, 3, 2], false, false),
            (&[2, 3], &[2, 3, 4], false, false),
            (&[2, 1, 2, 3], &[3, 3, 2], false, false),
        ];
        let batch = 3;
        for &(sa, sb, ta, tb) in cases {
            let examples: Vec<[Tensor; 2]> = (0..batch)
                .map(|i| [vals(sa, 2 * i + 1), vals(sb, 2 * i + 2)])
                .collect();
            for axes in [[Some(0), Some(0)], [Some(0), None], [None, Some(0)]] {
                let g = Graph::new();
                let inputs: Vec<Var<'_>> = (0..2)
                    .map(|j| match axes[j] {
                        Some(_) => {
                            let column: Vec<Var<'_>> =
                                examples.iter().map(|e| g.variable(e[j].clone())).collect();
                            let refs: Vec<&Var<'_>> = column.iter().collect();
                            Var::try_stack(&refs, 0).unwrap()
                        }
                        None => g.variable(examples[0][j].clone()),
                    })
                    .collect();
                let got = VMap::new()
                    .in_axes(&axes)
                    .try_call(
                        |v| Ok(vec![v[0].try_matmul_transposed(&v[1], ta, tb)?]),
                        &[&inputs[0], &inputs[1]],
                    )
                    .unwrap_or_else(|e| panic!("{sa:?} @ {sb:?} {axes:?}: {e}"))
                    .remove(0);
                for (i, e) in examples.iter().enumerate() {
                    let a = if axes[0].is_some() {
                        &e[0]
                    } else {
                        &examples[0][0]
                    };
                    let b = if axes[1].is_some() {
                        &e[1]
                    } else {
                        &examples[0][1]
                    };
                    let h = Graph::new();
                    let want =
                        h.constant(a.clone())
                            .matmul_transposed(&h.constant(b.clone()), ta, tb);
                    let row = got.value().select(0, i).unwrap().contiguous();
                    assert!(
                        row.allclose(want.value(), 1e-12, 1e-12),
                        "{sa:?} @ {sb:?} ({ta}, {tb}) {axes:?}: example {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn f32_matches_f64_and_errors_are_typed() {
        let g = Graph::new();
        let a64 = g.variable(vals(&[4, 6], 1));
        let b64 = g.variable(vals(&[6, 3], 2));
        let a32 = g.variable(a64.value().to_dtype(DType::F32));
        let b32 = g.variable(b64.value().to_dtype(DType::F32));
        let c32 = a32.matmul(&b32);
        assert_eq!(c32.dtype(), DType::F32);
        assert!(c32.value().allclose(a64.matmul(&b64).value(), 1e-5, 1e-5));
        let gr = c32.sum().backward().unwrap();
        let gr64 = a64.matmul(&b64).sum().backward().unwrap();
        assert!(gr.wrt(&b32).allclose(&gr64.wrt(&b64), 1e-5, 1e-5));
        assert!(matches!(
            a32.try_matmul(&b64),
            Err(crate::Error::DTypeMismatch { .. })
        ));
        assert!(matches!(
            a64.try_matmul(&a64),
            Err(crate::Error::ShapeMismatch { op: "matmul", .. })
        ));
        let s = g.variable(Tensor::scalar(2.0));
        assert!(s.try_matmul(&a64).is_err());
        let r = g.apply("matmul", &[&a64, &b64]).unwrap();
        assert_eq!(r.shape(), &[4, 3]);
    }
}
