//! `broadcastable`: a reduction's output viewed in its keepdim shape, so
//! that backward formulas can broadcast it (a gradient, a mean, a
//! log-sum-exp) against the input it came from. The view is a `reshape`
//! node, added only when the squeezed shape would not broadcast correctly.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::tensor::shape::{normalize_axes, reduced_shape};

/// `v`, the output of a reduction over (normalised) `axes` of a value of
/// shape `shape`, viewed so that it broadcasts against that value: its
/// keepdim shape. Free (no node) when it already broadcasts correctly, as a
/// keepdim output or a reduction over leading axes does.
pub(crate) fn broadcastable<'g>(
    v: &Var<'g>,
    shape: &[usize],
    axes: &[usize],
    keepdim: bool,
) -> Result<Var<'g>> {
    let leading = axes.iter().enumerate().all(|(i, &a)| i == a);
    if keepdim || leading {
        return Ok(v.clone());
    }
    v.reshape_dims(&reduced_shape(shape, axes, true))
}

/// [`broadcastable`] for `v`, the output (or its gradient) of the
/// reduction `op` of `x` over `axes` as the caller wrote them (negative
/// axes count from the end).
pub(crate) fn broadcastable_over<'g>(
    op: &'static str,
    v: &Var<'g>,
    x: &Var<'g>,
    axes: &[isize],
    keepdim: bool,
) -> Result<Var<'g>> {
    let axes = normalize_axes(op, axes, x.value().rank())?;
    broadcastable(v, x.shape(), &axes, keepdim)
}

#[cfg(test)]
mod tests {
    use crate::{Graph, Tensor};

    #[test]
    fn a_node_only_when_needed() {
        let g = Graph::new();
        let shape = [2, 3, 4];
        // Leading axes (or keepdim) already broadcast: no node.
        let lead = g.variable(Tensor::from_vec(vec![1.0; 12], &[3, 4]).unwrap());
        let v = super::broadcastable(&lead, &shape, &[0], false).unwrap();
        assert_eq!(v.shape(), &[3, 4]);
        assert_eq!(g.len(), 0);
        // A middle axis: viewed as [2, 1, 4].
        let r = g.variable(Tensor::from_vec(vec![1.0; 8], &[2, 4]).unwrap());
        let v = super::broadcastable(&r, &shape, &[1], false).unwrap();
        assert_eq!(v.shape(), &[2, 1, 4]);
        assert_eq!(g.len(), 1);
        assert_eq!(g.nodes()[0].op_name(), "reshape");
    }
}
