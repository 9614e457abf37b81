//! What batching rules ([`Differentiable::batch`]) share: the few moves
//! every rule is made of. A rule sees its inputs as [`Batched`] values
//! (batch axis 0, or shared by every example) and records ordinary ops.
//!
//! - an elementwise op applies itself once its inputs are aligned
//!   ([`elementwise`]): a batched input of lower rank than the others gets
//!   unit axes after its batch axis, so broadcasting pairs example axes
//!   with example axes and never the batch with an example axis;
//! - an op with axis settings moves them past the batch axis
//!   ([`example_axis`]);
//! - an op that already maps over leading axes (a matmul's batch, a
//!   convolution's images) takes the batch folded into them ([`fold`],
//!   [`unfold`]), with shared inputs expanded where it needs every input
//!   batched ([`materialize`]).

use super::Differentiable;
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};

/// An elementwise op (broadcasting its inputs) over a batch: the op
/// itself, on its inputs aligned so that broadcasting pairs each
/// example's axes with the other inputs' (see the module docs).
pub fn elementwise<'g, O: Differentiable + Clone>(
    op: &O,
    inputs: &[Batched<'g>],
) -> Result<Batched<'g>> {
    let rank = inputs.iter().map(Batched::example_rank).max().unwrap_or(0);
    let aligned = inputs
        .iter()
        .map(|x| with_example_rank(x, rank))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Var<'g>> = aligned.iter().collect();
    let out = refs[0].graph().record(op.clone(), &refs)?;
    Ok(Batched {
        value: out,
        batched: inputs.iter().any(|x| x.batched),
    })
}

/// `x`'s value with unit axes after the batch axis until one example has
/// rank `rank` (a shared value is returned as it is: broadcasting aligns
/// it from the right).
pub fn with_example_rank<'g>(x: &Batched<'g>, rank: usize) -> Result<Var<'g>> {
    let missing = rank.saturating_sub(x.example_rank());
    if !x.batched || missing == 0 {
        return Ok(x.value.clone());
    }
    let shape = x.value.shape();
    let mut dims = Vec::with_capacity(shape.len() + missing);
    dims.push(shape[0]);
    dims.extend(std::iter::repeat_n(1, missing));
    dims.extend_from_slice(&shape[1..]);
    x.value.reshape_dims(&dims)
}

/// `x` with a batch axis: a shared value expanded (a view, no copy) to
/// `[batch, ...]`; a batched value as it is.
pub fn materialize<'g>(x: &Batched<'g>, ctx: &BatchContext) -> Result<Var<'g>> {
    if x.batched {
        return Ok(x.value.clone());
    }
    let mut shape = Vec::with_capacity(x.value.shape().len() + 1);
    shape.push(ctx.size);
    shape.extend_from_slice(x.value.shape());
    x.value.try_unsqueeze(0)?.try_expand(&shape)
}

/// The axis of a batched value that an example's axis `axis` (negative
/// counts from the end of the example's `example_rank` axes) is: one past
/// it. The op that recorded the example already checked `axis`.
pub fn example_axis(axis: isize, example_rank: usize) -> isize {
    let rank = example_rank as isize;
    let axis = if axis < 0 { axis + rank } else { axis };
    axis + 1
}

/// A batched value's batch axis merged into the axis after it:
/// `[batch, n, ...]` becomes `[batch * n, ...]` (a view when the value's
/// layout allows). An example of rank 0 cannot be folded; rules fold only
/// inputs the op requires to have a leading axis.
pub fn fold<'g>(x: &Var<'g>) -> Result<Var<'g>> {
    let shape = x.shape();
    let mut dims = Vec::with_capacity(shape.len() - 1);
    dims.push(shape[0] * shape[1]);
    dims.extend_from_slice(&shape[2..]);
    x.reshape_dims(&dims)
}

/// [`fold`] undone on an op's output: `[batch * n, ...]` back to
/// `[batch, n, ...]`.
pub fn unfold<'g>(x: &Var<'g>, batch: usize) -> Result<Batched<'g>> {
    let shape = x.shape();
    let mut dims = Vec::with_capacity(shape.len() + 1);
    dims.push(batch);
    dims.push(shape[0] / batch);
    dims.extend_from_slice(&shape[1..]);
    Ok(Batched::along_batch(x.reshape_dims(&dims)?))
}

/// The op itself on every input made batched ([`materialize`]): the rule of
/// an op that treats its leading axes as independent (a batched matmul's
/// batch axes, a reduction over its last axes) and needs every input to
/// carry the batch.
pub fn on_materialized<'g, O: Differentiable + Clone>(
    op: &O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let values = inputs
        .iter()
        .map(|x| materialize(x, ctx))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Var<'g>> = values.iter().collect();
    Ok(Batched::along_batch(
        refs[0].graph().record(op.clone(), &refs)?,
    ))
}

/// The op itself on its inputs as they are: the rule of an op that maps
/// over its input's leading axes and leaves them in place (a softmax over
/// the last axis, a layer norm over the trailing axes), with its one
/// batched input first.
pub fn on_leading_axes<'g, O: Differentiable + Clone>(
    op: &O,
    inputs: &[Batched<'g>],
) -> Result<Batched<'g>> {
    let values: Vec<&Var<'g>> = inputs.iter().map(|x| &x.value).collect();
    Ok(Batched {
        value: values[0].graph().record(op.clone(), &values)?,
        batched: inputs.iter().any(|x| x.batched),
    })
}
