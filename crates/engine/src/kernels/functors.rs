//! Functor traits that let one kernel loop serve every elementwise op.
//!
//! A closure cannot be generic over the element type, so elementwise ops are
//! small `Copy` structs implementing [`UnaryFn`] or [`BinaryFn`]; the kernel
//! is monomorphised per functor and per dtype, and the call inlines.

use crate::tensor::math::Block;
use crate::tensor::Element;

/// An elementwise function of one element.
pub trait UnaryFn: Copy + Send + Sync {
    /// Applies the function.
    fn call<T: Element>(self, x: T) -> T;
    /// Whether [`map_slice`](super::elementwise::map_slice) runs f32 by
    /// blocks through [`call_block`](Self::call_block): for a function
    /// that is one long dependency chain per element.
    const BLOCKS: bool = false;
    /// Applies the function to each element of a block of f32; a long
    /// chain writes its steps over the whole block (ARCHITECTURE.md, PERF:
    /// "Long chains run in blocks"). It must give `call`'s bits.
    #[inline(always)]
    fn call_block(self, x: Block) -> Block {
        let mut out = x.0;
        for v in out.iter_mut() {
            *v = self.call(*v);
        }
        Block(out)
    }
}

/// An elementwise function of two elements.
pub trait BinaryFn: Copy + Send + Sync {
    /// Applies the function.
    fn call<T: Element>(self, a: T, b: T) -> T;
    /// Whether [`zip`](super::zip) runs two f32 operands of one shape by
    /// blocks, as [`UnaryFn::BLOCKS`].
    const BLOCKS: bool = false;
    /// Applies the function to each pair of a block of f32, as
    /// [`UnaryFn::call_block`]; it must give `call`'s bits.
    #[inline(always)]
    fn call_block(self, a: Block, b: Block) -> Block {
        let mut out = a.0;
        for (x, &y) in out.iter_mut().zip(&b.0) {
            *x = self.call(*x, y);
        }
        Block(out)
    }
}

/// Defines a unit-struct [`UnaryFn`] from an expression in `x`.
#[macro_export]
#[doc(hidden)]
macro_rules! unary_fn {
    ($(#[$m:meta])* $name:ident, |$x:ident| $body:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;
        impl $crate::kernels::UnaryFn for $name {
            #[inline(always)]
            fn call<T: $crate::Element>(self, $x: T) -> T {
                $body
            }
        }
    };
}

/// Defines a unit-struct [`BinaryFn`] from an expression in `a` and `b`.
#[macro_export]
#[doc(hidden)]
macro_rules! binary_fn {
    ($(#[$m:meta])* $name:ident, |$a:ident, $b:ident| $body:expr) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $name;
        impl $crate::kernels::BinaryFn for $name {
            #[inline(always)]
            fn call<T: $crate::Element>(self, $a: T, $b: T) -> T {
                $body
            }
        }
    };
}

binary_fn!(
    /// `a + b`
    Add,
    |a, b| a + b
);
binary_fn!(
    /// `a - b`
    Sub,
    |a, b| a - b
);
binary_fn!(
    /// `a * b`
    Mul,
    |a, b| a * b
);
binary_fn!(
    /// `a / b`
    Div,
    |a, b| a / b
);

/// `x * factor`, with the factor given in f64 and rounded to the element type.
#[derive(Clone, Copy, Debug)]
pub struct Scale(pub f64);

impl UnaryFn for Scale {
    #[inline(always)]
    fn call<T: crate::Element>(self, x: T) -> T {
        x * T::from_f64(self.0)
    }
}
