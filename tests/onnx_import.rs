//! ONNX import against PyTorch: small models defined in PyTorch and written
//! by `torch.onnx.export` (`tests/reference/onnx_reference.py`; the files
//! are committed in `tests/reference/onnx/`), read by `OnnxModel`, match
//! PyTorch's outputs within 1e-5 at two batch sizes; two of them, fine-tuned
//! for three steps with the usual optimizers, match the same steps in
//! PyTorch (losses and every parameter) within 1e-4.

#![cfg(feature = "onnx")]

use std::path::PathBuf;

use retrograd::io::load_tensors;
use retrograd::nn::Module;
use retrograd::onnx::OnnxModel;
use retrograd::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use retrograd::{DType, Graph, Tensor};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference/onnx")
        .join(name)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// Runs fixture `name` on every recorded case; returns the worst difference.
fn check(name: &str) -> f64 {
    let model =
        OnnxModel::load(fixture(&format!("{name}.onnx"))).unwrap_or_else(|e| panic!("{name}: {e}"));
    let io = load_tensors(fixture(&format!("{name}.io.safetensors")))
        .unwrap()
        .tensors;
    let mut worst = 0.0f64;
    for k in 0.. {
        let key = |n: &str| format!("case{k}.{n}");
        if !io.contains_key(&key(model.input_names()[0])) {
            assert!(k > 0, "{name}: no cases");
            break;
        }
        let inputs: Vec<Tensor> = model
            .input_names()
            .iter()
            .map(|n| io[&key(n)].clone())
            .collect();
        let outputs = model
            .infer(&inputs)
            .unwrap_or_else(|e| panic!("{name} case {k}: {e}"));
        for (n, got) in model.output_names().iter().zip(&outputs) {
            let d = max_diff(got, &io[&key(n)]);
            assert!(
                d <= 1e-5,
                "{name} case {k}: output `{n}` differs from PyTorch by {d}"
            );
            worst = worst.max(d);
        }
    }
    println!(
        "{name}: {} nodes run ({:?}); worst difference from PyTorch {worst:.3e}",
        model.op_types().len(),
        {
            let mut ops: Vec<&str> = model.op_types();
            ops.sort_unstable();
            ops.dedup();
            ops
        }
    );
    worst
}

#[test]
fn mlp_matches_pytorch() {
    check("mlp");
}

#[test]
fn cnn_with_batch_norm_folded_matches_pytorch() {
    check("cnn");
}

/// Each convolution block (`Conv`, `Relu`, 2x2 `MaxPool`) of the CNN runs
/// as one fused step.
#[test]
fn cnn_convolution_blocks_run_fused() {
    let model = OnnxModel::load(fixture("cnn.onnx")).unwrap();
    let ops = model.op_types();
    let fused = ops
        .iter()
        .filter(|o| **o == "Conv+Relu+MaxPool (fused)")
        .count();
    assert_eq!(fused, 2, "{ops:?}");
    assert!(
        !ops.contains(&"MaxPool") && !ops.contains(&"Conv"),
        "{ops:?}"
    );
}

/// `profile` times each node that runs, under its op type (a fused
/// block's), and refuses zero runs.
#[test]
fn a_profile_has_a_part_per_node_that_runs() {
    let model = OnnxModel::load(fixture("cnn.onnx")).unwrap();
    let io = load_tensors(fixture("cnn.io.safetensors")).unwrap().tensors;
    let input = io[&format!("case0.{}", model.input_names()[0])].clone();
    let profile = model.profile(std::slice::from_ref(&input), 3).unwrap();
    assert_eq!(profile.runs(), 3);
    let kinds: Vec<&str> = profile.parts().iter().map(|p| p.kind.as_str()).collect();
    assert_eq!(kinds, model.op_types());
    let fused = profile
        .by_kind()
        .into_iter()
        .find(|k| k.kind == "Conv+Relu+MaxPool (fused)")
        .expect("the fused blocks are a kind");
    assert_eq!(fused.parts, 2);
    assert!(
        profile.parts().iter().all(|p| p.label.starts_with("node ")),
        "{profile}"
    );
    assert!(matches!(
        model.profile(&[input], 0),
        Err(retrograd::Error::InvalidArgument { op: "profile", .. })
    ));
}

#[test]
fn cnn_with_batch_norm_nodes_matches_pytorch() {
    check("cnn_bn");
    let model = OnnxModel::load(fixture("cnn_bn.onnx")).unwrap();
    // The running statistics are buffers, never trained; the rest are
    // parameters under PyTorch's names.
    let buffers: Vec<String> = model.buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers.len(), 4, "{buffers:?}");
    assert!(buffers
        .iter()
        .all(|n| n.ends_with("running_mean") || n.ends_with("running_var")));
    let params: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
    assert!(
        params.contains(&"1.weight".to_string()) && params.contains(&"12.bias".to_string()),
        "{params:?}"
    );
}

#[test]
fn gpt_from_the_torchscript_exporter_matches_pytorch() {
    check("gpt");
    fused(&["gpt", "gpt_dynamo", "bert"]);
}

/// Each fixture's attention (one per layer) and GELU run as retrograd's
/// fused ops: no `Softmax` or `Erf` node is left.
fn fused(names: &[&str]) {
    for name in names {
        let model = OnnxModel::load(fixture(&format!("{name}.onnx"))).unwrap();
        let ops = model.op_types();
        let count = |op: &str| ops.iter().filter(|o| **o == op).count();
        assert!(count("Attention (fused)") >= 2, "{name}: {ops:?}");
        assert_eq!(count("Softmax") + count("Erf"), 0, "{name}: {ops:?}");
        assert!(count("Gelu") >= 2, "{name}: {ops:?}");
        // The linear layers' MatMul + Add of a bias: one step each.
        assert!(count("MatMul+Add (fused)") >= 4, "{name}: {ops:?}");
        // A post-norm residual (BERT): `Add` then `LayerNormalization`, one step.
        if *name == "bert" {
            assert!(
                count("Add+LayerNormalization (fused)") >= 4,
                "{name}: {ops:?}"
            );
        }
    }
}

