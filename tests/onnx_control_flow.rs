//! ONNX control flow, imported and run: `If` picks a branch by a value
//! known only at run time, `Loop` and `Scan` repeat their body, subgraphs
//! read the values of every enclosing graph, and gradients flow through
//! the branch that ran and every unrolled iteration. The expected values
//! are worked out by hand in the comments.

#![cfg(feature = "onnx")]

#[path = "support/onnx_node.rs"]
mod onnx_node;

use onnx_node::value_info;
use retrograd::nn::Module;
use retrograd::onnx::proto::attribute_proto::AttributeType;
use retrograd::onnx::proto::tensor_shape_proto::dimension::Value::DimValue;
use retrograd::onnx::proto::tensor_shape_proto::Dimension;
use retrograd::onnx::proto::type_proto::{Sequence, Tensor as TensorType, Value as TypeValue};
use retrograd::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use retrograd::onnx::OnnxModel;
use retrograd::{DType, Error, Graph, Tensor};

/// A float value the graph declares with its type and sizes.
fn float_info(name: &str, dims: &[i64]) -> ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| Dimension {
            value: Some(DimValue(d)),
            ..Default::default()
        })
        .collect();
    let mut v = value_info(name, None);
    v.r#type = Some(TypeProto {
        value: Some(TypeValue::TensorType(TensorType {
            elem_type: Some(1),
            shape: Some(TensorShapeProto { dim }),
        })),
        ..Default::default()
    });
    v
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn with_graph(mut n: NodeProto, name: &str, g: GraphProto) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        g: Some(g),
        r#type: Some(AttributeType::Graph as i32),
        ..Default::default()
    });
    n
}

fn with_int(mut n: NodeProto, name: &str, v: i64) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    });
    n
}

fn with_ints(mut n: NodeProto, name: &str, v: &[i64]) -> NodeProto {
    n.attribute.push(AttributeProto {
        name: Some(name.into()),
        ints: v.to_vec(),
        r#type: Some(AttributeType::Ints as i32),
        ..Default::default()
    });
    n
}

fn graph(name: &str, nodes: Vec<NodeProto>, inputs: &[&str], outputs: &[&str]) -> GraphProto {
    GraphProto {
        name: Some(name.into()),
        node: nodes,
        input: inputs.iter().map(|n| value_info(n, None)).collect(),
        output: outputs.iter().map(|n| value_info(n, None)).collect(),
        ..Default::default()
    }
}

fn float_initializer(name: &str, v: &[f32], dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some(name.into()),
        data_type: Some(1),
        dims: dims.to_vec(),
        float_data: v.to_vec(),
        ..Default::default()
    }
}

fn model(g: GraphProto) -> ModelProto {
    ModelProto {
        ir_version: Some(10),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(21),
        }],
        graph: Some(g),
        ..Default::default()
    }
}

fn import(g: GraphProto) -> retrograd::Result<OnnxModel> {
    OnnxModel::from_proto(&model(g))
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn boolean(b: bool) -> Tensor {
    Tensor::scalar_of(f64::from(u8::from(b)), DType::Bool)
}

fn int64(v: i64) -> Tensor {
    Tensor::from_vec(vec![v], &[]).unwrap()
}

#[track_caller]
fn assert_close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "{g:?}");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 + 1e-5 * b.abs(),
            "element {i}: {a} against {b} (all: {g:?})"
        );
    }
}

/// `If(c)`: then `x * 2` (a branch initializer), else `x + w` (`w` the
/// model's initializer, read from the enclosing graph).
fn if_model() -> OnnxModel {
    let mut then = graph(
        "then",
        vec![node("Mul", &["x", "two"], &["t"])],
        &[],
        &["t"],
    );
    then.initializer.push(float_initializer("two", &[2.0], &[]));
    let otherwise = graph("else", vec![node("Add", &["x", "w"], &["e"])], &[], &["e"]);
    let n = node("If", &["c"], &["y"]);
    let n = with_graph(with_graph(n, "then_branch", then), "else_branch", otherwise);
    let mut g = graph("g", vec![n], &["c", "x"], &["y"]);
    g.initializer
        .push(float_initializer("w", &[10.0, 20.0], &[2]));
    import(g).unwrap()
}

