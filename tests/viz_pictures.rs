//! Pictures of graphs: the DOT we write is parsed back with an independent
//! DOT parser (graphviz-rust) and checked node by node and edge by edge;
//! the SVG is parsed as XML.

use std::collections::{BTreeMap, BTreeSet};

use graphviz_rust::dot_structures::{Attribute, EdgeTy, Graph as DotGraph, Id, Stmt, Vertex};
use retrograd::viz::GraphPictures;
use retrograd::viz::{Renderer, VizOptions};
use retrograd::{Error, Graph, Tensor, Var};

/// A parsed DOT digraph: node attributes by id, edges in order.
struct Dot {
    nodes: BTreeMap<String, BTreeMap<String, String>>,
    edges: Vec<(String, String, BTreeMap<String, String>)>,
}

impl Dot {
    fn parse(text: &str) -> Dot {
        let graph = graphviz_rust::parse(text).unwrap_or_else(|e| panic!("bad DOT: {e}\n{text}"));
        let DotGraph::DiGraph { stmts, .. } = graph else {
            panic!("not a digraph")
        };
        let mut dot = Dot {
            nodes: BTreeMap::new(),
            edges: Vec::new(),
        };
        for stmt in stmts {
            match stmt {
                Stmt::Node(node) => {
                    let id = id_text(&node.id.0);
                    assert!(!dot.nodes.contains_key(&id), "node {id} declared twice");
                    dot.nodes.insert(id, attributes(&node.attributes));
                }
                Stmt::Edge(edge) => {
                    let EdgeTy::Pair(Vertex::N(a), Vertex::N(b)) = &edge.ty else {
                        panic!("unexpected edge form {:?}", edge.ty)
                    };
                    dot.edges
                        .push((id_text(&a.0), id_text(&b.0), attributes(&edge.attributes)));
                }
                _ => {}
            }
        }
        for (a, b, _) in &dot.edges {
            assert!(
                dot.nodes.contains_key(a) && dot.nodes.contains_key(b),
                "edge {a} -> {b} to an undeclared node"
            );
        }
        dot
    }

    fn attr(&self, node: &str, name: &str) -> &str {
        self.nodes[node].get(name).map(String::as_str).unwrap_or("")
    }

    fn label_lines(&self, node: &str) -> Vec<&str> {
        self.attr(node, "label").split('\n').collect()
    }

    fn classes(&self, node: &str) -> BTreeSet<&str> {
        self.attr(node, "class").split_whitespace().collect()
    }

    fn edge_set(&self) -> Vec<(&str, &str)> {
        let mut e: Vec<(&str, &str)> = self
            .edges
            .iter()
            .map(|(a, b, _)| (a.as_str(), b.as_str()))
            .collect();
        e.sort();
        e
    }

    /// Op-node ids, in the order of the graph's node indices.
    fn op_nodes(&self) -> Vec<&str> {
        self.nodes
            .keys()
            .filter(|id| self.classes(id).contains("op"))
            .map(String::as_str)
            .collect()
    }
}

fn attributes(attrs: &[Attribute]) -> BTreeMap<String, String> {
    attrs
        .iter()
        .map(|a| (id_text(&a.0), id_text(&a.1)))
        .collect()
}

/// The text of a DOT id: quotes removed and `\"`, `\\`, `\n` unescaped.
fn id_text(id: &Id) -> String {
    match id {
        Id::Escaped(s) => {
            let inner = &s[1..s.len() - 1];
            let mut out = String::new();
            let mut chars = inner.chars();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    match chars.next() {
                        Some('n') => out.push('\n'),
                        Some(other) => out.push(other),
                        None => out.push('\\'),
                    }
                } else {
                    out.push(c);
                }
            }
            out
        }
        Id::Html(s) | Id::Plain(s) | Id::Anonymous(s) => s.clone(),
    }
}

/// The textbook chapter's running example; with `dead_node`, Worked Example 15.4.2's
/// `q = x - 1` recorded between mul and add.
fn seed_example(graph: &Graph, dead_node: bool) -> (Var<'_>, Var<'_>, Var<'_>) {
    let x = graph.named_variable("x", Tensor::scalar(3.0));
    let y = graph.named_variable("y", Tensor::scalar(4.0));
    let z = &x * &y;
    if dead_node {
        let _q = (&x - 1.0).named("q");
    }
    let w = (&z + &x).named("w");
    (x, y, w)
}

