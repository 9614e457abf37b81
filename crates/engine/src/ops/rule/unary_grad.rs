//! [`UnaryGrad`]: a unary rule's first-order backward, `(g, u) -> g f'(u)`,
//! as an elementwise op of its own. A compiled step records it in its joint
//! graph in place of the rule's `Var` formula (GELU's is eleven nodes), so
//! the replay runs the backward as one member of a fused pass: the eager
//! sweep's own fused kernel (`backward_fast`), with its bits.

use std::sync::Arc;

use super::num::Lane;
use super::unary_op::GradFn;
use super::{OpFacts, UnaryRule};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::Pointwise;
use crate::kernels::blocks::{as_slots, by_blocks};
use crate::kernels::{self, simd::wide};
use crate::ops::{expect_inputs, Differentiable, GradInputs};
use crate::tensor::{Element, Tensor};

/// The backward of the unary rule `R` as an op of `(g, u)`, `u` the value
/// the rule writes its derivative in (its input or its output). Named
/// `<rule>_backward` (`gelu_backward`) in printed and drawn graphs.
#[derive(Clone, Debug)]
pub(crate) struct UnaryGrad<R> {
    pub(crate) rule: R,
    pub(crate) name: Arc<str>,
}

impl<R: UnaryRule> UnaryGrad<R> {
    pub(crate) fn new(rule: R) -> Self {
        UnaryGrad {
            rule,
            name: format!("{}_backward", R::NAME).into(),
        }
    }
}

impl<R: UnaryRule> Differentiable for UnaryGrad<R> {
    fn name(&self) -> &str {
        &self.name
    }
    settings_and_arity!(2);
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs(R::NAME, inputs, 2)?;
        kernels::zip(R::NAME, inputs[0], inputs[1], GradFn(self.rule))
    }
    /// A compiled step's backward is first order: gradients of gradients
    /// stay eager (the rule's own `Var` formula differentiates again).
    fn backward<'g>(
        &self,
        _g: &Var<'g>,
        _inputs: &[Var<'g>],
        _output: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        Err(Error::Unsupported {
            op: self.name.to_string(),
            what: "differentiating a compiled step's backward kernel (use an eager graph)",
        })
    }
    fn pointwise(&self) -> Option<Arc<dyn Pointwise>> {
        Some(Arc::new(UnaryGradKernel(self.rule)))
    }
    elementwise_batch!();
    fn facts(&self) -> OpFacts {
        OpFacts {
            elementwise: true,
            ..OpFacts::opaque(Some(2))
        }
    }
}

/// [`UnaryGrad`] as a [`Pointwise`] kernel: the loop of `backward_fast`.
#[derive(Clone, Copy, Debug)]
struct UnaryGradKernel<R>(R);

#[inline(always)]
fn grad<T: Element, R: UnaryRule>(rule: R, ins: &[&[T]], out: &mut [T]) {
    let (g, u) = (&ins[0][..out.len()], &ins[1][..out.len()]);
    // A long chain by blocks on f32, as in `pointwise::unary`.
    if R::BLOCKS
        && wide(
            #[inline(always)]
            || {
                by_blocks(
                    [g, u],
                    as_slots(out),
                    #[inline(always)]
                    |[g, u]| rule.grad(&g, &u),
                    #[inline(always)]
                    |[g, u]| rule.grad(&Lane(g), &Lane(u)).0,
                )
                .is_some()
            },
        )
    {
        return;
    }
    wide(
        #[inline(always)]
        || {
            for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
                *o = rule.grad(&Lane(g), &Lane(u)).0;
            }
        },
    )
}

impl<R: UnaryRule> Pointwise for UnaryGradKernel<R> {
    fn arity(&self) -> usize {
        2
    }
    fn run_f32(&self, ins: &[&[f32]], out: &mut [f32]) {
        grad(self.0, ins, out)
    }
    fn run_f64(&self, ins: &[&[f64]], out: &mut [f64]) {
        grad(self.0, ins, out)
    }
    fn one_f32(&self, args: [f32; 4]) -> f32 {
        self.0.grad(&Lane(args[0]), &Lane(args[1])).0
    }
    fn one_f64(&self, args: [f64; 4]) -> f64 {
        self.0.grad(&Lane(args[0]), &Lane(args[1])).0
    }
}
