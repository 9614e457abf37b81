//! What the neural-net ops share: [`Reduction`], the integer index types
//! targets and embedding indices may be given in ([`IntIndex`]), their
//! validation, a sum over one axis as a differentiable op (the fused
//! backward ops' own derivatives need per-lane sums), and the batching
//! rules of the elementwise losses.

use crate::ops::batching::materialize;
use crate::ops::declare_op;
use std::sync::Arc;

use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, Differentiable, OpAttributes};
use crate::kernels;
use crate::ops::{Node, StructuredOp};
use crate::tensor::shape::normalize_axis;
use crate::tensor::{Dims, Tensor};

/// How a loss combines its per-sample (or per-element) values, as PyTorch's
/// `reduction` argument.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// No reduction: one loss per sample (or element).
    None,
    /// The mean (for class losses with weights or `ignore_index`: the
    /// weighted sum divided by the summed weight of the counted targets).
    #[default]
    Mean,
    /// The sum.
    Sum,
}

impl Reduction {
    /// PyTorch's word for it: `none`, `mean` or `sum` (a loss's
    /// `reduction` attribute).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reduction::None => "none",
            Reduction::Mean => "mean",
            Reduction::Sum => "sum",
        }
    }
}

/// An integer type class targets and embedding indices can be given in.
pub trait IntIndex: Copy + private::Sealed {
    /// The value as `i64` (saturating: a value beyond `i64::MAX` is out of any range anyway).
    fn to_i64(self) -> i64;
}

mod private {
    pub trait Sealed {}
}

macro_rules! index_types {
    ($($t:ty),*) => {$(
        impl private::Sealed for $t {}
        impl IntIndex for $t {
            #[inline(always)]
            fn to_i64(self) -> i64 {
                i64::try_from(self).unwrap_or(i64::MAX)
            }
        }
    )*};
}
index_types!(usize, u64, u32, u16, u8, i64, i32, i16, i8, isize);

/// Class targets or embedding indices as the losses and `embedding` take
/// them: a slice, array or `Vec` of any [`IntIndex`] type, a [`Tensor`]
/// of dtype `i64` (or f32/f64 holding whole numbers), read in row-major
/// order, or a value of the graph ([`Var`]) holding such a tensor. A bool
/// tensor is `Error::WrongDType`.
///
/// Where the op finds them is one decision for every op that takes
/// indices: a graph value (a `Var`, or a tensor while a
/// [compiled step](crate::compile) captures) is an *input* of the recorded
/// node, so the node depends on the value (an ONNX export takes it as the
/// graph's input, a compiled step reads each run's); anything else is a
/// list stored in the op.
///
/// ```
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let logits = g.variable(Tensor::from_vec(vec![2.0, 0.0, 0.0, 2.0], &[2, 2])?);
/// let ids = Tensor::from_vec(vec![0i64, 1], &[2])?;
/// let a = logits.try_cross_entropy(&ids)?.value().try_item()?;
/// let b = logits.try_cross_entropy(&[0usize, 1])?.value().try_item()?;
/// let c = logits.try_cross_entropy(&g.constant(ids))?.value().try_item()?; // the node's input
/// assert_eq!(a, b);
/// assert_eq!(a, c);
/// assert!(logits.try_cross_entropy(&Tensor::from_vec(vec![true, false], &[2])?).is_err());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait Indices<'g> {
    /// The indices as `i64`s, row-major; errors name `op`.
    fn index_list(&self, op: &'static str) -> Result<Arc<[i64]>>;

    /// The indices as a tensor, when they are one: while a compiled step
    /// captures, an op takes them as an input of its node (bound to the
    /// step's input they come from) rather than storing them.
    fn as_tensor(&self) -> Option<&Tensor> {
        None
    }

    /// The graph value holding the indices, when they are one: always the
    /// node's input.
    fn as_value(&self) -> Option<&Var<'g>> {
        None
    }
}

impl<I: IntIndex> Indices<'_> for [I] {
    fn index_list(&self, _op: &'static str) -> Result<Arc<[i64]>> {
        Ok(to_i64_list(self))
    }
}