#[test]
fn seed_example_has_two_ops_two_leaves_and_four_edges() {
    let graph = Graph::new();
    let (_x, _y, w) = seed_example(&graph, false);
    let grads = w.backward().unwrap();
    let dot = Dot::parse(
        &graph
            .to_dot(&VizOptions::new().root(&w).gradients(&grads))
            .unwrap(),
    );

    assert_eq!(
        dot.nodes.keys().collect::<Vec<_>>(),
        ["n0", "n1", "v0", "v1"]
    );
    assert_eq!(dot.label_lines("n0")[0], "mul");
    assert_eq!(dot.label_lines("n1")[0], "w = add");
    assert_eq!(dot.label_lines("v0")[0], "x");
    assert_eq!(dot.label_lines("v1")[0], "y");
    assert_eq!(
        dot.edge_set(),
        [("n0", "n1"), ("v0", "n0"), ("v0", "n1"), ("v1", "n0")]
    );

    // Ops and leaves look different; the root is bold; nothing is dead.
    for op in ["n0", "n1"] {
        assert_eq!(dot.attr(op, "shape"), "box");
        assert!(dot.classes(op).contains("op"));
    }
    for leaf in ["v0", "v1"] {
        assert_eq!(dot.attr(leaf, "shape"), "ellipse");
        assert_eq!(dot.classes(leaf), BTreeSet::from(["leaf", "variable"]));
    }
    assert!(dot.classes("n1").contains("root"));
    assert!(dot.nodes.keys().all(|n| !dot.classes(n).contains("dead")));

    // Shapes, values and gradients: x.grad = y + 1 = 5, y.grad = x = 3.
    assert_eq!(dot.label_lines("n0")[1..3], ["#0  f64 []", "= 12"]);
    assert_eq!(dot.label_lines("n1")[2], "= 15");
    assert_eq!(dot.label_lines("v0")[1..], ["f64 []", "= 3", "grad 5"]);
    assert_eq!(dot.label_lines("v1")[1..], ["f64 []", "= 4", "grad 3"]);
}

#[test]
fn the_dead_node_is_greyed_out() {
    let graph = Graph::new();
    let (_x, _y, w) = seed_example(&graph, true);
    let dot = Dot::parse(&graph.to_dot(&VizOptions::new().root(&w)).unwrap());

    let order = graph.backward_order(&w);
    assert_eq!(order, [2, 0]);
    assert_eq!(dot.op_nodes(), ["n0", "n1", "n2"]);
    for i in 0..graph.len() {
        let id = format!("n{i}");
        let dead = dot.classes(&id).contains("dead");
        assert_eq!(dead, !order.contains(&i), "node {i}");
    }
    assert_eq!(dot.label_lines("n1")[0], "q = sub");
    assert_eq!(
        dot.label_lines("n1").last(),
        Some(&"not in backward_order(w)")
    );
    assert_ne!(dot.attr("n1", "fontcolor"), dot.attr("n0", "fontcolor"));
    assert!(dot.attr("n1", "style").contains("dashed"));

    // The constant 1 feeds only the dead node: grey too, and so are the edges into q.
    let one = dot
        .nodes
        .keys()
        .find(|n| dot.classes(n).contains("constant"))
        .expect("the constant 1 is drawn");
    assert_eq!(dot.label_lines(one), ["const", "f64 []", "= 1"]);
    assert!(dot.classes(one).contains("dead"));
    assert!(
        !dot.classes("v0").contains("dead"),
        "x feeds live nodes too"
    );
    let color = |into_q: bool| -> BTreeSet<&str> {
        dot.edges
            .iter()
            .filter(|e| (e.1 == "n1") == into_q)
            .map(|e| e.2["color"].as_str())
            .collect()
    };
    assert_eq!(color(true).len(), 1);
    assert_eq!(color(false).len(), 1);
    assert_ne!(
        color(true),
        color(false),
        "edges into the dead node are grey"
    );
    let mut expected = vec![
        ("n0", "n2"),
        ("v0", "n0"),
        ("v0", "n1"),
        ("v0", "n2"),
        (one.as_str(), "n1"),
        ("v1", "n0"),
    ];
    expected.sort();
    assert_eq!(dot.edge_set(), expected);

    // Without a root nothing is dead.
    let plain = Dot::parse(&graph.to_dot(&VizOptions::new()).unwrap());
    assert!(plain
        .nodes
        .keys()
        .all(|n| !plain.classes(n).contains("dead")));
}

