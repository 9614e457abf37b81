//! Writing a [`Picture`] as Graphviz DOT.

use std::fmt::Write;

use super::model::{PicNode, Picture, Shape, CLUSTER_LINE, DEAD_EDGE, LIVE_EDGE};
use super::Direction;

const FONT: &str = "Helvetica,Arial,sans-serif";

pub(crate) fn write(picture: &Picture) -> String {
    let mut out = String::new();
    out.push_str("digraph retrograd {\n");
    let rankdir = match picture.direction {
        Direction::TopDown => "TB",
        Direction::LeftRight => "LR",
    };
    let _ = write!(
        out,
        "  graph [rankdir={rankdir}, fontname={}, nodesep=0.3, ranksep=0.35",
        quote(FONT)
    );
    if let Some(title) = &picture.title {
        let _ = write!(out, ", label={}, labelloc=t, fontsize=14", quote(title));
    }
    out.push_str("];\n");
    let _ = writeln!(
        out,
        "  node [fontname={}, fontsize=11, margin=\"0.12,0.05\"];",
        quote(FONT)
    );
    let _ = writeln!(out, "  edge [arrowsize=0.7];");
    for node in &picture.nodes {
        let _ = writeln!(out, "  {} [{}];", node.id, node_attributes(node));
    }
    for (k, (label, members)) in picture.clusters.iter().enumerate() {
        let _ = writeln!(
            out,
            "  subgraph cluster_{k} {{ label={}; style=\"dashed,rounded\"; color={}; fontcolor={}; class=\"cluster\";",
            quote(label),
            quote(CLUSTER_LINE),
            quote(CLUSTER_LINE)
        );
        for &m in members {
            let _ = writeln!(out, "    {};", picture.nodes[m].id);
        }
        out.push_str("  }\n");
    }
    for (k, edge) in picture.edges.iter().enumerate() {
        let color = if edge.dead { DEAD_EDGE } else { LIVE_EDGE };
        let _ = writeln!(
            out,
            "  {} -> {} [color={}, id={}];",
            picture.nodes[edge.from].id,
            picture.nodes[edge.to].id,
            quote(color),
            quote(&edge_id(k))
        );
    }
    out.push_str("}\n");
    out
}

/// The id of the `k`-th edge, in DOT and in both renderers' SVG.
pub(crate) fn edge_id(k: usize) -> String {
    format!("e{k}")
}

fn node_attributes(node: &PicNode) -> String {
    let look = node.look();
    let shape = match look.shape {
        Shape::Box => "box",
        Shape::Ellipse => "ellipse",
    };
    let mut style = vec!["filled"];
    if look.rounded {
        style.push("rounded");
    }
    if look.dashed {
        style.push("dashed");
    }
    let mut attrs = vec![
        format!("label={}", quote(&node.lines.join("\n"))),
        format!("shape={shape}"),
        format!("style={}", quote(&style.join(","))),
        format!("fillcolor={}", quote(look.fill)),
        format!("color={}", quote(look.line)),
        format!("fontcolor={}", quote(look.text)),
        format!("class={}", quote(&node.class())),
        format!("id={}", quote(&node.id)),
    ];
    if look.pen_width != 1.0 {
        attrs.push(format!("penwidth={}", look.pen_width));
    }
    if look.double {
        attrs.push("peripheries=2".to_string());
    }
    if node.dead {
        attrs.push(format!("tooltip={}", quote("not an ancestor of the root")));
    }
    attrs.join(", ")
}

/// A DOT double-quoted string: `"` and `\` escaped, line breaks as `\n`.
fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => {}
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn quoting_escapes_what_dot_needs() {
        assert_eq!(quote("x"), "\"x\"");
        assert_eq!(quote("a\"b\\c\nd"), "\"a\\\"b\\\\c\\nd\"");
    }
}
