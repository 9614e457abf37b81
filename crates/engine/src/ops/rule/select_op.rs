//! [`SelectWhere`], the op behind [`Num::select`](super::Num::select) on a
//! recorded value: `then` where `x cmp rhs`, else `otherwise`.
//!
//! The comparison's operands are inputs of the node although no gradient
//! flows to them: a derivative that depends on `x` only through a kink
//! (relu's step) still depends on `x` in the graph, so differentiating it
//! again gives zero rather than "does not require grad", as in PyTorch.

use smallvec::smallvec;

use super::num::{MaskFn, PickFn};
use super::Cmp;
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::Node;
use crate::kernels;
use crate::ops::{expect_inputs, sum_tangents, unbroadcast, Differentiable, GradInputs};
use crate::tensor::Tensor;

/// `select_where(x, rhs, then, otherwise)`: `then` where `x cmp rhs`
/// holds, else `otherwise`, all four broadcasting together.
#[derive(Clone, Copy, Debug)]
pub struct SelectWhere(pub Cmp);

impl SelectWhere {
    /// The forward on plain tensors.
    pub(crate) fn compute(
        self,
        x: &Tensor,
        rhs: &Tensor,
        then: &Tensor,
        otherwise: &Tensor,
    ) -> Result<Tensor> {
        let mask = kernels::zip("select_where", x, rhs, MaskFn(self.0))?;
        kernels::zip3("select_where", &mask, then, otherwise, PickFn)
    }

    fn record<'g>(self, x: &Var<'g>, rhs: &Var<'g>, a: &Var<'g>, b: &Var<'g>) -> Result<Var<'g>> {
        x.graph().record(self, &[x, rhs, a, b])
    }
}

impl Differentiable for SelectWhere {
    fn name(&self) -> &str {
        "select_where"
    }
    settings_and_arity!(4);
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("select_where", inputs, 4)?;
        self.compute(inputs[0], inputs[1], inputs[2], inputs[3])
    }
    elementwise_batch!();
    fn pointwise(&self) -> Option<std::sync::Arc<dyn crate::core::Pointwise>> {
        Some(self.kernel())
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let (x, rhs, then, otherwise) = (&inputs[0], &inputs[1], &inputs[2], &inputs[3]);
        let zero = g.scalar_like(0.0);
        let d_then = then
            .requires_grad()
            .then(|| unbroadcast(self.record(x, rhs, g, &zero)?, then))
            .transpose()?;
        let d_otherwise = otherwise
            .requires_grad()
            .then(|| unbroadcast(self.record(x, rhs, &zero, g)?, otherwise))
            .transpose()?;
        Ok(smallvec![None, None, d_then, d_otherwise])
    }
    fn jvp<'g>(&self, t: &[Option<Var<'g>>], node: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        if t[2].is_none() && t[3].is_none() {
            return Ok(None);
        }
        let (inputs, out) = (node.inputs, node.output);
        let zero = out.scalar_like(0.0);
        let (a, b) = (
            t[2].as_ref().unwrap_or(&zero),
            t[3].as_ref().unwrap_or(&zero),
        );
        sum_tangents(
            out.shape(),
            [Some(self.record(&inputs[0], &inputs[1], a, b))],
        )
    }
}
