//! Ops of integer and bool tensors: comparisons (`eq`, `ne`, `lt`, `le`,
//! `gt`, `ge`, returning bool), `masked_fill`, `tril`/`triu`, `to_dtype`
//! casts and `topk`.
//!
//! i64 and bool values are never differentiable, so an op whose output is
//! one records no node: comparisons and the indices of `topk` are constants,
//! and a cast from a float to i64 or bool is a constant too. The ops whose
//! output is a float stay differentiable in their float inputs:
//! `masked_fill` (zero gradient where masked) and `tril`/`triu` are `where`
//! with a bool mask, `topk`'s values are a `gather` (the gradient is
//! scattered back to the picked positions) and a float-to-float cast
//! ([`Cast`]) casts the gradient back.

use smallvec::smallvec;

use super::compare::Condition;
use super::{expect_inputs, Differentiable, GradInputs, OpRegistry};
use crate::error::{Error, Result};
use crate::fallible::fallible;
use crate::graph::Var;
use crate::kernels::mask::{self as kernel, Comparison};
use crate::tensor::{DType, Tensor};

/// A cast to another dtype ([`Tensor::to_dtype`]'s conversions). Between
/// f32 and f64 it is differentiable (the gradient is cast back); to i64 or
/// bool its output is a constant (no node), and from them there is no
/// gradient to give.
#[derive(Clone, Copy, Debug)]
pub struct Cast {
    /// The dtype of the output.
    pub to: DType,
}

impl Differentiable for Cast {
    fn name(&self) -> &str {
        "to_dtype"
    }
    fn arity(&self) -> Option<usize> {
        Some(1)
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        expect_inputs("to_dtype", inputs, 1)?;
        Ok(inputs[0].to_dtype(self.to))
    }
    fn non_float_output(&self) -> bool {
        !self.to.is_float()
    }
    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let x = &inputs[0];
        Ok(smallvec![(x.requires_grad() && x.dtype().is_float())
            .then(|| g.try_to_dtype(x.dtype()))
            .transpose()?])
    }
    fn backward_fast(
        &self,
        g: &Tensor,
        inputs: &[&Tensor],
        _out: &Tensor,
        needs: &[bool],
        grads: &mut [Option<Tensor>],
    ) -> Result<bool> {
        if needs[0] && inputs[0].is_float() {
            grads[0] = Some(g.to_dtype(inputs[0].dtype()));
        }
        Ok(true)
    }
    fn jvp<'g>(
        &self,
        t: &[Option<Var<'g>>],
        _inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<Option<Var<'g>>> {
        match &t[0] {
            Some(t) if self.to.is_float() => Ok(Some(t.try_to_dtype(self.to)?)),
            _ => Ok(None),
        }
    }
}