#[test]
fn if_runs_the_branch_its_condition_chooses_and_differentiates() {
    let m = if_model();
    let x = f32s(&[1.0, 2.0], &[2]);
    let y = m.infer(&[boolean(true), x.clone()]).unwrap();
    assert_close(&y[0], &[2], &[2.0, 4.0]);
    let y = m.infer(&[boolean(false), x.clone()]).unwrap();
    assert_close(&y[0], &[2], &[11.0, 22.0]);
    // `w`, read only inside a branch, is a parameter that trains.
    let params = m.parameters();
    let (name, w) = &params[0];
    assert_eq!(name, "w");
    for (cond, dx, dw) in [(true, 2.0, 0.0), (false, 1.0, 1.0)] {
        let g = Graph::new();
        let (c, xv) = (g.constant(boolean(cond)), g.variable(x.clone()));
        let y = m.forward(&g, &[&c, &xv]).unwrap();
        let grads = y[0].sum().backward().unwrap();
        assert_close(&grads.try_wrt(&xv).unwrap(), &[2], &[dx, dx]);
        if cond {
            assert!(grads.get_param(w).is_none(), "the else branch did not run");
        } else {
            assert_close(&grads.of(w), &[2], &[dw, dw]);
        }
    }
    // A branch may give an enclosing value as it is, with no node at all.
    let then = graph("then", vec![], &[], &["x"]);
    let otherwise = graph("else", vec![node("Neg", &["x"], &["e"])], &[], &["e"]);
    let n = node("If", &["c"], &["y"]);
    let n = with_graph(with_graph(n, "then_branch", then), "else_branch", otherwise);
    let pass = import(graph("g", vec![n], &["c", "x"], &["y"])).unwrap();
    let y = pass.infer(&[boolean(true), x.clone()]).unwrap();
    assert_close(&y[0], &[2], &[1.0, 2.0]);
    // A condition of two values is an error naming the node.
    let e = m.infer(&[f32s(&[1.0, 0.0], &[2]), x]).unwrap_err();
    assert!(matches!(e, Error::OnnxInvalid { .. }), "{e}");
    assert!(
        e.to_string().contains("If") && e.to_string().contains("[2]"),
        "{e}"
    );
}

/// `Loop(M, "", x)` with body `y' = y * w + float(i)`, scanning `y'`.
fn counting_loop() -> OnnxModel {
    let body = graph(
        "body",
        vec![
            with_int(node("Cast", &["i"], &["fi"]), "to", 1),
            node("Mul", &["y", "w"], &["yw"]),
            node("Add", &["yw", "fi"], &["y2"]),
            node("Identity", &["cond"], &["cond2"]),
            node("Identity", &["y2"], &["s"]),
        ],
        &["i", "cond", "y"],
        &["cond2", "y2", "s"],
    );
    let n = with_graph(
        node("Loop", &["m", "", "x"], &["last", "all"]),
        "body",
        body,
    );
    let mut g = graph("g", vec![n], &["m", "x"], &["last", "all"]);
    g.initializer
        .push(float_initializer("w", &[0.5, 2.0], &[2]));
    import(g).unwrap()
}

#[test]
fn loop_carries_values_stacks_scan_outputs_and_differentiates() {
    let m = counting_loop();
    let x = f32s(&[1.0, 1.0], &[2]);
    let y = m.infer(&[int64(3), x.clone()]).unwrap();
    // y1 = x·w, y2 = y1·w + 1, y3 = y2·w + 2.
    assert_close(&y[0], &[2], &[2.625, 12.0]);
    assert_close(&y[1], &[3, 2], &[0.5, 2.0, 1.25, 5.0, 2.625, 12.0]);
    // y3 = x·w³ + w + 2: d/dx = w³, d/dw = 3·x·w² + 1.
    let g = Graph::new();
    let (mv, xv) = (g.constant(int64(3)), g.variable(x.clone()));
    let y = m.forward(&g, &[&mv, &xv]).unwrap();
    let grads = y[0].sum().backward().unwrap();
    assert_close(&grads.try_wrt(&xv).unwrap(), &[2], &[0.125, 8.0]);
    let params = m.parameters();
    assert_close(&grads.of(&params[0].1), &[2], &[1.75, 13.0]);
    // No trip at all: the initial value, and no rows of the scan output.
    let y = m.infer(&[int64(0), x]).unwrap();
    assert_close(&y[0], &[2], &[1.0, 1.0]);
    assert_eq!(y[1].shape()[0], 0);
}

