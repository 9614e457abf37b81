//! The `trace` example's library side: `expr::trace` on the textbook chapter's example,
//! parser and build errors with their columns, and `--frozen` constant folding.
#![cfg(feature = "expr")]

use retrograd::expr::{parse_input, trace, Input};
use retrograd::viz::GraphPictures;
use retrograd::viz::VizOptions;
use retrograd::{Graph, Tensor};

fn inputs(args: &[&str], frozen: &[&str]) -> Vec<Input> {
    args.iter()
        .map(|a| {
            let mut input = parse_input(a).unwrap();
            input.frozen = frozen.contains(&input.name.as_str());
            input
        })
        .collect()
}

#[test]
fn seed_example_report() {
    let graph = Graph::new();
    let t = trace(&graph, "x*y + x", &inputs(&["x=3", "y=4"], &[])).unwrap();
    let report = t.report();
    // The textbook-style trace is `print!("{graph}")`, verbatim.
    assert!(report.contains(&graph.to_string()));
    assert!(report.contains("nodes[0] = mul(x, y) -> 12\nnodes[1] = add(nodes[0], x) -> 15\n"));
    assert!(report.contains("topological_backward_order() = [1, 0]\n"));
    assert!(report.contains("backward_order(output)       = [1, 0]\n"));
    assert!(report.contains("output = 15\n"));
    assert!(report.contains("  x = 5\n  y = 3\n"));
    let grads = t.gradients.as_ref().unwrap();
    assert_eq!(grads.wrt(&t.inputs[0]).item(), 5.0);
    assert_eq!(grads.wrt(&t.inputs[1]).item(), 3.0);
    // The picture of a trace is rooted at the output and shows gradients.
    let dot = graph.to_dot(&t.viz_options()).unwrap();
    assert!(dot.contains("grad 5") && dot.contains("class=\"op root\""));
}

#[test]
fn unknown_functions_point_at_the_name() {
    let graph = Graph::new();
    let err = trace(&graph, "x*y + tanhh(x)", &inputs(&["x=3", "y=4"], &[])).unwrap_err();
    assert_eq!(err.column(), 7);
    let rendered = err.render();
    let lines: Vec<&str> = rendered.lines().collect();
    assert_eq!(
        lines[0],
        "error: unknown function `tanhh` (did you mean `tanh`?)"
    );
    assert_eq!(lines[1], "  x*y + tanhh(x)");
    assert_eq!(lines[2], "        ^^^^^");
    assert!(
        lines[3].starts_with("note: functions are the registered ops: ")
            && lines[3].contains("sigmoid")
    );
    assert_eq!(
        graph.len(),
        1,
        "x*y was recorded before the unknown call was reached"
    );
}

#[test]
fn syntax_errors_point_at_the_column() {
    let graph = Graph::new();
    let cases = [
        ("x*y +", 6, "unexpected end of input"),
        ("x*)y", 3, "unexpected `)`"),
        ("x y", 3, "unexpected `y`"),
        ("sum(x,)", 7, "unexpected `)`"),
    ];
    for (src, column, start) in cases {
        let err = trace(&graph, src, &inputs(&["x=3", "y=4"], &[])).unwrap_err();
        assert_eq!(err.column(), column, "{src}: {err}");
        assert!(err.message().starts_with(start), "{src}: {err}");
        let caret_line = err.render().lines().nth(2).unwrap().to_string();
        assert_eq!(
            caret_line.find('^'),
            Some(column + 1),
            "{src}: caret under column {column}"
        );
    }
    assert!(graph.is_empty());
}

