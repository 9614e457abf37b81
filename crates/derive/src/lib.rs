//! `#[derive(Module)]` for retrograd.
//!
//! A model is a struct of layers, parameters and buffers; its `Module`
//! implementation only walks those fields, so it is written here from the
//! struct instead of by hand. Each field is visited through
//! `retrograd::nn::Visit` under its own name (`"blocks.0.attn.weight"`),
//! in declaration order. Plain settings (numbers, flags, dtypes) visit
//! nothing; any other field that is not a module is marked
//! `#[module(skip)]`. `#[module(rename = "self")]` visits a field under
//! another name: a checkpoint's name that is a Rust keyword, or not
//! snake case (Hugging Face's `attention.self`, `LayerNorm`).

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::quote;
use syn::{parse_macro_input, Data, DeriveInput, Fields, Index, LitStr};

/// Implements `retrograd::nn::Module` for a struct by visiting its fields.
///
/// ```ignore
/// #[derive(Module)]
/// struct Block {
///     norm: RMSNorm,
///     attn: MultiheadAttention,
///     layers: Vec<Linear>,        // "layers.0.weight", ...
///     gate: Option<Parameter>,
///     #[module(skip)]
///     cache: std::cell::Cell<usize>,
///     #[module(rename = "LayerNorm")]
///     layer_norm: LayerNorm,      // "LayerNorm.weight", ...
/// }
/// ```
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] supports structs only: an enum's active layers change at run time, so write its Module by hand",
        ));
    };
    // (how to reach the field, its name in the state dict)
    let mut fields: Vec<(TokenStream2, LitStr)> = Vec::new();
    match &data.fields {
        Fields::Named(named) => {
            for f in &named.named {
                let options = field_options(&f.attrs)?;
                if options.skip {
                    continue;
                }
                let ident = f.ident.as_ref().expect("named field");
                let name = match options.rename {
                    Some(name) => name,
                    None => {
                        let name = ident.to_string();
                        name.strip_prefix("r#").unwrap_or(&name).to_string()
                    }
                };
                fields.push((quote!(#ident), LitStr::new(&name, Span::call_site())));
            }
        }
        Fields::Unnamed(unnamed) => {
            for (i, f) in unnamed.unnamed.iter().enumerate() {
                let options = field_options(&f.attrs)?;
                if options.skip {
                    continue;
                }
                let index = Index::from(i);
                let name = options.rename.unwrap_or_else(|| i.to_string());
                fields.push((quote!(#index), LitStr::new(&name, Span::call_site())));
            }
        }
        Fields::Unit => {}
    }
    let access: Vec<_> = fields.iter().map(|(a, _)| a).collect();
    let names: Vec<_> = fields.iter().map(|(_, n)| n).collect();
    let ident = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics ::retrograd::nn::Module for #ident #ty_generics #where_clause {
            fn visit_parameters(
                &self,
                prefix: &str,
                f: &mut dyn FnMut(&str, &::retrograd::nn::Parameter),
            ) {
                #( ::retrograd::nn::Visit::visit_parameters(
                    &self.#access, &::retrograd::nn::join_name(prefix, #names), f); )*
                let _ = (prefix, f);
            }
            fn visit_buffers(
                &self,
                prefix: &str,
                f: &mut dyn FnMut(&str, &::retrograd::nn::Buffer),
            ) {
                #( ::retrograd::nn::Visit::visit_buffers(
                    &self.#access, &::retrograd::nn::join_name(prefix, #names), f); )*
                let _ = (prefix, f);
            }
            fn visit_random_streams(
                &self,
                prefix: &str,
                f: &mut dyn FnMut(&str, &::retrograd::nn::RandomStream),
            ) {
                #( ::retrograd::nn::Visit::visit_random_streams(
                    &self.#access, &::retrograd::nn::join_name(prefix, #names), f); )*
                let _ = (prefix, f);
            }
            fn set_training(&mut self, training: bool) {
                #( ::retrograd::nn::Visit::set_training(&mut self.#access, training); )*
                let _ = training;
            }
        }
    })
}

/// A field's `#[module(...)]` options.
#[derive(Default)]
struct FieldOptions {
    /// `skip`: the field is not visited.
    skip: bool,
    /// `rename = "name"`: the field is visited under this name.
    rename: Option<String>,
}

/// Reads `#[module(skip)]` and `#[module(rename = "...")]`; any other
/// option is an error.
fn field_options(attrs: &[syn::Attribute]) -> syn::Result<FieldOptions> {
    let mut options = FieldOptions::default();
    for attr in attrs.iter().filter(|a| a.path().is_ident("module")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("skip") {
                options.skip = true;
                Ok(())
            } else if meta.path.is_ident("rename") {
                let name: LitStr = meta.value()?.parse()?;
                if name.value().is_empty() || name.value().contains('.') {
                    return Err(meta.error("a renamed field needs a non-empty name without dots"));
                }
                options.rename = Some(name.value());
                Ok(())
            } else {
                Err(meta.error(
                    "unknown #[module] option; the options are `skip` and `rename = \"name\"`",
                ))
            }
        })?;
    }
    Ok(options)
}