impl<I: IntIndex, const N: usize> Indices<'_> for [I; N] {
    fn index_list(&self, _op: &'static str) -> Result<Arc<[i64]>> {
        Ok(to_i64_list(self))
    }
}

impl<I: IntIndex> Indices<'_> for Vec<I> {
    fn index_list(&self, _op: &'static str) -> Result<Arc<[i64]>> {
        Ok(to_i64_list(self))
    }
}

impl Indices<'_> for Tensor {
    fn index_list(&self, op: &'static str) -> Result<Arc<[i64]>> {
        indices_from_tensor(op, self)
    }
    fn as_tensor(&self) -> Option<&Tensor> {
        Some(self)
    }
}

impl<'g> Indices<'g> for Var<'g> {
    fn index_list(&self, op: &'static str) -> Result<Arc<[i64]>> {
        indices_from_tensor(op, self.value())
    }
    fn as_tensor(&self) -> Option<&Tensor> {
        Some(self.value())
    }
    fn as_value(&self) -> Option<&Var<'g>> {
        Some(self)
    }
}

/// Where an op's indices come from (see [`Indices`]).
pub(crate) enum IndexSource<'g> {
    /// A list the op stores.
    Stored(Arc<[i64]>),
    /// A value of the graph, laid out in the op's index shape: the node's
    /// last input.
    Input(Var<'g>),
}

/// Decides where `op` on `graph` finds `indices`, laid out in `shape`: a
/// graph value (a `Var`; a tensor while `graph` captures a compiled step,
/// bound at every run to the input it comes from) is the node's input,
/// anything else a stored list. A `Var` of another graph is
/// `Error::ForeignVariable`; one whose element count is not `shape`'s,
/// `Error::ElementCount`.
pub(crate) fn index_source<'g, T: Indices<'g> + ?Sized>(
    graph: &'g crate::Graph,
    op: &'static str,
    indices: &T,
    shape: &[usize],
) -> Result<IndexSource<'g>> {
    let n = crate::tensor::shape::checked_numel(op, shape)?;
    let value = match (indices.as_value(), indices.as_tensor()) {
        (Some(v), _) => {
            graph.check_same(op, v)?;
            if v.value().numel() != n {
                return Err(Error::ElementCount {
                    op,
                    len: v.value().numel(),
                    shape: shape.to_vec(),
                });
            }
            v.clone()
        }
        // A captured tensor of the wrong count is stored, so that the op
        // reports the count as the eager op does.
        (None, Some(t)) if graph.is_capturing() && t.numel() == n => {
            let laid_out = if t.shape() == shape {
                t.clone()
            } else {
                t.reshape(shape)?
            };
            return Ok(IndexSource::Input(graph.constant(laid_out)));
        }
        _ => return Ok(IndexSource::Stored(indices.index_list(op)?)),
    };
    if value.shape() == shape {
        return Ok(IndexSource::Input(value));
    }
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    Ok(IndexSource::Input(value.try_reshape(&dims)?))
}

/// Converts indices to a shared `i64` list.
pub(crate) fn to_i64_list<I: IntIndex>(indices: &[I]) -> Arc<[i64]> {
    indices.iter().map(|&i| i.to_i64()).collect()
}

/// Reads a tensor of class indices: i64 as they are, or floats (the form
/// `Graph::apply` used to pass them in), each of which must be an integer;
/// a bool, f16 or bf16 tensor is `Error::WrongDType`.
pub(crate) fn indices_from_tensor(op: &'static str, t: &Tensor) -> Result<Arc<[i64]>> {
    match t.dtype() {
        crate::DType::I64 => {
            return Ok(t
                .shared_elements::<i64>()
                .unwrap_or_else(|| Arc::from(t.as_slice_of::<i64>())))
        }
        found @ (crate::DType::Bool | crate::DType::F16 | crate::DType::BF16) => {
            return Err(Error::WrongDType {
                op,
                expected: crate::DType::I64,
                found,
            })
        }
        crate::DType::F32 | crate::DType::F64 => {}
    }
    t.to_f64_vec()
        .into_iter()
        .enumerate()
        .map(|(pos, v)| {
            if v.is_finite() && v.fract() == 0.0 && v.abs() < 9.0e15 {
                Ok(v as i64)
            } else {
                Err(Error::invalid(
                    op,
                    format!("index {v} at position {pos} is not an integer"),
                ))
            }
        })
        .collect()
}