#[test]
fn frozen_subexpressions_record_no_node() {
    let graph = Graph::new();
    let t = trace(
        &graph,
        "tanh(y*2 + 1) * x",
        &inputs(&["x=3", "y=4"], &["y"]),
    )
    .unwrap();
    // y*2, +1 and tanh ran on constants only: folded, one node left.
    assert_eq!(graph.len(), 1);
    assert_eq!(graph.nodes()[0].op_name(), "mul");
    let folded = (9.0f64).tanh();
    assert!((t.output.value().item() - 3.0 * folded).abs() < 1e-12);
    assert!(t.report().contains("  y: frozen, no gradient\n"));
    assert!(t.report().contains("inputs: x = 3, y = 4 (frozen)\n"));

    // The picture: y is a frozen leaf with no edges, and mul reads the folded constant.
    let dot = graph.to_dot(&VizOptions::new().root(&t.output)).unwrap();
    let y_line = dot
        .lines()
        .find(|l| l.contains("label=\"y (frozen)"))
        .unwrap();
    assert!(y_line.contains("class=\"leaf constant dead\""), "{y_line}");
    let y_id = y_line.split_whitespace().next().unwrap();
    assert!(!dot.contains(&format!("{y_id} ->")), "y feeds no node");

    // Without freezing, the same expression records four nodes.
    let graph = Graph::new();
    trace(&graph, "tanh(y*2 + 1) * x", &inputs(&["x=3", "y=4"], &[])).unwrap();
    assert_eq!(graph.len(), 4);
}

#[test]
fn everything_frozen_means_nothing_to_differentiate() {
    let graph = Graph::new();
    let t = trace(&graph, "x*y", &inputs(&["x=3", "y=4"], &["x", "y"])).unwrap();
    assert!(graph.is_empty() && t.gradients.is_none());
    assert!(t.report().contains("the output does not require grad"));
}

#[test]
fn two_tower_diamond_meets_at_the_dot_product() {
    let graph = Graph::new();
    let src = "hq = tanh(tanh(q*qw1 + qb1) * qw2); hd = tanh(tanh(d*dw1 + db1) * dw2); \
               score = sum(hq*hd); e = score - 0.25; e*e";
    let args = [
        "q=[0.5,-1,2,0.1]",
        "d=[1.5,0.3,-0.7,0.9]",
        "qw1=[0.1,0.2,-0.3,0.4]",
        "qb1=[0,0.1,0,-0.1]",
        "qw2=[1,-0.5,0.3,0.8]",
        "dw1=[-0.2,0.3,0.5,0.1]",
        "db1=[0.2,0,-0.1,0]",
        "dw2=[0.7,0.4,-0.6,1.1]",
    ];
    let t = trace(&graph, src, &inputs(&args, &["q", "d"])).unwrap();
    // Five ops per tower, then mul, sum (the dot product), sub, mul (the loss).
    assert_eq!(graph.len(), 14);
    let order = graph.backward_order(&t.output);
    assert_eq!(order[..4], [13, 12, 11, 10]);
    // The same numbers as building it by hand.
    let g2 = Graph::new();
    let v = |s: &[f64]| g2.variable(Tensor::vector(s));
    let c = |s: &[f64]| g2.constant(Tensor::vector(s));
    let hq = ((c(&[0.5, -1.0, 2.0, 0.1]) * v(&[0.1, 0.2, -0.3, 0.4]) + v(&[0.0, 0.1, 0.0, -0.1]))
        .tanh()
        * v(&[1.0, -0.5, 0.3, 0.8]))
    .tanh();
    let hd = ((c(&[1.5, 0.3, -0.7, 0.9]) * v(&[-0.2, 0.3, 0.5, 0.1]) + v(&[0.2, 0.0, -0.1, 0.0]))
        .tanh()
        * v(&[0.7, 0.4, -0.6, 1.1]))
    .tanh();
    let e = (&hq * &hd).sum() - 0.25;
    let loss = &e * &e;
    assert!((t.output.value().item() - loss.value().item()).abs() < 1e-15);
}

#[test]
fn bad_inputs_are_explained() {
    assert!(parse_input("x").unwrap_err().contains("NAME=VALUE"));
    assert!(parse_input("2x=1").unwrap_err().contains("not a name"));
    assert!(parse_input("q=[1,,2]")
        .unwrap_err()
        .contains("not a number"));
    let graph = Graph::new();
    let err = trace(&graph, "x", &inputs(&["x=1", "x=2"], &[])).unwrap_err();
    assert_eq!(err.message(), "input `x` is given twice");
    let err = trace(
        &graph,
        "x*v",
        &[
            Input::new("x", Tensor::scalar(1.0)),
            Input::new("v", Tensor::vector(&[1.0, 2.0])),
        ],
    )
    .unwrap_err();
    assert!(err.message().starts_with("backward needs a scalar output"));
    assert_eq!(err.note(), Some("wrap the expression in sum(...)"));
}