/// `Loop("", go, y)` with body `y' = y * 2`, going on while `y' < limit`.
fn doubling_loop() -> OnnxModel {
    let mut body = graph(
        "body",
        vec![
            node("Add", &["y", "y"], &["y2"]),
            node("Less", &["y2", "limit"], &["more"]),
            node("Identity", &["y2"], &["s"]),
        ],
        &["i", "cond", "y"],
        &["more", "y2", "s"],
    );
    body.output[2] = float_info("s", &[]);
    let n = with_graph(
        node("Loop", &["", "go", "y0"], &["last", "all"]),
        "body",
        body,
    );
    import(graph(
        "g",
        vec![n],
        &["go", "y0", "limit"],
        &["last", "all"],
    ))
    .unwrap()
}

#[test]
fn a_loop_without_trip_count_runs_while_its_condition_holds() {
    let m = doubling_loop();
    let (y0, limit) = (f32s(&[1.0], &[]), f32s(&[20.0], &[]));
    let y = m
        .infer(&[boolean(true), y0.clone(), limit.clone()])
        .unwrap();
    // 2, 4, 8, 16, 32: the condition fails after 32.
    assert_close(&y[0], &[], &[32.0]);
    assert_close(&y[1], &[5], &[2.0, 4.0, 8.0, 16.0, 32.0]);
    // A false condition at the start runs nothing; the empty scan output
    // has the body's declared shape.
    let y = m.infer(&[boolean(false), y0, limit]).unwrap();
    assert_close(&y[0], &[], &[1.0]);
    assert_eq!(y[1].shape(), &[0]);
    assert_eq!(y[1].dtype(), DType::F32);
}

#[test]
fn subgraphs_nest_and_read_every_enclosing_scope() {
    // Loop(2) { acc' = If(flag) { Loop(3) { a' = a + step } (acc) } else { acc - step } }:
    // `acc` is read two levels down, `step` and `flag` three and two.
    let inner_body = graph(
        "inner_body",
        vec![
            node("Add", &["a", "step"], &["a2"]),
            node("Identity", &["ic"], &["ic2"]),
        ],
        &["j", "ic", "a"],
        &["ic2", "a2"],
    );
    let inner = with_graph(
        node("Loop", &["three", "", "acc"], &["t"]),
        "body",
        inner_body,
    );
    let mut then = graph("then", vec![inner], &[], &["t"]);
    then.initializer.push(TensorProto {
        name: Some("three".into()),
        data_type: Some(7),
        int64_data: vec![3],
        ..Default::default()
    });
    let otherwise = graph(
        "else",
        vec![node("Sub", &["acc", "step"], &["e"])],
        &[],
        &["e"],
    );
    let branch = with_graph(
        with_graph(node("If", &["flag"], &["next"]), "then_branch", then),
        "else_branch",
        otherwise,
    );
    let body = graph(
        "outer_body",
        vec![branch, node("Identity", &["oc"], &["oc2"])],
        &["k", "oc", "acc"],
        &["oc2", "next"],
    );
    let outer = with_graph(node("Loop", &["two", "", "x"], &["y"]), "body", body);
    let mut g = graph("g", vec![outer], &["flag", "x", "step"], &["y"]);
    g.initializer.push(TensorProto {
        name: Some("two".into()),
        data_type: Some(7),
        int64_data: vec![2],
        ..Default::default()
    });
    let m = import(g).unwrap();
    let (x, step) = (f32s(&[1.0], &[]), f32s(&[0.5], &[]));
    // x + 2·3·step, or x - 2·step.
    let y = m.infer(&[boolean(true), x.clone(), step.clone()]).unwrap();
    assert_close(&y[0], &[], &[4.0]);
    let y = m.infer(&[boolean(false), x.clone(), step.clone()]).unwrap();
    assert_close(&y[0], &[], &[0.0]);
    let g = Graph::new();
    let (f, xv, sv) = (g.constant(boolean(true)), g.variable(x), g.variable(step));
    let y = m.forward(&g, &[&f, &xv, &sv]).unwrap();
    let grads = y[0].backward().unwrap();
    assert_close(&grads.try_wrt(&sv).unwrap(), &[], &[6.0]);
    assert_close(&grads.try_wrt(&xv).unwrap(), &[], &[1.0]);
}

