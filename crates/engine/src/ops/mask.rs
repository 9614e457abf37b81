//! Ops of integer and bool tensors: comparisons (`eq`, `ne`, `lt`, `le`,
//! `gt`, `ge`, returning bool), `masked_fill`, `tril`/`triu`, `to_dtype`
//! casts and `topk`.
//!
//! Each is an op of the registry ([`Compare`], [`MaskedFill`],
//! [`Triangle`], [`Cast`], [`Topk`]). i64, bool, f16 and bf16 values are
//! never differentiable, so an op whose output is one records no node:
//! comparisons and the indices of `topk` are constants, and a cast to a
//! dtype other than f32 and f64 is a constant too. The ops whose output is
//! a float stay differentiable in their float inputs, each with a linear
//! derivative that is the op itself (so every order exists): `masked_fill`
//! passes the gradient where the mask is false, `tril`/`triu` mask the
//! gradient the same way, `topk`'s values are a gather whose gradient is
//! scattered back to the picked positions, and an f32<->f64 cast casts the
//! gradient back.

use super::batching::{elementwise, materialize, on_leading_axes, with_example_rank};
use super::compare::Condition;
use super::index::Gather;
use super::rule::OpFacts;
use super::{Node, OpRegistry, StructuredOp};
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};
use crate::kernels::mask::{self as kernel, Comparison};
use crate::ops::declare_op;
use crate::tensor::{DType, Tensor};

/// A cast to another dtype ([`Tensor::to_dtype`]'s conversions). Between
/// f32 and f64 it is differentiable (the gradient is cast back); to i64,
/// bool, f16 or bf16 its output is a constant (no node), and from them
/// there is no gradient to give.
#[derive(Clone, Copy, Debug)]
pub struct Cast {
    /// The dtype of the output.
    pub to: DType,
}

