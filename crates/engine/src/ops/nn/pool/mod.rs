//! The 2-d poolings: one file per op, each declaring its options, its
//! window reduction (the forward over the window plan, and its derivative,
//! written once) and its `Var` method; one line per file in
//! [`with_poolings!`], from which the rest follows: the `mod` lines, the
//! registration, the re-exports (`options`, glob-re-exported by
//! `ops::nn`, `nn` and the crate root), the registry's name check below
//! and, in `nn/layers/pool.rs`, a layer per options type (`Pool2d` over
//! them, under PyTorch's name).
//!
//! - `geometry.rs`: what they share: input checks, sliding windows
//!   (`Sliding` and the builders its users share) and adaptive ones, the
//!   window plan handed to `kernels::nn::pool`, facts and sample inputs;
//! - `max_pool.rs`: argmax saved in forward, tagged by its output buffer;
//!   the scatter `max_pool2d_backward` and the gather `max_pool2d_gather`,
//!   each the other's derivative;
//! - `avg_pool.rs`: fixed or adaptive windows, and the linear `_backward`
//!   adjoint;
//! - `lp_pool.rs`: power-average pooling, its forward one generic window
//!   reduction (`kernels::nn::pool::reduce_windows`), its derivative
//!   through `avg_pool2d`'s adjoint.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::ops::OpRegistry;

mod geometry;

/// The pooling family, one line per file: `file: Options => Layer, ...;`
/// (the layer's name is PyTorch's). `with_poolings!(callback)` hands the
/// list to `callback`, a macro of the caller's: this module's
/// `pooling_family!` and `nn/layers/pool.rs`'s `pooling_layers!`. A new
/// pooling op is its file and its line here.
macro_rules! with_poolings {
    ($callback:ident) => {
        $callback! {
            avg_pool: AvgPool2dOptions => AvgPool2d, AdaptiveAvgPool2dOptions => AdaptiveAvgPool2d;
            lp_pool: LpPool2dOptions => LPPool2d;
            max_pool: MaxPool2dOptions => MaxPool2d;
        }
    };
}
pub(crate) use with_poolings;

/// What a pooling's options do, for the layer over them: pool `x` (the
/// op's `try_` method) under the op's registry name.
pub trait Pooling2d: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The op's name: PyTorch's, and the registry's.
    const NAME: &'static str;
    /// `x` pooled with these options.
    fn pool<'g>(&self, x: &Var<'g>) -> Result<Var<'g>>;
}

/// The `mod` lines, the `options` re-exports and `register` of the family.
macro_rules! pooling_family {
    ($($file:ident: $($options:ident => $layer:ident),+;)*) => {
        $(mod $file;)*

        /// Every pooling op's options type, and [`Pooling2d`].
        pub mod options {
            pub use super::Pooling2d;
            $(pub use super::$file::{$($options),+};)*
        }

        /// Registers every pooling op (called by `ops::nn::register`).
        pub(crate) fn register(reg: &mut OpRegistry) {
            $($file::register(reg);)*
        }

        #[cfg(test)]
        #[test]
        fn every_pooling_is_registered_under_its_name() {
            use options::*;
            let reg = OpRegistry::with_builtins();
            $($(assert_eq!(reg.get($options::NAME).unwrap().name(), $options::NAME);)+)*
        }
    };
}
with_poolings!(pooling_family);
