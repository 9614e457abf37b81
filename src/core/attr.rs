//! An op's settings by name ([`Differentiable::attributes`]): what an
//! exporter (ONNX attributes) or a printed graph reads, without knowing the
//! op's type.
//!
//! [`Differentiable::attributes`]: super::Differentiable::attributes

use std::fmt;

use crate::tensor::Tensor;

/// One setting of an op: a number, a list of numbers, a word or a tensor.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// An integer (an axis, a count, a flag as 0 or 1).
    Int(i64),
    /// A list of integers (axes, strides, a shape).
    Ints(Vec<i64>),
    /// A float (`eps`, a probability, a scale).
    Float(f64),
    /// A word from a fixed set (a reduction, a mode).
    Str(&'static str),
    /// A tensor the op holds (class weights).
    Tensor(Tensor),
}

/// An op's settings, in the order the op lists them.
pub type Attributes = Vec<(&'static str, Attr)>;

impl From<bool> for Attr {
    fn from(v: bool) -> Self {
        Attr::Int(i64::from(v))
    }
}

impl From<usize> for Attr {
    fn from(v: usize) -> Self {
        Attr::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<isize> for Attr {
    fn from(v: isize) -> Self {
        Attr::Int(v as i64)
    }
}

impl From<i64> for Attr {
    fn from(v: i64) -> Self {
        Attr::Int(v)
    }
}

impl From<f64> for Attr {
    fn from(v: f64) -> Self {
        Attr::Float(v)
    }
}

impl From<&'static str> for Attr {
    fn from(v: &'static str) -> Self {
        Attr::Str(v)
    }
}

impl From<Tensor> for Attr {
    fn from(v: Tensor) -> Self {
        Attr::Tensor(v)
    }
}

impl From<&[usize]> for Attr {
    fn from(v: &[usize]) -> Self {
        Attr::Ints(
            v.iter()
                .map(|&x| i64::try_from(x).unwrap_or(i64::MAX))
                .collect(),
        )
    }
}

impl From<&[isize]> for Attr {
    fn from(v: &[isize]) -> Self {
        Attr::Ints(v.iter().map(|&x| x as i64).collect())
    }
}

impl<const N: usize> From<[usize; N]> for Attr {
    fn from(v: [usize; N]) -> Self {
        Attr::from(&v[..])
    }
}

impl fmt::Display for Attr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attr::Int(v) => write!(f, "{v}"),
            Attr::Ints(v) => write!(f, "{v:?}"),
            Attr::Float(v) => write!(f, "{v}"),
            Attr::Str(v) => f.write_str(v),
            Attr::Tensor(t) => write!(f, "tensor{:?}", t.shape()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_convert_and_print() {
        assert_eq!(Attr::from(true), Attr::Int(1));
        assert_eq!(Attr::from([2usize, 3]), Attr::Ints(vec![2, 3]));
        assert_eq!(Attr::from(&[-1isize][..]).to_string(), "[-1]");
        assert_eq!(Attr::from(1e-5).to_string(), "0.00001");
        assert_eq!(Attr::from("mean").to_string(), "mean");
        let t = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
        assert_eq!(Attr::from(t).to_string(), "tensor[2]");
    }
}
