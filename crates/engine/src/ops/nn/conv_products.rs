//! How the three convolution ops differentiate, written once for all three.
//!
//! One convolution `y = conv(x, w)` relates three tensors ([`Slot`]): the
//! input `x`, the weight `w` and the output `y`. Each op computes one slot
//! from the other two and is bilinear in them: [`Conv`] makes `y` from
//! `(x, w)`, [`ConvTranspose`] makes `x` from `(y, w)` (the input gradient),
//! [`ConvWeight`] makes `w` from `(x, y)` (the weight gradient). The
//! gradient of any of them with respect to an operand is the op that makes
//! that operand's slot, fed the output gradient in the op's own slot and the
//! other operand: so the three are closed under differentiation, and one
//! rule ([`grad`], [`grad_fast`], [`tangent`]) serves all of them. Their
//! batching rule ([`batch`]) is shared too.

use super::conv::{bias_grad, bias_grad_plain, bias_view, Conv};
use super::conv_spec::{split_inputs, ConvSpec};
use super::conv_transpose::ConvTranspose;
use super::conv_weight::ConvWeight;
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};
use crate::kernels::nn::conv::{conv2d_forward, conv2d_input_grad, ConvGeometry};
use crate::ops::batching::{fold, materialize, unfold};
use crate::ops::{Node, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// One of the three tensors of a convolution `y = conv(x, w)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// The input `x`, `[N, C_in, spatial...]`.
    X,
    /// The weight `w`, `[C_out, C_in / groups, kernel...]`.
    W,
    /// The output `y`, `[N, C_out, spatial'...]`.
    Y,
}

impl Slot {
    /// The slots of the operands of the op that makes this one, in order.
    pub(super) fn operands(self) -> [Slot; 2] {
        match self {
            Slot::Y => [Slot::X, Slot::W],
            Slot::X => [Slot::Y, Slot::W],
            Slot::W => [Slot::X, Slot::Y],
        }
    }
}

/// A convolution op: the slot it makes and its settings. Its first two
/// inputs are the operands in [`Slot::operands`] order; [`Conv`] and
/// [`ConvTranspose`] take an optional bias third.
pub(super) trait ConvProduct: StructuredOp {
    /// The slot the op makes.
    const MAKES: Slot;
    /// The convolution's settings.
    fn spec(&self) -> &ConvSpec;
    /// The same op with the settings `spec`.
    fn with_spec(&self, spec: ConvSpec) -> Self;
}

/// The [`StructuredOp`] methods every convolution op shares, inside its
/// `impl StructuredOp`: settings held, its name per dimension
/// (`name_str`), the derivative rule of this file ([`grad`],
/// [`grad_fast`]); `with_bias` adds what [`Conv`] and
/// [`ConvTranspose`] share: the spec's attributes, the optional bias
/// input, [`tangent`].
macro_rules! conv_product_rules {
    () => {
        const HOLDS: crate::Holds = crate::Holds::Settings;
        fn name(&self) -> &'static str {
            self.name_str()
        }
        fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            products::grad(self, i, g, n)
        }
        fn grad_fast(
            &self,
            i: usize,
            g: &Tensor,
            x: &[&Tensor],
            _: &Tensor,
        ) -> Option<Result<Tensor>> {
            Some(products::grad_fast(self, i, g, x))
        }
        fn batch<'g>(
            &self,
            x: &[crate::core::Batched<'g>],
            ctx: &crate::core::BatchContext,
        ) -> Result<crate::core::Batched<'g>> {
            products::batch(self, x, ctx)
        }
    };
    (with_bias) => {
        $crate::ops::nn::conv_products::conv_product_rules!();
        fn attributes(&self) -> OpAttributes {
            self.spec.attributes()
        }
        /// The input and the weight, then the bias if given.
        fn arity(&self) -> Option<usize> {
            None
        }
        fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            products::tangent(self, i, t, n)
        }
        fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
            products::forward(self, inputs)
        }
    };
}
pub(super) use conv_product_rules;