/// Checks that every index is in `0..size` (or equals `ignore`).
pub(crate) fn check_indices(
    op: &'static str,
    indices: &[i64],
    size: usize,
    ignore: Option<i64>,
) -> Result<()> {
    match indices
        .iter()
        .find(|&&i| Some(i) != ignore && (i < 0 || i as u64 >= size as u64))
    {
        Some(&index) => Err(Error::IndexOutOfRange { op, index, size }),
        None => Ok(()),
    }
}

/// Resolves a possibly negative axis; a 0-d tensor has one axis of size 1
/// (PyTorch accepts `dim = 0` or `-1` there).
pub(crate) fn resolve_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize> {
    normalize_axis(op, axis, rank.max(1)).map(|a| a.min(rank.saturating_sub(1)))
}

/// Sums over one axis (already resolved), keeping it as size 1 or dropping it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SumAxis {
    pub(crate) axis: usize,
    pub(crate) keepdim: bool,
}

impl StructuredOp for SumAxis {
    declare_op!("sum"(input), linear[0]);
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .ints("axes", &[self.axis])
            .bool("keepdim", self.keepdim)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        if x[0].rank() == 0 {
            return Ok(x[0].clone());
        }
        kernels::sum_axes("sum", x[0], &[self.axis as isize], self.keepdim)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        expand_axis(g, self.axis, n.x(0).shape())
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        // A 0-d example is returned as it is.
        if x[0].example_rank() == 0 {
            return Ok(x[0].clone());
        }
        let op = SumAxis {
            axis: self.axis + 1,
            keepdim: self.keepdim,
        };
        Ok(Batched::along_batch(
            x[0].value.graph().record(op, &[&x[0].value])?,
        ))
    }
}

/// Broadcasts a value with `axis` reduced away (or kept as size 1) back to `shape`.
#[derive(Clone, Debug)]
pub(crate) struct ExpandAxis {
    pub(crate) axis: usize,
    pub(crate) shape: Dims,
}

impl StructuredOp for ExpandAxis {
    declare_op!("expand"(input), linear[0], settings(ints shape));
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let mut kept = self.shape.clone();
        if !kept.is_empty() {
            kept[self.axis] = 1;
        }
        kernels::broadcast_to("expand", &x[0].reshape(&kept)?, &self.shape)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        sum_axis(g, self.axis, n.x(0).shape().len() == self.shape.len())
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let v = materialize(&x[0], ctx)?;
        if self.shape.is_empty() {
            // A 0-d example's value is its own broadcast.
            return Ok(Batched::along_batch(v.reshape_dims(&[ctx.size])?));
        }
        let mut shape = Dims::from_slice(&[ctx.size]);
        shape.extend_from_slice(&self.shape);
        let op = ExpandAxis {
            axis: self.axis + 1,
            shape,
        };
        Ok(Batched::along_batch(v.graph().record(op, &[&v])?))
    }
}

/// `v` summed over `axis` (resolved), as a recorded op.
pub(crate) fn sum_axis<'g>(v: &Var<'g>, axis: usize, keepdim: bool) -> Result<Var<'g>> {
    v.graph().record(SumAxis { axis, keepdim }, &[v])
}

/// `v` (the result of a sum over `axis`, with or without keepdim) broadcast back to `shape`.
pub(crate) fn expand_axis<'g>(v: &Var<'g>, axis: usize, shape: &[usize]) -> Result<Var<'g>> {
    if v.shape() == shape {
        return Ok(v.clone());
    }
    v.graph().record(
        ExpandAxis {
            axis,
            shape: Dims::from_slice(shape),
        },
        &[v],
    )
}

