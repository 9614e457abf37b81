//! What a picture shows, independent of how it is written: nodes with label
//! lines and a look, edges in the direction of data flow.

use std::collections::HashMap;

use super::collapse::{self, Group};
use super::{label, Direction, VizOptions};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::order::ancestors_of;
use retrograd_engine::core::graph::{Graph, GraphState, LEAF_CONSTANT, LEAF_VARIABLE};

/// What a picture node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// One recorded op.
    Op,
    /// A leaf that requires grad.
    Variable,
    /// A frozen leaf (a constant, or a constant-folded value).
    Constant,
    /// A run of repeated ops drawn as one node.
    Group,
    /// Several leaves feeding one group, drawn as one node.
    LeafSummary,
    /// The op nodes left out by `max_nodes`.
    Elided,
}

impl Kind {
    /// The DOT `class` words for this kind.
    pub(crate) fn class(self) -> &'static str {
        match self {
            Kind::Op => "op",
            Kind::Variable => "leaf variable",
            Kind::Constant => "leaf constant",
            Kind::Group => "op group",
            Kind::LeafSummary => "leaf summary",
            Kind::Elided => "elided",
        }
    }
}

/// Outline shape of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    Box,
    Ellipse,
}

/// How a node looks, shared by the DOT writer and the built-in SVG renderer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Look {
    pub(crate) shape: Shape,
    pub(crate) rounded: bool,
    pub(crate) fill: &'static str,
    pub(crate) line: &'static str,
    pub(crate) text: &'static str,
    pub(crate) dashed: bool,
    pub(crate) pen_width: f64,
    pub(crate) double: bool,
}

pub(crate) const LIVE_EDGE: &str = "#404040";
pub(crate) const DEAD_EDGE: &str = "#c4c4c4";
/// The outline and label of a cluster (a compiled step's fused group).
pub(crate) const CLUSTER_LINE: &str = "#2e6da4";
pub(crate) const DEAD_LINE: &str = "#b0b0b0";
const DEAD_TEXT: &str = "#9a9a9a";
const DEAD_FILL: &str = "#f7f7f7";

#[derive(Clone, Debug)]
pub(crate) struct PicNode {
    /// The DOT node id: `n{i}` (op node i), `v{id}` (leaf value id), `g{k}`, `s{k}`, `elided`.
    pub(crate) id: String,
    pub(crate) kind: Kind,
    pub(crate) lines: Vec<String>,
    /// Outside `backward_order(root)` (or feeding nothing in it).
    pub(crate) dead: bool,
    pub(crate) root: bool,
}

impl PicNode {
    pub(crate) fn look(&self) -> Look {
        let mut look = match self.kind {
            Kind::Op => Look::new(Shape::Box, "#fff3c4", "#7a5c00"),
            Kind::Group => Look {
                double: true,
                ..Look::new(Shape::Box, "#ffe3a3", "#7a5c00")
            },
            Kind::Variable => Look::new(Shape::Ellipse, "#dbeafe", "#1e4e8c"),
            Kind::LeafSummary => Look {
                double: true,
                ..Look::new(Shape::Ellipse, "#dbeafe", "#1e4e8c")
            },
            Kind::Constant => Look {
                dashed: true,
                ..Look::new(Shape::Ellipse, "#ececec", "#555555")
            },
            Kind::Elided => Look {
                dashed: true,
                ..Look::new(Shape::Box, "#ffffff", "#777777")
            },
        };
        look.rounded = matches!(self.kind, Kind::Op | Kind::Group);
        if self.dead {
            look.fill = DEAD_FILL;
            look.line = DEAD_LINE;
            look.text = DEAD_TEXT;
            look.dashed = true;
        }
        if self.root {
            look.pen_width = 2.5;
        }
        look
    }

    /// The DOT `class` attribute: the kind, then `dead` and `root` when they apply.
    pub(crate) fn class(&self) -> String {
        let mut class = self.kind.class().to_string();
        if self.dead {
            class.push_str(" dead");
        }
        if self.root {
            class.push_str(" root");
        }
        class
    }
}

