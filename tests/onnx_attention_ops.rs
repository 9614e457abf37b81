//! The attention family of ONNX ops as one-node models, imported and run
//! against the values ONNX's reference implementation
//! (`onnx.reference.ReferenceEvaluator`, onnx 1.23) gives for the same
//! node and inputs: `CausalConvWithState`, `LinearAttention`,
//! `FlexAttention` with a modifier subgraph, and `Attention` and
//! `Softmax` on bf16, which round each step to bf16 as the reference does,
//! and `Scan`, whose body reads a value of the enclosing graph.

#![cfg(feature = "onnx")]

#[path = "support/onnx_node.rs"]
mod onnx_node;

use onnx_node::value_info;
use prost::Message;
use retrograd::onnx::proto::attribute_proto::AttributeType;
use retrograd::onnx::proto::{
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
};
use retrograd::onnx::OnnxModel;
use retrograd::{DType, Error, Graph, Tensor};

fn int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        i: Some(v),
        r#type: Some(AttributeType::Int as i32),
        ..Default::default()
    }
}

fn string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: Some(name.into()),
        s: Some(v.as_bytes().to_vec()),
        r#type: Some(AttributeType::String as i32),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<AttributeProto>) -> NodeProto {
    NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs,
        ..Default::default()
    }
}

fn graph(name: &str, n: NodeProto) -> GraphProto {
    GraphProto {
        name: Some(name.into()),
        input: n
            .input
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| value_info(n, None))
            .collect(),
        output: n.output.iter().map(|n| value_info(n, None)).collect(),
        node: vec![n],
        ..Default::default()
    }
}

/// A model of the one node `n` at default-domain `opset` (and the
/// preview domain's opset 1), imported.
fn import(n: NodeProto, opset: i64) -> retrograd::Result<OnnxModel> {
    let id = |domain: &str, version| OperatorSetIdProto {
        domain: Some(domain.into()),
        version: Some(version),
    };
    let m = ModelProto {
        ir_version: Some(10),
        opset_import: vec![id("", opset), id("ai.onnx.preview", 1)],
        graph: Some(graph("g", n)),
        ..Default::default()
    };
    OnnxModel::from_bytes(&m.encode_to_vec())
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[track_caller]
fn assert_close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len());
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-6 + 1e-5 * b.abs(),
            "element {i}: {a} against {b} (all: {g:?})"
        );
    }
}

#[test]
fn causal_conv_with_state_prefixes_the_state_and_carries_the_last_positions() {
    let x = f32s(&[1.0, 2.0, 3.0, -1.0, 0.5, 2.0], &[1, 2, 3]);
    let w = f32s(&[0.5, -1.0, 2.0, 0.25], &[2, 1, 2]);
    let b = f32s(&[0.1, -0.2], &[2]);
    let past = f32s(&[4.0, -3.0], &[1, 2, 1]);
    let ins = ["x", "w", "b", "p"];
    let m = import(node("CausalConvWithState", &ins, &["y", "s"], vec![]), 27).unwrap();
    let y = m
        .infer(&[x.clone(), w.clone(), b.clone(), past.clone()])
        .unwrap();
    assert_close(&y[0], &[1, 2, 3], &[1.1, -1.4, -1.9, -6.45, -2.075, 1.3]);
    assert_close(&y[1], &[1, 2, 1], &[3.0, 2.0]);
    let silu = vec![string("activation", "silu")];
    let m = import(node("CausalConvWithState", &ins, &["y", "s"], silu), 27).unwrap();
    let y = m.infer(&[x, w, b, past]).unwrap();
    assert_close(
        &y[0],
        &[1, 2, 3],
        &[
            0.825286,
            -0.2769426,
            -0.2472061,
            -0.01017828,
            -0.2314674,
            1.0215855,
        ],
    );
    let bad = vec![string("activation", "gelu")];
    let e = import(node("CausalConvWithState", &ins, &["y", "s"], bad), 27).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
}

/// Gated delta rule, two query heads on one key/value head, two tokens.
fn linear_attention_inputs(dtype: DType) -> Vec<Tensor> {
    let t = |v: &[f32], s: &[usize]| f32s(v, s).to_dtype(dtype);
    vec![
        t(
            &[0.35, 0.82, 0.33, -1.3, 0.91, 0.45, -0.54, 0.58],
            &[1, 2, 4],
        ),
        t(&[0.36, 0.29, 0.03, 0.55], &[1, 2, 2]),
        t(&[-0.74, -0.16, -0.48, 0.6, 0.04, -0.29], &[1, 2, 3]),
        t(&[-0.78, -0.26], &[1, 2, 1]),
        t(&[0.5, 0.75], &[1, 2, 1]),
    ]
}