/// The ops of this file are `Var` methods; none is registered by name (an
/// op whose output is an index or a mask has no gradient to register).
pub(crate) fn register(_reg: &mut OpRegistry) {}

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
                        let t = kernel::compare(Comparison::$cmp, self.value(), other.value())?;
                        Ok(Var::constant_in(self.graph(), t))
                    }
                }

                fallible! {
                    #[doc = concat!("`self ", $sym, " value` elementwise, as a bool constant; `value`")]
                    /// takes this value's dtype (and must be exactly a value
                    /// of it: 2.5 is an error for an i64 tensor).
                    pub fn $try_scalar / $scalar(&self, value: f64) -> Var<'g> {
                        let v = scalar_operand(Comparison::$cmp.name(), value, self.dtype())?;
                        let t = kernel::compare(Comparison::$cmp, self.value(), &v)?;
                        Ok(Var::constant_in(self.graph(), t))
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
        const OP: &str = "masked_fill";
        let mask = mask.into_condition(self.graph());
        if mask.dtype() != DType::Bool {
            return Err(Error::WrongDType {
                op: OP,
                expected: DType::Bool,
                found: mask.dtype(),
            });
        }
        if !crate::tensor::shape::broadcastable_to(mask.shape(), self.shape()) {
            return Err(Error::shape_mismatch(OP, mask.shape(), self.shape()));
        }
        if !self.dtype().is_float() {
            // No gradient to keep: select the elements directly.
            let filled = kernel::expand_any(OP, &Tensor::scalar_of(value, self.dtype()), self.shape())?;
            let keep = kernel::compare(Comparison::Eq, mask.value(), &Tensor::scalar(false))?;
            let out = crate::kernels::mask::select(OP, &keep, self.value(), &filled)?;
            return Ok(Var::constant_in(self.graph(), out));
        }
        self.scalar_like(value).try_where(&mask, self)
    }

    /// See [`try_masked_fill`](Self::try_masked_fill); panics at the
    /// caller's line on a bad mask.
    #[track_caller]
    pub fn masked_fill(&self, mask: impl Condition<'g>, value: f64) -> Var<'g> {
        crate::error::or_panic(self.try_masked_fill(mask, value))
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
            self.triangle("tril", diagonal, false)
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
            self.triangle("triu", diagonal, true)
        }
    }

    fn triangle(&self, op: &'static str, diagonal: i64, upper: bool) -> Result<Var<'g>> {
        if !self.requires_grad() {
            let t = kernel::triangle(op, self.value(), diagonal, upper)?;
            return Ok(Var::constant_in(self.graph(), t));
        }
        let r = self.shape().len();
        if r < 2 {
            // The kernel words the error.
            kernel::triangle(op, self.value(), diagonal, upper)?;
        }
        let square = &self.shape()[r - 2..];
        let keep = kernel::triangle(op, &Tensor::full(square, 1.0, DType::Bool)?, diagonal, upper)?;
        self.try_where(&keep, &self.scalar_like(0.0))
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
            let idx = kernel::topk_indices("topk", self.value(), k, largest)?;
            let values = if self.dtype().is_float() {
                self.try_gather(-1, &idx)?
            } else {
                let t = crate::kernels::index::gather("topk", self.value(), self.shape().len() - 1, &idx)?;
                Var::constant_in(self.graph(), t)
            };
            Ok((values, Var::constant_in(self.graph(), idx)))
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
        assert_eq!(x.ge_scalar(2.0).value().to_vec::<bool>().unwrap(), vec![false, true, false]);
        assert_eq!(x.le_scalar(1.0).value().to_vec::<bool>().unwrap(), vec![true, false, false]);
        assert_eq!(x.gt_scalar(1.0).value().to_vec::<bool>().unwrap(), vec![false, true, false]);
        assert_eq!(x.eq_scalar(2.0).value().to_vec::<bool>().unwrap(), vec![false, true, false]);
        assert!(!lt.requires_grad());
        assert_eq!(g.len(), before, "comparisons record no node");
        // i64 and bool compare too; a scalar must be a value of the dtype.
        let ids = g.constant(Tensor::from_vec(vec![3i64, 5], &[2]).unwrap());
        assert_eq!(ids.eq_scalar(5.0).value().to_vec::<bool>().unwrap(), vec![false, true]);
        assert!(ids.try_eq_scalar(2.5).is_err());
        assert!(matches!(
            x.try_eq(&ids),
            Err(Error::DTypeMismatch { op: "eq", lhs: DType::F64, rhs: DType::I64 })
        ));
        let s = g.constant(Tensor::scalar(7i64));
        assert_eq!(s.lt_scalar(8.0).value().to_vec::<bool>().unwrap(), vec![true]);
        assert!(s.lt_scalar(8.0).value().is_scalar());
    }

    #[test]
    fn masked_fill_where_and_triangles_have_gradients() {
        let x = Tensor::from_vec(vec![0.3, -1.2, 0.8, 2.0, -0.5, 1.1], &[2, 3]).unwrap();
        let mask = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
        gradcheck(|v| Ok(v[0].try_masked_fill(&mask, 5.0)?.tanh()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].try_tril(0)?.tanh()), &[x.clone()]).unwrap();
        gradcheck(|v| Ok(v[0].try_triu(-1)?.exp()), &[x.clone()]).unwrap();
        gradcheck(|v| v[0].try_where(&mask, &v[1]), &[x.clone(), Tensor::scalar(0.5)]).unwrap();
        let g = Graph::new();
        let xv = g.variable(x);
        // A mask that does not broadcast to x's shape is an error.
        let wide = Tensor::from_vec(vec![true; 4], &[4]).unwrap();
        assert!(matches!(xv.try_masked_fill(&wide, 0.0), Err(Error::ShapeMismatch { .. })));
        // masked_fill of an i64 tensor is a constant.
        let ids = g.constant(Tensor::from_vec(vec![1i64, 2, 3], &[3]).unwrap());
        let filled = ids.masked_fill(&mask, -1.0);
        assert_eq!(filled.value().to_vec::<i64>().unwrap(), vec![-1, 2, -1]);
        assert!(xv.try_tril(0).is_ok());
        assert!(g.variable(Tensor::vector(&[1.0, 2.0])).try_tril(0).is_err());
    }

    #[test]
    fn casts_between_every_dtype() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![-1.5, 0.0, 2.7], &[3]).unwrap());
        for dtype in [DType::F32, DType::F64, DType::I64, DType::Bool, DType::F16, DType::BF16] {
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
        let grad = (x.to_dtype(DType::F32) * 3.0).to_dtype(DType::F64).sum().backward().unwrap().wrt(&x);
        assert_eq!((grad.dtype(), grad.to_f64_vec()), (DType::F64, vec![3.0; 3]));
        let grad = x.to_dtype(DType::I64).to_dtype(DType::F64).sum().backward();
        assert!(grad.is_err(), "a constant root has no gradient");
        assert_eq!(Tensor::scalar(i64::MAX).to_dtype(DType::I64).to_vec::<i64>().unwrap(), vec![i64::MAX]);
        assert_eq!(Tensor::scalar(f64::NAN).to_dtype(DType::I64).to_vec::<i64>().unwrap(), vec![0]);
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
        assert_eq!(nan.topk(3, true).1.value().to_vec::<i64>().unwrap(), vec![1, 2, 3]);
        assert_eq!(nan.topk(2, false).1.value().to_vec::<i64>().unwrap(), vec![0, 2]);
        let ids = g.constant(Tensor::from_vec(vec![4i64, 9, 1], &[3]).unwrap());
        let (v, i) = ids.topk(1, true);
        assert_eq!((v.value().to_vec::<i64>().unwrap(), i.value().to_vec::<i64>().unwrap()), (vec![9], vec![1]));
    }
}
