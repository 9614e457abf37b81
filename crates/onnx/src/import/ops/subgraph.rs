//! A graph attribute run on the node's graph: its inputs bound to `Var`s,
//! its initializers as constants, each node a [`Step`] like the model's
//! own, so what the subgraph computes differentiates like the rest. A
//! value the subgraph reads but does not define is the enclosing graph's:
//! the loader gives the node those values after its own inputs
//! ([`outer_refs`], `Attrs::outer`), so they are computed first and kept
//! alive like any input.
//!
//! The walks over nested graphs use an explicit stack; nesting deeper
//! than [`MAX_DEPTH`] is refused at load, before anything copies or
//! checks a subgraph, which bounds the recursion of checking and running
//! a subgraph's subgraphs.

use std::collections::{HashMap, HashSet};

use super::{lookup, Attrs, Ctx};
use crate::import::Step;
use crate::proto::type_proto::Value as TypeValue;
use crate::proto::{GraphProto, NodeProto, ValueInfoProto};
use crate::tensor::{dtype_of, from_proto};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

/// How deep subgraphs may nest (a loop in a branch in a loop is 3).
pub(crate) const MAX_DEPTH: usize = 64;

/// Whether the importer runs every node of `g` with its settings:
/// `Err(reason)` names the first one it does not, or a value of a type
/// other than tensor. (The loader has refused nesting deeper than
/// [`MAX_DEPTH`] before.)
pub(super) fn check(g: &GraphProto, opset: i64) -> std::result::Result<(), String> {
    for v in g.input.iter().chain(&g.output) {
        if let Some(kind) = non_tensor(v) {
            return Err(format!(
                "subgraph {:?}: the {kind}-typed value `{}`",
                g.name(),
                v.name()
            ));
        }
    }
    for (i, node) in g.node.iter().enumerate() {
        let op = node.op_type();
        let domain = node.domain();
        if !(domain.is_empty() || domain == "ai.onnx") {
            return Err(format!("a subgraph node of domain {domain:?} ({op})"));
        }
        let Some((_, check)) = lookup(op) else {
            let why = super::refused(op).map_or(String::new(), |w| format!("; {w}"));
            return Err(format!("op {op} (in subgraph {:?}{why})", g.name()));
        };
        let attrs =
            Attrs::decode(label("", g, i, op), &node.attribute).map_err(|e| e.to_string())?;
        check(&attrs, opset).map_err(|why| format!("{why} (in subgraph {:?})", g.name()))?;
    }
    Ok(())
}

/// The kind of a value declared other than a tensor (`sequence`,
/// `optional`, `map`, `sparse tensor`), which the importer does not hold.
pub(crate) fn non_tensor(v: &ValueInfoProto) -> Option<&'static str> {
    match v.r#type.as_ref().and_then(|t| t.value.as_ref())? {
        TypeValue::TensorType(_) => None,
        TypeValue::SequenceType(_) => Some("sequence"),
        TypeValue::OptionalType(_) => Some("optional"),
        TypeValue::MapType(_) => Some("map"),
        TypeValue::SparseTensorType(_) => Some("sparse tensor"),
        TypeValue::OpaqueType(_) => Some("opaque"),
    }
}

fn label(parent: &str, g: &GraphProto, i: usize, op: &str) -> String {
    let at = format!("subgraph {:?} node {i} ({op})", g.name());
    if parent.is_empty() {
        at
    } else {
        format!("{parent} > {at}")
    }
}

/// The names `node`'s graph attributes read (at any depth) and do not
/// define themselves, in first-read order: values of the enclosing scope.
pub(crate) fn outer_refs(node: &NodeProto) -> Vec<String> {
    Tree::of(graphs_of(node)).free_of_roots()
}

/// How deep `node`'s subgraphs nest (0: it holds none).
pub(crate) fn nesting_depth(node: &NodeProto) -> usize {
    Tree::of(graphs_of(node)).depth()
}

