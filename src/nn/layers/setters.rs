//! Builder methods written once: a builder lists its plain options and
//! `setters!` writes each one's method, and `build` where the builder has a
//! `build_with(rng)`.

/// For each `/// doc` and `field: Type;` in the list, the builder method
/// `pub fn field(mut self, field: Type) -> Self` with that doc, which sets
/// the field; with `builds Layer`, also `pub fn build(self) ->
/// Result<Layer>`, the builder's own `build_with` over the default generator:
///
/// ```text
/// setters! {
///     impl LinearBuilder builds Linear {
///         /// Whether the layer adds a learnable bias (default true).
///         bias: bool;
///     }
/// }
/// ```
macro_rules! setters {
    (impl $builder:ident $(builds $built:ident)? { $($(#[$doc:meta])* $field:ident: $ty:ty;)* }) => {
        impl $builder {
            $(
                /// Builds it from the default generator, as
                /// [`build_with`](Self::build_with) does from a given one.
                pub fn build(self) -> $crate::error::Result<$built> {
                    $crate::nn::with_default_generator(|rng| self.build_with(rng))
                }
            )?

            $(
                $(#[$doc])*
                pub fn $field(mut self, $field: $ty) -> Self {
                    self.$field = $field;
                    self
                }
            )*
        }
    };
}
pub(crate) use setters;
