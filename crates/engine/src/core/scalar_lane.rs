//! The scalar lane of the first-order backward: a node whose inputs, output
//! and output gradient are all 0-d values of one dtype hands its op plain
//! numbers instead of tensors, so a graph of scalar ops (the textbook chapter's running
//! example, a hand-written loss, W1 of the benchmarks) pays for arithmetic,
//! not for tensor plumbing.
//!
//! An op opts in with [`Differentiable::backward_scalar`](super::Differentiable::backward_scalar),
//! usually through [`scalar_rule!`](crate::scalar_rule), which writes one rule
//! for both dtypes. The rule must compute exactly what the op's `backward`
//! computes, operation for operation, so both paths give the same bits (the
//! property tests compare them on random graphs).

/// The numbers one scalar node's backward works with, in dtype `T`.
#[derive(Debug)]
pub struct ScalarArgs<'a, T> {
    /// The gradient of the node's output.
    pub grad: T,
    /// The node's input values, in order.
    pub inputs: &'a [T],
    /// The node's output value.
    pub output: T,
    /// One gradient per input, to be written by the rule.
    pub grads: &'a mut [T],
}

/// A scalar node's backward call, in the dtype of its values.
#[derive(Debug)]
pub enum ScalarBackward<'a> {
    /// Every value is `f32`.
    F32(ScalarArgs<'a, f32>),
    /// Every value is `f64`.
    F64(ScalarArgs<'a, f64>),
}

impl ScalarBackward<'_> {
    /// The number of inputs.
    pub fn arity(&self) -> usize {
        match self {
            ScalarBackward::F32(a) => a.inputs.len(),
            ScalarBackward::F64(a) => a.inputs.len(),
        }
    }
}

/// Implements [`Differentiable::backward_scalar`](crate::Differentiable::backward_scalar)
/// from one rule written for both dtypes: `|g, x, y, d| body` binds the
/// output gradient, the input values, the output value and the gradients to
/// write. Inside the body, generic helpers (the kernels' functors, methods of
/// [`Element`](crate::Element) and the operators) work for either dtype. The rule declines
/// (returns `false`) when the node has a different number of inputs than
/// `arity`.
///
/// ```
/// use retrograd::{scalar_rule, Differentiable, GradInputs, Graph, Result, Tensor, Var};
///
/// /// f(x) = 3x, with a scalar lane.
/// struct Triple;
/// impl Differentiable for Triple {
///     fn name(&self) -> &str { "triple" }
///     fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
///         retrograd::kernels::map(inputs[0], retrograd::kernels::functors::Scale(3.0))
///     }
///     fn backward<'g>(&self, g: &Var<'g>, _x: &[Var<'g>], _y: &Var<'g>) -> Result<GradInputs<'g>> {
///         Ok(smallvec::smallvec![Some(g * 3.0)])
///     }
///     scalar_rule!(arity 1, |g, _x, _y, d| d[0] = g * 3.0);
/// }
///
/// let graph = Graph::new();
/// let x = graph.variable(Tensor::scalar(2.0));
/// let y = graph.record(Triple, &[&x])?;
/// assert_eq!(y.backward()?.wrt(&x).try_item()?, 3.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[macro_export]
macro_rules! scalar_rule {
    (arity $n:literal, |$g:ident, $x:ident, $y:ident, $d:ident| $body:expr) => {
        #[inline]
        fn backward_scalar(&self, call: &mut $crate::core::ScalarBackward<'_>) -> bool {
            match call {
                $crate::core::ScalarBackward::F32(a) => {
                    if a.inputs.len() != $n {
                        return false;
                    }
                    let ($g, $x, $y, $d) = (a.grad, a.inputs, a.output, &mut *a.grads);
                    let _ = (&$x, &$y);
                    $body;
                }
                $crate::core::ScalarBackward::F64(a) => {
                    if a.inputs.len() != $n {
                        return false;
                    }
                    let ($g, $x, $y, $d) = (a.grad, a.inputs, a.output, &mut *a.grads);
                    let _ = (&$x, &$y);
                    $body;
                }
            }
            true
        }
    };
}
