//! Joining values: `cat` (along an existing dimension) and `stack` (along a
//! new one). Each input's gradient is its slice of the output gradient.

use crate::base::fallible::fallible;
use smallvec::SmallVec;

use super::batching::{example_axis, materialize};
use super::{Node, StructuredOp};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels::layout;
use crate::tensor::shape::normalize_axis;
use crate::tensor::Tensor;

/// A joining op: its struct, with the `dim` it joins along, and its
/// [`StructuredOp`] impl, in which the two share everything but `forward`
/// and `grad` (given in braces): any number of inputs, the `dim` setting,
/// and tangents joined as the inputs are (`join`).
macro_rules! join_op {
    ($(#[$doc:meta])* $op:ident = $name:literal, $(#[$dim_doc:meta])* join: $join:path, { $($rules:tt)* }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $op {
            $(#[$dim_doc])*
            pub dim: isize,
        }

        impl StructuredOp for $op {
            crate::ops::declare_op!($name(tensors), settings(int dim));
            fn arity(&self) -> Option<usize> {
                None
            }
            fn tangents<'g>(&self, t: &[Option<Var<'g>>], n: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
                joined_tangents(t, n, self.dim, $join)
            }
            $($rules)*
        }
    };
}

join_op! {
    /// Concatenates its inputs along `dim` (PyTorch's `cat`): every input has
    /// the same rank (>= 1) and the same size in every other dimension.
    Cat = "cat",
    /// The dimension joined along (negative counts from the end).
    join: Var::try_cat,
    {
        fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
            let first = first_of(Self::NAME, inputs)?;
            if first.rank() == 0 {
                return Err(Error::invalid("cat", "0-d tensors cannot be concatenated"));
            }
            let dim = normalize_axis("cat", self.dim, first.rank())?;
            layout::cat("cat", inputs, dim)
        }
        fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let dim = normalize_axis("cat", self.dim, g.shape().len())?;
            let at: usize = n.inputs[..i].iter().map(|x| x.shape()[dim]).sum();
            g.try_narrow(dim as isize, at as isize, n.x(i).shape()[dim])
        }
        fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
            let dim = example_axis(self.dim, x[0].example_rank());
            joined(x, ctx, Var::try_cat, dim)
        }
        fn facts(&self) -> OpFacts {
            join_facts(Cat { dim: 1 }, |seed| {
                vec![sample_tensor(&[2, 3], seed, 1.0), sample_tensor(&[2, 2], seed + 7, 1.0)]
            })
        }
    }
}

join_op! {
    /// Stacks its inputs along a new dimension `dim` (PyTorch's `stack`): every
    /// input has the same shape.
    Stack = "stack",
    /// Where the new dimension goes in the output (in `-rank-1..=rank`).
    join: Var::try_stack,
    {
        fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
            let first = first_of(Self::NAME, inputs)?;
            let dim = normalize_axis("stack", self.dim, first.rank() + 1)?;
            let mut shape: SmallVec<[usize; 4]> = SmallVec::from_slice(first.shape());
            shape.insert(dim, 1);
            let views = inputs
                .iter()
                .map(|x| {
                    if x.shape() != first.shape() {
                        return Err(Error::shape_mismatch("stack", first.shape(), x.shape()));
                    }
                    x.reshape(&shape)
                })
                .collect::<Result<Vec<Tensor>>>()?;
            let refs: Vec<&Tensor> = views.iter().collect();
            layout::cat("stack", &refs, dim)
        }
        fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
            let dim = normalize_axis("stack", self.dim, g.shape().len())?;
            g.try_narrow(dim as isize, i as isize, 1)?
                .reshape_dims(n.x(i).shape())
        }
        fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
            let dim = example_axis(self.dim, x[0].example_rank() + 1);
            joined(x, ctx, Var::try_stack, dim)
        }
        fn facts(&self) -> OpFacts {
            join_facts(Stack { dim: 1 }, |seed| {
                vec![sample_tensor(&[2, 3], seed, 1.0), sample_tensor(&[2, 3], seed + 7, 1.0)]
            })
        }
    }
}

