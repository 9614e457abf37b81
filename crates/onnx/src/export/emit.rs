//! [`Emit`]: the ONNX graph being written. Op mappers add nodes and
//! constants through it; it hands out unique value names and builds the
//! attribute messages.

use std::collections::HashSet;

use crate::proto::attribute_proto::AttributeType;
use crate::proto::{AttributeProto, NodeProto, TensorProto};
use crate::tensor::{onnx_type, to_proto};
use retrograd_engine::base::error::Result;
use retrograd_engine::tensor::{DType, Tensor};

/// A free axis of a graph input: its size when the graph was recorded.
#[derive(Clone, Debug)]
pub(crate) struct FreeAxis {
    /// The recorded size.
    pub(crate) size: usize,
    /// The ONNX name of the input.
    pub(crate) input: String,
    pub(crate) axis: usize,
    /// The dimension's name (`batch`, `sequence`).
    pub(crate) name: String,
}

/// The nodes and initializers written so far, and the names taken.
#[derive(Default)]
pub(crate) struct Emit {
    pub(crate) nodes: Vec<NodeProto>,
    pub(crate) initializers: Vec<TensorProto>,
    taken: HashSet<String>,
    /// The inputs' free axes: reshapes, expands and slices keep them free.
    pub(crate) free: Vec<FreeAxis>,
    /// `Shape` nodes already written, by (input, axis).
    sizes: Vec<((String, usize), String)>,
}

impl Emit {
    /// An empty graph whose inputs have the `free` axes.
    pub(crate) fn new(free: Vec<FreeAxis>) -> Self {
        Emit {
            free,
            ..Emit::default()
        }
    }

    /// Whether any input axis is free (reshapes then copy kept sizes).
    pub(crate) fn is_dynamic(&self) -> bool {
        !self.free.is_empty()
    }

    /// The free axis whose recorded size is `size`, if one is: a size the
    /// model took from its input (a table cut to the sequence length).
    /// Two differently named free axes of that size are ambiguous: an error
    /// saying to record at distinct sizes.
    pub(crate) fn free_axis_of_size(
        &self,
        size: usize,
    ) -> std::result::Result<Option<FreeAxis>, String> {
        let mut found: Option<&FreeAxis> = None;
        for f in self.free.iter().filter(|f| f.size == size && size > 1) {
            match found {
                Some(g) if g.name != f.name => {
                    return Err(format!(
                        "free axes `{}` and `{}` were both recorded at size {size}: record \
                         the graph at distinct sizes",
                        g.name, f.name
                    ))
                }
                Some(_) => {}
                None => found = Some(f),
            }
        }
        Ok(found.cloned())
    }

    /// A 1-d i64 value holding the run-time size of `free` (a `Shape`
    /// node over that axis of its input, written once).
    pub(crate) fn size_of(&mut self, free: &FreeAxis) -> String {
        let key = (free.input.clone(), free.axis);
        if let Some((_, name)) = self.sizes.iter().find(|(k, _)| *k == key) {
            return name.clone();
        }
        let axis = free.axis as i64;
        let name = self.op(
            "Shape",
            &[&free.input],
            &format!("{}_size", free.name),
            vec![attr_int("start", axis), attr_int("end", axis + 1)],
        );
        self.sizes.push((key, name.clone()));
        name
    }

    /// Claims `name` as it is (a user's input, output or parameter name);
    /// false if it was already taken.
    pub(crate) fn claim(&mut self, name: &str) -> bool {
        self.taken.insert(name.to_string())
    }

    /// A fresh value name starting with `base` (`base`, then `base_1`...).
    pub(crate) fn fresh(&mut self, base: &str) -> String {
        if self.claim(base) {
            return base.to_string();
        }
        (1..)
            .map(|i| format!("{base}_{i}"))
            .find(|n| self.claim(n))
            .expect("some suffix is free")
    }

    /// Adds a node of ONNX op `op_type` reading `inputs` and writing
    /// `outputs` (names given, or fresh ones from `out_base`).
    pub(crate) fn node(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        outputs: &[&str],
        attributes: Vec<AttributeProto>,
    ) {
        let name = self.fresh(&format!("{op_type}_{}", self.nodes.len()));
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            name: Some(name),
            op_type: Some(op_type.to_string()),
            attribute: attributes,
            ..Default::default()
        });
    }

    /// Adds a node writing one fresh value named after `base`; returns its name.
    pub(crate) fn op(
        &mut self,
        op_type: &str,
        inputs: &[&str],
        base: &str,
        attributes: Vec<AttributeProto>,
    ) -> String {
        let out = self.fresh(base);
        self.node(op_type, inputs, &[&out], attributes);
        out
    }

    /// A `Constant` node holding `value`; returns the value's name.
    pub(crate) fn constant(&mut self, base: &str, value: &Tensor) -> Result<String> {
        let out = self.fresh(base);
        let tensor = to_proto(&out, value)?;
        self.node("Constant", &[], &[&out], vec![attr_tensor("value", tensor)]);
        Ok(out)
    }

    /// A 1-d i64 constant (shapes, axes, pads).
    pub(crate) fn ints(&mut self, base: &str, values: &[i64]) -> Result<String> {
        self.constant(base, &Tensor::from_slice(values, &[values.len()])?)
    }

    /// A 0-d constant of `dtype`.
    pub(crate) fn scalar(&mut self, base: &str, value: f64, dtype: DType) -> Result<String> {
        self.constant(base, &Tensor::scalar_of(value, dtype))
    }

    /// Adds an initializer (a trainable weight or a saved buffer).
    pub(crate) fn initializer(&mut self, name: &str, value: &Tensor) -> Result<()> {
        self.initializers.push(to_proto(name, value)?);
        Ok(())
    }
}

/// An integer attribute.
pub(crate) fn attr_int(name: &str, value: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Int as i32),
        i: Some(value),
        ..Default::default()
    }
}

/// A list-of-integers attribute.
pub(crate) fn attr_ints(name: &str, values: &[i64]) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Ints as i32),
        ints: values.to_vec(),
        ..Default::default()
    }
}

/// A float attribute (ONNX stores f32).
pub(crate) fn attr_float(name: &str, value: f64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Float as i32),
        f: Some(value as f32),
        ..Default::default()
    }
}

/// A tensor attribute (a `Constant`'s value).
pub(crate) fn attr_tensor(name: &str, value: TensorProto) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        r#type: Some(AttributeType::Tensor as i32),
        t: Some(value),
        ..Default::default()
    }
}

/// The `to` attribute of a `Cast` to `dtype`.
pub(crate) fn attr_dtype(name: &str, dtype: DType) -> AttributeProto {
    attr_int(name, i64::from(onnx_type(dtype)))
}
