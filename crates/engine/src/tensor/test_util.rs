//! Shorthands shared by the unit tests of every module.

use crate::tensor::Tensor;

/// A 1-d f64 tensor of `v`.
pub(crate) fn t(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).expect("a 1-d shape")
}

/// An f64 tensor of `v` in `shape`.
pub(crate) fn tensor(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).expect("as many values as the shape holds")
}

/// An f64 tensor that takes `v` in `shape`, for tests that build the values.
pub(crate) fn shaped(v: Vec<f64>, shape: &[usize]) -> Tensor {
    Tensor::from_vec(v, shape).expect("as many values as the shape holds")
}

/// Whether `a` and `b` have the same length and agree within `tol` elementwise.
pub(crate) fn close(a: &[f64], b: &[f64], tol: f64) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
}