#[test]
fn linear_attention_runs_the_gated_delta_recurrence_and_differentiates() {
    let ins = linear_attention_inputs(DType::F32);
    let attrs = vec![int("q_num_heads", 2), int("kv_num_heads", 1)];
    let names = ["q", "k", "v", "", "g", "beta"];
    let m = import(node("LinearAttention", &names, &["y", "s"], attrs), 27).unwrap();
    let y = m.infer(&ins).unwrap();
    assert_close(
        &y[0],
        &[1, 2, 6],
        &[
            -0.09518082,
            -0.02057964,
            -0.06173890,
            0.06755273,
            0.01460600,
            0.04381798,
            0.00210885,
            -0.01262077,
            -0.09761352,
            0.10943762,
            0.00925303,
            -0.03808032,
        ],
    );
    assert_close(
        &y[1],
        &[1, 1, 2, 3],
        &[
            -0.08811092,
            -0.02106993,
            -0.07243478,
            0.18480736,
            0.00294483,
            -0.16029049,
        ],
    );
    // The gradient of the output's sum with respect to the key, against
    // central differences (in f64).
    let ins = linear_attention_inputs(DType::F64);
    let loss = |k: &Tensor| -> f64 {
        let mut x = ins.clone();
        x[1] = k.clone();
        m.infer(&x).unwrap()[0].to_f64_vec().iter().sum()
    };
    let g = Graph::new();
    let vars: Vec<_> = ins.iter().map(|t| g.variable(t.clone())).collect();
    let refs: Vec<_> = vars.iter().collect();
    let y = m.forward(&g, &refs).unwrap();
    let grads = y[0].sum().backward().unwrap();
    let dk = grads.try_wrt(&vars[1]).unwrap().to_f64_vec();
    let k = ins[1].to_f64_vec();
    for i in 0..k.len() {
        let h = 1e-6;
        let at = |d: f64| {
            let mut v = k.clone();
            v[i] += d;
            loss(&Tensor::from_vec(v, &[1, 2, 2]).unwrap())
        };
        let want = (at(h) - at(-h)) / (2.0 * h);
        assert!((dk[i] - want).abs() < 1e-6, "{i}: {} against {want}", dk[i]);
    }
    // A gated rule without its decay is an error naming the op.
    let attrs = vec![int("q_num_heads", 2), int("kv_num_heads", 1)];
    let m = import(node("LinearAttention", &["q", "k", "v"], &["y"], attrs), 27).unwrap();
    let e = m.infer(&ins[..3]).unwrap_err().to_string();
    assert!(e.contains("LinearAttention") && e.contains("decay"), "{e}");
}

#[test]
fn flex_attention_runs_its_score_modifier_subgraph() {
    let q: Vec<f32> = (0..12).map(|i| (i % 5) as f32 * 0.25 - 0.5).collect();
    let k: Vec<f32> = (0..9).map(|i| (i % 4) as f32 * 0.3 - 0.4).collect();
    let v: Vec<f32> = (0..6).map(|i| (i % 3) as f32 * 0.5 - 0.2).collect();
    // score_mod: the scores times an initializer 2.
    let mut times_two = graph("mod", node("Mul", &["s", "two"], &["o"], vec![]));
    times_two.input.truncate(1);
    times_two.initializer.push(TensorProto {
        name: Some("two".into()),
        data_type: Some(1),
        float_data: vec![2.0],
        ..Default::default()
    });
    let flex = |sub: GraphProto| {
        let mut n = node("FlexAttention", &["q", "k", "v"], &["y"], vec![]);
        n.domain = Some("ai.onnx.preview".into());
        n.attribute.push(AttributeProto {
            name: Some("score_mod".into()),
            g: Some(sub),
            r#type: Some(AttributeType::Graph as i32),
            ..Default::default()
        });
        import(n, 26)
    };
    let m = flex(times_two.clone()).unwrap();
    let y = m
        .infer(&[
            f32s(&q, &[1, 2, 2, 3]),
            f32s(&k, &[1, 1, 3, 3]),
            f32s(&v, &[1, 1, 3, 2]),
        ])
        .unwrap();
    assert_close(
        &y[0],
        &[1, 2, 2, 2],
        &[
            0.22166733, 0.28800809, 0.33173650, 0.41561121, 0.23936959, 0.30000001, 0.43505681,
            0.18658388,
        ],
    );
    // An op the importer does not run, inside the subgraph, is refused at load.
    times_two.node[0].op_type = Some("NoSuchOp".into());
    let e = flex(times_two).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("score_mod"), "{e}");
}