/// A join over a batch: every input given the batch axis (a shared one
/// expanded), joined along the example's axis `dim` moved past it.
fn joined<'g>(
    x: &[Batched<'g>],
    ctx: &BatchContext,
    join: fn(&[&Var<'g>], isize) -> Result<Var<'g>>,
    dim: isize,
) -> Result<Batched<'g>> {
    let values = x
        .iter()
        .map(|v| materialize(v, ctx))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Var<'g>> = values.iter().collect();
    Ok(Batched::along_batch(join(&refs, dim)?))
}

/// The facts of a join: linear in every input; an example and its inputs.
fn join_facts(example: impl crate::Differentiable, sample: crate::core::SampleInputs) -> OpFacts {
    OpFacts::differentiable(None, std::sync::Arc::new(example), sample)
}

/// The first of a joining op's inputs, or an error for none.
fn first_of<'t>(op: &'static str, inputs: &[&'t Tensor]) -> Result<&'t Tensor> {
    inputs
        .first()
        .copied()
        .ok_or_else(|| Error::invalid(op, "expected a non-empty list of tensors"))
}

/// The output's tangent: the inputs' tangents, zeros for those that have
/// none, joined as the op joins its inputs (`join`, along `dim`).
fn joined_tangents<'g>(
    t: &[Option<Var<'g>>],
    n: Node<'_, 'g>,
    dim: isize,
    join: fn(&[&Var<'g>], isize) -> Result<Var<'g>>,
) -> Result<Option<Var<'g>>> {
    let dense: Vec<Var<'g>> = t
        .iter()
        .zip(n.inputs)
        .map(|(t, x)| match t {
            Some(t) => t.clone(),
            None => Var::constant_in(x.graph(), x.value().zeros_like()),
        })
        .collect();
    let refs: Vec<&Var<'g>> = dense.iter().collect();
    join(&refs, dim).map(Some)
}

register_defaults!(Cat, Stack);

/// The graph every value belongs to (the first one's), or an error for an empty list.
fn graph_of<'g>(op: &'static str, vars: &[&Var<'g>]) -> Result<&'g crate::Graph> {
    vars.first()
        .map(|v| v.graph())
        .ok_or_else(|| Error::invalid(op, "expected a non-empty list of values"))
}

impl<'g> Var<'g> {
    fallible! {
        /// Concatenates `vars` along `dim` (negative counts from the end). They
        /// must share a dtype, a rank (>= 1) and every size but `dim`'s.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, Var};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?);
        /// let b = g.variable(Tensor::from_vec(vec![3.0, 4.0, 5.0, 6.0], &[2, 2])?);
        /// let c = Var::try_cat(&[&a, &b], 0)?;
        /// assert_eq!(c.shape(), &[3, 2]);
        /// assert_eq!(c.value().to_f64_vec(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        /// assert!(Var::try_cat(&[&a, &b], 1).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_cat / cat(vars: &[&Var<'g>], dim: isize) -> Var<'g> {
            if let [only] = vars {
                // Still validate the dim, as the op would.
                if only.shape().is_empty() {
                    return Err(Error::invalid("cat", "0-d tensors cannot be concatenated"));
                }
                normalize_axis("cat", dim, only.shape().len())?;
                return Ok((*only).clone());
            }
            graph_of("cat", vars)?.record(Cat { dim }, vars)
        }
    }

    fallible! {
        /// Stacks `vars` (all of one shape and dtype) along a new dimension
        /// `dim` (in `-rank-1..=rank`).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor, Var};
        /// let g = Graph::new();
        /// let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// let b = g.variable(Tensor::from_vec(vec![3.0, 4.0], &[2])?);
        /// let s = Var::try_stack(&[&a, &b], 1)?;
        /// assert_eq!(s.shape(), &[2, 2]);
        /// assert_eq!(s.value().to_f64_vec(), vec![1.0, 3.0, 2.0, 4.0]);
        /// assert_eq!(Var::try_stack(&[&a, &b], -3).is_err(), true);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_stack / stack(vars: &[&Var<'g>], dim: isize) -> Var<'g> {
            graph_of("stack", vars)?.record(Stack { dim }, vars)
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor, Var};

    fn vals(shape: &[usize], seed: f64) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec(
            (0..n).map(|i| (i as f64 * 0.7 + seed).sin()).collect(),
            shape,
        )
        .unwrap()
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let a = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2]).unwrap());
        let b = g.constant(Tensor::from_vec(vec![5.0, 6.0], &[2, 1]).unwrap());
        let c = Var::cat(&[&a, &b, &a], -1);
        assert_eq!(c.shape(), &[2, 5]);
        assert_eq!(
            c.value().to_f64_vec(),
            vec![1., 2., 5., 1., 2., 3., 4., 6., 3., 4.]
        );
        let s = Var::stack(&[&a, &a], 0);
        assert_eq!(s.shape(), &[2, 2, 2]);
        assert_eq!(s.value().to_f64_vec(), vec![1., 2., 3., 4., 1., 2., 3., 4.]);
        let s2 = Var::stack(&[&a, &a], 2);
        assert_eq!(
            s2.value().to_f64_vec(),
            vec![1., 1., 2., 2., 3., 3., 4., 4.]
        );
        let x = g.variable(Tensor::scalar(1.0));
        let y = g.variable(Tensor::scalar(2.0));
        assert_eq!(
            Var::stack(&[&x, &y], 0).value().to_f64_vec(),
            vec![1.0, 2.0]
        );
        assert_eq!(Var::cat(&[&a], 1).value(), a.value());
    }

    #[test]
    fn errors_are_typed() {
        let g = Graph::new();
        let a = g.variable(Tensor::zeros(&[2, 2], DType::F64).unwrap());
        let b = g.variable(Tensor::zeros(&[2, 3], DType::F64).unwrap());
        let f = g.variable(Tensor::zeros(&[2, 2], DType::F32).unwrap());
        assert!(matches!(
            Var::try_cat(&[&a, &b], 0),
            Err(Error::ShapeMismatch { op: "cat", .. })
        ));
        assert!(matches!(
            Var::try_cat(&[&a, &f], 0),
            Err(Error::DTypeMismatch { op: "cat", .. })
        ));
        assert!(matches!(
            Var::try_cat(&[&a, &b], 2),
            Err(Error::AxisOutOfRange { op: "cat", .. })
        ));
        assert!(Var::try_cat(&[], 0).is_err());
        assert!(Var::try_stack(&[], 0).is_err());
        assert!(matches!(
            Var::try_stack(&[&a, &b], 0),
            Err(Error::ShapeMismatch { op: "stack", .. })
        ));
        let s = g.variable(Tensor::scalar(1.0));
        assert!(Var::try_cat(&[&s, &s], 0).is_err());
        assert!(Var::try_cat(&[&s], 0).is_err());
        let other = Graph::new();
        let foreign = other.variable(Tensor::zeros(&[2, 2], DType::F64).unwrap());
        assert!(matches!(
            Var::try_cat(&[&a, &foreign], 0),
            Err(Error::ForeignVariable { .. })
        ));
    }

    #[test]
    fn gradients_and_tangents() {
        let (a, b) = (vals(&[2, 3], 0.1), vals(&[2, 1], 0.7));
        gradcheck(
            |v| Var::try_cat(&[&v[0], &v[1], &v[0]], 1),
            &[a.clone(), b.clone()],
        )
        .unwrap();
        gradcheck(
            |v| Ok(Var::try_cat(&[&v[0], &v[1]], -1)?.tanh()),
            &[a.clone(), b.clone()],
        )
        .unwrap();
        let c = vals(&[2, 3], 0.3);
        gradcheck(
            |v| Var::try_stack(&[&v[0], &v[1], &v[0]], 1),
            &[a.clone(), c.clone()],
        )
        .unwrap();
        jvpcheck(|v| Var::try_cat(&[&v[0], &v[1]], 1), &[a.clone(), b]).unwrap();
        jvpcheck(|v| Ok(Var::try_stack(&[&v[0], &v[1]], -1)?.exp()), &[a, c]).unwrap();
    }

    #[test]
    fn frozen_inputs_get_no_gradient_and_f32_works() {
        let g = Graph::new();
        let a = g.variable(Tensor::from_vec(vec![1.0f32, 2.0], &[2]).unwrap());
        let k = g.constant(Tensor::from_vec(vec![3.0f32], &[1]).unwrap());
        let c = Var::cat(&[&k, &a], 0);
        let w = g.constant(Tensor::from_vec(vec![1.0f32, 10.0, 100.0], &[3]).unwrap());
        let grads = (&c * &w).sum().backward().unwrap();
        assert_eq!(grads.wrt(&a).to_vec::<f32>().unwrap(), vec![10.0, 100.0]);
        let r = g.apply("stack", &[&a, &a]).unwrap();
        assert_eq!(r.shape(), &[2, 2]);
    }
}