impl Look {
    fn new(shape: Shape, fill: &'static str, line: &'static str) -> Self {
        Look {
            shape,
            rounded: false,
            fill,
            line,
            text: "#1a1a1a",
            dashed: false,
            pen_width: 1.0,
            double: false,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct PicEdge {
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) dead: bool,
    /// The op node and input position the edge was drawn for (the first
    /// one, where a collapsed group merges several).
    pub(crate) node: usize,
    pub(crate) input: usize,
}

/// A graph ready to be written: nodes and edges, both in a stable order.
#[derive(Clone, Debug)]
pub(crate) struct Picture {
    pub(crate) nodes: Vec<PicNode>,
    pub(crate) edges: Vec<PicEdge>,
    pub(crate) direction: Direction,
    pub(crate) title: Option<String>,
    /// Labelled groups of picture nodes (indices into `nodes`), disjoint.
    pub(crate) clusters: Vec<(String, Vec<usize>)>,
    /// The picture node each op node is drawn in (itself, its group, or the
    /// elided node).
    pub(crate) node_units: Vec<usize>,
    /// The picture node of each drawn leaf, by value id.
    pub(crate) leaf_units: HashMap<u32, usize>,
}

/// Where an op node went in the picture.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Placement {
    Drawn(usize),
    Elided,
}

impl Picture {
    pub(crate) fn build(graph: &Graph, options: &VizOptions<'_>) -> Result<Picture> {
        if let Some(root) = &options.root
            && root.graph_id != graph.id()
        {
            return Err(Error::ForeignVariable {
                op: "viz: root".to_string(),
            });
        }
        if let Some(grads) = options.gradients
            && grads.graph_id() != graph.id()
        {
            return Err(Error::ForeignVariable {
                op: "viz: gradients".to_string(),
            });
        }
        let st = graph.state();
        Builder::new(graph, &st, options).build()
    }
}

struct Builder<'a> {
    graph: &'a Graph,
    st: &'a GraphState,
    options: &'a VizOptions<'a>,
    /// Per op node: inside `backward_order(root)`; all true without a root.
    live: Vec<bool>,
    root_value: Option<usize>,
    /// How the root is called in "not in backward_order(...)".
    root_label: String,
    nodes: Vec<PicNode>,
    edges: Vec<PicEdge>,
}

impl<'a> Builder<'a> {
    fn new(graph: &'a Graph, st: &'a GraphState, options: &'a VizOptions<'a>) -> Self {
        let n = st.nodes().len();
        let root_value = options.root.as_ref().and_then(|r| r.value_id);
        let (live, root_label) = match &options.root {
            None => (vec![true; n], String::new()),
            Some(_) => {
                let mut live = vec![false; n];
                let producer = root_value.map(|id| st.producers()[id]);
                if let Some(p) = producer.filter(|&p| p < LEAF_CONSTANT) {
                    for a in ancestors_of(st, p as usize) {
                        live[a as usize] = true;
                    }
                }
                let root_label = match root_value {
                    Some(id) => graph.label_of(st, id as u32),
                    None => "root".to_string(),
                };
                (live, root_label)
            }
        };
        Builder {
            graph,
            st,
            options,
            live,
            root_value,
            root_label,
            nodes: Vec::new(),
            edges: Vec::new(),
        }
    }

