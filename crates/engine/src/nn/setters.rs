//! Builder methods written once: a builder lists its plain options and
//! `setters!` writes each one's method, and `build` where the builder has a
//! `build_with(rng)`.

/// For each `/// doc` and `name(field: Type, ...);` in the list, the
/// builder method `pub fn name(mut self, field: Type, ...) -> Self` with
/// that doc, which sets those fields; with `builds Layer`, also `pub fn
/// build(self) -> Result<Layer>`, the builder's own `build_with` over the
/// default generator:
///
/// ```text
/// setters! {
///     impl BlockBuilder builds Block {
///         /// Whether linear layers and layer norms have biases (default true).
///         bias(bias: bool);
///         /// Dropout while training (default 0), masks seeded from `seed`.
///         dropout(dropout: f64, seed: u64);
///     }
/// }
/// ```
///
/// Exported (hidden from the docs) for the model crates around the engine,
/// whose builders follow the same convention.
#[doc(hidden)]
#[macro_export]
macro_rules! setters {
    (
        impl $builder:ident $(builds $built:ident)? {
            $($(#[$doc:meta])* $name:ident($($field:ident: $ty:ty),+);)*
        }
    ) => {
        impl $builder {
            $(
                /// Builds it from the default generator, as
                /// [`build_with`](Self::build_with) does from a given one.
                pub fn build(self) -> $crate::base::error::Result<$built> {
                    $crate::nn::with_default_generator(|rng| self.build_with(rng))
                }
            )?

            $(
                $(#[$doc])*
                pub fn $name(mut self, $($field: $ty),+) -> Self {
                    $(self.$field = $field;)+
                    self
                }
            )*
        }
    };
}
pub use crate::setters;