#[test]
fn max_nodes_keeps_the_nearest_and_summarises_the_rest() {
    let graph = Graph::new();
    let x = graph.named_variable("x", Tensor::scalar(0.5));
    let mut h = x.clone();
    for _ in 0..50 {
        h = h.tanh();
    }
    let dot = Dot::parse(
        &graph
            .to_dot(&VizOptions::new().root(&h).max_nodes(5))
            .unwrap(),
    );
    assert_eq!(dot.op_nodes(), ["n45", "n46", "n47", "n48", "n49"]);
    assert_eq!(dot.label_lines("elided")[0], "… 45 more op nodes");
    assert_eq!(
        dot.edge_set(),
        [
            ("elided", "n45"),
            ("n45", "n46"),
            ("n46", "n47"),
            ("n47", "n48"),
            ("n48", "n49")
        ]
    );
    assert!(!dot.nodes.contains_key("v0"), "x feeds only elided nodes");
}

#[test]
fn repeated_chains_collapse_into_one_node() {
    let graph = Graph::new();
    let x = graph.named_variable("x", Tensor::vector(&[0.1, 0.2]));
    let mut h = x.clone();
    for k in 0..6 {
        let w = graph.variable(Tensor::vector(&[0.5, f64::from(k)]));
        h = (&h * &w + 1.0).tanh();
    }
    let loss = (&h * &h).sum();
    let dot = Dot::parse(
        &graph
            .to_dot(&VizOptions::new().root(&loss).collapse_repeated(true))
            .unwrap(),
    );
    assert_eq!(dot.op_nodes(), ["g0", "n18", "n19"]);
    assert_eq!(dot.label_lines("g0")[0], "(mul → add → tanh) × 6");
    assert_eq!(dot.label_lines("g0")[1], "#0..#17  f64 [2]");
    // x, the six weights and six constants 1 become x plus one summary node.
    let leaves: Vec<&String> = dot
        .nodes
        .keys()
        .filter(|n| dot.classes(n).contains("leaf"))
        .collect();
    assert_eq!(leaves, ["s0", "v0"]);
    assert_eq!(dot.classes("s0"), BTreeSet::from(["leaf", "summary"]));
    assert_eq!(dot.label_lines("s0")[0], "6 variables, 6 constants");
    // h*h: the group's output feeds mul twice.
    assert_eq!(
        dot.edge_set(),
        [
            ("g0", "n18"),
            ("g0", "n18"),
            ("n18", "n19"),
            ("s0", "g0"),
            ("v0", "g0")
        ]
    );
}

#[test]
fn foreign_roots_and_gradients_are_errors() {
    let a = Graph::new();
    let b = Graph::new();
    let (_, _, wa) = seed_example(&a, false);
    let (_, _, wb) = seed_example(&b, false);
    let grads_b = wb.backward().unwrap();
    assert!(matches!(
        a.to_dot(&VizOptions::new().root(&wb)),
        Err(Error::ForeignVariable { .. })
    ));
    assert!(matches!(
        a.to_dot(&VizOptions::new().root(&wa).gradients(&grads_b)),
        Err(Error::ForeignVariable { .. })
    ));
}

