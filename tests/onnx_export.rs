//! ONNX export, checked through the importer: every op of the registry
//! (asked of the registry, not listed) either exports to a graph that the
//! importer runs to the same values, or is refused with
//! `Error::OnnxExport` naming it; the README models (an MLP, the CNN with
//! batch norm in eval mode, a GPT) export, import to the same outputs at
//! another batch size, and round-trip: export, import, export again gives
//! the same nodes and initializers.
//!
//! With `RETROGRAD_ONNX_OPS_DIR` set, every per-op model is also written
//! there with its inputs and outputs, for `tests/reference/onnx_export_check.py`
//! to run in onnxruntime (`.ci/run` does).

#![cfg(feature = "onnx")]

#[path = "support/registry_ops.rs"]
mod registry_ops;

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::nn::{Forward, Gpt, GptConfig, Module, Sequential};
use retrograd::onnx::{can_export, Exporter, OnnxModel, EXPORT_OPSET, MAX_EXPORT_OPSET};
use retrograd::{DType, Error, Graph, Tensor, Var};

/// The largest absolute difference between two tensors of one shape.
fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| if x == &y { 0.0 } else { (x - y).abs() })
        .fold(0.0, f64::max)
}

/// `inputs` as f32 (the dtype ONNX runtimes support for every op).
fn as_f32(inputs: Vec<Tensor>) -> Vec<Tensor> {
    inputs
        .into_iter()
        .map(|t| {
            if t.dtype() == DType::F64 {
                t.to_dtype(DType::F32)
            } else {
                t
            }
        })
        .collect()
}

/// Records `apply` on `inputs` (floats as variables), exports the graph
/// with inputs `in0..` and output `out` at `opset`, and returns the
/// bytes and the recorded output.
fn export_one(
    inputs: &[Tensor],
    apply: impl for<'g> Fn(&[Var<'g>]) -> retrograd::Result<Var<'g>>,
    opset: i64,
) -> retrograd::Result<(Vec<u8>, Tensor)> {
    let graph = Graph::new();
    graph.set_tracing(true);
    let vars: Vec<Var<'_>> = inputs
        .iter()
        .map(|t| {
            if t.is_float() {
                graph.variable(t.clone())
            } else {
                graph.constant(t.clone())
            }
        })
        .collect();
    let y = apply(&vars)?;
    let mut e = Exporter::new(&graph).output("out", &y).opset(opset);
    for (i, v) in vars.iter().enumerate() {
        e = e.input(&format!("in{i}"), v);
    }
    Ok((e.to_bytes()?, y.value().clone()))
}

/// Writes a per-op model and its io for the onnxruntime check, when asked.
fn keep_for_onnxruntime(name: &str, bytes: &[u8], inputs: &[Tensor], output: &Tensor) {
    let Ok(dir) = std::env::var("RETROGRAD_ONNX_OPS_DIR") else {
        return;
    };
    let dir = std::path::Path::new(&dir);
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join(format!("{name}.onnx")), bytes).unwrap();
    let mut io = BTreeMap::new();
    for (i, t) in inputs.iter().enumerate() {
        io.insert(format!("case0.in{i}"), t.clone());
    }
    io.insert("case0.out".to_string(), output.clone());
    retrograd::io::save_tensors(
        dir.join(format!("{name}.io.safetensors")),
        &io,
        &BTreeMap::new(),
    )
    .unwrap();
}

/// Exports one op applied to `inputs`: the importer must give back the
/// same values, or the export must be refused naming the op.
fn check_op(
    label: &str,
    name: &str,
    inputs: Vec<Tensor>,
    apply: impl for<'g> Fn(&[Var<'g>]) -> retrograd::Result<Var<'g>>,
) -> bool {
    let inputs = as_f32(inputs);
    match export_one(&inputs, &apply, EXPORT_OPSET) {
        Ok((bytes, expected)) => {
            assert!(
                can_export(name),
                "{label}: exported, but can_export says no"
            );
            // The default opset, and the newest, whose forms differ.
            let newest = export_one(&inputs, &apply, MAX_EXPORT_OPSET)
                .unwrap_or_else(|e| panic!("{label}: export at opset {MAX_EXPORT_OPSET}: {e}"))
                .0;
            let file = label.replace([' ', '(', ')'], "_");
            for (bytes, file) in [
                (bytes, file.clone()),
                (newest, format!("{file}.opset{MAX_EXPORT_OPSET}")),
            ] {
                let model =
                    OnnxModel::from_bytes(&bytes).unwrap_or_else(|e| panic!("{file}: import: {e}"));
                let got = model
                    .infer(&inputs)
                    .unwrap_or_else(|e| panic!("{file}: run: {e}"));
                let diff = max_diff(&got[0].to_dtype(DType::F64), &expected.to_dtype(DType::F64));
                assert!(diff <= 1e-5, "{file}: imported value differs by {diff}");
                keep_for_onnxruntime(&file, &bytes, &inputs, &expected);
            }
            true
        }
        Err(Error::OnnxExport { op, .. }) => {
            assert_eq!(op, name, "{label}: the error names another op");
            false
        }
        Err(e) => panic!("{label}: export failed without naming the op: {e}"),
    }
}

