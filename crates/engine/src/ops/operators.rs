//! Operator sugar: `+ - * /` and unary `-` on `Var` and `&Var`, and with
//! `f64` scalars on either side. Each panics with the op's error message
//! (at the caller's line) where the `try_` method would return it.

use std::ops;

use crate::core::graph::Var;

macro_rules! var_binary_operator {
    ($Trait:ident, $method:ident, $var_method:ident, $scalar:ident, $rscalar:ident) => {
        impl<'g> ops::$Trait<&Var<'g>> for &Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: &Var<'g>) -> Var<'g> {
                Var::$var_method(self, rhs)
            }
        }
        impl<'g> ops::$Trait<Var<'g>> for Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: Var<'g>) -> Var<'g> {
                Var::$var_method(&self, &rhs)
            }
        }
        impl<'g> ops::$Trait<&Var<'g>> for Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: &Var<'g>) -> Var<'g> {
                Var::$var_method(&self, rhs)
            }
        }
        impl<'g> ops::$Trait<Var<'g>> for &Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: Var<'g>) -> Var<'g> {
                Var::$var_method(self, &rhs)
            }
        }
        impl<'g> ops::$Trait<f64> for &Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: f64) -> Var<'g> {
                self.$scalar(rhs)
            }
        }
        impl<'g> ops::$Trait<f64> for Var<'g> {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: f64) -> Var<'g> {
                self.$scalar(rhs)
            }
        }
        impl<'g> ops::$Trait<&Var<'g>> for f64 {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: &Var<'g>) -> Var<'g> {
                rhs.$rscalar(self)
            }
        }
        impl<'g> ops::$Trait<Var<'g>> for f64 {
            type Output = Var<'g>;
            #[track_caller]
            #[inline]
            fn $method(self, rhs: Var<'g>) -> Var<'g> {
                rhs.$rscalar(self)
            }
        }
    };
}

var_binary_operator!(Add, add, add, add_scalar, add_scalar);
var_binary_operator!(Sub, sub, sub, sub_scalar, rsub_scalar);
var_binary_operator!(Mul, mul, mul, mul_scalar, mul_scalar);
var_binary_operator!(Div, div, div, div_scalar, rdiv_scalar);

impl<'g> ops::Neg for &Var<'g> {
    type Output = Var<'g>;
    #[track_caller]
    #[inline]
    fn neg(self) -> Var<'g> {
        Var::neg(self)
    }
}

impl<'g> ops::Neg for Var<'g> {
    type Output = Var<'g>;
    #[track_caller]
    #[inline]
    fn neg(self) -> Var<'g> {
        Var::neg(&self)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Graph, Tensor};

    #[test]
    fn every_operator_form() {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(6.0));
        let y = g.variable(Tensor::scalar(3.0));
        let v = |v: crate::Var<'_>| v.value().item();
        assert_eq!(v(&x + &y), 9.0);
        assert_eq!(v(x.clone() - y.clone()), 3.0);
        assert_eq!(v(x.clone() * &y), 18.0);
        assert_eq!(v(&x / y.clone()), 2.0);
        assert_eq!(v(&x + 1.0), 7.0);
        assert_eq!(v(1.0 - &x), -5.0);
        assert_eq!(v(12.0 / x.clone()), 2.0);
        assert_eq!(v(x.clone() * 0.5), 3.0);
        assert_eq!(v(-&x), -6.0);
        assert_eq!(v(-x.clone()), -6.0);
    }

    #[test]
    #[should_panic(expected = "add: incompatible shapes [2] and [3]")]
    fn operator_panics_with_the_error_message() {
        let g = Graph::new();
        let a = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        let b = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap());
        let _ = &a + &b;
    }
}
