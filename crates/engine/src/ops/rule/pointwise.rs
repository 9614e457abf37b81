//! The rules as [`Pointwise`] kernels: what a compiled step's fused
//! kernels run. Each loop calls the rule's own `value` at every element,
//! so a fused kernel gives the bits of the op's `forward`.

use std::sync::Arc;

use super::{BinaryRule, Cmp, SelectWhere, UnaryRule};
use crate::core::{Pointwise, Primitive};
use crate::kernels::blocks::{as_slots, by_blocks};
use crate::kernels::simd::wide;
use crate::tensor::Element;

/// A unary rule as a [`Pointwise`] kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnaryKernel<R>(pub(crate) R);

/// A binary rule as a [`Pointwise`] kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BinaryKernel<R>(pub(crate) R);

/// [`SelectWhere`] as a [`Pointwise`] kernel.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SelectKernel(pub(crate) Cmp);

#[inline(always)]
fn unary<T: Element, R: UnaryRule>(rule: R, ins: &[&[T]], out: &mut [T]) {
    let x = &ins[0][..out.len()];
    // A long chain by blocks on f32 (`kernels/blocks.rs`: why the closures
    // inline).
    if R::BLOCKS
        && wide(
            #[inline(always)]
            || {
                by_blocks(
                    [x],
                    as_slots(out),
                    #[inline(always)]
                    |[a]| rule.value_block(a),
                    #[inline(always)]
                    |[a]| rule.value(a),
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
            for (o, &a) in out.iter_mut().zip(x) {
                *o = rule.value(a);
            }
        },
    )
}

#[inline(always)]
fn binary<T: Element, R: BinaryRule>(rule: R, ins: &[&[T]], out: &mut [T]) {
    let (a, b) = (&ins[0][..out.len()], &ins[1][..out.len()]);
    wide(
        #[inline(always)]
        || {
            for ((o, &x), &y) in out.iter_mut().zip(a).zip(b) {
                *o = rule.value(x, y);
            }
        },
    )
}

#[inline(always)]
fn select<T: Element>(cmp: Cmp, ins: &[&[T]], out: &mut [T]) {
    // One loop per comparison, so the comparison is not matched per
    // element and each loop compiles to compares and blends (ReLU's
    // backward in a compiled step: see ARCHITECTURE.md, PERF).
    match cmp {
        Cmp::Gt => select_by(|x, r| x > r, ins, out),
        Cmp::Ge => select_by(|x, r| x >= r, ins, out),
        Cmp::Lt => select_by(|x, r| x < r, ins, out),
        Cmp::Le => select_by(|x, r| x <= r, ins, out),
        Cmp::Eq => select_by(|x, r| x == r, ins, out),
    }
}

#[inline(always)]
fn select_by<T: Element>(holds: impl Fn(T, T) -> bool, ins: &[&[T]], out: &mut [T]) {
    let n = out.len();
    let (x, r, a, b) = (&ins[0][..n], &ins[1][..n], &ins[2][..n], &ins[3][..n]);
    // Both branches' values are loaded before the choice: a load under a
    // condition cannot be vectorized (LLVM may not speculate it).
    let pairs = x.iter().zip(r).zip(a.iter().zip(b));
    wide(
        #[inline(always)]
        || {
            for (o, ((&x, &r), (&a, &b))) in out.iter_mut().zip(pairs) {
                *o = if holds(x, r) { a } else { b };
            }
        },
    )
}

impl<R: UnaryRule> Pointwise for UnaryKernel<R> {
    fn arity(&self) -> usize {
        1
    }
    fn run_f32(&self, ins: &[&[f32]], out: &mut [f32]) {
        unary(self.0, ins, out)
    }
    fn run_f64(&self, ins: &[&[f64]], out: &mut [f64]) {
        unary(self.0, ins, out)
    }
    fn one_f32(&self, args: [f32; 4]) -> f32 {
        self.0.value(args[0])
    }
    fn one_f64(&self, args: [f64; 4]) -> f64 {
        self.0.value(args[0])
    }
    fn primitive(&self) -> Option<Primitive> {
        R::PRIMITIVE
    }
}

impl<R: BinaryRule> Pointwise for BinaryKernel<R> {
    fn arity(&self) -> usize {
        2
    }
    fn run_f32(&self, ins: &[&[f32]], out: &mut [f32]) {
        binary(self.0, ins, out)
    }
    fn run_f64(&self, ins: &[&[f64]], out: &mut [f64]) {
        binary(self.0, ins, out)
    }
    fn one_f32(&self, args: [f32; 4]) -> f32 {
        self.0.value(args[0], args[1])
    }
    fn one_f64(&self, args: [f64; 4]) -> f64 {
        self.0.value(args[0], args[1])
    }
    fn primitive(&self) -> Option<Primitive> {
        R::PRIMITIVE
    }
}

impl Pointwise for SelectKernel {
    fn arity(&self) -> usize {
        4
    }
    fn run_f32(&self, ins: &[&[f32]], out: &mut [f32]) {
        select(self.0, ins, out)
    }
    fn run_f64(&self, ins: &[&[f64]], out: &mut [f64]) {
        select(self.0, ins, out)
    }
    fn one_f32(&self, [x, r, a, b]: [f32; 4]) -> f32 {
        if self.0.holds(x, r) {
            a
        } else {
            b
        }
    }
    fn one_f64(&self, [x, r, a, b]: [f64; 4]) -> f64 {
        if self.0.holds(x, r) {
            a
        } else {
            b
        }
    }
}

impl SelectWhere {
    /// This op as a fused-kernel step.
    pub(crate) fn kernel(self) -> Arc<dyn Pointwise> {
        Arc::new(SelectKernel(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::arith::{Mul, Sub};
    use crate::ops::unary::Tanh;

    #[test]
    fn kernels_give_the_rules_values() {
        let x = [0.5f32, -1.25, 3.0];
        let y = [2.0f32, 0.5, -1.0];
        let mut out = [0.0f32; 3];
        BinaryKernel(Sub).run_f32(&[&x, &y], &mut out);
        assert_eq!(out, [-1.5, -1.75, 4.0]);
        UnaryKernel(Tanh).run_f32(&[&x], &mut out);
        for (o, &a) in out.iter().zip(&x) {
            assert_eq!(o.to_bits(), Tanh.value(a).to_bits());
        }
        assert_eq!(BinaryKernel(Mul).one_f64([3.0, 4.0, 0.0, 0.0]), 12.0);
        assert_eq!(BinaryKernel(Mul).primitive(), Some(Primitive::Mul));
        assert_eq!(UnaryKernel(Tanh).primitive(), None);
        let k = SelectKernel(Cmp::Gt);
        assert_eq!(k.one_f32([1.0, 0.0, 5.0, 6.0]), 5.0);
        let mut o = [0.0f64; 2];
        k.run_f64(
            &[&[1.0, -1.0], &[0.0, 0.0], &[5.0, 5.0], &[6.0, 6.0]],
            &mut o,
        );
        assert_eq!(o, [5.0, 6.0]);
    }
}
