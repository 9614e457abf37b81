//! [`Visit`]: how `#[derive(Module)]` walks a model's fields.

use crate::nn::{join_name, Buffer, Module, Parameter, RandomStream};
use crate::tensor::DType;

/// A field of a module: what `#[derive(Module)]` calls for each field, with
/// the field's full name as `prefix`.
///
/// Implemented for every [`Module`] (the field is visited as a sub-module),
/// for [`Parameter`], [`Buffer`] and [`RandomStream`] (the field itself, under its name), for
/// `Option<T>` (nothing when `None`), `Vec<T>` and arrays (element `i` under
/// `prefix.i`, as PyTorch's `ModuleList` names them), `Box<T>`, and for plain
/// settings (numbers, `bool`, `String`, [`DType`]), which visit nothing. Mark
/// any other field `#[module(skip)]`.
pub trait Visit {
    /// Calls `f` with each parameter inside, named under `prefix`.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter));

    /// Calls `f` with each buffer inside, named under `prefix`.
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        let _ = (prefix, f);
    }

    /// Calls `f` with each random stream inside, named under `prefix`.
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        let _ = (prefix, f);
    }

    /// Switches training behaviour of the modules inside.
    fn set_training(&mut self, training: bool) {
        let _ = training;
    }
}

impl<M: Module + ?Sized> Visit for M {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        Module::visit_parameters(self, prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        Module::visit_buffers(self, prefix, f)
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        Module::visit_random_streams(self, prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        Module::set_training(self, training)
    }
}

impl Visit for Parameter {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        f(prefix, self)
    }
}

impl Visit for Buffer {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        f(prefix, self)
    }
}

impl Visit for RandomStream {
    fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        f(prefix, self)
    }
}

impl<T: Visit> Visit for Option<T> {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        if let Some(inner) = self {
            inner.visit_parameters(prefix, f)
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        if let Some(inner) = self {
            inner.visit_buffers(prefix, f)
        }
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        if let Some(inner) = self {
            inner.visit_random_streams(prefix, f)
        }
    }
    fn set_training(&mut self, training: bool) {
        if let Some(inner) = self {
            inner.set_training(training)
        }
    }
}

impl<T: Visit> Visit for [T] {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        for (i, item) in self.iter().enumerate() {
            item.visit_parameters(&join_name(prefix, &i.to_string()), f)
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        for (i, item) in self.iter().enumerate() {
            item.visit_buffers(&join_name(prefix, &i.to_string()), f)
        }
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        for (i, item) in self.iter().enumerate() {
            item.visit_random_streams(&join_name(prefix, &i.to_string()), f)
        }
    }
    fn set_training(&mut self, training: bool) {
        self.iter_mut().for_each(|item| item.set_training(training))
    }
}

/// Forwards to the slice of elements.
macro_rules! visit_as_slice {
    ($($ty:ty => [$($generics:tt)*]),* $(,)?) => {$(
        impl<$($generics)*> Visit for $ty {
            fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
                self[..].visit_parameters(prefix, f)
            }
            fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
                self[..].visit_buffers(prefix, f)
            }
            fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
                self[..].visit_random_streams(prefix, f)
            }
            fn set_training(&mut self, training: bool) {
                self[..].set_training(training)
            }
        }
    )*};
}
visit_as_slice!(Vec<T> => [T: Visit], [T; N] => [T: Visit, const N: usize]);

/// Settings that live beside the layers (sizes, rates, flags) and hold no
/// parameters.
macro_rules! visit_nothing {
    ($($ty:ty),* $(,)?) => {$(
        impl Visit for $ty {
            fn visit_parameters(&self, _: &str, _: &mut dyn FnMut(&str, &Parameter)) {}
        }
    )*};
}
visit_nothing!(bool, u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64, String, DType);