/// The graphs a node holds as attributes.
fn graphs_of(node: &NodeProto) -> impl Iterator<Item = &GraphProto> {
    node.attribute
        .iter()
        .flat_map(|a| a.g.iter().chain(&a.graphs))
}

/// Every graph under some root graphs, each before the graphs its nodes
/// hold (found with an explicit stack: no recursion however deep).
struct Tree<'a> {
    /// Each graph and its depth (a root is 1).
    graphs: Vec<(&'a GraphProto, usize)>,
    /// For each graph, its nodes' graphs: (node index, entry in `graphs`).
    children: Vec<Vec<(usize, usize)>>,
    roots: usize,
}

impl<'a> Tree<'a> {
    fn of(roots: impl IntoIterator<Item = &'a GraphProto>) -> Tree<'a> {
        let graphs: Vec<_> = roots.into_iter().map(|g| (g, 1)).collect();
        let roots = graphs.len();
        let mut t = Tree {
            children: vec![Vec::new(); roots],
            graphs,
            roots,
        };
        let mut stack: Vec<usize> = (0..roots).collect();
        while let Some(e) = stack.pop() {
            let (g, depth) = t.graphs[e];
            for (n, node) in g.node.iter().enumerate() {
                for sub in graphs_of(node) {
                    let child = t.graphs.len();
                    t.graphs.push((sub, depth + 1));
                    t.children.push(Vec::new());
                    t.children[e].push((n, child));
                    stack.push(child);
                }
            }
        }
        t
    }

    fn depth(&self) -> usize {
        self.graphs.iter().map(|&(_, d)| d).max().unwrap_or(0)
    }

    /// What the roots read from outside themselves, in first-read order.
    fn free_of_roots(&self) -> Vec<String> {
        // A child's entry comes after its parent's: children first.
        let mut free: Vec<Vec<String>> = vec![Vec::new(); self.graphs.len()];
        for e in (0..self.graphs.len()).rev() {
            let g = self.graphs[e].0;
            let mut defined: HashSet<&str> = g.input.iter().map(|v| v.name()).collect();
            defined.extend(g.initializer.iter().map(|t| t.name()));
            defined.extend(
                g.node
                    .iter()
                    .flat_map(|n| n.output.iter().map(String::as_str)),
            );
            let mut reads = Reads::default();
            let mut kids = self.children[e].iter().peekable();
            for (n, node) in g.node.iter().enumerate() {
                for name in &node.input {
                    reads.add(name, &defined);
                }
                while let Some(&&(_, child)) = kids.peek().filter(|(k, _)| *k == n) {
                    for name in &free[child] {
                        reads.add(name, &defined);
                    }
                    kids.next();
                }
            }
            // An output may be an enclosing graph's value, passed through.
            for o in &g.output {
                reads.add(o.name(), &defined);
            }
            free[e] = reads.names;
        }
        let mut all = Reads::default();
        for names in &free[..self.roots] {
            for name in names {
                all.add(name, &HashSet::new());
            }
        }
        all.names
    }
}

/// Names read from outside, once each, in order.
#[derive(Default)]
struct Reads {
    names: Vec<String>,
    seen: HashSet<String>,
}

impl Reads {
    fn add(&mut self, name: &str, defined: &HashSet<&str>) {
        if !name.is_empty() && !defined.contains(name) && self.seen.insert(name.to_string()) {
            self.names.push(name.to_string());
        }
    }
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

/// The node's own inputs: all but the enclosing graph's values after them.
pub(super) fn own_inputs<'v, 'g>(
    c: &Ctx<'_, 'g>,
    ins: &'v [Option<Var<'g>>],
) -> &'v [Option<Var<'g>>] {
    &ins[..ins.len().saturating_sub(c.attrs.outer.len())]
}

/// A subgraph read once and run any number of times (a loop's body):
/// its nodes as steps over numbered value slots.
pub(super) struct Body<'p> {
    graph: &'p GraphProto,
    slots: usize,
    inputs: Vec<usize>,
    outer: Vec<(String, usize)>,
    constants: Vec<(usize, Tensor)>,
    steps: Vec<Step>,
    outputs: Vec<usize>,
}

