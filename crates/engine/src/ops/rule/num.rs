//! [`Num`]: the numbers a rule is written over, and its three
//! instantiations: [`Lane`] (one element, in a kernel or the scalar lane),
//! [`Traced`] (a `Var`: each step records a node) and [`Plain`] (a tensor:
//! each step runs a kernel).

use std::borrow::Cow;

use super::select_op::SelectWhere;
use super::{BinaryRule, UnaryRule};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::kernels::{self, BinaryFn, TernaryFn};
use crate::ops::arith::{Add, Div, Mul, Neg, Sub};
use crate::ops::unary::{Exp, Log, Sigmoid, Tanh};
use crate::tensor::{Element, Tensor};

/// A comparison for [`Num::select`]; false wherever NaN is involved, as in IEEE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cmp {
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a == b`
    Eq,
}

impl Cmp {
    /// Whether `a cmp b` holds.
    #[inline(always)]
    pub fn holds<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            Cmp::Gt => a > b,
            Cmp::Ge => a >= b,
            Cmp::Lt => a < b,
            Cmp::Le => a <= b,
            Cmp::Eq => a == b,
        }
    }
}

/// A number a rule's gradient is written over. Each operation is an
/// elementwise op of the library, so a formula means the same on one
/// element, on a tensor and on a recorded `Var`.
pub trait Num: Clone {
    /// The constant `c` in this number's dtype.
    fn lit(&self, c: f64) -> Self;
    /// The elementwise op of `rule` applied to `self`.
    fn map<R: UnaryRule>(&self, rule: R) -> Self;
    /// The binary elementwise op of `rule` applied to `self` and `other`.
    fn zip<R: BinaryRule>(&self, rule: R, other: &Self) -> Self;
    /// `then` where `self cmp rhs` holds, else `otherwise`, elementwise.
    /// The comparison carries no gradient: a kink or a tie is where the
    /// rule chooses its one-sided derivative.
    fn select(&self, cmp: Cmp, rhs: &Self, then: &Self, otherwise: &Self) -> Self;

    /// `self + other`
    #[inline(always)]
    fn add(&self, other: &Self) -> Self {
        self.zip(Add, other)
    }
    /// `self - other`
    #[inline(always)]
    fn sub(&self, other: &Self) -> Self {
        self.zip(Sub, other)
    }
    /// `self * other`
    #[inline(always)]
    fn mul(&self, other: &Self) -> Self {
        self.zip(Mul, other)
    }
    /// `self / other`
    #[inline(always)]
    fn div(&self, other: &Self) -> Self {
        self.zip(Div, other)
    }
    /// `-self`
    #[inline(always)]
    fn neg(&self) -> Self {
        self.map(Neg)
    }
    /// `self * c` for a constant `c`.
    #[inline(always)]
    fn scale(&self, c: f64) -> Self {
        self.mul(&self.lit(c))
    }
    /// `c - self` for a constant `c`.
    #[inline(always)]
    fn rsub(&self, c: f64) -> Self {
        self.lit(c).sub(self)
    }
    /// `e^self`
    #[inline(always)]
    fn exp(&self) -> Self {
        self.map(Exp)
    }
    /// `ln self`
    #[inline(always)]
    fn ln(&self) -> Self {
        self.map(Log)
    }
    /// `tanh self`
    #[inline(always)]
    fn tanh(&self) -> Self {
        self.map(Tanh)
    }
    /// The logistic sigmoid of `self`.
    #[inline(always)]
    fn sigmoid(&self) -> Self {
        self.map(Sigmoid)
    }
}

/// One element of dtype `T`: what kernels and the scalar lane compute with.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lane<T>(pub T);

impl<T: Element> Num for Lane<T> {
    #[inline(always)]
    fn lit(&self, c: f64) -> Self {
        Lane(T::from_f64(c))
    }
    #[inline(always)]
    fn map<R: UnaryRule>(&self, rule: R) -> Self {
        Lane(rule.value(self.0))
    }
    #[inline(always)]
    fn zip<R: BinaryRule>(&self, rule: R, other: &Self) -> Self {
        Lane(rule.value(self.0, other.0))
    }
    #[inline(always)]
    fn select(&self, cmp: Cmp, rhs: &Self, then: &Self, otherwise: &Self) -> Self {
        if cmp.holds(self.0, rhs.0) {
            *then
        } else {
            *otherwise
        }
    }
}

/// A recorded value: every step of a formula over `Traced` records a node
/// (or, with recording suspended, runs the op's kernel), so the formula is
/// differentiable again. The first error is carried through the rest of
/// the formula, like NaN through arithmetic.
#[derive(Clone, Debug)]
pub struct Traced<'g>(pub Result<Var<'g>>);

impl<'g> Traced<'g> {
    /// Wraps a `Var`.
    #[inline]
    pub fn of(v: &Var<'g>) -> Self {
        Traced(Ok(v.clone()))
    }

    /// The recorded value, or the first error of the formula.
    #[inline]
    pub fn into_result(self) -> Result<Var<'g>> {
        self.0
    }

    fn and_then(&self, f: impl FnOnce(&Var<'g>) -> Result<Var<'g>>) -> Self {
        Traced(match &self.0 {
            Ok(v) => f(v),
            Err(e) => Err(e.clone()),
        })
    }

    fn and_then2(
        &self,
        other: &Self,
        f: impl FnOnce(&Var<'g>, &Var<'g>) -> Result<Var<'g>>,
    ) -> Self {
        match &other.0 {
            Ok(b) => self.and_then(|a| f(a, b)),
            Err(e) => Traced(Err(e.clone())),
        }
    }
}

impl Num for Traced<'_> {
    fn lit(&self, c: f64) -> Self {
        self.and_then(|v| Ok(v.scalar_like(c)))
    }
    fn map<R: UnaryRule>(&self, rule: R) -> Self {
        self.and_then(|v| v.graph().record(super::Unary(rule), &[v]))
    }
    fn zip<R: BinaryRule>(&self, rule: R, other: &Self) -> Self {
        self.and_then2(other, |a, b| a.graph().record(super::Binary(rule), &[a, b]))
    }
    fn select(&self, cmp: Cmp, rhs: &Self, then: &Self, otherwise: &Self) -> Self {
        match (&self.0, &rhs.0, &then.0, &otherwise.0) {
            (Ok(x), Ok(r), Ok(t), Ok(o)) => {
                Traced(x.graph().record(SelectWhere(cmp), &[x, r, t, o]))
            }
            (Err(e), ..) | (_, Err(e), ..) | (.., Err(e), _) | (.., Err(e)) => {
                Traced(Err(e.clone()))
            }
        }
    }
}

/// A plain tensor: every step runs the op's kernel, nothing is recorded.
/// The formula's inputs are borrowed, so a gradient that is `g` itself
/// (`add`) costs one clone at the end and no reference counting before;
/// an error is boxed, so the value moves in three words.
#[derive(Clone, Debug)]
pub struct Plain<'a>(Result<Cow<'a, Tensor>, Box<Error>>);

impl<'a> Plain<'a> {
    /// Borrows a tensor.
    #[inline(always)]
    pub fn of(t: &'a Tensor) -> Self {
        Plain(Ok(Cow::Borrowed(t)))
    }

    /// The tensor, or the first error of the formula.
    #[inline(always)]
    pub fn into_result(self) -> Result<Tensor> {
        self.0.map(Cow::into_owned).map_err(|e| *e)
    }

    #[inline(always)]
    fn from_result(r: Result<Tensor>) -> Self {
        Plain(r.map(Cow::Owned).map_err(Box::new))
    }
}

impl Num for Plain<'_> {
    #[inline]
    fn lit(&self, c: f64) -> Self {
        Plain(match &self.0 {
            Ok(t) => Ok(Cow::Owned(Tensor::scalar_of(c, t.dtype()))),
            Err(e) => Err(e.clone()),
        })
    }
    #[inline]
    fn map<R: UnaryRule>(&self, rule: R) -> Self {
        Plain(match &self.0 {
            Ok(t) => kernels::map(t, super::unary_op::ValueFn(rule))
                .map(Cow::Owned)
                .map_err(Box::new),
            Err(e) => Err(e.clone()),
        })
    }
    #[inline]
    fn zip<R: BinaryRule>(&self, rule: R, other: &Self) -> Self {
        match (&self.0, &other.0) {
            (Ok(a), Ok(b)) => {
                Plain::from_result(kernels::zip(R::NAME, a, b, super::binary_op::ValueFn(rule)))
            }
            (Err(e), _) | (_, Err(e)) => Plain(Err(e.clone())),
        }
    }
    fn select(&self, cmp: Cmp, rhs: &Self, then: &Self, otherwise: &Self) -> Self {
        match (&self.0, &rhs.0, &then.0, &otherwise.0) {
            (Ok(x), Ok(r), Ok(t), Ok(o)) => {
                Plain::from_result(SelectWhere(cmp).compute(x, r, t, o))
            }
            (Err(e), ..) | (_, Err(e), ..) | (.., Err(e), _) | (.., Err(e)) => {
                Plain(Err(e.clone()))
            }
        }
    }
}

/// 1 where `a cmp b` holds, else 0.
#[derive(Clone, Copy, Debug)]
pub(super) struct MaskFn(pub(super) Cmp);

impl BinaryFn for MaskFn {
    #[inline(always)]
    fn call<T: Element>(self, a: T, b: T) -> T {
        if self.0.holds(a, b) {
            T::one()
        } else {
            T::zero()
        }
    }
}

/// `mask != 0 ? a : b`
#[derive(Clone, Copy, Debug)]
pub(super) struct PickFn;

impl TernaryFn for PickFn {
    #[inline(always)]
    fn call<T: Element>(self, mask: T, a: T, b: T) -> T {
        if mask != T::zero() {
            a
        } else {
            b
        }
    }
}