impl StructuredOp for Cast {
    declare_op!("to_dtype"(input), settings(dtype to));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].to_dtype(self.to))
    }
    fn non_float_output(&self) -> bool {
        !self.to.is_float()
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        g.try_to_dtype(n.x(0).dtype())
    }
    fn grad_fast(&self, _: usize, g: &Tensor, x: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        Some(Ok(g.to_dtype(x[0].dtype())))
    }
    // A cast to a dtype that is not a float carries no tangent.
    fn tangents<'g>(&self, t: &[Option<Var<'g>>], _: Node<'_, 'g>) -> Result<Option<Var<'g>>> {
        match &t[0] {
            Some(t) if self.to.is_float() => Ok(Some(t.try_to_dtype(self.to)?)),
            _ => Ok(None),
        }
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        on_leading_axes(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            // Finite differences need f64 through and through: the cast
            // f64 -> f64 (an f32 step would round away the differences).
            example: Some(std::sync::Arc::new(Cast { to: DType::F64 })),
            sample_inputs: Some(|seed| vec![sample(&[2, 3], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

/// `scale · sin(0.37 i + 1.3 seed + 0.1)`: smooth, distinct sample values.
fn sample(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| scale * (0.37 * i as f64 + 1.3 * seed as f64 + 0.1).sin())
        .collect();
    Tensor::from_vec(v, shape).expect("a valid shape")
}

/// A comparison as an op (`eq`, `ne`, `lt`, `le`, `gt`, `ge`): two
/// operands of one dtype, broadcasting, a bool output that is always a
/// constant (no node, no gradient).
#[derive(Clone, Copy, Debug)]
pub struct Compare(pub Comparison);

impl StructuredOp for Compare {
    declare_op!("eq"(input, other));
    // Piecewise constant: no gradient, no tangent (and never a node to run).
    const NO_GRAD: &'static [usize] = &[0, 1];
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        kernel::compare(self.0, inputs[0], inputs[1])
    }
    fn non_float_output(&self) -> bool {
        true
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        elementwise(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            elementwise: true,
            tangent: true,
            // Operands on a grid of quarters, broadcasting, so that ties
            // (where `eq`/`le`/`ge` differ from `ne`/`lt`/`gt`) occur.
            sample_inputs: Some(|seed| {
                let grid = |t: Tensor| t.map_f64(|v| (v * 4.0).round() / 4.0);
                vec![
                    grid(sample(&[2, 3], seed, 1.0)),
                    grid(sample(&[3], seed + 2, 1.0)),
                ]
            }),
            ..OpFacts::opaque(Some(2))
        }
    }
}

/// `value` where the bool `mask` is true, the input elsewhere (PyTorch's
/// `masked_fill`). Inputs: `[x, mask]`, `mask` broadcasting to `x`'s shape.
/// Its derivative in `x` is `masked_fill` with 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct MaskedFill {
    /// The value written where the mask is true (in `x`'s dtype).
    pub value: f64,
}

impl MaskedFill {
    fn run(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        const OP: &str = "masked_fill";
        if mask.dtype() != DType::Bool {
            return Err(Error::WrongDType {
                op: OP,
                expected: DType::Bool,
                found: mask.dtype(),
            });
        }
        if !crate::tensor::shape::broadcastable_to(mask.shape(), x.shape()) {
            return Err(Error::shape_mismatch(OP, mask.shape(), x.shape()));
        }
        kernel::select(OP, mask, &Tensor::scalar_of(self.value, x.dtype()), x)
    }
}

impl StructuredOp for MaskedFill {
    declare_op!("masked_fill"(input, mask), no_grad[1], settings(float value));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        self.run(inputs[0], inputs[1])
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        g.graph().record(MaskedFill { value: 0.0 }, &[g, n.x(1)])
    }
    fn grad_fast(&self, _: usize, g: &Tensor, x: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        Some(MaskedFill { value: 0.0 }.run(g, x[1]))
    }
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        t.graph().record(MaskedFill { value: 0.0 }, &[t, n.x(1)])
    }
    // The output has the input's shape, so a batched mask needs a batched
    // input (a shared one expanded) and unit axes after its batch axis to
    // broadcast against the example's axes.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let (input, mask) = (&x[0], &x[1]);
        let (input, mask) = if mask.batched {
            let input = materialize(input, ctx)?;
            (input, with_example_rank(mask, x[0].example_rank())?)
        } else {
            (input.value.clone(), mask.value.clone())
        };
        Ok(Batched::along_batch(
            input.graph().record(*self, &[&input, &mask])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(MaskedFill { value: -1.5 })),
            sample_inputs: Some(|seed| {
                let keep: Vec<bool> = (0..4).map(|i| (i + seed) % 3 == 0).collect();
                vec![
                    sample(&[2, 3, 4], seed, 1.0),
                    Tensor::from_vec(keep, &[1, 4]).expect("a shape"),
                ]
            }),
            ..OpFacts::opaque(Some(2))
        }
    }
}

/// The lower (`tril`) or upper (`triu`) triangle of the matrices in the
/// last two dims, the rest zero; its derivative is the same triangle of the
/// gradient.
#[derive(Clone, Copy, Debug, Default)]
pub struct Triangle {
    /// The diagonal that bounds the triangle (0 the main one, positive above).
    pub diagonal: i64,
    /// `triu` (keep `j - i >= diagonal`) rather than `tril` (`j - i <= diagonal`).
    pub upper: bool,
}