    fn build(mut self) -> Result<Picture> {
        let st = self.st;
        let n = st.nodes().len();
        let kept = self.kept_nodes();
        let groups = if self.options.collapse_repeated {
            collapse::find_groups(st, &kept, &self.live)
        } else {
            Vec::new()
        };

        // One picture node per kept op node or group; one for all elided nodes.
        let mut placement = vec![Placement::Elided; n];
        let mut group_of = vec![usize::MAX; n];
        for (g, group) in groups.iter().enumerate() {
            for &m in &group.members {
                group_of[m] = g;
            }
        }
        let mut group_unit = vec![usize::MAX; groups.len()];
        for i in 0..n {
            if !kept[i] {
                continue;
            }
            let g = group_of[i];
            if g == usize::MAX {
                placement[i] = Placement::Drawn(self.push_op(i));
            } else {
                if group_unit[g] == usize::MAX {
                    group_unit[g] = self.push_group(g, &groups[g]);
                }
                placement[i] = Placement::Drawn(group_unit[g]);
            }
        }
        let elided_count = kept.iter().filter(|k| !**k).count();
        let elided_unit = (elided_count > 0).then(|| self.push_elided(elided_count));

        // Leaves: those feeding a drawn node, and those feeding no node at all.
        let mut consumers: HashMap<u32, Vec<usize>> = HashMap::new();
        for i in 0..n {
            for &id in st.inputs_of(i) {
                if st.producers()[id as usize] >= LEAF_CONSTANT {
                    consumers.entry(id).or_default().push(i);
                }
            }
        }
        let mut leaf_unit: HashMap<u32, usize> = HashMap::new();
        let summaries = self.leaf_summaries(&consumers, &groups, &group_of, &kept);
        let mut summary_unit: HashMap<usize, usize> = HashMap::new();
        for id in 0..st.values().len() as u32 {
            if st.producers()[id as usize] < LEAF_CONSTANT {
                continue;
            }
            let users = consumers.get(&id).map(Vec::as_slice).unwrap_or(&[]);
            let drawn_users = users.iter().filter(|&&u| kept[u]).count();
            if !users.is_empty() && drawn_users == 0 {
                continue;
            }
            let dead = self.options.root.is_some() && !users.iter().any(|&u| self.live[u]);
            let unit = match summaries.get(&id) {
                Some(&g) => *summary_unit
                    .entry(g)
                    .or_insert_with(|| self.push_summary(g, &groups[g], &summaries, dead)),
                None => self.push_leaf(id, dead),
            };
            leaf_unit.insert(id, unit);
        }

        // Edges, producer to consumer, in consumer order.
        let mut seen = std::collections::HashSet::new();
        for i in 0..n {
            let Placement::Drawn(to) = placement[i] else {
                continue;
            };
            let collapsed = self.nodes[to].kind == Kind::Group;
            for (input, &id) in st.inputs_of(i).iter().enumerate() {
                let p = st.producers()[id as usize];
                let from = if p < LEAF_CONSTANT {
                    match placement[p as usize] {
                        Placement::Drawn(u) => u,
                        Placement::Elided => elided_unit.expect("an elided producer"),
                    }
                } else {
                    leaf_unit[&id]
                };
                let repeatable = !collapsed && self.nodes[from].kind != Kind::Elided;
                if from == to || (!repeatable && !seen.insert((from, to))) {
                    continue;
                }
                self.edges.push(PicEdge {
                    from,
                    to,
                    dead: self.nodes[to].dead,
                    node: i,
                    input,
                });
            }
        }
        let mut clustered = vec![false; self.nodes.len()];
        let clusters = self
            .options
            .clusters
            .iter()
            .map(|(label, members)| {
                let mut units = Vec::new();
                for &i in members {
                    if let Some(Placement::Drawn(u)) = placement.get(i)
                        && !std::mem::replace(&mut clustered[*u], true)
                    {
                        units.push(*u);
                    }
                }
                (label.clone(), units)
            })
            .filter(|(_, units)| !units.is_empty())
            .collect();
        let node_units = placement
            .iter()
            .map(|p| match p {
                Placement::Drawn(u) => *u,
                Placement::Elided => elided_unit.expect("an elided node"),
            })
            .collect();
        Ok(Picture {
            nodes: self.nodes,
            edges: self.edges,
            direction: self.options.direction,
            title: self.options.title.clone(),
            clusters,
            node_units,
            leaf_units: leaf_unit,
        })
    }

    /// Which op nodes are drawn: all, or `max_nodes` of them, the root's
    /// ancestors nearest the root first, then the newest others.
    fn kept_nodes(&self) -> Vec<bool> {
        let n = self.st.nodes().len();
        let Some(cap) = self.options.max_nodes.filter(|&c| c < n) else {
            return vec![true; n];
        };
        let mut kept = vec![false; n];
        let live_first = (0..n).rev().filter(|&i| self.live[i]);
        let then_dead = (0..n).rev().filter(|&i| !self.live[i]);
        for i in live_first.chain(then_dead).take(cap) {
            kept[i] = true;
        }
        kept
    }

    fn push(&mut self, id: String, kind: Kind, lines: Vec<String>, dead: bool) -> usize {
        self.nodes.push(PicNode {
            id,
            kind,
            lines,
            dead,
            root: false,
        });
        self.nodes.len() - 1
    }

    fn push_op(&mut self, i: usize) -> usize {
        let st = self.st;
        let op = st.op_name(st.nodes()[i].op);
        let header = match st.name_of(st.nodes()[i].output) {
            Some(name) => format!("{name} = {op}"),
            None => op.to_string(),
        };
        self.push_nodes(format!("n{i}"), Kind::Op, header, format!("#{i}"), i)
    }

    fn push_group(&mut self, g: usize, group: &Group) -> usize {
        let first = group.members[0];
        let last = *group.members.last().expect("a group has members");
        let header = format!("{} × {}", group.pattern, group.repeats);
        self.push_nodes(
            format!("g{g}"),
            Kind::Group,
            header,
            format!("#{first}..#{last}"),
            last,
        )
    }