/// [`Conv`] and [`ConvTranspose`]: a convolution op with an optional bias
/// whose forward is one kernel over a checked geometry.
pub(super) trait BiasedConv: ConvProduct {
    /// Checks the inputs; returns the output shape and kernel geometry.
    fn plan(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<(Dims, ConvGeometry)>;
}

/// The forward of a [`BiasedConv`]: split the inputs, plan, run the kernel
/// that makes the op's slot (the convolution for `y`, its input gradient
/// for `x`).
pub(super) fn forward<P: BiasedConv>(op: &P, inputs: &[&Tensor]) -> Result<Tensor> {
    let (x, w, b) = split_inputs(op.name(), inputs)?;
    let (shape, geo) = op.plan(x, w, b)?;
    let kernel = if P::MAKES == Slot::X {
        "conv_transpose"
    } else {
        "conv"
    };
    crate::with_dtype!(kernel, x.dtype(), T => {
        let (xs, ws, bias) = (x.as_slice_of::<T>(), w.as_slice_of::<T>(), b.map(|b| b.as_slice_of::<T>()));
        Ok(Tensor::build::<T>(shape, |out| match P::MAKES {
            Slot::X => conv2d_input_grad(&geo, xs, ws, bias, out),
            _ => conv2d_forward(&geo, xs, ws, bias, out),
        }))
    })
}

/// A value the products apply to: a recorded [`Var`] (backward, tangents)
/// or a plain [`Tensor`] (the first-order fast path).
trait Operand: Sized {
    fn dims(&self) -> &[usize];
    /// The op making `slot` with `spec` (and, for the weight, `kernel`)
    /// applied to `args`.
    fn product(slot: Slot, spec: ConvSpec, kernel: [usize; 2], args: [&Self; 2]) -> Result<Self>;
}

impl<'g> Operand for Var<'g> {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
    fn product(slot: Slot, spec: ConvSpec, kernel: [usize; 2], args: [&Self; 2]) -> Result<Self> {
        let graph = args[0].graph();
        match slot {
            Slot::Y => graph.record(Conv { spec }, &args),
            Slot::X => graph.record(ConvTranspose { spec }, &args),
            Slot::W => graph.record(ConvWeight { spec, kernel }, &args),
        }
    }
}

impl Operand for Tensor {
    fn dims(&self) -> &[usize] {
        self.shape()
    }
    fn product(slot: Slot, spec: ConvSpec, kernel: [usize; 2], args: [&Self; 2]) -> Result<Self> {
        match slot {
            Slot::Y => StructuredOp::forward(&Conv { spec }, &args),
            Slot::X => StructuredOp::forward(&ConvTranspose { spec }, &args),
            Slot::W => StructuredOp::forward(&ConvWeight { spec, kernel }, &args),
        }
    }
}

/// The gradient, with respect to operand `i` (0 or 1) of `op` applied to
/// `operands`, of a loss whose gradient at the op's output is `g`.
fn operand_grad<O: ConvProduct, V: Operand>(
    op: &O,
    i: usize,
    g: &V,
    operands: [&V; 2],
) -> Result<V> {
    let from = O::MAKES.operands();
    let at = |slot: Slot| {
        if slot == O::MAKES {
            g
        } else {
            operands[usize::from(slot == from[1])]
        }
    };
    let spec = op.spec();
    let (x, w) = (spec.hw(at(Slot::X).dims()), spec.hw(at(Slot::W).dims()));
    // The windows of a strided convolution may stop short of the input's
    // end: the gradient ops use the spec that ends at the last window, so
    // their transposes give back exactly the input's size.
    let fitted = spec.fitted_to(x, w);
    let wanted = from[i];
    let [a, b] = wanted.operands();
    V::product(wanted, fitted, w, [at(a), at(b)])
}

/// [`StructuredOp::grad`] of a convolution op: a product for each operand,
/// the output gradient summed per channel for the bias.
pub(super) fn grad<'g, O: ConvProduct>(
    op: &O,
    i: usize,
    g: &Var<'g>,
    n: Node<'_, 'g>,
) -> Result<Var<'g>> {
    if i == 2 {
        return bias_grad(g, g.shape()[1], op.spec().spatial);
    }
    operand_grad(op, i, g, [n.x(0), n.x(1)])
}