impl StructuredOp for Triangle {
    declare_op!("tril"(input), linear[0], settings(int diagonal, bool upper));
    fn name(&self) -> &'static str {
        if self.upper {
            "triu"
        } else {
            "tril"
        }
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        kernel::triangle(self.name(), inputs[0], self.diagonal, self.upper)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        g.graph().record(*self, &[g])
    }
    fn grad_fast(&self, _: usize, g: &Tensor, _: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        Some(self.forward(&[g]))
    }
    // The matrices are the last two axes; the batch is one more leading axis.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        on_leading_axes(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Triangle {
                diagonal: if self.upper { 1 } else { -1 },
                upper: self.upper,
            })),
            sample_inputs: Some(|seed| vec![sample(&[2, 3, 4], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

/// The `k` largest (or smallest) elements along the last axis, sorted
/// (PyTorch's `topk(k, dim=-1)` values; `Var::topk` also returns the
/// positions). The positions are found again in backward and tangent, and
/// the derivative is [`Gather`]'s at them (the gradient scattered back).
#[derive(Clone, Copy, Debug)]
pub struct Topk {
    /// How many elements per lane.
    pub k: usize,
    /// The largest (`true`) or the smallest.
    pub largest: bool,
}

impl Topk {
    /// The positions picked in `x`, recorded as [`TopkPositions`] (a
    /// constant, except in a trace).
    fn positions<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let op = TopkPositions {
            k: self.k,
            largest: self.largest,
        };
        x.graph().record(op, &[x])
    }
}

/// The positions `topk` picks along the last axis, as i64. Its output is
/// an index, so outside a trace it records no node and is a constant; in a
/// trace (`vmap`) it is an op of the input, so that a batched gradient of
/// `topk` finds each example's positions rather than those of the example
/// it was traced on. Not registered: `topk`'s gradient and `Var::topk`
/// record it.
#[derive(Clone, Copy, Debug)]
struct TopkPositions {
    k: usize,
    largest: bool,
}

impl StructuredOp for TopkPositions {
    declare_op!("topk_indices"(input), no_grad[0], settings(int k, bool largest));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        kernel::topk_indices("topk", inputs[0], self.k, self.largest)
    }
    fn non_float_output(&self) -> bool {
        true
    }
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        on_leading_axes(self, x)
    }
}