#[test]
fn every_registry_op_exports_to_the_same_values_or_is_refused_by_name() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let (mut exported, mut refused) = (Vec::new(), Vec::new());
    for inst in registry_ops::elementwise() {
        let inputs = registry_ops::sample_inputs(inst, 6, &mut rng);
        let ok = check_op(&inst.label, &inst.name, inputs, |v| {
            let refs: Vec<&Var<'_>> = v.iter().collect();
            inst.apply(&refs)
        });
        if ok {
            exported.push(inst.label.clone())
        } else {
            refused.push(inst.label.clone())
        }
    }
    for op in registry_ops::structured() {
        let all = op.inputs(0);
        let ok = check_op(&op.name, &op.name, all.clone(), |v| op.apply(v));
        if ok {
            exported.push(op.name.clone())
        } else {
            refused.push(op.name.clone())
        }
    }
    for (label, inputs, apply) in other_cases() {
        let name = label.split(' ').next().unwrap_or(label);
        let ok = check_op(label, name, inputs, apply);
        if ok {
            exported.push(label.to_string())
        } else {
            refused.push(label.to_string())
        }
    }
    println!(
        "exported: {}\nrefused: {}",
        exported.join(", "),
        refused.join(", ")
    );
    // Every op the exporter claims was exported (or refused by name) here.
    for name in retrograd::OpRegistry::default_shared().names() {
        let tried = exported
            .iter()
            .chain(&refused)
            .any(|l| l == name || l.starts_with(&format!("{name} ")));
        assert!(
            !can_export(name) || tried,
            "{name} has a mapper but no case in this test"
        );
    }
    for needed in [
        "conv2d",
        "max_pool2d",
        "batch_norm",
        "layer_norm",
        "softmax",
        "embedding",
        "where",
        "scaled_dot_product_attention",
    ] {
        assert!(
            exported.iter().any(|e| e.starts_with(needed)),
            "{needed} did not export"
        );
    }
    assert!(
        refused.iter().any(|r| r == "dropout"),
        "training-mode dropout must be refused"
    );
}

type Apply = Box<dyn for<'g> Fn(&[Var<'g>]) -> retrograd::Result<Var<'g>>>;

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, seed).unwrap()
}

