//! The opset an export is written at. The mappers write opset 17's
//! forms; for a later opset this pass rewrites the nodes whose form
//! changed since: the reductions other than `ReduceSum`, whose `axes`
//! became an input at opset 18. Every other op the exporter writes kept
//! its meaning for the inputs it is given through opset 28 (later
//! versions only added element types or optional settings left at their
//! defaults).

use super::super::proto::attribute_proto::AttributeType;
use super::super::proto::{GraphProto, TensorProto};
use crate::proto::tensor_proto::DataType as OnnxType;
use retrograd_engine::base::error::{Error, Result};

/// The opset the exporter writes unless asked otherwise.
pub const EXPORT_OPSET: i64 = 17;

/// The newest opset the exporter writes (the newest ONNX defines today).
pub const MAX_EXPORT_OPSET: i64 = 28;

/// The IR version ONNX pairs with each opset (`onnx.helper.VERSION_TABLE`).
pub(crate) fn ir_version(opset: i64) -> i64 {
    match opset {
        ..=18 => 8,
        19 | 20 => 9,
        21 | 22 => 10,
        23 => 11,
        24 => 12,
        25..=27 => 13,
        _ => 14,
    }
}

/// The reductions whose axes moved from an attribute to an input at 18.
const AXES_BECAME_INPUT: &[&str] = &[
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceLogSumExp",
    "ReduceLogSum",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
];

/// Checks `opset` is one the exporter writes.
pub(crate) fn check(opset: i64) -> Result<()> {
    if (EXPORT_OPSET..=MAX_EXPORT_OPSET).contains(&opset) {
        Ok(())
    } else {
        Err(Error::invalid(
            "onnx export",
            format!(
                "opset {opset}: the exporter writes opsets {EXPORT_OPSET} to {MAX_EXPORT_OPSET}"
            ),
        ))
    }
}

/// Rewrites `graph`, written at opset 17, into opset `opset`'s forms.
pub(crate) fn upgrade(graph: &mut GraphProto, opset: i64) {
    if opset < 18 {
        return;
    }
    let mut added = Vec::new();
    for node in &mut graph.node {
        if !AXES_BECAME_INPUT.contains(&node.op_type()) {
            continue;
        }
        let Some(at) = node.attribute.iter().position(|a| a.name() == "axes") else {
            continue;
        };
        let axes = node.attribute.remove(at);
        debug_assert_eq!(axes.r#type, Some(AttributeType::Ints as i32));
        // Node outputs are unique names, so this one is too.
        let name = format!("{}/axes", node.output[0]);
        added.push(TensorProto {
            dims: vec![axes.ints.len() as i64],
            data_type: Some(OnnxType::Int64 as i32),
            name: Some(name.clone()),
            int64_data: axes.ints,
            ..Default::default()
        });
        node.input.truncate(1);
        node.input.push(name);
    }
    graph.initializer.extend(added);
}