impl StructuredOp for Topk {
    declare_op!("topk"(input), settings(int k, bool largest));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        let idx = kernel::topk_indices("topk", x, self.k, self.largest)?;
        crate::kernels::index::gather("topk", x, x.rank() - 1, &idx)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let inputs = [n.x(0).clone(), self.positions(n.x(0))?];
        Gather { dim: -1 }.grad(
            0,
            g,
            Node {
                inputs: &inputs,
                output: n.output,
            },
        )
    }
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        t.graph()
            .record(Gather { dim: -1 }, &[t, &self.positions(n.x(0))?])
    }
    // Along the last axis: the batch is one more leading axis.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        on_leading_axes(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Topk {
                k: 2,
                largest: false,
            })),
            sample_inputs: Some(|seed| vec![sample(&[2, 3, 5], seed, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

/// Registers the six comparisons, `masked_fill` (value 0), `tril` and
/// `triu` (main diagonal), `to_dtype` (to f32, PyTorch's default float)
/// and `topk` (k = 1, largest): applied by name, each with those settings.
pub(crate) fn register(reg: &mut OpRegistry) {
    for cmp in [
        Comparison::Eq,
        Comparison::Ne,
        Comparison::Lt,
        Comparison::Le,
        Comparison::Gt,
        Comparison::Ge,
    ] {
        reg.add_builtin(Compare(cmp));
    }
    reg.add_builtin(MaskedFill::default());
    reg.add_builtin(Triangle {
        diagonal: 0,
        upper: false,
    });
    reg.add_builtin(Triangle {
        diagonal: 0,
        upper: true,
    });
    reg.add_builtin(Cast { to: DType::F32 });
    reg.add_builtin(Topk {
        k: 1,
        largest: true,
    });
}

/// `value` as a 0-d tensor of `dtype`, for comparing with a tensor of it; a
/// value that `dtype` cannot hold exactly (2.5 for i64, 3 for bool) is an
/// error rather than a silent rounding.
fn scalar_operand(op: &'static str, value: f64, dtype: DType) -> Result<Tensor> {
    let t = Tensor::scalar_of(value, dtype);
    let exact = match dtype {
        // A float scalar rounds to the tensor's float dtype, as in PyTorch.
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => true,
        DType::I64 | DType::Bool => t.try_item()? == value,
    };
    if exact {
        Ok(t)
    } else {
        Err(Error::invalid(
            op,
            format!("the scalar {value} is not a value of the tensor's dtype {dtype}"),
        ))
    }
}

/// Writes the six comparison methods, each with a tensor and a scalar form.
macro_rules! comparisons {
    ($($cmp:ident, $try_name:ident / $name:ident, $try_scalar:ident / $scalar:ident, $sym:literal;)*) => {
        impl<'g> Var<'g> {
            $(
                fallible! {
                    #[doc = concat!("`self ", $sym, " other` elementwise, broadcasting, as a bool constant")]
                    /// (no gradient, no node). Both operands must have the
                    /// same dtype (`Error::DTypeMismatch` otherwise); any
                    /// dtype compares, a NaN compares false (`ne`: true).
                    /// See the module's example.
                    pub fn $try_name / $name(&self, other: &Var<'g>) -> Var<'g> {
                        self.graph().record(Compare(Comparison::$cmp), &[self, other])
                    }
                }

                fallible! {
                    #[doc = concat!("`self ", $sym, " value` elementwise, as a bool constant; `value`")]
                    /// takes this value's dtype (and must be exactly a value
                    /// of it: 2.5 is an error for an i64 tensor).
                    pub fn $try_scalar / $scalar(&self, value: f64) -> Var<'g> {
                        let v = scalar_operand(Comparison::$cmp.name(), value, self.dtype())?;
                        let v = Var::constant_in(self.graph(), v);
                        self.graph().record(Compare(Comparison::$cmp), &[self, &v])
                    }
                }
            )*
        }
    };
}

comparisons! {
    Eq, try_eq / eq, try_eq_scalar / eq_scalar, "==";
    Ne, try_ne / ne, try_ne_scalar / ne_scalar, "!=";
    Lt, try_lt / lt, try_lt_scalar / lt_scalar, "<";
    Le, try_le / le, try_le_scalar / le_scalar, "<=";
    Gt, try_gt / gt, try_gt_scalar / gt_scalar, ">";
    Ge, try_ge / ge, try_ge_scalar / ge_scalar, ">=";
}

impl<'g> Var<'g> {
    /// `value` where `mask` is true, `self` elsewhere (PyTorch's
    /// `masked_fill`). `mask` is a bool `&Tensor` or `&Var` that broadcasts
    /// to this value's shape; the output has this value's shape and dtype.
    /// The gradient flows to `self` where the mask is false, and is zero
    /// where it is true.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
    /// let causal = Tensor::from_vec(vec![false, true, false, false], &[2, 2])?;
    /// let y = x.try_masked_fill(&causal, f64::NEG_INFINITY)?;
    /// assert_eq!(y.value().to_f64_vec(), vec![1.0, f64::NEG_INFINITY, 3.0, 4.0]);
    /// let grad = x.try_masked_fill(&causal, 0.0)?.sum().backward()?.wrt(&x);
    /// assert_eq!(grad.to_f64_vec(), vec![1.0, 0.0, 1.0, 1.0]);
    /// assert!(x.try_masked_fill(&Tensor::scalar(1.0), 0.0).is_err()); // not a bool mask
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn try_masked_fill(&self, mask: impl Condition<'g>, value: f64) -> Result<Var<'g>> {
        let mask = mask.into_condition(self.graph());
        self.graph().record(MaskedFill { value }, &[self, &mask])
    }

    /// See [`try_masked_fill`](Self::try_masked_fill); panics at the
    /// caller's line on a bad mask.
    #[track_caller]
    pub fn masked_fill(&self, mask: impl Condition<'g>, value: f64) -> Var<'g> {
        crate::base::error::or_panic(self.try_masked_fill(mask, value))
    }

    fallible! {
        /// The lower triangle of the matrices in the last two dimensions
        /// (PyTorch's `tril`): elements `(i, j)` with `j - i <= diagonal`
        /// are kept, the rest are zero. Any dtype; differentiable for floats
        /// (the gradient is masked the same way). Needs rank at least 2.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
        /// let y = x.try_tril(0)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 0.0, 3.0, 4.0]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![1.0, 0.0, 1.0, 1.0]);
        /// let ones = g.constant(Tensor::full(&[2, 3], 1.0, retrograd::DType::Bool)?);
        /// assert_eq!(ones.try_tril(-1)?.value().to_vec::<bool>()?, vec![false, false, false, true, false, false]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_tril / tril(&self, diagonal: i64) -> Var<'g> {
            self.triangle(diagonal, false)
        }
    }

    fallible! {
        /// The upper triangle of the matrices in the last two dimensions
        /// (PyTorch's `triu`): elements with `j - i >= diagonal` are kept
        /// (see [`try_tril`](Self::try_tril)).
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?);
        /// assert_eq!(x.try_triu(1)?.value().to_f64_vec(), vec![0.0, 2.0, 3.0, 0.0, 0.0, 6.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_triu / triu(&self, diagonal: i64) -> Var<'g> {
            self.triangle(diagonal, true)
        }
    }

    fn triangle(&self, diagonal: i64, upper: bool) -> Result<Var<'g>> {
        self.graph().record(Triangle { diagonal, upper }, &[self])
    }

    fallible! {
        /// This value converted to `dtype` ([`Tensor::to_dtype`]'s rules).
        /// Between f32 and f64 the cast is differentiable (the gradient is
        /// cast back); a cast to i64 or bool is a constant (no node).
        ///
        /// ```
        /// use retrograd::{DType, Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.5f32, -2.0], &[2])?);
        /// let y = x.try_to_dtype(DType::F64)?;
        /// assert_eq!(y.dtype(), DType::F64);
        /// let grad = (&y * &y).sum().backward()?.wrt(&x);
        /// assert_eq!(grad.to_vec::<f32>()?, vec![3.0, -4.0]);
        /// let ids = x.try_to_dtype(DType::I64)?;
        /// assert_eq!(ids.value().to_vec::<i64>()?, vec![1, -2]);
        /// assert!(!ids.requires_grad());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_to_dtype / to_dtype(&self, dtype: DType) -> Var<'g> {
            if dtype == self.dtype() {
                return Ok(self.clone());
            }
            self.graph().record(Cast { to: dtype }, &[self])
        }
    }

    fallible! {
        /// The `k` largest (`largest`) or smallest elements along the last
        /// axis, sorted (largest first, or smallest first), and their
        /// positions as an i64 constant (PyTorch's `topk(k, dim=-1)`). Ties
        /// keep the lower position first; NaN counts as the largest. The
        /// values are differentiable: the gradient is scattered back to the
        /// picked positions.
        ///
        /// ```
        /// use retrograd::{DType, Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![0.1, 0.7, 0.2, 0.9], &[4])?);
        /// let (values, indices) = x.try_topk(2, true)?;
        /// assert_eq!(values.value().to_f64_vec(), vec![0.9, 0.7]);
        /// assert_eq!(indices.value().to_vec::<i64>()?, vec![3, 1]);
        /// assert_eq!(indices.dtype(), DType::I64);
        /// let grad = (&values * 2.0).sum().backward()?.wrt(&x);
        /// assert_eq!(grad.to_f64_vec(), vec![0.0, 2.0, 0.0, 2.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_topk / topk(&self, k: usize, largest: bool) -> (Var<'g>, Var<'g>) {
            let op = Topk { k, largest };
            let values = self.graph().record(op, &[self])?;
            Ok((values, op.positions(self)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, DType, Error, Graph, Tensor};

    #[test]
    fn comparisons_broadcast_and_return_bool_constants() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, f64::NAN], &[3]).unwrap());
        let y = g.constant(Tensor::from_vec(vec![2.0, 1.0], &[2, 1]).unwrap());
        let before = g.len();
        let lt = x.lt(&y);
        assert_eq!(lt.dtype(), DType::Bool);
        assert_eq!(lt.shape(), &[2, 3]);
        assert_eq!(
            lt.value().to_vec::<bool>().unwrap(),
            vec![true, false, false, false, false, false]
        );
        assert_eq!(
            x.ne(&y).value().to_vec::<bool>().unwrap(),
            vec![true, false, true, false, true, true]
        );
        assert_eq!(
            x.ge_scalar(2.0).value().to_vec::<bool>().unwrap(),
            vec![false, true, false]
        );
        assert_eq!(
            x.le_scalar(1.0).value().to_vec::<bool>().unwrap(),
            vec![true, false, false]
        );
        assert_eq!(
            x.gt_scalar(1.0).value().to_vec::<bool>().unwrap(),
            vec![false, true, false]
        );
        assert_eq!(
            x.eq_scalar(2.0).value().to_vec::<bool>().unwrap(),
            vec![false, true, false]
        );
        assert!(!lt.requires_grad());
        assert_eq!(g.len(), before, "comparisons record no node");
        // i64 and bool compare too; a scalar must be a value of the dtype.
        let ids = g.constant(Tensor::from_vec(vec![3i64, 5], &[2]).unwrap());
        assert_eq!(
            ids.eq_scalar(5.0).value().to_vec::<bool>().unwrap(),
            vec![false, true]
        );
        assert!(ids.try_eq_scalar(2.5).is_err());
        assert!(matches!(
            x.try_eq(&ids),
            Err(Error::DTypeMismatch {
                op: "eq",
                lhs: DType::F64,
                rhs: DType::I64
            })
        ));
        let s = g.constant(Tensor::scalar(7i64));
        assert_eq!(
            s.lt_scalar(8.0).value().to_vec::<bool>().unwrap(),
            vec![true]
        );
        assert!(s.lt_scalar(8.0).value().is_scalar());
    }

    #[test]
    fn masked_fill_where_and_triangles_have_gradients() {
        let x = Tensor::from_vec(vec![0.3, -1.2, 0.8, 2.0, -0.5, 1.1], &[2, 3]).unwrap();
        let mask = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
        gradcheck(
            |v| Ok(v[0].try_masked_fill(&mask, 5.0)?.tanh()),
            &[x.clone()],
        )
        .unwrap();
        gradcheck(|v| Ok(v[0].try_tril(0)?.tanh()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].try_triu(-1)?.exp()), &[x.clone()]).unwrap();
        gradcheck(
            |v| v[0].try_where(&mask, &v[1]),
            &[x.clone(), Tensor::scalar(0.5)],
        )
        .unwrap();
        let g = Graph::new();
        let xv = g.variable(x);
        // A mask that does not broadcast to x's shape is an error.
        let wide = Tensor::from_vec(vec![true; 4], &[4]).unwrap();
        assert!(matches!(
            xv.try_masked_fill(&wide, 0.0),
            Err(Error::ShapeMismatch { .. })
        ));
        // masked_fill of an i64 tensor is a constant.
        let ids = g.constant(Tensor::from_vec(vec![1i64, 2, 3], &[3]).unwrap());
        let filled = ids.masked_fill(&mask, -1.0);
        assert_eq!(filled.value().to_vec::<i64>().unwrap(), vec![-1, 2, -1]);
        assert!(xv.try_tril(0).is_ok());
        assert!(g.variable(Tensor::vector(&[1.0, 2.0])).try_tril(0).is_err());
    }

    /// `vmap` through comparisons, a mask made of them and `topk`'s
    /// positions: each example's own (the index and mask outputs are
    /// values of the trace, not the traced example's constants).
    #[test]
    fn comparisons_masks_and_positions_batch() {
        use crate::autograd::VMap;
        use crate::Var;
        fn f<'g>(v: &[Var<'g>]) -> crate::Result<Vec<Var<'g>>> {
            let above = v[0].try_gt(&v[1])?;
            let (top, at) = v[0].try_topk(2, true)?;
            Ok(vec![v[0].try_masked_fill(&above, 0.0)?, above, top, at])
        }
        let rows = Tensor::from_vec(
            vec![
                0.3, -1.2, 0.8, 2.0, -0.5, 1.1, 0.4, -0.9, 1.7, 0.1, -0.3, 0.6,
            ],
            &[3, 4],
        )
        .unwrap();
        let g = Graph::new();
        let x = g.variable(rows.clone());
        let y = g.constant(Tensor::from_vec(vec![0.0, 0.5, -0.5, 1.0], &[4]).unwrap());
        let got = VMap::new()
            .in_axes(&[Some(0), None])
            .try_call(f, &[&x, &y])
            .unwrap();
        for b in 0..3 {
            let h = Graph::new();
            let xb = h.variable(rows.select(0, b).unwrap().contiguous());
            let want = f(&[xb, h.constant(y.value().clone())]).unwrap();
            for (k, (got, want)) in got.iter().zip(&want).enumerate() {
                let row = got.value().select(0, b).unwrap().contiguous();
                assert_eq!(row.dtype(), want.dtype(), "output {k}");
                assert_eq!(
                    row.to_f64_vec(),
                    want.value().to_f64_vec(),
                    "output {k}, example {b}"
                );
            }
        }
    }

    #[test]
    fn casts_between_every_dtype() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![-1.5, 0.0, 2.7], &[3]).unwrap());
        for dtype in [
            DType::F32,
            DType::F64,
            DType::I64,
            DType::Bool,
            DType::F16,
            DType::BF16,
        ] {
            let y = x.to_dtype(dtype);
            assert_eq!(y.dtype(), dtype);
            assert_eq!(y.requires_grad(), dtype.is_float());
            let back = y.to_dtype(DType::F64).value().to_f64_vec();
            let want = match dtype {
                DType::F32 | DType::F64 => vec![-1.5, 0.0, 2.7f32 as f64],
                DType::I64 => vec![-1.0, 0.0, 2.0],
                DType::Bool => vec![1.0, 0.0, 1.0],
                // Rounded to nearest: 11 and 8 significant bits.
                DType::F16 => vec![-1.5, 0.0, 2.69921875],
                DType::BF16 => vec![-1.5, 0.0, 2.703125],
            };
            if dtype == DType::F64 {
                assert_eq!(back, vec![-1.5, 0.0, 2.7]);
            } else {
                assert_eq!(back, want);
            }
        }
        // Through f32 and back: the gradient is cast back at each step.
        let grad = (x.to_dtype(DType::F32) * 3.0)
            .to_dtype(DType::F64)
            .sum()
            .backward()
            .unwrap()
            .wrt(&x);
        assert_eq!(
            (grad.dtype(), grad.to_f64_vec()),
            (DType::F64, vec![3.0; 3])
        );
        let grad = x.to_dtype(DType::I64).to_dtype(DType::F64).sum().backward();
        assert!(grad.is_err(), "a constant root has no gradient");
        assert_eq!(
            Tensor::scalar(i64::MAX)
                .to_dtype(DType::I64)
                .to_vec::<i64>()
                .unwrap(),
            vec![i64::MAX]
        );
        assert_eq!(
            Tensor::scalar(f64::NAN)
                .to_dtype(DType::I64)
                .to_vec::<i64>()
                .unwrap(),
            vec![0]
        );
    }

    #[test]
    fn topk_values_indices_and_gradient() {
        let x = Tensor::from_vec(vec![0.5, -1.0, 2.0, 1.5, 0.3, -0.7, 1.1, 0.9], &[2, 4]).unwrap();
        let g = Graph::new();
        let xv = g.variable(x.clone());
        let (v, i) = xv.topk(2, false);
        assert_eq!(v.value().to_f64_vec(), vec![-1.0, 0.5, -0.7, 0.3]);
        assert_eq!(i.value().to_vec::<i64>().unwrap(), vec![1, 0, 1, 0]);
        gradcheck(|v| Ok(v[0].try_topk(3, true)?.0.tanh()), &[x]).unwrap();
        assert!(xv.try_topk(5, true).is_err());
        // NaN counts as the largest; ties keep the lower position first.
        let nan = g.constant(Tensor::from_vec(vec![1.0, f64::NAN, 3.0, 3.0], &[4]).unwrap());
        assert_eq!(
            nan.topk(3, true).1.value().to_vec::<i64>().unwrap(),
            vec![1, 2, 3]
        );
        assert_eq!(
            nan.topk(2, false).1.value().to_vec::<i64>().unwrap(),
            vec![0, 2]
        );
        let ids = g.constant(Tensor::from_vec(vec![4i64, 9, 1], &[3]).unwrap());
        let (v, i) = ids.topk(1, true);
        assert_eq!(
            (
                v.value().to_vec::<i64>().unwrap(),
                i.value().to_vec::<i64>().unwrap()
            ),
            (vec![9], vec![1])
        );
    }
}