fn ids(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

/// Cases for the registry ops that declare no sample inputs (views,
/// reductions, products, the norms and softmax that transformers use).
fn other_cases() -> Vec<(&'static str, Vec<Tensor>, Apply)> {
    let x3 = || randn(&[2, 3, 4], 1);
    vec![
        (
            "layer_norm",
            vec![x3(), randn(&[4], 2), randn(&[4], 3)],
            Box::new(|v| v[0].try_layer_norm(&[4], Some(&v[1]), Some(&v[2]), 1e-5)),
        ),
        ("softmax", vec![x3()], Box::new(|v| v[0].try_softmax(1))),
        (
            "log_softmax",
            vec![x3()],
            Box::new(|v| v[0].try_log_softmax(-1)),
        ),
        (
            "embedding",
            vec![randn(&[5, 3], 4), ids(&[4, 0, 2, 2], &[2, 2])],
            Box::new(|v| v[0].try_embedding(&v[1], v[1].shape())),
        ),
        (
            "matmul",
            vec![x3(), randn(&[4, 5], 5)],
            Box::new(|v| v[0].try_matmul(&v[1])),
        ),
        (
            "matmul_nt",
            vec![x3(), randn(&[5, 4], 6)],
            Box::new(|v| v[0].try_matmul_transposed(&v[1], false, true)),
        ),
        (
            "matmul_nt 2-d",
            vec![randn(&[3, 4], 7), randn(&[5, 4], 6)],
            Box::new(|v| v[0].try_matmul_transposed(&v[1], false, true)),
        ),
        (
            "matmul_tn",
            vec![randn(&[4, 3], 7), randn(&[4, 5], 6)],
            Box::new(|v| v[0].try_matmul_transposed(&v[1], true, false)),
        ),
        (
            "matmul_tt",
            vec![randn(&[2, 4, 3], 7), randn(&[5, 4], 6)],
            Box::new(|v| v[0].try_matmul_transposed(&v[1], true, true)),
        ),
        (
            "reshape",
            vec![x3()],
            Box::new(|v| v[0].try_reshape(&[4, -1])),
        ),
        ("flatten", vec![x3()], Box::new(|v| v[0].try_flatten(1, -1))),
        (
            "flatten 0-1",
            vec![x3()],
            Box::new(|v| v[0].try_flatten(0, 1)),
        ),
        (
            "squeeze",
            vec![randn(&[2, 1, 3], 8)],
            Box::new(|v| v[0].try_squeeze_dim(1)),
        ),
        (
            "unsqueeze",
            vec![x3()],
            Box::new(|v| v[0].try_unsqueeze(-1)),
        ),
        (
            "expand",
            vec![randn(&[3, 1], 9)],
            Box::new(|v| v[0].try_expand(&[2, 3, 4])),
        ),
        (
            "transpose",
            vec![x3()],
            Box::new(|v| v[0].try_transpose(0, 2)),
        ),
        (
            "permute",
            vec![x3()],
            Box::new(|v| v[0].try_permute(&[1, 2, 0])),
        ),
        ("t", vec![randn(&[3, 4], 10)], Box::new(|v| v[0].try_t())),
        (
            "slice",
            vec![x3()],
            Box::new(|v| v[0].try_slice(2, 1, -1, 2)),
        ),
        (
            "slice narrow",
            vec![x3()],
            Box::new(|v| v[0].try_narrow(1, 1, 2)),
        ),
        ("select", vec![x3()], Box::new(|v| v[0].try_select(1, 2))),
        (
            "cat",
            vec![x3(), randn(&[2, 1, 4], 11)],
            Box::new(|v| Var::try_cat(&[&v[0], &v[1]], 1)),
        ),
        (
            "stack",
            vec![x3(), randn(&[2, 3, 4], 12)],
            Box::new(|v| Var::try_stack(&[&v[0], &v[1]], 0)),
        ),
        (
            "index_select",
            vec![x3()],
            Box::new(|v| v[0].try_index_select(2, &ids(&[3, 0, 3], &[3]))),
        ),
        (
            "gather",
            vec![x3()],
            Box::new(|v| {
                v[0].try_gather(2, &ids(&[0, 1, 3, 2, 1, 0, 0, 3, 2, 2, 1, 0], &[2, 3, 2]))
            }),
        ),
        (
            "constant_pad_nd",
            vec![x3()],
            Box::new(|v| v[0].try_pad(&[1, 2, 0, 1], 0.5)),
        ),
        ("sum", vec![x3()], Box::new(|v| v[0].try_sum())),
        (
            "sum_dim",
            vec![x3()],
            Box::new(|v| v[0].try_sum_axes(&[0, 2], true)),
        ),
        ("mean", vec![x3()], Box::new(|v| Ok(v[0].mean()))),
        (
            "mean_dim",
            vec![x3()],
            Box::new(|v| v[0].try_mean_axes(&[-1], false)),
        ),
        ("max", vec![x3()], Box::new(|v| v[0].try_max())),
        ("min", vec![x3()], Box::new(|v| v[0].try_min())),
        (
            "amax",
            vec![x3()],
            Box::new(|v| v[0].try_max_axes(&[1], false)),
        ),
        (
            "amin",
            vec![x3()],
            Box::new(|v| v[0].try_min_axes(&[1, 2], true)),
        ),
        (
            "var",
            vec![x3()],
            Box::new(|v| v[0].try_var(&[2], 1.0, false)),
        ),
        (
            "logsumexp",
            vec![x3()],
            Box::new(|v| v[0].try_logsumexp(&[1], true)),
        ),
        (
            "argmax",
            vec![x3()],
            Box::new(|v| {
                v[0].try_argmax(Some(2), false)?
                    .try_to_dtype(DType::F32)?
                    .try_add(&v[0].try_sum_axes(&[2], false)?)
            }),
        ),
        (
            "argmin",
            vec![x3()],
            Box::new(|v| {
                v[0].try_argmin(None, true)?
                    .try_to_dtype(DType::F32)?
                    .try_add(&v[0])
            }),
        ),
        (
            "where",
            vec![x3(), randn(&[2, 3, 4], 13)],
            Box::new(|v| v[0].try_where(&v[0].try_gt(&v[1])?, &v[1])),
        ),
        (
            "adaptive_avg_pool2d",
            vec![randn(&[2, 3, 4, 6], 14)],
            Box::new(|v| v[0].try_adaptive_avg_pool2d([2, 3])),
        ),
        (
            "adaptive_avg_pool2d 1x1",
            vec![randn(&[2, 3, 4, 6], 14)],
            Box::new(|v| v[0].try_adaptive_avg_pool2d(1)),
        ),
        (
            "dropout",
            vec![x3()],
            Box::new(|v| v[0].try_dropout(0.5, true, 3)),
        ),
    ]
}

/// The CNN of `train_mnist_cnn` (two blocks), smaller.
fn cnn() -> Sequential {
    use retrograd::nn::{Activation, BatchNorm2d, Conv2d, Flatten, Linear, MaxPool2d};
    use retrograd::ops::nn::{Conv2dOptions, MaxPool2dOptions};
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let same = Conv2dOptions::new().padding(1);
    let mut m = Sequential::new();
    m.push(Conv2d::with_bias(1, 4, 3, same, false, DType::F32, &mut rng).unwrap());
    m.push(BatchNorm2d::new(4, DType::F32).unwrap());
    m.push(Activation::Relu);
    m.push(MaxPool2d::new(MaxPool2dOptions::new(2)));
    m.push(Flatten::new());
    m.push(
        Linear::builder(4 * 4 * 4, 10)
            .dtype(DType::F32)
            .build_with(&mut rng)
            .unwrap(),
    );
    // Running statistics that are not the defaults, so they matter.
    let bn = m.buffers();
    bn[0]
        .1
        .set(Tensor::from_vec(vec![0.1f32, -0.2, 0.3, 0.0], &[4]).unwrap())
        .unwrap();
    bn[1]
        .1
        .set(Tensor::from_vec(vec![1.5f32, 0.5, 2.0, 1.0], &[4]).unwrap())
        .unwrap();
    m.set_training(false);
    m
}

fn gpt() -> Gpt {
    let config = GptConfig {
        vocab_size: 11,
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        dropout: 0.0,
        bias: true,
        activation: retrograd::nn::Activation::Gelu,
        dtype: DType::F32,
    };
    Gpt::with_rng(config, &mut ChaCha8Rng::seed_from_u64(5)).unwrap()
}

fn mlp() -> retrograd::nn::Mlp {
    retrograd::nn::Mlp::builder(&[6, 12, 4])
        .seed(1)
        .dtype(DType::F32)
        .build()
        .unwrap()
}

/// An input of `batch` for each README model.
fn example(kind: &str, batch: usize) -> Tensor {
    match kind {
        "mlp" => Tensor::randn(&[batch, 6], DType::F32, batch as u64).unwrap(),
        "cnn" => Tensor::randn(&[batch, 1, 8, 8], DType::F32, batch as u64).unwrap(),
        _ => Tensor::from_vec(
            (0..batch * 8).map(|i| (i * 7 % 11) as i64).collect(),
            &[batch, 8],
        )
        .unwrap(),
    }
}

/// Records `model` on `x` and exports it with a free batch axis.
fn export_model(model: &dyn Forward, x: &Tensor) -> Vec<u8> {
    let graph = Graph::new();
    graph.set_tracing(true);
    let v = if x.is_float() {
        graph.variable(x.clone())
    } else {
        graph.constant(x.clone())
    };
    let y = model.forward(&v).unwrap();
    Exporter::new(&graph)
        .input("input", &v)
        .output("output", &y)
        .parameters_of(model)
        .dynamic_batch("batch")
        .to_bytes()
        .unwrap()
}

fn models() -> Vec<(&'static str, Box<dyn Forward>)> {
    vec![
        ("mlp", Box::new(mlp())),
        ("cnn", Box::new(cnn())),
        ("gpt", Box::new(gpt())),
    ]
}

#[test]
fn readme_models_import_to_the_same_outputs_at_another_batch_size() {
    for (kind, model) in models() {
        let bytes = export_model(model.as_ref(), &example(kind, 3));
        let imported = OnnxModel::from_bytes(&bytes).unwrap();
        // Weights come back under the module's names.
        let names: Vec<String> = imported.parameters().into_iter().map(|(n, _)| n).collect();
        let mut expected: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
        expected.sort();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(sorted, expected, "{kind}: parameter names");
        for batch in [3, 5] {
            let x = example(kind, batch);
            let want = model
                .forward(&Var::from(x.clone()))
                .unwrap()
                .value()
                .clone();
            let got = imported.infer(&[x]).unwrap();
            let diff = max_diff(&got[0], &want);
            assert!(diff <= 1e-5, "{kind} at batch {batch}: differs by {diff}");
        }
    }
}

/// Three convolution blocks, 8 and 16 channels deep after the first:
/// deep enough that the import's fused blocks sum by Winograd's F(2x2,
/// 3x3) on an AVX-512 CPU (`ConvSummation::Winograd`), with a pooling that
/// drops a row and a column (5x5 to 2x2) and an unpooled block.
fn deep_cnn() -> Sequential {
    use retrograd::nn::{Activation, Conv2d, Flatten, Linear, MaxPool2d};
    use retrograd::ops::nn::{Conv2dOptions, MaxPool2dOptions};
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let same = Conv2dOptions::new().padding(1);
    let mut m = Sequential::new();
    for (i, (cin, cout)) in [(1, 8), (8, 16), (16, 16)].into_iter().enumerate() {
        m.push(Conv2d::with_bias(cin, cout, 3, same, true, DType::F32, &mut rng).unwrap());
        m.push(Activation::Relu);
        if i < 2 {
            m.push(MaxPool2d::new(MaxPool2dOptions::new(2)));
        }
    }
    m.push(Flatten::new());
    m.push(
        Linear::builder(16 * 2 * 2, 10)
            .dtype(DType::F32)
            .build_with(&mut rng)
            .unwrap(),
    );
    m
}

/// The imported deep CNN runs each block as one fused step and gives the
/// eager model's outputs within 1e-5, as the Winograd sums allow.
#[test]
fn deep_convolution_blocks_import_fused_to_the_eager_outputs() {
    let model = deep_cnn();
    let x =
        |batch: usize| Tensor::randn(&[batch, 1, 10, 10], DType::F32, 7 + batch as u64).unwrap();
    let imported = OnnxModel::from_bytes(&export_model(&model, &x(2))).unwrap();
    let ops = imported.op_types();
    let count = |op: &str| ops.iter().filter(|o| **o == op).count();
    assert_eq!(count("Conv+Relu+MaxPool (fused)"), 2, "{ops:?}");
    assert_eq!(count("Conv+Relu (fused)"), 1, "{ops:?}");
    for batch in [1, 4] {
        let want = model.forward(&Var::from(x(batch))).unwrap().value().clone();
        let got = imported.infer(&[x(batch)]).unwrap();
        let diff = max_diff(&got[0], &want);
        assert!(diff <= 1e-5, "batch {batch}: differs by {diff}");
    }
}

/// A model's nodes with value names replaced by where they come from (a
/// graph input, an initializer by name, the k-th output of the n-th node,
/// a constant's value), so two exports compare whatever their names.
fn canonical(bytes: &[u8]) -> (Vec<String>, BTreeMap<String, Vec<u32>>) {
    use prost::Message;
    let m = retrograd::onnx::proto::ModelProto::decode(bytes).unwrap();
    let g = m.graph.unwrap();
    let mut origin: BTreeMap<String, String> = BTreeMap::new();
    for i in &g.input {
        origin.insert(i.name().to_string(), format!("input {}", i.name()));
    }
    let inits: BTreeMap<String, Vec<u32>> = g
        .initializer
        .iter()
        .map(|t| {
            origin.insert(t.name().to_string(), format!("init {}", t.name()));
            let bits = t
                .raw_data()
                .chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap_or([0; 4])))
                .collect();
            (t.name().to_string(), bits)
        })
        .collect();
    let mut nodes = Vec::new();
    for (n, node) in g.node.iter().enumerate() {
        let ins: Vec<String> = node
            .input
            .iter()
            .map(|i| origin.get(i).cloned().unwrap_or_else(|| format!("? {i}")))
            .collect();
        let mut attrs: Vec<String> = node
            .attribute
            .iter()
            .map(|a| match &a.t {
                Some(t) => format!("{}={:?}{:?}", a.name(), t.dims, t.raw_data()),
                None => format!("{}={:?}{:?}{:?}", a.name(), a.i, a.ints, a.f),
            })
            .collect();
        attrs.sort();
        let line = format!(
            "{}({}) [{}]",
            node.op_type(),
            ins.join(", "),
            attrs.join(", ")
        );
        // A constant is known by its value, which names its readers' inputs.
        for (k, o) in node.output.iter().enumerate() {
            let src = if node.op_type() == "Constant" {
                line.clone()
            } else {
                format!("node {n}.{k}")
            };
            origin.insert(o.clone(), src);
        }
        if node.op_type() != "Constant" {
            nodes.push(line);
        }
    }
    // Graph outputs by what writes them.
    for o in &g.output {
        nodes.push(format!(
            "output {} <- {}",
            o.name(),
            origin.get(o.name()).cloned().unwrap_or_default()
        ));
    }
    // Node numbers count only non-constant nodes in both.
    (nodes, inits)
}

