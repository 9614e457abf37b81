//! One-node ONNX models built in code for the importer's tests: a node's
//! attributes, declared values and the model around it.

#![allow(dead_code)]

use prost::Message;
use retrograd::onnx::proto::attribute_proto::AttributeType;
use retrograd::onnx::proto::type_proto::{Tensor as TensorType, Value as TypeValue};
use retrograd::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto, TypeProto,
    ValueInfoProto,
};
use retrograd::onnx::OnnxModel;

/// An attribute: an integer, integers, a float, a string or strings.
pub enum A {
    I(i64),
    Is(&'static [i64]),
    F(f32),
    S(&'static str),
    Ss(&'static [&'static str]),
    /// A 1-d float tensor.
    Tf(&'static [f32]),
}

pub fn attr(name: &str, a: &A) -> AttributeProto {
    let mut p = AttributeProto {
        name: Some(name.into()),
        ..Default::default()
    };
    let kind = match a {
        A::I(v) => {
            p.i = Some(*v);
            AttributeType::Int
        }
        A::Is(v) => {
            p.ints = v.to_vec();
            AttributeType::Ints
        }
        A::F(v) => {
            p.f = Some(*v);
            AttributeType::Float
        }
        A::S(v) => {
            p.s = Some(v.as_bytes().to_vec());
            AttributeType::String
        }
        A::Ss(v) => {
            p.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
            AttributeType::Strings
        }
        A::Tf(v) => {
            p.t = Some(TensorProto {
                dims: vec![v.len() as i64],
                data_type: Some(1),
                float_data: v.to_vec(),
                ..Default::default()
            });
            AttributeType::Tensor
        }
    };
    p.r#type = Some(kind as i32);
    p
}

/// A value of element type `elem` (an ONNX type code), or undeclared.
pub fn value_info(name: &str, elem: Option<i32>) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(TypeValue::TensorType(TensorType {
                elem_type: elem,
                ..Default::default()
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A model of one `op` node at `opset` reading `inputs` (an empty name:
/// an omitted optional input; each with its declared element type, if
/// any) and naming `n_out` outputs, imported.
pub fn model_typed(
    op: &str,
    opset: i64,
    inputs: &[(&str, Option<i32>)],
    n_out: usize,
    attrs: &[(&str, A)],
) -> retrograd::Result<OnnxModel> {
    let outs: Vec<String> = (0..n_out).map(|i| format!("y{i}")).collect();
    let node = NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|(s, _)| s.to_string()).collect(),
        output: outs.clone(),
        attribute: attrs.iter().map(|(n, a)| attr(n, a)).collect(),
        ..Default::default()
    };
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(opset),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![node],
            input: inputs
                .iter()
                .filter(|(n, _)| !n.is_empty())
                .map(|&(n, t)| value_info(n, t))
                .collect(),
            output: outs.iter().map(|n| value_info(n, None)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    OnnxModel::from_bytes(&m.encode_to_vec())
}

/// [`model_typed`] with no input's element type declared.
pub fn model_reading(
    op: &str,
    opset: i64,
    inputs: &[&str],
    n_out: usize,
    attrs: &[(&str, A)],
) -> retrograd::Result<OnnxModel> {
    let untyped: Vec<(&str, Option<i32>)> = inputs.iter().map(|&n| (n, None)).collect();
    model_typed(op, opset, &untyped, n_out, attrs)
}