/// The fused steps' fast paths (the bias product of `MatMul+Add` and
/// `Gemm`, max pooling without indices) run where nothing requires grad;
/// on a graph that trains, the same steps run as the composed ops. Both
/// give the same outputs on every fixture, within the last bits the
/// bias product's order of addition moves.
#[test]
fn fused_inference_matches_the_composed_ops() {
    for name in ["mlp", "cnn", "gpt", "gpt_dynamo", "bert"] {
        let model = OnnxModel::load(fixture(&format!("{name}.onnx"))).unwrap();
        let io = load_tensors(fixture(&format!("{name}.io.safetensors")))
            .unwrap()
            .tensors;
        let inputs: Vec<Tensor> = model
            .input_names()
            .iter()
            .map(|n| io[&format!("case0.{n}")].clone())
            .collect();
        let fast = model.infer(&inputs).unwrap();
        let g = Graph::new();
        let vars: Vec<_> = inputs.iter().map(|t| g.constant(t.clone())).collect();
        let refs: Vec<_> = vars.iter().collect();
        let composed = model.forward(&g, &refs).unwrap();
        assert!(
            !g.is_empty(),
            "{name}: the parameters are variables, so nodes are recorded"
        );
        for (a, b) in fast.iter().zip(&composed) {
            let scale = b
                .value()
                .to_f64_vec()
                .iter()
                .fold(1.0f64, |m, v| m.max(v.abs()));
            let d = max_diff(a, b.value());
            assert!(
                d <= 2e-6 * scale,
                "{name}: fused and composed differ by {d}"
            );
        }
    }
}

#[test]
fn gpt_from_the_dynamo_exporter_with_external_data_matches_pytorch() {
    check("gpt_dynamo");
    // The weights live in a file beside the model: reading bytes alone cannot find them.
    let bytes = std::fs::read(fixture("gpt_dynamo.onnx")).unwrap();
    let err = OnnxModel::from_bytes(&bytes).unwrap_err();
    assert!(err.to_string().contains("external file"), "{err}");
}

#[test]
fn bert_encoder_with_an_attention_mask_matches_pytorch() {
    check("bert");
}

/// Three steps of `opt` on the fixture's batch: the losses before each
/// update and every parameter after them, against PyTorch's.
fn fine_tune(name: &str, mut opt: impl FnMut(&OnnxModel) -> Box<dyn Optimizer>) {
    let model = OnnxModel::load(fixture(&format!("{name}.onnx"))).unwrap();
    let reference = load_tensors(fixture(&format!("{name}.finetune.safetensors")))
        .unwrap()
        .tensors;
    let x = reference["step.input"].clone();
    let target: Vec<usize> = reference["step.target"]
        .to_f64_vec()
        .iter()
        .map(|&v| v as usize)
        .collect();
    let want_losses = reference["losses"].to_f64_vec();
    let mut optimizer = opt(&model);
    let mut losses = Vec::new();
    for _ in 0..want_losses.len() {
        let graph = Graph::new();
        let out = model
            .forward(&graph, &[&graph.constant(x.clone())])
            .unwrap();
        let loss = out[0].try_cross_entropy(&target[..]).unwrap();
        losses.push(loss.value().item());
        optimizer.step(&loss.backward().unwrap()).unwrap();
    }
    for (k, (got, want)) in losses.iter().zip(&want_losses).enumerate() {
        assert!(
            (got - want).abs() <= 1e-4,
            "{name} step {k}: loss {got} vs PyTorch {want}"
        );
    }
    let mut worst = 0.0f64;
    for (n, p) in model.parameters() {
        let want = reference
            .get(&format!("final.{n}"))
            .unwrap_or_else(|| panic!("{name}: PyTorch has no parameter `{n}`"));
        let d = max_diff(&p.value(), want);
        assert!(
            d <= 1e-4,
            "{name}: parameter `{n}` after fine-tuning differs by {d}"
        );
        worst = worst.max(d);
    }
    println!("{name}: losses {losses:?} (PyTorch {want_losses:?}); parameters within {worst:.3e}");
}

#[test]
fn imported_mlp_fine_tunes_with_adam_as_pytorch_does() {
    fine_tune("mlp", |m| {
        Box::new(Adam::new(m.parameters(), AdamConfig::default().lr(0.01)).unwrap())
    });
}

#[test]
fn imported_cnn_fine_tunes_with_sgd_momentum_as_pytorch_does() {
    fine_tune("cnn_bn", |m| {
        Box::new(Sgd::new(m.parameters(), SgdConfig::new(0.05).momentum(0.9)).unwrap())
    });
}

#[test]
fn imported_parameters_are_f32_and_trainable() {
    let model = OnnxModel::load(fixture("gpt.onnx")).unwrap();
    assert!(model
        .parameters()
        .iter()
        .all(|(_, p)| p.dtype() == DType::F32));
    let graph = Graph::new();
    let tokens = graph.constant(Tensor::from_vec(vec![1i64; 8], &[1, 8]).unwrap());
    let out = model.forward(&graph, &[&tokens]).unwrap();
    let grads = out[0].sum().backward().unwrap();
    // Every weight the logits depend on gets a gradient.
    let reached = model
        .parameters()
        .iter()
        .filter(|(_, p)| grads.get_param(p).is_some())
        .count();
    assert_eq!(reached, model.parameters().len());
}
