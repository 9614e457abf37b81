//! A graph attribute run on the node's graph: its inputs bound to `Var`s,
//! its initializers as constants, each node through the same converters
//! as the model's own nodes, so what the subgraph computes differentiates
//! like the rest. Only the subgraph's own values are read: a subgraph
//! that names a value of the enclosing graph is refused by name.

use std::collections::HashMap;

use super::{lookup, Attrs, Ctx};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::onnx::proto::GraphProto;
use crate::onnx::tensor::from_proto;

/// Whether the importer runs every node of `g` with its settings:
/// `Err(reason)` names the first one it does not.
pub(super) fn check(g: &GraphProto, opset: i64) -> std::result::Result<(), String> {
    for (i, node) in g.node.iter().enumerate() {
        let op = node.op_type();
        let domain = node.domain();
        if !(domain.is_empty() || domain == "ai.onnx") {
            return Err(format!("a subgraph node of domain {domain:?} ({op})"));
        }
        let Some((_, check)) = lookup(op) else {
            return Err(format!("op {op} (in a subgraph)"));
        };
        let attrs = Attrs::decode(label(g, i, op), &node.attribute).map_err(|e| e.to_string())?;
        check(&attrs, opset).map_err(|why| format!("{why} (in a subgraph)"))?;
    }
    Ok(())
}

fn label(g: &GraphProto, i: usize, op: &str) -> String {
    format!("subgraph {:?} node {i} ({op})", g.name())
}

/// Runs `g` on `inputs` (one per graph input, in order) and gives its
/// outputs.
pub(super) fn run<'g>(c: &Ctx<'_, 'g>, g: &GraphProto, inputs: &[Var<'g>]) -> Result<Vec<Var<'g>>> {
    if g.input.len() != inputs.len() {
        return Err(c.error(format!(
            "subgraph {:?} reads {} inputs, the op gives it {}",
            g.name(),
            g.input.len(),
            inputs.len()
        )));
    }
    let mut values: HashMap<&str, Var<'g>> = HashMap::new();
    for (info, v) in g.input.iter().zip(inputs) {
        values.insert(info.name(), v.clone());
    }
    for t in &g.initializer {
        values.insert(t.name(), c.constant(from_proto(t)?));
    }
    for (i, node) in g.node.iter().enumerate() {
        let op = node.op_type();
        let label = label(g, i, op);
        let (convert, check) = lookup(op)
            .filter(|_| node.domain().is_empty() || node.domain() == "ai.onnx")
            .ok_or_else(|| c.error(format!("{label}: the op is not supported")))?;
        let attrs = Attrs::decode(label.clone(), &node.attribute)?;
        check(&attrs, c.opset)
            .map_err(|why| c.error(format!("{label}: {why} is not supported")))?;
        let ins = node
            .input
            .iter()
            .map(|n| match n.as_str() {
                "" => Ok(None),
                n => values.get(n).cloned().map(Some).ok_or_else(|| {
                    c.error(format!(
                        "{label} reads `{n}`, which the subgraph does not define \
                         (values of the enclosing graph are not read)"
                    ))
                }),
            })
            .collect::<Result<Vec<_>>>()?;
        let ctx = Ctx {
            graph: c.graph,
            attrs: &attrs,
            opset: c.opset,
            n_outputs: node.output.len(),
            input_types: &[],
        };
        let outs = convert(&ctx, &ins).map_err(|e| match e {
            Error::OnnxInvalid { .. } | Error::OnnxUnsupported { .. } => e,
            other => c.error(format!("{label}: {other}")),
        })?;
        if outs.len() < node.output.len() {
            return Err(c.error(format!(
                "{label} made {} outputs, the node names {}",
                outs.len(),
                node.output.len()
            )));
        }
        for (name, v) in node.output.iter().zip(outs) {
            if !name.is_empty() {
                values.insert(name, v);
            }
        }
    }
    g.output
        .iter()
        .map(|o| {
            values.get(o.name()).cloned().ok_or_else(|| {
                c.error(format!(
                    "subgraph {:?} never defines its output `{}`",
                    g.name(),
                    o.name()
                ))
            })
        })
        .collect()
}