/// A loss's per-lane values reduced as asked: mean divides the sum by `denominator`.
pub(crate) fn reduce_lanes(
    per_lane: Tensor,
    lane_shape: &[usize],
    reduction: Reduction,
    denominator: f64,
) -> Result<Tensor> {
    match reduction {
        Reduction::None => per_lane.reshape(lane_shape),
        Reduction::Sum => kernels::sum_all(&per_lane),
        Reduction::Mean => {
            let s = kernels::reduce::sum_all(&per_lane.to_dtype(crate::DType::F64))?.try_item()?;
            Ok(Tensor::scalar_of(s / denominator, per_lane.dtype()))
        }
    }
}

// What the elementwise losses (`mse_loss`, `binary_cross_entropy_with_logits`) share.

/// Per-example values (`[B, ...]`) reduced over each example's own axes as
/// `reduction` says (a mean divides by one example's element count): a
/// loss's reduction over a batch, one loss per example.
pub(crate) fn reduce_examples<'g>(v: Var<'g>, reduction: Reduction) -> Result<Var<'g>> {
    let axes: Vec<isize> = (1..v.shape().len() as isize).collect();
    match reduction {
        _ if axes.is_empty() => Ok(v),
        Reduction::None => Ok(v),
        Reduction::Sum => v.try_sum_axes(&axes, false),
        Reduction::Mean => v.try_mean_axes(&axes, false),
    }
}

/// A loss's gradient `g` over a batch (one element per example for a
/// reduced loss, else one per element of the example) spread to `shape`,
/// the batched operands' shape `[B, ...]`.
pub(crate) fn spread_grad<'g>(
    g: &Batched<'g>,
    shape: &[usize],
    ctx: &BatchContext,
) -> Result<Var<'g>> {
    if g.example_shape().iter().product::<usize>() != 1 || g.example_shape() == &shape[1..] {
        return materialize(g, ctx);
    }
    let mut units = vec![1; shape.len()];
    units[0] = if g.batched { ctx.size } else { 1 };
    g.value.reshape_dims(&units)?.try_expand(shape)
}

/// The batching rule of an elementwise loss (`mse_loss`,
/// `binary_cross_entropy_with_logits`, inputs of one shape):
/// `unreduced` (the loss with reduction `none`) on its inputs made batched,
/// each example's elements then reduced as `reduction` says.
pub(crate) fn batch_elementwise_loss<'g, O: Differentiable + Clone>(
    unreduced: &O,
    reduction: Reduction,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let per_element = crate::ops::batching::on_materialized(unreduced, inputs, ctx)?.value;
    Ok(Batched::along_batch(reduce_examples(
        per_element,
        reduction,
    )?))
}

/// The batching rule of an elementwise loss's backward op (inputs `g` and
/// the loss's operands): `unreduced` (the backward of the loss with
/// reduction `none`) on `g` spread over each example's elements, times
/// `1 / n` for a mean over an example's `n` elements.
pub(crate) fn batch_elementwise_loss_backward<'g, O: Differentiable + Clone>(
    unreduced: &O,
    reduction: Reduction,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let operands = inputs[1..]
        .iter()
        .map(|x| materialize(x, ctx))
        .collect::<Result<Vec<_>>>()?;
    let g = spread_grad(&inputs[0], operands[0].shape(), ctx)?;
    let refs: Vec<&Var<'g>> = std::iter::once(&g).chain(&operands).collect();
    let out = g.graph().record(unreduced.clone(), &refs)?;
    let n = inputs[1].example_shape().iter().product();
    Ok(Batched::along_batch(match reduction {
        Reduction::Mean => out.mul_scalar(reduction_scale(reduction, n)),
        _ => out,
    }))
}

/// Checks two same-shape, same-dtype operands.
pub(crate) fn check_same(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    check_dtypes(op, a.dtype(), b.dtype())?;
    if a.shape() != b.shape() {
        return Err(Error::shape_mismatch(op, a.shape(), b.shape()));
    }
    Ok(())
}