#[test]
fn export_import_export_gives_the_same_nodes_and_initializers() {
    for (kind, model) in models() {
        let x = example(kind, 2);
        let first = export_model(model.as_ref(), &x);
        let imported = OnnxModel::from_bytes(&first).unwrap();
        let second = export_model(&ImportedForward(&imported), &x);
        let (a, b) = (canonical(&first), canonical(&second));
        assert_eq!(a.1, b.1, "{kind}: initializers differ");
        assert_eq!(
            a.0.len(),
            b.0.len(),
            "{kind}: node counts differ:\n{:#?}\n{:#?}",
            a.0,
            b.0
        );
        for (x, y) in a.0.iter().zip(&b.0) {
            assert_eq!(
                strip_node_numbers(x),
                strip_node_numbers(y),
                "{kind}: nodes differ"
            );
        }
    }
}

/// Node references renumbered by order of first appearance are equal when
/// the graphs are; constant nodes' positions may shift, so compare the
/// structure without absolute numbers.
fn strip_node_numbers(line: &str) -> String {
    line.split("node ")
        .enumerate()
        .map(|(i, part)| {
            if i == 0 {
                part.to_string()
            } else {
                part.trim_start_matches(|c: char| c.is_ascii_digit())
                    .to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("node")
}

/// An imported model as a one-input `Forward`, to export it again.
struct ImportedForward<'m>(&'m OnnxModel);

impl Module for ImportedForward<'_> {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &retrograd::nn::Parameter)) {
        self.0.visit_parameters(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &retrograd::nn::Buffer)) {
        self.0.visit_buffers(prefix, f)
    }
}