/// `(class, text)` of every node group in a built-in SVG.
fn svg_nodes(svg: &str) -> Vec<(String, String)> {
    let doc = roxmltree::Document::parse(svg).expect("well-formed SVG");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let mut nodes = Vec::new();
    let groups = doc
        .descendants()
        .filter(|n| n.has_tag_name("g") && n.attribute("class").is_some());
    for g in groups {
        // The text follows its shape's group.
        let text = g
            .next_siblings()
            .find(|n| n.has_tag_name("text"))
            .map(|t| {
                t.descendants()
                    .filter_map(|n| n.text())
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_default();
        nodes.push((g.attribute("class").unwrap().to_string(), text));
    }
    nodes
}

#[test]
fn builtin_svg_draws_every_node_and_edge() {
    let graph = Graph::new();
    let (_x, _y, w) = seed_example(&graph, true);
    let svg = graph
        .to_svg(
            &VizOptions::new()
                .root(&w)
                .renderer(Renderer::Builtin)
                .title("w = x*y + x"),
        )
        .unwrap();
    let nodes = svg_nodes(&svg);
    assert_eq!(nodes.len(), 6, "3 ops, x, y and the constant 1: {nodes:?}");
    let op_texts: Vec<&str> = nodes
        .iter()
        .filter(|(c, _)| c.starts_with("op"))
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!(op_texts.len(), 3);
    assert!(op_texts.iter().any(|t| t.starts_with("mul\n")));
    let dead: Vec<&(String, String)> = nodes.iter().filter(|(c, _)| c.contains("dead")).collect();
    assert_eq!(dead.len(), 2, "q's node and the constant");
    assert!(dead.iter().any(|(_, t)| t.starts_with("q = sub\n")));
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let arrows = doc.descendants().filter(|n| n.has_tag_name("path")).count();
    assert_eq!(arrows, 6);
    assert!(doc.descendants().any(|n| n.text() == Some("w = x*y + x")));
}

#[test]
fn graphviz_renderer_runs_dot_or_says_it_is_missing() {
    let graph = Graph::new();
    let (_x, _y, w) = seed_example(&graph, false);
    let result = graph.to_svg(&VizOptions::new().root(&w).renderer(Renderer::Graphviz));
    if retrograd::viz::graphviz_available() {
        let svg = result.unwrap();
        // Graphviz writes a DOCTYPE.
        let options = roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        };
        let doc = roxmltree::Document::parse_with_options(&svg, options).unwrap();
        let titles: BTreeSet<&str> = doc
            .descendants()
            .filter(|n| n.has_tag_name("title"))
            .filter_map(|n| n.text())
            .collect();
        assert!(
            titles.is_superset(&BTreeSet::from(["n0", "n1", "v0", "v1"])),
            "{titles:?}"
        );
    } else {
        let err = result.unwrap_err();
        assert!(
            matches!(err, Error::Io { .. }) && err.to_string().contains("Graphviz"),
            "{err}"
        );
    }
}

#[test]
fn pictures_are_written_atomically() {
    let dir = std::env::temp_dir().join(format!("retrograd-viz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let graph = Graph::new();
    let (_x, _y, w) = seed_example(&graph, false);
    let options = VizOptions::new().root(&w).renderer(Renderer::Builtin);
    graph.write_dot(dir.join("w.dot"), &options).unwrap();
    graph.write_svg(dir.join("w.svg"), &options).unwrap();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["w.dot", "w.svg"],
        "no temporary file is left behind"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("w.dot")).unwrap(),
        graph.to_dot(&options).unwrap()
    );
    let missing = graph.write_svg(dir.join("no/such/dir/w.svg"), &options);
    assert!(matches!(missing, Err(Error::Io { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn large_tensors_show_shape_and_gradient_norm() {
    let graph = Graph::new();
    let x = graph.named_variable("x", Tensor::from_vec(vec![1.0; 12], &[3, 4]).unwrap());
    let loss = (&x * 2.0).sum();
    let grads = loss.backward().unwrap();
    let options = VizOptions::new().root(&loss).gradients(&grads);
    let dot = Dot::parse(&graph.to_dot(&options).unwrap());
    // 12 elements: more than max_values (8), so no values; |grad| = sqrt(12 * 2^2).
    assert_eq!(dot.label_lines("v0"), ["x", "f64 [3, 4]", "|grad| 6.928"]);
    let all = Dot::parse(&graph.to_dot(&options.clone().max_values(12)).unwrap());
    assert_eq!(
        all.label_lines("v0")[2],
        "= [[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, 1]]"
    );
    assert_eq!(
        all.label_lines("v0")[3],
        "grad [[2, 2, 2, 2], [2, 2, 2, 2], [2, 2, 2, 2]]"
    );
    let none = Dot::parse(&graph.to_dot(&options.max_values(0)).unwrap());
    assert_eq!(
        none.label_lines("n1"),
        ["sum", "#1  f64 []"],
        "the root's gradient was not retained"
    );
}

/// A compiled step's capture draws with each fused group as a cluster: a
/// DOT subgraph, and a dashed box in the built-in renderer's SVG.
#[test]
fn a_compiled_steps_fused_groups_draw_as_clusters() {
    use retrograd::{compile, CompileOptions, DType};
    let w = retrograd::nn::Parameter::new(Tensor::randn(&[5, 7], DType::F64, 1).unwrap());
    let b = retrograd::nn::Parameter::new(Tensor::randn(&[7], DType::F64, 2).unwrap());
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| {
            x[0].try_matmul(&g.param(&w))?
                .try_add(&g.param(&b))?
                .relu()
                .try_sum()
        },
        CompileOptions::new().params([&w, &b]),
    );
    step.run(&[Tensor::randn(&[4, 5], DType::F64, 3).unwrap()])
        .unwrap();
    let c = step.capture().unwrap();
    let options = VizOptions::new().clusters(c.clusters());
    let dot = c.graph().to_dot(&options).unwrap();
    assert!(
        dot.contains("subgraph cluster_0") && dot.contains("fused"),
        "{dot}"
    );
    let svg = c
        .graph()
        .to_svg(&options.renderer(Renderer::Builtin))
        .unwrap();
    assert!(svg.contains("<g class=\"cluster\">"), "{svg}");
}