/// Checks a loss gradient: one element, or the operands' shape.
pub(crate) fn check_grad(op: &'static str, g: &Tensor, x: &Tensor) -> Result<()> {
    check_same(
        op,
        &Tensor::scalar_of(0.0, g.dtype()),
        &Tensor::scalar_of(0.0, x.dtype()),
    )?;
    if g.numel() == 1 || g.shape() == x.shape() {
        Ok(())
    } else {
        Err(Error::shape_mismatch(op, x.shape(), g.shape()))
    }
}

/// The factor a reduction puts on each element's gradient.
pub(crate) fn reduction_scale(reduction: Reduction, n: usize) -> f64 {
    match reduction {
        Reduction::Mean => 1.0 / n as f64,
        _ => 1.0,
    }
}

/// Applies a reduction to an elementwise loss (as a `Var`).
pub(crate) fn reduce<'g>(v: Var<'g>, reduction: Reduction) -> Var<'g> {
    match reduction {
        Reduction::None => v,
        Reduction::Sum => v.sum(),
        Reduction::Mean => v.mean(),
    }
}

/// The gradient of a reduced loss with respect to its `g` input: the
/// elementwise product summed (a 0-d `g`) or kept (an elementwise `g`).
pub(crate) fn grad_of_g<'g>(prod: Var<'g>, g: &Var<'g>) -> Result<Var<'g>> {
    if g.shape() == prod.shape() {
        Ok(prod)
    } else {
        prod.sum().try_expand(g.shape())
    }
}

#[cfg(test)]
pub(in crate::ops::nn) mod tests {
    use super::*;
    use crate::autograd::VMap;
    use crate::{grad, gradcheck, jvpcheck, GradOptions, Graph};

    /// `tensors` stacked along a new axis 0.
    fn stack(tensors: &[Tensor]) -> Tensor {
        let g = Graph::new();
        let vars: Vec<Var<'_>> = tensors.iter().map(|t| g.constant(t.clone())).collect();
        let refs: Vec<&Var<'_>> = vars.iter().collect();
        Var::try_stack(&refs, 0).unwrap().value().clone()
    }

    /// `f` over each example's inputs and its gradients (of `sum f`, with
    /// respect to the float inputs, recorded so that they batch too).
    fn value_and_grads<'s>(
        f: &impl Fn(&[Var<'s>]) -> Result<Var<'s>>,
        v: &[Var<'s>],
    ) -> Result<Vec<Var<'s>>> {
        let y = f(v)?;
        let wrt: Vec<&Var<'s>> = v.iter().filter(|x| x.value().is_float()).collect();
        let opts = GradOptions::new().create_graph(true).allow_unused(true);
        let mut out = vec![y.clone()];
        out.extend(grad(&[&y.sum()], &wrt, &opts)?);
        Ok(out)
    }

    /// A float input as a variable, an index as a constant.
    fn leaf(g: &Graph, t: Tensor) -> Var<'_> {
        if t.is_float() {
            g.variable(t)
        } else {
            g.constant(t)
        }
    }