#[test]
fn scan_reads_and_writes_along_any_axis_in_either_direction() {
    // The columns of xs from the last; the running sums written last first.
    let mut body = graph(
        "body",
        vec![
            node("Add", &["acc", "col"], &["acc2"]),
            node("Identity", &["acc2"], &["out"]),
        ],
        &["acc", "col"],
        &["acc2", "out"],
    );
    body.output[1] = float_info("out", &[2]);
    let n = with_graph(node("Scan", &["init", "xs"], &["last", "ys"]), "body", body);
    let n = with_int(n, "num_scan_inputs", 1);
    let n = with_ints(n, "scan_input_axes", &[1]);
    let n = with_ints(n, "scan_input_directions", &[1]);
    let n = with_ints(n, "scan_output_axes", &[1]);
    let n = with_ints(n, "scan_output_directions", &[1]);
    let m = import(graph("g", vec![n], &["init", "xs"], &["last", "ys"])).unwrap();
    let xs = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let y = m.infer(&[f32s(&[0.0, 0.0], &[2]), xs]).unwrap();
    // Sums after columns 2, 1, 0: [3, 6], [5, 11], [6, 15].
    assert_close(&y[0], &[2], &[6.0, 15.0]);
    assert_close(&y[1], &[2, 3], &[6.0, 5.0, 3.0, 15.0, 11.0, 6.0]);
    // No columns: the state as given, and no entries along the output axis.
    let y = m
        .infer(&[f32s(&[1.0, 2.0], &[2]), f32s(&[], &[2, 0])])
        .unwrap();
    assert_close(&y[0], &[2], &[1.0, 2.0]);
    assert_eq!(y[1].shape(), &[2, 0]);
}

/// An `If` whose then branch holds an `If` ... `depth` graphs deep.
fn nested_ifs(depth: usize) -> GraphProto {
    let leaf = || graph("leaf", vec![node("Identity", &["x"], &["o"])], &[], &["o"]);
    let mut g = leaf();
    for _ in 0..depth {
        let n = node("If", &["c"], &["o"]);
        let n = with_graph(with_graph(n, "then_branch", g), "else_branch", leaf());
        g = graph("level", vec![n], &[], &["o"]);
    }
    g.input = vec![value_info("c", None), value_info("x", None)];
    g
}

#[test]
fn nesting_is_limited_and_refused_past_the_limit() {
    let m = import(nested_ifs(5)).unwrap();
    let y = m.infer(&[boolean(true), f32s(&[3.0], &[1])]).unwrap();
    assert_close(&y[0], &[1], &[3.0]);
    // At the limit it still loads and runs (on a test thread's stack).
    let m = import(nested_ifs(64)).unwrap();
    let y = m.infer(&[boolean(true), f32s(&[3.0], &[1])]).unwrap();
    assert_close(&y[0], &[1], &[3.0]);
    let e = import(nested_ifs(70)).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("nested"), "{e}");
    // Far deeper: refused before anything walks it by recursion.
    let e = import(nested_ifs(1000)).unwrap_err();
    assert!(e.to_string().contains("nested 1000 deep"), "{e}");
}

