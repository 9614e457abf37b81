//! One self-contained HTML page for a graph: today's SVG picture, and
//! buttons (and arrow keys) that step through the backward sweep node by
//! node. The steps come from [`Var::backward_recorded`]: the engine's own
//! store, watched as the sweep runs; the page's script only shows them.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::model::{Kind, Picture};
use super::{label, svg, VizOptions};
use retrograd_engine::autograd::{StepKind, SweepRecord, SweepStep};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::{Graph, GraphState, Var, LEAF_CONSTANT, LEAF_VARIABLE};

const TEMPLATE: &str = include_str!("page/page.html");
const STYLE: &str = include_str!("page/page.css");
const SCRIPT: &str = include_str!("page/page.js");

/// The page for `graph` as `options` draw it; with a root, its backward
/// sweep is run (recorded) to fill the steps.
pub(crate) fn page(graph: &Graph, options: &VizOptions<'_>) -> Result<String> {
    // The page shows gradients step by step: the final ones stay off the labels.
    let mut drawn = options.clone();
    drawn.gradients = None;
    let mut picture = Picture::build(graph, &drawn)?;
    let record = match root_var(graph, options) {
        Some(root) => Some(root.backward_recorded(options.max_values)?.1),
        None => None,
    };
    let badges = badges(&graph.state(), &picture, record.as_ref());
    // Each node that will show a gradient gets a last label line for it, so
    // the layout makes room; the script writes the gradient there.
    for &(unit, _) in &badges {
        picture.nodes[unit].lines.push(GRAD_LINE.to_string());
    }
    let svg_text = svg::render(&picture, options.renderer)?;
    let data = PageData::new(graph, &picture, record.as_ref(), &badges, options).to_json();
    let title = options
        .title
        .as_deref()
        .unwrap_or("retrograd: the backward sweep");
    Ok(fill(TEMPLATE, title, &svg_text, &data))
}

/// The label line that holds a node's gradient: `grad` and room for about
/// ten characters (no-break spaces, which neither renderer trims).
const GRAD_LINE: &str = "grad\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}\u{a0}";

/// The value each picture node stands for: an op's output (a group's
/// last), a leaf; none for summaries.
fn unit_values(st: &GraphState, picture: &Picture) -> Vec<Option<usize>> {
    let mut last_node = vec![None; picture.nodes.len()];
    for (i, &unit) in picture.node_units.iter().enumerate() {
        last_node[unit] = Some(i);
    }
    let mut leaf_of = vec![None; picture.nodes.len()];
    for (&id, &unit) in &picture.leaf_units {
        leaf_of[unit] = Some(id as usize);
    }
    picture
        .nodes
        .iter()
        .enumerate()
        .map(|(unit, node)| match node.kind {
            Kind::Op | Kind::Group => last_node[unit].map(|i| st.nodes()[i].output as usize),
            Kind::Variable | Kind::Constant => leaf_of[unit],
            Kind::LeafSummary | Kind::Elided => None,
        })
        .collect()
}

/// The picture nodes that show a gradient, with the value whose gradient
/// they show: those the sweep sends a gradient to.
fn badges(st: &GraphState, picture: &Picture, record: Option<&SweepRecord>) -> Vec<(usize, usize)> {
    let Some(record) = record else {
        return Vec::new();
    };
    let touched: std::collections::HashSet<usize> = record
        .steps
        .iter()
        .flat_map(|s| s.contributions.iter().map(|c| c.value))
        .collect();
    unit_values(st, picture)
        .into_iter()
        .enumerate()
        .filter_map(|(unit, v)| v.filter(|v| touched.contains(v)).map(|v| (unit, v)))
        .collect()
}

/// The root of the options as a handle on `graph` (`Picture::build` has
/// checked it belongs there).
fn root_var<'g>(graph: &'g Graph, options: &VizOptions<'_>) -> Option<Var<'g>> {
    let id = options.root.as_ref()?.value_id? as u32;
    graph.value_handle(id)
}