    /// `f` under `vmap` (inputs `i` with `batched[i]` stacked from
    /// `examples`, the others the first example's, shared) equals `f` on
    /// each example, and so do its per-sample gradients.
    pub(in crate::ops::nn) fn vmap_agrees<F>(f: F, examples: &[Vec<Tensor>], batched: &[bool])
    where
        F: for<'s> Fn(&[Var<'s>]) -> Result<Var<'s>>,
    {
        let g = Graph::new();
        let inputs: Vec<Var<'_>> = (0..batched.len())
            .map(|i| {
                let column: Vec<Tensor> = examples.iter().map(|e| e[i].clone()).collect();
                leaf(
                    &g,
                    if batched[i] {
                        stack(&column)
                    } else {
                        column[0].clone()
                    },
                )
            })
            .collect();
        let refs: Vec<&Var<'_>> = inputs.iter().collect();
        let axes: Vec<Option<usize>> = batched.iter().map(|&b| b.then_some(0)).collect();
        let got = VMap::new()
            .in_axes(&axes)
            .try_call(|v| value_and_grads(&f, v), &refs)
            .unwrap();
        let per_example: Vec<Vec<Tensor>> = examples
            .iter()
            .map(|e| {
                let h = Graph::new();
                let args: Vec<Var<'_>> = (0..batched.len())
                    .map(|i| {
                        leaf(
                            &h,
                            if batched[i] {
                                e[i].clone()
                            } else {
                                examples[0][i].clone()
                            },
                        )
                    })
                    .collect();
                value_and_grads(&f, &args)
                    .unwrap()
                    .iter()
                    .map(|v| v.value().clone())
                    .collect()
            })
            .collect();
        for (k, got) in got.iter().enumerate() {
            let want: Vec<Tensor> = per_example.iter().map(|e| e[k].clone()).collect();
            let want = stack(&want);
            assert_eq!(got.shape(), want.shape(), "output {k}");
            assert!(
                got.value().allclose(&want, 1e-10, 1e-12),
                "output {k}: {:?} vs {:?}",
                got.value().to_f64_vec(),
                want.to_f64_vec()
            );
        }
    }

    // Each example's loss and gradient, for every reduction and with the
    // target shared, for the elementwise losses.
    #[test]
    fn elementwise_losses_batch_example_by_example() {
        use super::super::batch_norm::sample;
        let examples: Vec<Vec<Tensor>> = (0..3)
            .map(|s| {
                vec![
                    sample(&[2, 3], s, 0.2, 2.0),
                    sample(&[2, 3], s + 4, 0.5, 0.4),
                ]
            })
            .collect();
        let pw = sample(&[3], 3, 1.5, 0.5);
        for r in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            for batched in [[true, true], [true, false], [false, true]] {
                vmap_agrees(|v| v[0].try_mse_loss_with(&v[1], r), &examples, &batched);
                vmap_agrees(
                    |v| v[0].try_binary_cross_entropy_with_logits_with(&v[1], r, Some(pw.clone())),
                    &examples,
                    &batched,
                );
            }
        }
    }

    #[test]
    fn axis_sum_and_expand_are_each_others_backward() {
        let x = Tensor::from_vec((0..24).map(|i| i as f64 * 0.1).collect(), &[2, 3, 4]).unwrap();
        for axis in 0..3 {
            for keepdim in [false, true] {
                gradcheck(|v| sum_axis(&v[0], axis, keepdim), std::slice::from_ref(&x)).unwrap();
                jvpcheck(|v| sum_axis(&v[0], axis, keepdim), std::slice::from_ref(&x)).unwrap();
                let shape = x.shape().to_vec();
                gradcheck(
                    |v| expand_axis(&sum_axis(&v[0], axis, keepdim)?, axis, &shape),
                    std::slice::from_ref(&x),
                )
                .unwrap();
            }
        }
    }

    #[test]
    fn index_conversion_and_checks() {
        assert_eq!(&*to_i64_list(&[1usize, 2]), &[1, 2]);
        assert_eq!(&*to_i64_list(&[-1i32]), &[-1]);
        assert_eq!(usize::MAX.to_i64(), i64::MAX);
        let t = Tensor::from_vec(vec![0.0, 2.0], &[2]).unwrap();
        assert_eq!(&*indices_from_tensor("t", &t).unwrap(), &[0, 2]);
        let bad = Tensor::from_vec(vec![0.5f32], &[1]).unwrap();
        assert!(matches!(
            indices_from_tensor("t", &bad),
            Err(Error::InvalidArgument { op: "t", .. })
        ));
        assert!(check_indices("t", &[0, 2, -100], 3, Some(-100)).is_ok());
        assert!(matches!(
            check_indices("t", &[3], 3, None),
            Err(Error::IndexOutOfRange {
                index: 3,
                size: 3,
                ..
            })
        ));
        assert!(check_indices("t", &[-1], 3, None).is_err());
    }
}