impl<'p> Body<'p> {
    /// Reads `g`'s nodes, settings and initializers.
    pub(super) fn prepare(c: &Ctx<'_, '_>, g: &'p GraphProto) -> Result<Body<'p>> {
        let mut names: Vec<&str> = Vec::new();
        let mut define = |name: &'p str| {
            names.push(name);
            names.len() - 1
        };
        let inputs: Vec<usize> = g.input.iter().map(|v| define(v.name())).collect();
        let mut constants = Vec::with_capacity(g.initializer.len());
        for t in &g.initializer {
            constants.push((define(t.name()), from_proto(t)?));
        }
        // Slots of the nodes' outputs first, so a read of one names its slot.
        let outs_of: Vec<Vec<usize>> = g
            .node
            .iter()
            .map(|node| node.output.iter().map(|n| define(n.as_str())).collect())
            .collect();
        let free = Tree::of([g]).free_of_roots();
        let base = names.len();
        let outer: Vec<(String, usize)> = free
            .into_iter()
            .enumerate()
            .map(|(k, n)| (n, base + k))
            .collect();
        let slots = names.len() + outer.len();
        // Later definitions win, as the last writer of a name does.
        let mut all: HashMap<&str, usize> = HashMap::new();
        for (n, s) in &outer {
            all.insert(n.as_str(), *s);
        }
        for (s, n) in names.iter().enumerate() {
            if !n.is_empty() {
                all.insert(n, s);
            }
        }
        let mut declared = declared_types(g);
        let mut steps = Vec::with_capacity(g.node.len());
        for ((i, node), outputs) in g.node.iter().enumerate().zip(outs_of) {
            let op = node.op_type();
            let label = label(&c.attrs.label, g, i, op);
            let (convert, check) = lookup(op)
                .filter(|_| node.domain().is_empty() || node.domain() == "ai.onnx")
                .ok_or_else(|| c.error(format!("{label}: the op is not supported")))?;
            let mut attrs = Attrs::decode(label.clone(), &node.attribute)?;
            check(&attrs, c.opset)
                .map_err(|why| c.error(format!("{label}: {why} is not supported")))?;
            attrs.outer = outer_refs(node);
            let inputs = node
                .input
                .iter()
                .chain(&attrs.outer)
                .map(|n| match n.as_str() {
                    "" => Ok(None),
                    n => all.get(n).copied().map(Some).ok_or_else(|| {
                        c.error(format!("{label} reads `{n}`, which nothing defines"))
                    }),
                })
                .collect::<Result<Vec<_>>>()?;
            let input_types: Vec<Option<i32>> = node
                .input
                .iter()
                .map(|n| declared.get(n.as_str()).copied())
                .collect();
            if op == "Cast"
                && let Ok(to) = attrs.int("to", 0)
            {
                for o in &node.output {
                    declared.insert(o.as_str(), to as i32);
                }
            }
            steps.push(Step {
                convert,
                attrs,
                op_type: op.to_string(),
                inputs,
                outputs,
                input_types,
            });
        }
        let outputs = g
            .output
            .iter()
            .map(|o| {
                all.get(o.name()).copied().ok_or_else(|| {
                    c.error(format!(
                        "subgraph {:?} never defines its output `{}`",
                        g.name(),
                        o.name()
                    ))
                })
            })
            .collect::<Result<_>>()?;
        Ok(Body {
            graph: g,
            slots,
            inputs,
            outer,
            constants,
            steps,
            outputs,
        })
    }

    /// How many inputs and outputs the subgraph declares.
    pub(super) fn arity(&self) -> (usize, usize) {
        (self.inputs.len(), self.outputs.len())
    }