impl Forward for ImportedForward<'_> {
    fn forward<'g>(&self, x: &Var<'g>) -> retrograd::Result<Var<'g>> {
        Ok(self.0.forward(x.graph(), &[x])?.remove(0))
    }
}

#[test]
fn ops_without_an_onnx_form_are_refused_by_name() {
    let g = Graph::new();
    g.set_tracing(true);
    let x = g.variable(Tensor::randn(&[4, 3], DType::F32, 0).unwrap());
    let loss = x.try_cross_entropy(&[0usize, 1, 2, 0]).unwrap();
    let err = Exporter::new(&g)
        .input("x", &x)
        .output("loss", &loss)
        .to_bytes()
        .unwrap_err();
    assert!(
        matches!(&err, Error::OnnxExport { op, .. } if op == "cross_entropy"),
        "{err}"
    );
    let d = x.try_dropout(0.5, true, 1).unwrap();
    let err = Exporter::new(&g)
        .input("x", &x)
        .output("d", &d)
        .to_bytes()
        .unwrap_err();
    assert!(
        err.to_string().contains("dropout") && err.to_string().contains("eval mode"),
        "{err}"
    );
    // An input that only an index list depends on is not an input of the graph.
    let w = g.variable(Tensor::randn(&[5, 2], DType::F32, 1).unwrap());
    let ids = g.constant(Tensor::from_vec(vec![1i64, 3], &[2]).unwrap());
    let e = w.try_embedding(&ids.value().clone(), &[2]).unwrap();
    let err = Exporter::new(&g)
        .input("ids", &ids)
        .output("e", &e)
        .to_bytes()
        .unwrap_err();
    assert!(err.to_string().contains("does not feed"), "{err}");
    // Through the ids as an input it exports.
    let e = w.try_embedding(&ids, ids.shape()).unwrap();
    assert!(Exporter::new(&g)
        .input("ids", &ids)
        .output("e", &e)
        .to_bytes()
        .is_ok());
}