#[test]
fn bf16_attention_and_softmax_round_each_step_to_bf16() {
    let bf = |v: &[f64], s: &[usize]| Tensor::from_f64_slice(v, s, DType::BF16).unwrap();
    let q = bf(
        &[
            0.75,
            0.279296875,
            0.490234375,
            0.98046875,
            0.9609375,
            0.71875,
            0.5390625,
            0.279296875,
        ],
        &[1, 1, 2, 4],
    );
    let k = bf(
        &[
            0.16015625,
            0.96875,
            0.51953125,
            0.1201171875,
            0.62109375,
            0.78125,
            0.609375,
            0.921875,
            0.0400390625,
            0.53125,
            0.4609375,
            0.06005859375,
        ],
        &[1, 1, 3, 4],
    );
    let v = bf(
        &[
            0.640625,
            0.8515625,
            0.58984375,
            0.259765625,
            0.83984375,
            0.51171875,
            0.51171875,
            0.75,
            0.150390625,
            0.8203125,
            0.6796875,
            0.7890625,
        ],
        &[1, 1, 3, 4],
    );
    let causal = vec![int("is_causal", 1)];
    let m = import(node("Attention", &["q", "k", "v"], &["y"], causal), 24).unwrap();
    let y = m.infer(&[q, k, v]).unwrap();
    assert_eq!(y[0].dtype(), DType::BF16);
    // Rounded once at the end, element 6 would be 0.546875.
    assert_eq!(
        y[0].to_f64_vec(),
        vec![
            0.640625,
            0.8515625,
            0.58984375,
            0.259765625,
            0.75390625,
            0.65625,
            0.54296875,
            0.5390625
        ]
    );
    let x = bf(
        &[
            0.10009765625,
            0.69921875,
            1.8984375,
            -0.400390625,
            2.296875,
            0.050048828125,
            1.1015625,
            0.30078125,
            0.8984375,
        ],
        &[1, 9],
    );
    let m = import(node("Softmax", &["x"], &["y"], vec![]), 13).unwrap();
    let y = m.infer(&[x]).unwrap();
    assert_eq!(y[0].dtype(), DType::BF16);
    assert_eq!(
        y[0].to_f64_vec(),
        vec![
            0.03857421875,
            0.07080078125,
            0.2353515625,
            0.0234375,
            0.349609375,
            0.036865234375,
            0.10595703125,
            0.04736328125,
            0.08642578125
        ]
    );
}

#[test]
fn scan_carries_its_state_reads_the_enclosing_graph_and_differentiates() {
    // body(acc, x) = (acc + x·w, acc + x·w), with `w` the outer graph's input.
    let body = GraphProto {
        name: Some("body".into()),
        node: vec![
            node("Mul", &["x", "w"], &["xw"], vec![]),
            node("Add", &["acc", "xw"], &["next"], vec![]),
            node("Identity", &["next"], &["out"], vec![]),
        ],
        input: vec![value_info("acc", None), value_info("x", None)],
        output: vec![value_info("next", None), value_info("out", None)],
        ..Default::default()
    };
    let mut scan = node(
        "Scan",
        &["init", "xs"],
        &["last", "ys"],
        vec![int("num_scan_inputs", 1)],
    );
    scan.attribute.push(AttributeProto {
        name: Some("body".into()),
        g: Some(body),
        r#type: Some(AttributeType::Graph as i32),
        ..Default::default()
    });
    let build = |opset: i64| {
        let mut g = graph("g", scan.clone());
        g.input.push(value_info("w", None));
        let m = ModelProto {
            ir_version: Some(10),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(opset),
            }],
            graph: Some(g),
            ..Default::default()
        };
        OnnxModel::from_bytes(&m.encode_to_vec())
    };
    let m = build(21).unwrap();
    let init = f32s(&[0.0, 1.0], &[2]);
    let xs = f32s(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2]);
    let w = f32s(&[2.0], &[1]);
    let y = m.infer(&[init.clone(), xs.clone(), w.clone()]).unwrap();
    assert_close(&y[0], &[2], &[18.0, 25.0]);
    assert_close(&y[1], &[3, 2], &[2.0, 5.0, 8.0, 13.0, 18.0, 25.0]);
    // d sum(last) / d w: every x once.
    let g = Graph::new();
    let (init, xs, w) = (g.constant(init), g.constant(xs), g.variable(w));
    let y = m.forward(&g, &[&init, &xs, &w]).unwrap();
    let grads = y[0].sum().backward().unwrap();
    assert_close(&grads.try_wrt(&w).unwrap(), &[1], &[21.0]);
    // Opset 8's batched Scan is refused by name.
    let e = build(8).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("opset 9"), "{e}");
}