    /// The element type and sizes output `i` declares (unknown sizes as
    /// `None`), for outputs made of no steps at all.
    pub(super) fn declared_output(&self, i: usize) -> (Option<DType>, Option<Vec<Option<usize>>>) {
        let Some(TypeValue::TensorType(t)) = self
            .graph
            .output
            .get(i)
            .and_then(|o| o.r#type.as_ref())
            .and_then(|t| t.value.as_ref())
        else {
            return (None, None);
        };
        let dtype = t.elem_type.and_then(dtype_of);
        let dims = t.shape.as_ref().map(|s| {
            s.dim
                .iter()
                .map(|d| match d.value {
                    Some(crate::proto::tensor_shape_proto::dimension::Value::DimValue(n))
                        if n >= 0 =>
                    {
                        Some(n as usize)
                    }
                    _ => None,
                })
                .collect()
        });
        (dtype, dims)
    }

    /// Runs the subgraph on `inputs` (one per graph input, in order),
    /// reading the enclosing graph's values from `outer`; its outputs.
    pub(super) fn run<'g>(
        &self,
        c: &Ctx<'_, 'g>,
        inputs: &[Var<'g>],
        outer: &HashMap<String, Var<'g>>,
    ) -> Result<Vec<Var<'g>>> {
        let g = self.graph;
        if self.inputs.len() != inputs.len() {
            return Err(c.error(format!(
                "subgraph {:?} reads {} inputs, the op gives it {}",
                g.name(),
                self.inputs.len(),
                inputs.len()
            )));
        }
        let mut values: Vec<Option<Var<'g>>> = vec![None; self.slots];
        for (name, slot) in &self.outer {
            let v = outer.get(name).ok_or_else(|| {
                c.error(format!(
                    "subgraph {:?} reads `{name}`, which the enclosing graph does not give",
                    g.name()
                ))
            })?;
            values[*slot] = Some(v.clone());
        }
        for (&slot, v) in self.inputs.iter().zip(inputs) {
            values[slot] = Some(v.clone());
        }
        for (slot, t) in &self.constants {
            values[*slot] = Some(c.constant(t.clone()));
        }
        for step in &self.steps {
            let mut args = Vec::with_capacity(step.inputs.len());
            for (k, s) in step.inputs.iter().enumerate() {
                args.push(match s {
                    None => None,
                    Some(s) => Some(values[*s].clone().ok_or_else(|| {
                        let names = step.attrs.label.as_str();
                        c.error(format!(
                            "{names} reads its input {k} before a node defines it"
                        ))
                    })?),
                });
            }
            let outs = step.run(c.graph, c.opset, &args).map_err(|e| match e {
                Error::OnnxInvalid { .. } | Error::OnnxUnsupported { .. } => e,
                other => c.error(other),
            })?;
            for (slot, v) in step.outputs.iter().zip(outs) {
                values[*slot] = Some(v);
            }
        }
        self.outputs
            .iter()
            .zip(&g.output)
            .map(|(s, o)| {
                values[*s].clone().ok_or_else(|| {
                    c.error(format!(
                        "subgraph {:?} never computes its output `{}`",
                        g.name(),
                        o.name()
                    ))
                })
            })
            .collect()
    }
}

/// The element type codes `g` declares for its values.
fn declared_types(g: &GraphProto) -> HashMap<&str, i32> {
    let mut types = HashMap::new();
    for v in g.input.iter().chain(&g.output).chain(&g.value_info) {
        if let Some(TypeValue::TensorType(t)) = v.r#type.as_ref().and_then(|t| t.value.as_ref())
            && let Some(code) = t.elem_type.filter(|&c| c != 0)
        {
            types.insert(v.name(), code);
        }
    }
    for t in &g.initializer {
        types.insert(t.name(), t.data_type());
    }
    types
}

/// Runs `g` once on `inputs` (one per graph input, in order), reading the
/// enclosing graph's values from `outer`, and gives its outputs.
pub(super) fn run<'g>(
    c: &Ctx<'_, 'g>,
    g: &GraphProto,
    inputs: &[Var<'g>],
    outer: &HashMap<String, Var<'g>>,
) -> Result<Vec<Var<'g>>> {
    Body::prepare(c, g)?.run(c, inputs, outer)
}
