//! Functors for powers: the fixed-exponent fast paths PyTorch uses (`x*x`
//! for 2, `sqrt` for 0.5, `1/x` for -1, ...) behind [`with_power!`], and the
//! elementwise formulas of `pow` and its backward helpers.

use super::{BinaryFn, TernaryFn, UnaryFn};
use crate::tensor::Element;

crate::unary_fn!(
    /// `x^0 = 1` (also for NaN and 0, like `powf`).
    PowZeroFn,
    |x| {
        let _ = x;
        T::one()
    }
);
crate::unary_fn!(
    /// `x^1`
    PowOneFn,
    |x| x
);
crate::unary_fn!(
    /// `x^2`
    SquareFn,
    |x| x * x
);
crate::unary_fn!(
    /// `x^3`
    CubeFn,
    |x| x * x * x
);
crate::unary_fn!(
    /// `x^0.5`
    SqrtFn,
    |x| x.sqrt()
);
crate::unary_fn!(
    /// `x^-0.5`
    RsqrtFn,
    |x| T::one() / x.sqrt()
);
crate::unary_fn!(
    /// `x^-1`
    RecipFn,
    |x| T::one() / x
);
crate::unary_fn!(
    /// `x^-2`
    RecipSquareFn,
    |x| T::one() / (x * x)
);

/// `x^e` for any other fixed exponent.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PowfFn(pub(crate) f64);

impl UnaryFn for PowfFn {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        x.powf(T::from_f64(self.0))
    }
}

/// Runs `$body` with `$p` bound to the cheapest functor computing `x^$e`.
macro_rules! with_power {
    ($e:expr, $p:ident => $body:expr) => {{
        let e: f64 = $e;
        if e == 0.0 {
            let $p = $crate::kernels::power::PowZeroFn;
            $body
        } else if e == 1.0 {
            let $p = $crate::kernels::power::PowOneFn;
            $body
        } else if e == 2.0 {
            let $p = $crate::kernels::power::SquareFn;
            $body
        } else if e == 3.0 {
            let $p = $crate::kernels::power::CubeFn;
            $body
        } else if e == 0.5 {
            let $p = $crate::kernels::power::SqrtFn;
            $body
        } else if e == -0.5 {
            let $p = $crate::kernels::power::RsqrtFn;
            $body
        } else if e == -1.0 {
            let $p = $crate::kernels::power::RecipFn;
            $body
        } else if e == -2.0 {
            let $p = $crate::kernels::power::RecipSquareFn;
            $body
        } else {
            let $p = $crate::kernels::power::PowfFn(e);
            $body
        }
    }};
}

pub(crate) use with_power;

crate::binary_fn!(
    /// `x^y`
    PowFn,
    |x, y| x.powf(y)
);

/// `g * c * P(x)`: `pow_backward_self` for a fixed exponent `c`, `P = x^(c-1)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScaledPowFn<P> {
    pub(crate) c: f64,
    pub(crate) p: P,
}

impl<P: UnaryFn> BinaryFn for ScaledPowFn<P> {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T) -> T {
        g * T::from_f64(self.c) * self.p.call(x)
    }
}

crate::binary_fn!(
    /// The gradient through a zero exponent: exactly 0.
    ZeroFn,
    |g, x| {
        let _ = (g, x);
        T::zero()
    }
);

/// `g * y * x^(y-1)`, 0 where `y == 0`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PowBackwardSelfFn;

impl TernaryFn for PowBackwardSelfFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T, y: T) -> T {
        if y == T::zero() {
            T::zero()
        } else {
            g * y * x.powf(y - T::one())
        }
    }
}

/// `g * x^y * ln x`, 0 where `x == 0` and `y >= 0`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PowBackwardExponentFn;

impl TernaryFn for PowBackwardExponentFn {
    #[inline(always)]
    fn call<T: Element>(self, g: T, x: T, y: T) -> T {
        if x == T::zero() && y >= T::zero() {
            T::zero()
        } else {
            g * x.powf(y) * x.ln()
        }
    }
}
