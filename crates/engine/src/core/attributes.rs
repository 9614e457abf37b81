//! [`OpAttributes`]: the settings an op was built with (axes, eps, strides,
//! a shape), listed by name. [`Differentiable::attributes`] returns them, so
//! code that reads a recorded graph (the ONNX exporter, a trace printer)
//! sees a node's settings without knowing the op's type.
//!
//! [`Differentiable::attributes`]: crate::Differentiable::attributes

use std::fmt;

use crate::tensor::{DType, Tensor};

/// One attribute value.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    /// A whole number (an axis, a group count).
    Int(i64),
    /// A list of whole numbers (a shape, strides, pads).
    Ints(Vec<i64>),
    /// A real number (eps, a slope, a fill value).
    Float(f64),
    /// A switch (keepdim, training, ceil_mode).
    Bool(bool),
    /// A dtype (the target of a cast).
    DType(DType),
    /// A word from a fixed set (a loss's reduction).
    Str(&'static str),
    /// A tensor the op holds (class weights, `pos_weight`).
    Tensor(Tensor),
}

impl fmt::Display for AttrValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttrValue::Int(v) => write!(f, "{v}"),
            AttrValue::Ints(v) => write!(f, "{v:?}"),
            AttrValue::Float(v) => write!(f, "{v}"),
            AttrValue::Bool(v) => write!(f, "{v}"),
            AttrValue::DType(d) => write!(f, "{d}"),
            AttrValue::Str(v) => f.write_str(v),
            AttrValue::Tensor(t) => write!(f, "tensor{:?}", t.shape()),
        }
    }
}

/// An op's settings by name, in a fixed order. An absent optional setting
/// (a clamp with no upper bound) is simply not listed.
///
/// ```
/// use retrograd::ops::{AttrValue, OpAttributes};
/// use retrograd::Differentiable;
/// use retrograd::ops::shape::Reshape;
///
/// let op = Reshape { shape: [2, -1].into_iter().collect() };
/// let attrs = op.attributes();
/// assert_eq!(attrs.get("shape"), Some(&AttrValue::Ints(vec![2, -1])));
/// assert_eq!(attrs.to_string(), "shape=[2, -1]");
/// let built = OpAttributes::new().int("dim", 1).float("eps", 1e-5).bool("keepdim", true);
/// assert_eq!(built.get_int("dim"), Some(1));
/// assert_eq!(built.to_string(), "dim=1, eps=0.00001, keepdim=true");
/// let loss = OpAttributes::new().str("reduction", "mean");
/// assert_eq!(loss.get_str("reduction"), Some("mean"));
/// assert_eq!(loss.to_string(), "reduction=mean");
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OpAttributes {
    entries: Vec<(&'static str, AttrValue)>,
}

impl OpAttributes {
    /// No attributes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `name = value`.
    pub fn with(mut self, name: &'static str, value: AttrValue) -> Self {
        self.entries.push((name, value));
        self
    }

    /// Adds a whole number.
    pub fn int(self, name: &'static str, value: impl TryInto<i64>) -> Self {
        // Every setting an op holds (an axis, a size) fits in an i64.
        let value = value.try_into().unwrap_or(i64::MAX);
        self.with(name, AttrValue::Int(value))
    }

    /// Adds a list of whole numbers.
    pub fn ints<T: TryInto<i64> + Copy>(self, name: &'static str, values: &[T]) -> Self {
        let values = values
            .iter()
            .map(|&v| v.try_into().unwrap_or(i64::MAX))
            .collect();
        self.with(name, AttrValue::Ints(values))
    }

    /// Adds a real number.
    pub fn float(self, name: &'static str, value: f64) -> Self {
        self.with(name, AttrValue::Float(value))
    }

    /// Adds a real number if there is one.
    pub fn float_opt(self, name: &'static str, value: Option<f64>) -> Self {
        match value {
            Some(v) => self.float(name, v),
            None => self,
        }
    }

    /// Adds a whole number if there is one.
    pub fn int_opt(self, name: &'static str, value: Option<impl TryInto<i64>>) -> Self {
        match value {
            Some(v) => self.int(name, v),
            None => self,
        }
    }

    /// Adds a switch.
    pub fn bool(self, name: &'static str, value: bool) -> Self {
        self.with(name, AttrValue::Bool(value))
    }

    /// Adds a word from a fixed set.
    pub fn str(self, name: &'static str, value: &'static str) -> Self {
        self.with(name, AttrValue::Str(value))
    }

    /// Adds a tensor the op holds.
    pub fn tensor(self, name: &'static str, value: Tensor) -> Self {
        self.with(name, AttrValue::Tensor(value))
    }

    /// Adds a tensor if there is one.
    pub fn tensor_opt(self, name: &'static str, value: Option<&Tensor>) -> Self {
        match value {
            Some(t) => self.tensor(name, t.clone()),
            None => self,
        }
    }

    /// Adds a dtype.
    pub fn dtype(self, name: &'static str, value: DType) -> Self {
        self.with(name, AttrValue::DType(value))
    }

    /// The value named `name`, if listed.
    pub fn get(&self, name: &str) -> Option<&AttrValue> {
        self.entries
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v)
    }

    /// The whole number named `name`, if listed as one.
    pub fn get_int(&self, name: &str) -> Option<i64> {
        match self.get(name) {
            Some(AttrValue::Int(v)) => Some(*v),
            _ => None,
        }
    }

    /// The list named `name`, if listed as one.
    pub fn get_ints(&self, name: &str) -> Option<&[i64]> {
        match self.get(name) {
            Some(AttrValue::Ints(v)) => Some(v),
            _ => None,
        }
    }

    /// The real number named `name`, if listed as one.
    pub fn get_float(&self, name: &str) -> Option<f64> {
        match self.get(name) {
            Some(AttrValue::Float(v)) => Some(*v),
            _ => None,
        }
    }

    /// The switch named `name`, if listed as one.
    pub fn get_bool(&self, name: &str) -> Option<bool> {
        match self.get(name) {
            Some(AttrValue::Bool(v)) => Some(*v),
            _ => None,
        }
    }

    /// The dtype named `name`, if listed as one.
    pub fn get_dtype(&self, name: &str) -> Option<DType> {
        match self.get(name) {
            Some(AttrValue::DType(v)) => Some(*v),
            _ => None,
        }
    }

    /// The word named `name`, if listed as one.
    pub fn get_str(&self, name: &str) -> Option<&'static str> {
        match self.get(name) {
            Some(AttrValue::Str(v)) => Some(*v),
            _ => None,
        }
    }

    /// The tensor named `name`, if listed as one.
    pub fn get_tensor(&self, name: &str) -> Option<&Tensor> {
        match self.get(name) {
            Some(AttrValue::Tensor(v)) => Some(v),
            _ => None,
        }
    }

    /// Every attribute, in order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, &AttrValue)> {
        self.entries.iter().map(|(n, v)| (*n, v))
    }

    /// The number of attributes.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

impl fmt::Display for OpAttributes {
    /// `name=value, name=value`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, value)) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}
