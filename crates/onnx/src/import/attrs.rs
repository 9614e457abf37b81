//! A node's attributes, decoded once at load: [`Attrs`], with getters
//! that fall back to the ONNX default or report a typed error naming the
//! node.

use std::collections::HashMap;

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, GraphProto};
use crate::tensor::from_proto;
use retrograd_engine::base::error::{Error, OnnxProblem, Result};
use retrograd_engine::tensor::Tensor;

/// One decoded attribute value.
#[derive(Clone, Debug)]
pub(crate) enum Attr {
    Int(i64),
    Ints(Vec<i64>),
    Float(f64),
    Floats(Vec<f64>),
    Str(String),
    Strs(Vec<String>),
    Tensor(Tensor),
    /// A subgraph (`FlexAttention`'s modifiers), run by `ops/subgraph.rs`.
    Graph(Box<GraphProto>),
    /// A list of graphs, sparse tensor or type: no supported op reads one.
    Other,
}

/// The attributes of one node, by name, and the node's label for messages.
#[derive(Clone, Debug, Default)]
pub(crate) struct Attrs {
    values: HashMap<String, Attr>,
    /// `node "name" (OpType)`.
    pub(crate) label: String,
    /// The enclosing graph's values the node's subgraphs read, in the
    /// order the loader gives them after the node's own inputs.
    pub(crate) outer: Vec<String>,
}

impl Attrs {
    /// Decodes `protos`; `label` names the node in errors.
    pub(crate) fn decode(label: String, protos: &[AttributeProto]) -> Result<Attrs> {
        let mut values = HashMap::new();
        for a in protos {
            let name = a.name().to_string();
            let kind = a.r#type.and_then(|t| AttributeType::try_from(t).ok());
            let value = match kind {
                Some(AttributeType::Int) => Attr::Int(a.i()),
                Some(AttributeType::Ints) => Attr::Ints(a.ints.clone()),
                Some(AttributeType::Float) => Attr::Float(f64::from(a.f())),
                Some(AttributeType::Floats) => {
                    Attr::Floats(a.floats.iter().map(|&f| f64::from(f)).collect())
                }
                Some(AttributeType::String) => {
                    Attr::Str(String::from_utf8_lossy(a.s()).into_owned())
                }
                Some(AttributeType::Strings) => Attr::Strs(
                    a.strings
                        .iter()
                        .map(|s| String::from_utf8_lossy(s).into_owned())
                        .collect(),
                ),
                Some(AttributeType::Tensor) => match &a.t {
                    Some(t) => Attr::Tensor(from_proto(t)?),
                    None => return Err(bad(&label, format!("attribute `{name}` holds no tensor"))),
                },
                Some(AttributeType::Graph) => match &a.g {
                    Some(g) => Attr::Graph(Box::new(g.clone())),
                    None => return Err(bad(&label, format!("attribute `{name}` holds no graph"))),
                },
                Some(AttributeType::Graphs) => Attr::Other,
                Some(_) => Attr::Other,
                // Files from before the type field: whichever field is set.
                None => {
                    if let Some(t) = &a.t {
                        Attr::Tensor(from_proto(t)?)
                    } else if !a.ints.is_empty() {
                        Attr::Ints(a.ints.clone())
                    } else if !a.floats.is_empty() {
                        Attr::Floats(a.floats.iter().map(|&f| f64::from(f)).collect())
                    } else if let Some(i) = a.i {
                        Attr::Int(i)
                    } else if let Some(f) = a.f {
                        Attr::Float(f64::from(f))
                    } else if let Some(s) = &a.s {
                        Attr::Str(String::from_utf8_lossy(s).into_owned())
                    } else {
                        Attr::Other
                    }
                }
            };
            values.insert(name, value);
        }
        Ok(Attrs {
            values,
            label,
            outer: Vec::new(),
        })
    }

    /// These attributes under another `label`, with integer `name` set to
    /// `value` (a fused step's setting beside its first node's).
    pub(crate) fn relabelled_with_int(&self, label: String, name: &str, value: i64) -> Attrs {
        let mut values = self.values.clone();
        values.insert(name.to_string(), Attr::Int(value));
        Attrs {
            values,
            label,
            outer: self.outer.clone(),
        }
    }

    /// Whether `name` is set.
    pub(crate) fn has(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    /// The raw value of `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Attr> {
        self.values.get(name)
    }

    fn wrong(&self, name: &str, want: &str) -> Error {
        bad(&self.label, format!("attribute `{name}` is not {want}"))
    }

    /// Integer `name`, or `default` when absent.
    pub(crate) fn int(&self, name: &str, default: i64) -> Result<i64> {
        match self.values.get(name) {
            None => Ok(default),
            Some(Attr::Int(v)) => Ok(*v),
            Some(_) => Err(self.wrong(name, "an integer")),
        }
    }

    /// Integer list `name`, if present.
    pub(crate) fn ints(&self, name: &str) -> Result<Option<Vec<i64>>> {
        match self.values.get(name) {
            None => Ok(None),
            Some(Attr::Ints(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.wrong(name, "a list of integers")),
        }
    }

    /// Float `name`, or `default` when absent.
    pub(crate) fn float(&self, name: &str, default: f64) -> Result<f64> {
        match self.values.get(name) {
            None => Ok(default),
            Some(Attr::Float(v)) => Ok(*v),
            Some(Attr::Int(v)) => Ok(*v as f64),
            Some(_) => Err(self.wrong(name, "a float")),
        }
    }

    /// String `name`, or `default` when absent.
    pub(crate) fn string(&self, name: &str, default: &str) -> Result<String> {
        match self.values.get(name) {
            None => Ok(default.to_string()),
            Some(Attr::Str(v)) => Ok(v.clone()),
            Some(_) => Err(self.wrong(name, "a string")),
        }
    }

    /// String list `name`, if present.
    pub(crate) fn strings(&self, name: &str) -> Result<Option<Vec<String>>> {
        match self.values.get(name) {
            None => Ok(None),
            Some(Attr::Strs(v)) => Ok(Some(v.clone())),
            Some(_) => Err(self.wrong(name, "a list of strings")),
        }
    }

    /// Graph `name`, if present.
    pub(crate) fn graph(&self, name: &str) -> Result<Option<&GraphProto>> {
        match self.values.get(name) {
            None => Ok(None),
            Some(Attr::Graph(g)) => Ok(Some(g)),
            Some(_) => Err(self.wrong(name, "a graph")),
        }
    }

    /// Tensor `name`, if present.
    pub(crate) fn tensor(&self, name: &str) -> Result<Option<&Tensor>> {
        match self.values.get(name) {
            None => Ok(None),
            Some(Attr::Tensor(t)) => Ok(Some(t)),
            Some(_) => Err(self.wrong(name, "a tensor")),
        }
    }
}

/// [`OnnxProblem::BadNode`] naming `label`.
pub(crate) fn bad(label: &str, reason: impl std::fmt::Display) -> Error {
    Error::OnnxInvalid {
        problem: OnnxProblem::BadNode,
        detail: format!("{label}: {reason}"),
    }
}