/// The template with its five holes filled; the SVG loses its XML prolog
/// (Graphviz also writes a doctype and comments before `<svg`).
fn fill(template: &str, title: &str, svg_text: &str, data: &str) -> String {
    let svg_body = svg_text.find("<svg").map_or(svg_text, |at| &svg_text[at..]);
    // `</script>` inside the JSON would end the script element early.
    let data = data.replace("</", "<\\/");
    let mut out = String::with_capacity(template.len() + svg_body.len() + data.len() + 16_384);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let end = start + rest[start..].find("}}").expect("a closed hole") + 2;
        match &rest[start..end] {
            "{{TITLE}}" => out.push_str(&escape_html(title)),
            "{{STYLE}}" => out.push_str(STYLE),
            "{{SVG}}" => out.push_str(svg_body),
            "{{DATA}}" => out.push_str(&data),
            "{{SCRIPT}}" => out.push_str(SCRIPT),
            other => unreachable!("unknown hole {other} in page.html"),
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// What the script needs, gathered from the graph, the picture and the record.
struct PageData<'a> {
    graph: &'a Graph,
    picture: &'a Picture,
    record: Option<&'a SweepRecord>,
    badges: &'a [(usize, usize)],
    max_values: usize,
    /// Op nodes that `backward_order(root)` visits (all, without a root).
    live: Vec<bool>,
    root_label: String,
}

impl<'a> PageData<'a> {
    fn new(
        graph: &'a Graph,
        picture: &'a Picture,
        record: Option<&'a SweepRecord>,
        badges: &'a [(usize, usize)],
        options: &VizOptions<'_>,
    ) -> Self {
        let st = graph.state();
        let n = st.nodes().len();
        let (live, root_label) = match record {
            Some(r) => {
                let mut live = vec![false; n];
                r.order.iter().for_each(|&i| live[i] = true);
                (live, graph.label_of(&st, r.root as u32))
            }
            None => (vec![true; n], String::new()),
        };
        PageData {
            graph,
            picture,
            record,
            badges,
            max_values: options.max_values,
            live,
            root_label,
        }
    }

    fn to_json(&self) -> String {
        let st = self.graph.state();
        let values = self.values(&st);
        let data = json!({
            "root": self.record.map(|r| json!({"value": r.root, "label": self.root_label})),
            "order": self.record.map(|r| r.order.clone()),
            "units": self.units(&st),
            "nodes": self.nodes(&st),
            "values": values,
            "badges": self.badges.iter().map(|&(unit, value)| json!({
                "unit": self.picture.nodes[unit].id,
                "value": value,
            })).collect::<Vec<_>>(),
            "edges": self.picture.edges.iter().enumerate().map(|(k, e)| json!({
                "id": super::dot::edge_id(k),
                "node": e.node,
                "input": e.input,
            })).collect::<Vec<_>>(),
            "steps": self.record.map(|r| self.steps(&st, r)).unwrap_or_default(),
        });
        data.to_string()
    }

    /// One entry per picture node: what hovering over it tells.
    fn units(&self, st: &GraphState) -> Value {
        let mut units = serde_json::Map::new();
        let values = unit_values(st, self.picture);
        for (node, value) in self.picture.nodes.iter().zip(values) {
            // Not the gradient line, nor the dead note: the page says why in full.
            let lines: Vec<&String> = node
                .lines
                .iter()
                .filter(|l| *l != GRAD_LINE && !l.starts_with("not in backward_order("))
                .collect();
            let kind = match node.kind {
                Kind::Op => "op",
                Kind::Variable => "variable",
                Kind::Constant => "constant",
                Kind::Group => "group",
                Kind::LeafSummary => "leaves",
                Kind::Elided => "elided",
            };
            units.insert(
                node.id.clone(),
                json!({"kind": kind, "lines": lines, "dead": node.dead, "value": value}),
            );
        }
        Value::Object(units)
    }

    fn nodes(&self, st: &GraphState) -> Vec<Value> {
        (0..st.nodes().len())
            .map(|i| {
                let rec = st.nodes()[i];
                let op = st.op_name(rec.op);
                let args: Vec<String> = st
                    .inputs_of(i)
                    .iter()
                    .map(|&id| self.graph.label_of(st, id))
                    .collect();
                let out = self.graph.label_of(st, rec.output);
                let call = format!("{op}({})", args.join(", "));
                let text = if st.name_of(rec.output).is_some() {
                    format!("{out} = {call}  (nodes[{i}])")
                } else {
                    format!("nodes[{i}] = {call}")
                };
                json!({
                    "op": op,
                    "text": text,
                    "output": rec.output,
                    "inputs": st.inputs_of(i),
                    "unit": self.picture.nodes[self.picture.node_units[i]].id,
                    "live": self.live[i],
                })
            })
            .collect()
    }

    /// Every value: its label, forward value, picture node and why it gets
    /// no gradient, if it gets none.
    fn values(&self, st: &GraphState) -> Vec<Value> {
        let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); st.values().len()];
        for i in 0..st.nodes().len() {
            for &id in st.inputs_of(i) {
                consumers[id as usize].push(i);
            }
        }
        let badge_of: HashMap<usize, usize> = self.badges.iter().map(|&(u, v)| (v, u)).collect();
        (0..st.values().len())
            .map(|id| {
                let t = &st.values()[id];
                let summary = t.summary(self.max_values);
                let producer = st.producers()[id];
                let kind = match producer {
                    LEAF_VARIABLE => "variable",
                    LEAF_CONSTANT => "constant",
                    _ => "op",
                };
                json!({
                    "label": self.graph.label_of(st, id as u32),
                    "kind": kind,
                    "node": (producer < LEAF_CONSTANT).then_some(producer),
                    "value": label::summary_short(&summary),
                    "long": label::summary_long(&summary),
                    "unit": badge_of.get(&id).map(|&u| self.picture.nodes[u].id.clone()),
                    // Rows of the gradients table: op outputs and drawn leaves.
                    "listed": producer < LEAF_CONSTANT
                        || self.picture.leaf_units.contains_key(&(id as u32)),
                    "note": self.note(producer, &consumers[id]),
                })
            })
            .collect()
    }

    /// Why value `id` gets no gradient from this sweep, if it gets none.
    fn note(&self, producer: u32, users: &[usize]) -> Option<String> {
        let root = &self.root_label;
        if producer == LEAF_CONSTANT {
            return Some("a constant: it requires no grad, so the sweep sends it none".into());
        }
        self.record?;
        if producer < LEAF_CONSTANT {
            let i = producer as usize;
            return (!self.live[i]).then(|| {
                format!(
                    "not in backward_order({root}): nodes[{i}]'s output does not lead to {root}, \
                     so the sweep never visits it"
                )
            });
        }
        (!users.iter().any(|&u| self.live[u]))
            .then(|| format!("feeds no node of backward_order({root}): no gradient reaches it"))
    }

    fn steps(&self, st: &GraphState, record: &SweepRecord) -> Vec<Value> {
        let mut totals: HashMap<usize, String> = HashMap::new();
        record
            .steps
            .iter()
            .map(|step| self.step(st, step, &mut totals))
            .collect()
    }

    fn step(
        &self,
        st: &GraphState,
        step: &SweepStep,
        totals: &mut HashMap<usize, String>,
    ) -> Value {
        let (kind, node, value) = match step.kind {
            StepKind::Seed => ("seed", None, None),
            StepKind::Node(i) => ("node", Some(i), Some(st.nodes()[i].output as usize)),
            StepKind::LeafHooks(v) => ("hooks", None, Some(v)),
        };
        let contributions: Vec<Value> = step
            .contributions
            .iter()
            .map(|c| {
                let total = label::summary_short(&c.total);
                let previous = totals.insert(c.value, total.clone());
                json!({
                    "value": c.value,
                    "input": c.input,
                    "tiny": label::summary_tiny(&c.gradient),
                    "total_tiny": label::summary_tiny(&c.total),
                    "gradient": label::summary_short(&c.gradient),
                    "gradient_long": label::summary_long(&c.gradient),
                    "total": total,
                    "total_long": label::summary_long(&c.total),
                    "previous": if c.accumulated { previous } else { None },
                })
            })
            .collect();
        json!({
            "kind": kind,
            "node": node,
            "value": value,
            "grad_output": step.grad_output.as_ref().map(label::summary_short),
            "released": step.released,
            "contributions": contributions,
        })
    }
}