/// [`StructuredOp::grad_fast`] of a convolution op: [`grad`] on plain
/// tensors.
pub(super) fn grad_fast<O: ConvProduct>(
    op: &O,
    i: usize,
    g: &Tensor,
    x: &[&Tensor],
) -> Result<Tensor> {
    match i {
        2 => bias_grad_plain(g, g.shape()[1], op.spec().spatial),
        _ => operand_grad(op, i, g, [x[0], x[1]]),
    }
}

/// [`StructuredOp::tangent`] of a convolution op: bilinear in its operands
/// (the op again, with the operand replaced by its tangent and no bias),
/// the bias's tangent broadcast over the output.
pub(super) fn tangent<'g, O: ConvProduct>(
    op: &O,
    i: usize,
    t: &Var<'g>,
    n: Node<'_, 'g>,
) -> Result<Var<'g>> {
    if i == 2 {
        return bias_view(t, op.spec().spatial);
    }
    let mut args = [n.x(0), n.x(1)];
    args[i] = t;
    t.graph().record(op.clone(), &args)
}

/// [`StructuredOp::batch`] of a convolution op (inputs: two operands in
/// [`Slot::operands`] order, then an optional bias), one convolution over
/// the whole batch:
///
/// - batched images, a shared weight: the batch folded into the images,
///   `[B, N, C, ...]` as `[B * N, C, ...]`;
/// - shared images, per-example weights (an ensemble's forward): the
///   examples' weights side by side as more output channels of each group
///   ([`weights_side_by_side`]), and the output's channels sorted back
///   ([`outputs_per_example`]);
/// - both batched (per-sample gradients: the weight gradient of batched
///   images and output gradients, or a backward through per-example
///   weights): a grouped convolution with `B * groups` groups, as
///   `torch.func` does. Example `b`'s channels become channel block `b` of
///   every image, `[B, N, C, ...]` as `[N, B * C, ...]`, and per-example
///   weights stack along their first axis, `[B * C_out, ...]`; since each
///   group reads only its own block, block `b` of the output is example
///   `b`'s result.
///
/// A bias is added after the convolution, per example, unless it and the
/// weight are shared.
pub(super) fn batch<'g, O: ConvProduct>(
    op: &O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let batch = ctx.size;
    let spec = op.spec();
    let (a, b, bias) = (&inputs[0], &inputs[1], inputs.get(2));
    let graph = a.value.graph();
    let out = match (a.batched, b.batched) {
        _ if O::MAKES == Slot::W => {
            // Both operands are images (input and output gradient): the
            // result, `[B * C_out, ...]`, is already per example.
            let grouped = op.with_spec(ConvSpec {
                groups: spec.groups * batch,
                ..spec.clone()
            });
            let (x, gy) = (
                into_channels(&materialize(a, ctx)?)?,
                into_channels(&materialize(b, ctx)?)?,
            );
            return unfold(&graph.record(grouped, &[&x, &gy])?, batch);
        }
        (true, false) if !bias.is_some_and(|c| c.batched) => {
            let mut args = vec![fold(&a.value)?, b.value.clone()];
            args.extend(bias.map(|c| c.value.clone()));
            let refs: Vec<&Var<'g>> = args.iter().collect();
            return unfold(&graph.record(op.clone(), &refs)?, batch);
        }
        (true, false) => {
            unfold(
                &graph.record(op.clone(), &[&fold(&a.value)?, &b.value])?,
                batch,
            )?
            .value
        }
        // Only the bias is batched: it broadcasts the output over the batch.
        (false, false) => graph.record(op.clone(), &[&a.value, &b.value])?,
        (false, true) => {
            let w = weights_side_by_side::<O>(&b.value, spec.groups)?;
            outputs_per_example(
                &graph.record(op.clone(), &[&a.value, &w])?,
                batch,
                spec.groups,
            )?
        }
        (true, true) => {
            let grouped = op.with_spec(ConvSpec {
                groups: spec.groups * batch,
                ..spec.clone()
            });
            let (x, w) = (into_channels(&a.value)?, fold(&b.value)?);
            out_of_channels(&graph.record(grouped, &[&x, &w])?, batch)?
        }
    };
    let out = match bias {
        None => out,
        Some(c) if c.batched => {
            // [B, C] as [B, 1, C, 1...] against [B, N, C, spatial...].
            let mut dims = vec![batch, 1, c.value.shape()[1]];
            dims.extend(std::iter::repeat_n(1, spec.spatial));
            out.try_add(&c.value.reshape_dims(&dims)?)?
        }
        Some(c) => out.try_add(&bias_view(&c.value, spec.spatial)?)?,
    };
    Ok(Batched::along_batch(out))
}