#[test]
fn sequence_values_are_refused_by_name() {
    let mut body = graph(
        "body",
        vec![
            node("Identity", &["cond"], &["cond2"]),
            node("Identity", &["s"], &["s2"]),
        ],
        &["i", "cond", "s"],
        &["cond2", "s2"],
    );
    body.input[2].r#type = Some(TypeProto {
        value: Some(TypeValue::SequenceType(Box::new(Sequence {
            elem_type: Some(Box::new(TypeProto {
                value: Some(TypeValue::TensorType(TensorType::default())),
                ..Default::default()
            })),
        }))),
        ..Default::default()
    });
    let n = with_graph(node("Loop", &["m", "", "s0"], &["s"]), "body", body);
    let e = import(graph("g", vec![n], &["m", "s0"], &["s"])).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    let text = e.to_string();
    assert!(text.contains("sequence") && text.contains("`s`"), "{e}");
    // So is an op that makes one, inside a body.
    let body = graph(
        "body",
        vec![
            node("Identity", &["cond"], &["cond2"]),
            node("SequenceEmpty", &[], &["seq"]),
        ],
        &["i", "cond"],
        &["cond2"],
    );
    let n = with_graph(node("Loop", &["m", ""], &[]), "body", body);
    let e = import(graph("g", vec![n], &["m"], &[])).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("SequenceEmpty") && text.contains("sequence"),
        "{e}"
    );
}

#[test]
fn malformed_control_flow_is_an_error_not_a_panic() {
    // A Loop given fewer carried values than its body reads.
    let body = graph(
        "body",
        vec![
            node("Identity", &["cond"], &["cond2"]),
            node("Identity", &["y"], &["y2"]),
        ],
        &["i", "cond", "y"],
        &["cond2", "y2"],
    );
    let n = with_graph(node("Loop", &["m", ""], &[]), "body", body.clone());
    let m = import(graph("g", vec![n], &["m"], &[])).unwrap();
    let e = m.infer(&[int64(2)]).unwrap_err();
    assert!(matches!(e, Error::OnnxInvalid { .. }), "{e}");
    // A body of one input.
    let short = graph(
        "body",
        vec![node("Identity", &["i"], &["o"])],
        &["i"],
        &["o"],
    );
    let n = with_graph(node("Loop", &["m", "", "y"], &["z"]), "body", short);
    let m = import(graph("g", vec![n], &["m", "y"], &["z"])).unwrap();
    let e = m.infer(&[int64(2), f32s(&[1.0], &[1])]).unwrap_err();
    assert!(matches!(e, Error::OnnxInvalid { .. }), "{e}");
    // An If without its else branch, and a body with an op the importer lacks.
    let then = graph("then", vec![node("Identity", &["x"], &["t"])], &[], &["t"]);
    let n = with_graph(node("If", &["c"], &["y"]), "then_branch", then);
    let e = import(graph("g", vec![n], &["c", "x"], &["y"])).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    let mut odd = body;
    odd.node[1].op_type = Some("NoSuchOp".into());
    let n = with_graph(node("Loop", &["m", "", "y"], &["z"]), "body", odd);
    let e = import(graph("g", vec![n], &["m", "y"], &["z"])).unwrap_err();
    assert!(e.to_string().contains("NoSuchOp"), "{e}");
}

#[test]
fn sixteen_bit_values_keep_their_type_through_a_branch() {
    // then: Cast(x, FLOAT); else: x + x, computed in f32 and given back in f16.
    let then = with_int(node("Cast", &["x"], &["t"]), "to", 1);
    let then = graph("then", vec![then], &[], &["t"]);
    let otherwise = graph("else", vec![node("Add", &["x", "x"], &["e"])], &[], &["e"]);
    let n = node("If", &["c"], &["y"]);
    let n = with_graph(with_graph(n, "then_branch", then), "else_branch", otherwise);
    let m = import(graph("g", vec![n], &["c", "x"], &["y"])).unwrap();
    let x = Tensor::from_f64_slice(&[0.5, 1.5], &[2], DType::F16).unwrap();
    let y = m.infer(&[boolean(true), x.clone()]).unwrap();
    assert_eq!(y[0].dtype(), DType::F32);
    assert_close(&y[0], &[2], &[0.5, 1.5]);
    let y = m.infer(&[boolean(false), x]).unwrap();
    assert_eq!(y[0].dtype(), DType::F16);
    assert_close(&y[0], &[2], &[1.0, 3.0]);
}

#[test]
fn sequence_graph_inputs_are_refused_by_name() {
    let mut g = graph("g", vec![node("Identity", &["s"], &["y"])], &["s"], &["y"]);
    g.input[0].r#type = Some(TypeProto {
        value: Some(TypeValue::SequenceType(Box::default())),
        ..Default::default()
    });
    let e = import(g).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("graph input `s`") && text.contains("sequence"),
        "{e}"
    );
}
