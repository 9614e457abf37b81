//! A graph attribute run on the node's graph: its inputs bound to `Var`s,
//! its initializers as constants, each node through the same converters
//! as the model's own nodes, so what the subgraph computes differentiates
//! like the rest. A value the subgraph reads but does not define is the
//! enclosing graph's: the loader gives the node those values after its
//! own inputs ([`outer_refs`], `Attrs::outer`), so they are computed
//! first and kept alive like any input.

use std::collections::{HashMap, HashSet};

use super::{lookup, Attrs, Ctx};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::onnx::proto::{GraphProto, NodeProto};
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

/// The names `node`'s graph attributes read (at any depth) and do not
/// define themselves, in first-read order: values of the enclosing scope.
pub(crate) fn outer_refs(node: &NodeProto) -> Vec<String> {
    let mut found = Vec::new();
    for a in &node.attribute {
        for g in a.g.iter().chain(&a.graphs) {
            for name in graph_refs(g) {
                if !found.contains(&name) {
                    found.push(name);
                }
            }
        }
    }
    found
}

/// The names `g` reads from outside itself.
fn graph_refs(g: &GraphProto) -> Vec<String> {
    let mut defined: HashSet<&str> = g.input.iter().map(|v| v.name()).collect();
    defined.extend(g.initializer.iter().map(|t| t.name()));
    let mut reads = Vec::new();
    for node in &g.node {
        for name in node.input.iter().cloned().chain(outer_refs(node)) {
            if !name.is_empty() && !defined.contains(name.as_str()) && !reads.contains(&name) {
                reads.push(name);
            }
        }
        defined.extend(node.output.iter().map(String::as_str));
    }
    reads
}

/// The enclosing graph's values the node's subgraphs read, by name: the
/// last `c.attrs.outer.len()` of its inputs.
pub(super) fn outer_values<'g>(
    c: &Ctx<'_, 'g>,
    ins: &[Option<Var<'g>>],
) -> Result<HashMap<String, Var<'g>>> {
    let names = &c.attrs.outer;
    let first = ins
        .len()
        .checked_sub(names.len())
        .ok_or_else(|| c.error("fewer inputs than the values its subgraphs read"))?;
    names
        .iter()
        .zip(&ins[first..])
        .map(|(n, v)| {
            v.clone()
                .map(|v| (n.clone(), v))
                .ok_or_else(|| c.error(format!("the value `{n}` a subgraph reads is missing")))
        })
        .collect()
}

/// Runs `g` on `inputs` (one per graph input, in order), reading the
/// enclosing graph's values from `outer`, and gives its outputs.
pub(super) fn run<'g>(
    c: &Ctx<'_, 'g>,
    g: &GraphProto,
    inputs: &[Var<'g>],
    outer: &HashMap<String, Var<'g>>,
) -> Result<Vec<Var<'g>>> {
    if g.input.len() != inputs.len() {
        return Err(c.error(format!(
            "subgraph {:?} reads {} inputs, the op gives it {}",
            g.name(),
            g.input.len(),
            inputs.len()
        )));
    }
    let mut values: HashMap<&str, Var<'g>> =
        outer.iter().map(|(n, v)| (n.as_str(), v.clone())).collect();
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
        let mut attrs = Attrs::decode(label.clone(), &node.attribute)?;
        check(&attrs, c.opset)
            .map_err(|why| c.error(format!("{label}: {why} is not supported")))?;
        attrs.outer = outer_refs(node);
        let ins =
            node.input
                .iter()
                .chain(&attrs.outer)
                .map(|n| match n.as_str() {
                    "" => Ok(None),
                    n => values.get(n).cloned().map(Some).ok_or_else(|| {
                        c.error(format!("{label} reads `{n}`, which nothing defines"))
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
