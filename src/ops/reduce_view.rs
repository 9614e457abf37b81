//! `reduced_view`: the reshape between a reduction's output and its keepdim
//! shape (adding or removing size-1 axes), which reduction backward formulas
//! use to broadcast a reduced value (a gradient, a mean, a log-sum-exp)
//! against the input it came from.

use smallvec::smallvec;

use super::{expect_inputs, Differentiable, GradInputs, OpRegistry};
use crate::error::Result;
use crate::graph::Var;
use crate::tensor::shape::reduced_shape;
use crate::tensor::{Dims, Tensor};

/// A reshape between a reduction's output and its keepdim shape (adding or
/// removing size-1 axes); its own backward. Used by reduction backward
/// formulas, which need a reduced value to broadcast against the input.
#[derive(Clone, Debug, Default)]
pub struct ReducedView {
    /// The target shape (same element count).
    pub shape: Dims,
}

impl Differentiable for ReducedView {
    fn name(&self) -> &str {
        "reduced_view"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("reduced_view", inputs, 1)?;
        inputs[0].reshape(&self.shape)
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        Ok(smallvec![Some(view(g, inputs[0].shape())?)])
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        _inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        t[0].as_ref().map(|t| view(t, &self.shape)).transpose()
    }
}

fn view<'g>(v: &Var<'g>, shape: &[usize]) -> Result<Var<'g>> {
    if v.shape() == shape {
        return Ok(v.clone());
    }
    v.graph().record(
        ReducedView {
            shape: Dims::from_slice(shape),
        },
        &[v],
    )
}

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
    view(v, &reduced_shape(shape, axes, true))
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(ReducedView::default());
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, Graph, Tensor};

    #[test]
    fn reduced_view_is_differentiable() {
        let x = Tensor::from_vec(
            (0..24).map(|i| f64::from(i) * 0.1 - 1.0).collect(),
            &[2, 3, 4],
        )
        .unwrap();
        gradcheck(
            |v| super::view(&v[0], &[2, 1, 3, 4]),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(|v| super::view(&v[0], &[6, 4]), std::slice::from_ref(&x)).unwrap();
        let g = Graph::new();
        assert!(super::view(&g.variable(x), &[5]).is_err());
    }

    #[test]
    fn broadcastable_adds_a_node_only_when_needed() {
        let g = Graph::new();
        let r = g.variable(Tensor::from_vec(vec![1.0; 8], &[2, 4]).unwrap());
        let shape = [2, 3, 4];
        // Leading axes or keepdim already broadcast: no node.
        let lead = g.variable(Tensor::from_vec(vec![1.0; 12], &[3, 4]).unwrap());
        assert!(super::broadcastable(&lead, &shape, &[0], false).is_ok());
        let before = g.len();
        assert_eq!(
            super::broadcastable(&lead, &shape, &[0], false)
                .unwrap()
                .shape(),
            &[3, 4]
        );
        assert_eq!(g.len(), before);
        // A middle axis: viewed as [2, 1, 4].
        let v = super::broadcastable(&r, &shape, &[1], false).unwrap();
        assert_eq!(v.shape(), &[2, 1, 4]);
        assert_eq!(g.len(), before + 1);
    }
}