    /// Pushes the unit `id` drawing the nodes `span` that end in node
    /// `last`: the header, the span with the last output's dtype and shape,
    /// its values, and whether it is dead or the root.
    fn push_nodes(
        &mut self,
        id: String,
        kind: Kind,
        header: String,
        span: String,
        last: usize,
    ) -> usize {
        let st = self.st;
        let out = st.nodes()[last].output;
        let mut lines = vec![
            header,
            format!(
                "{span}  {}",
                label::dtype_and_shape(&st.values()[out as usize])
            ),
        ];
        self.value_lines(out, &mut lines);
        let dead = !self.live[last];
        if dead {
            lines.push(format!("not in backward_order({})", self.root_label));
        }
        let unit = self.push(id, kind, lines, dead);
        self.nodes[unit].root = self.root_value == Some(out as usize);
        unit
    }

    fn push_elided(&mut self, count: usize) -> usize {
        let noun = if count == 1 { "node" } else { "nodes" };
        let lines = vec![
            format!("… {count} more op {noun}"),
            format!(
                "not drawn (max_nodes = {})",
                self.options.max_nodes.unwrap_or(0)
            ),
        ];
        self.push("elided".to_string(), Kind::Elided, lines, false)
    }

    fn push_leaf(&mut self, id: u32, dead: bool) -> usize {
        let st = self.st;
        let variable = st.producers()[id as usize] == LEAF_VARIABLE;
        let header = match (st.name_of(id), variable) {
            (Some(name), true) => name.to_string(),
            (Some(name), false) => format!("{name} (frozen)"),
            (None, true) => self.graph.label_of(st, id),
            (None, false) => "const".to_string(),
        };
        let mut lines = vec![header, label::dtype_and_shape(&st.values()[id as usize])];
        self.value_lines(id, &mut lines);
        let kind = if variable {
            Kind::Variable
        } else {
            Kind::Constant
        };
        let unit = self.push(format!("v{id}"), kind, lines, dead);
        self.nodes[unit].root = self.root_value == Some(id as usize);
        unit
    }

    fn push_summary(
        &mut self,
        g: usize,
        group: &Group,
        summaries: &HashMap<u32, usize>,
        dead: bool,
    ) -> usize {
        let st = self.st;
        let (mut variables, mut constants) = (0, 0);
        for (&id, _) in summaries.iter().filter(|&(_, &sg)| sg == g) {
            if st.producers()[id as usize] == LEAF_VARIABLE {
                variables += 1;
            } else {
                constants += 1;
            }
        }
        let mut parts = Vec::new();
        if variables > 0 {
            parts.push(format!("{variables} variables"));
        }
        if constants > 0 {
            parts.push(format!("{constants} constants"));
        }
        let lines = vec![
            parts.join(", "),
            format!("inputs of {} × {}", group.pattern, group.repeats),
        ];
        self.push(format!("s{g}"), Kind::LeafSummary, lines, dead)
    }

    /// Unnamed leaves drawn as one summary node: every consumer is in the
    /// same group, and that group has more than two such leaves.
    fn leaf_summaries(
        &self,
        consumers: &HashMap<u32, Vec<usize>>,
        groups: &[Group],
        group_of: &[usize],
        kept: &[bool],
    ) -> HashMap<u32, usize> {
        let mut by_group: HashMap<usize, Vec<u32>> = HashMap::new();
        for (&id, users) in consumers {
            let g = group_of[users[0]];
            // Named leaves are what a reader looks for: drawn, unless they
            // are the many parameters of a repeated block.
            if g == usize::MAX || (self.st.name_of(id).is_some() && !groups[g].block) {
                continue;
            }
            if users.iter().all(|&u| group_of[u] == g && kept[u]) {
                by_group.entry(g).or_default().push(id);
            }
        }
        by_group
            .into_iter()
            .filter(|(_, ids)| ids.len() > 2)
            .flat_map(|(g, ids)| ids.into_iter().map(move |id| (id, g)))
            .collect()
    }

    /// `= value` and `grad ...` lines for value `id`.
    fn value_lines(&self, id: u32, lines: &mut Vec<String>) {
        let t = &self.st.values()[id as usize];
        // An empty tensor can still have huge dimensions: printing `[[], [], ...]`
        // row by row would never end, so every dimension must be small too.
        let small = t.numel() <= self.options.max_values
            && t.shape()
                .iter()
                .all(|&d| d <= self.options.max_values.max(1));
        if small {
            lines.push(format!("= {}", label::tensor(t)));
        }
        if let Some(grads) = self.options.gradients
            && let Some(g) = grads.get_by_id(id as usize)
        {
            if small {
                lines.push(format!("grad {}", label::tensor(g)));
            } else {
                lines.push(format!("|grad| {}", label::number(label::l2_norm(g))));
            }
        }
    }
}