/// Per-example weights `[B, ...]` of a [`Conv`] (`[B, C_out, C_in / g,
/// k...]`) or a [`ConvTranspose`] (`[B, C_in, C_out / g, k...]`) as one
/// weight whose group `i` has the output channels `(b, o)` of every
/// example `b`'s group `i`, in that order: `[C_out * B, C_in / g, k...]`,
/// or `[C_in, B * C_out / g, k...]`.
fn weights_side_by_side<'g, O: ConvProduct>(w: &Var<'g>, groups: usize) -> Result<Var<'g>> {
    let shape = w.shape().to_vec();
    let (batch, rest) = (shape[0], &shape[3..]);
    if O::MAKES == Slot::X {
        let mut dims = vec![shape[1], batch * shape[2]];
        dims.extend_from_slice(rest);
        let mut order: Vec<isize> = (0..shape.len() as isize).collect();
        order.swap(0, 1);
        return w.try_permute(&order)?.reshape_dims(&dims);
    }
    // [B, g, C_out / g, ...] to [g, B, C_out / g, ...].
    let mut split = vec![batch, groups, shape[1] / groups, shape[2]];
    split.extend_from_slice(rest);
    let mut order: Vec<isize> = (0..split.len() as isize).collect();
    order.swap(0, 1);
    let mut dims = vec![batch * shape[1], shape[2]];
    dims.extend_from_slice(rest);
    w.reshape_dims(&split)?
        .try_permute(&order)?
        .reshape_dims(&dims)
}

/// The output `[N, g * B * C / g, spatial...]` of weights laid
/// [`side by side`](weights_side_by_side) as `[B, N, C, spatial...]`.
fn outputs_per_example<'g>(y: &Var<'g>, batch: usize, groups: usize) -> Result<Var<'g>> {
    let shape = y.shape().to_vec();
    let (n, channels, spatial) = (shape[0], shape[1] / batch, &shape[2..]);
    let mut split = vec![n, groups, batch, channels / groups];
    split.extend_from_slice(spatial);
    // [N, g, B, C / g, ...] to [B, N, g, C / g, ...].
    let mut order: Vec<isize> = vec![2, 0, 1];
    order.extend(3..split.len() as isize);
    let mut dims = vec![batch, n, channels];
    dims.extend_from_slice(spatial);
    y.reshape_dims(&split)?
        .try_permute(&order)?
        .reshape_dims(&dims)
}

/// Batched images `[B, N, C, spatial...]` as the channel blocks of `N`
/// images: `[N, B * C, spatial...]`.
fn into_channels<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    let shape = x.shape().to_vec();
    let mut order: Vec<isize> = (0..shape.len() as isize).collect();
    order.swap(0, 1);
    let mut dims = vec![shape[1], shape[0] * shape[2]];
    dims.extend_from_slice(&shape[3..]);
    x.try_permute(&order)?.reshape_dims(&dims)
}

/// [`into_channels`] undone: `[N, B * C, spatial...]` back to
/// `[B, N, C, spatial...]`.
fn out_of_channels<'g>(y: &Var<'g>, batch: usize) -> Result<Var<'g>> {
    let shape = y.shape().to_vec();
    let mut dims = vec![shape[0], batch, shape[1] / batch];
    dims.extend_from_slice(&shape[2..]);
    let mut order: Vec<isize> = (0..dims.len() as isize).collect();
    order.swap(0, 1);
    y.reshape_dims(&dims)?.try_permute(&order)
}
