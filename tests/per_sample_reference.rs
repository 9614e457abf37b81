//! Per-sample gradients (`func::try_per_sample_gradients`) against
//! torch.func's `vmap(grad(loss of one example))`, for three small models
//! whose parameters, inputs, targets and gradients
//! `tests/reference/per_sample_grads.py` wrote (its docstring describes
//! the models and the files): an MLP with a squared-error loss, the CNN of
//! `examples/support/mnist_cnn.rs` without batch norm (per-example
//! gradients of a batch norm are not per example) on tiny widths, and a
//! `nn::Block` (causal self-attention, layer norms, GELU) with a
//! cross-entropy loss. Each in f64 (every gradient within 1e-12 of
//! torch's, relative to max(1, |value|)) and in f32 (within 1e-5); and the
//! MLP's per-sample gradients against one ordinary backward per example.
//!
//! `PER_SAMPLE_DEVIATIONS=1` prints the largest deviation of each model
//! and dtype; the test prints nothing otherwise.

use std::path::{Path, PathBuf};

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::func::{try_per_sample_gradients, Randomness};
use retrograd::hub::Weights;
use retrograd::nn::{
    Activation, Block, Conv2d, Flatten, Forward, Linear, MaxPool2d, MaxPool2dOptions, Module,
    Sequential, StateDict,
};
use retrograd::ops::nn::Conv2dOptions;
use retrograd::{CrossEntropyOptions, DType, Graph, Result, Tensor, Var};

/// A fixture file, `tests/reference/per_sample/{model}_{f64|f32}.safetensors`.
fn fixture(model: &str, dtype: DType) -> Weights {
    let tag = match dtype {
        DType::F64 => "f64",
        DType::F32 => "f32",
        other => panic!("no fixtures in {other:?}"),
    };
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference/per_sample")
        .join(format!("{model}_{tag}.safetensors"));
    Weights::open(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (the fixtures are committed; tests/reference/per_sample_grads.py writes them)",
            path.display()
        )
    })
}

/// Loads the fixture's parameters into `model`, strictly, after checking
/// that the file holds exactly the model's parameters, their gradients,
/// `input` and `target`.
fn load_parameters(model: &impl Module, file: &Weights, dtype: DType) {
    let params = model.parameters();
    let mut expected: Vec<String> = vec!["input".into(), "target".into()];
    for (name, _) in &params {
        expected.push(name.clone());
        expected.push(format!("grad.{name}"));
    }
    expected.sort();
    let mut names: Vec<String> = file.names().into_iter().map(String::from).collect();
    names.sort();
    assert_eq!(names, expected, "{}", file.source().display());
    let state: StateDict = params
        .iter()
        .map(|(name, _)| (name.clone(), file.tensor(name, dtype).unwrap()))
        .collect();
    model.load_state_dict(&state).unwrap();
}

/// The largest `|got - want| / max(1, |want|)` over the elements.
fn deviation(got: &Tensor, want: &Tensor) -> f64 {
    assert_eq!(got.shape(), want.shape());
    got.to_f64_vec()
        .iter()
        .zip(want.to_f64_vec())
        .map(|(a, b)| (a - b).abs() / b.abs().max(1.0))
        .fold(0.0, f64::max)
}

fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 {
        1e-12
    } else {
        1e-5
    }
}

/// `model`'s per-sample gradients of `loss` on the fixture's input and
/// target against torch.func's.
fn check<M, F>(label: &str, model: &M, file: &Weights, dtype: DType, loss: F)
where
    M: Module,
    F: for<'s> Fn(&[Var<'s>]) -> Result<Var<'s>>,
{
    let input = file.tensor("input", dtype).unwrap();
    let target = file.tensor("target", dtype).unwrap();
    let grads = try_per_sample_gradients(model, loss, &[&input, &target], Randomness::Error)
        .unwrap_or_else(|e| panic!("{label}: per-sample gradients failed: {e}"));
    let names: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
    let got_names: Vec<&String> = grads.iter().map(|(n, _)| n).collect();
    assert_eq!(got_names, names.iter().collect::<Vec<_>>(), "{label}");
    let mut worst = 0.0f64;
    let mut failures = Vec::new();
    for (name, got) in &grads {
        let want = file.tensor(&format!("grad.{name}"), dtype).unwrap();
        assert_eq!(got.dtype(), dtype, "{label}: {name}");
        assert_eq!(got.shape(), want.shape(), "{label}: {name}");
        let d = deviation(got, &want);
        worst = worst.max(d);
        if d.is_nan() || d > tolerance(dtype) {
            failures.push(format!("{name}: deviation {d:.3e}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{label}: per-sample gradients differ from torch.func's beyond {:e}:\n{}",
        tolerance(dtype),
        failures.join("\n")
    );
    if std::env::var_os("PER_SAMPLE_DEVIATIONS").is_some() {
        eprintln!("{label}: largest deviation from torch.func {worst:.3e}");
    }
}

fn rng() -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(0)
}

/// Linear(4, 8), tanh, Linear(8, 3): `0.weight`, `0.bias`, `2.weight`, `2.bias`.
fn mlp(dtype: DType) -> Sequential {
    let mut rng = rng();
    let linear =
        |i, o, rng: &mut ChaCha8Rng| Linear::builder(i, o).dtype(dtype).build_with(rng).unwrap();
    Sequential::new()
        .with(linear(4, 8, &mut rng))
        .with(Activation::Tanh)
        .with(linear(8, 3, &mut rng))
}

fn mlp_loss<'s>(model: &Sequential, v: &[Var<'s>]) -> Result<Var<'s>> {
    let out = model.forward(&v[0].try_unsqueeze(0)?)?;
    out.try_mse_loss(&v[1].try_unsqueeze(0)?)
}

/// `examples/support/mnist_cnn.rs`'s layers (no batch norm, no dropout)
/// with channels 2 and 4 on 8x8 inputs, hidden width 8, 10 classes.
fn cnn(dtype: DType) -> Sequential {
    let mut rng = rng();
    let same = Conv2dOptions::new().padding(1);
    let mut model = Sequential::new();
    let mut in_channels = 1;
    for out in [2, 4] {
        model.push(Conv2d::new(in_channels, out, 3, same, dtype, &mut rng).unwrap());
        model.push(Activation::Relu);
        model.push(MaxPool2d::new(MaxPool2dOptions::new(2)));
        in_channels = out;
    }
    model.push(Flatten::new());
    let linear =
        |i, o, rng: &mut ChaCha8Rng| Linear::builder(i, o).dtype(dtype).build_with(rng).unwrap();
    model.push(linear(in_channels * 2 * 2, 8, &mut rng));
    model.push(Activation::Relu);
    model.push(linear(8, 10, &mut rng));
    model
}

fn class_loss<'s>(logits: &Var<'s>, target: &Var<'s>) -> Result<Var<'s>> {
    let classes = *logits.shape().last().unwrap() as isize;
    logits
        .try_reshape(&[-1, classes])?
        .try_cross_entropy_input(&target.try_reshape(&[-1])?, &CrossEntropyOptions::default())
}

/// GPT-2's block, width 8, 2 heads, exact GELU (the script's `Block`).
fn block(dtype: DType) -> Block {
    Block::builder(8, 2)
        .activation(Activation::Gelu)
        .dtype(dtype)
        .build_with(&mut rng())
        .unwrap()
}

fn mlp_against_torch(dtype: DType) {
    let mut model = mlp(dtype);
    model.set_training(false);
    let file = fixture("mlp", dtype);
    load_parameters(&model, &file, dtype);
    let label = format!("mlp {dtype:?}");
    check(&label, &model, &file, dtype, |v| mlp_loss(&model, v));
}

fn cnn_against_torch(dtype: DType) {
    let mut model = cnn(dtype);
    model.set_training(false);
    let file = fixture("cnn", dtype);
    load_parameters(&model, &file, dtype);
    let label = format!("cnn {dtype:?}");
    check(&label, &model, &file, dtype, |v| {
        let logits = model.forward(&v[0].try_unsqueeze(0)?)?;
        class_loss(&logits, &v[1].try_unsqueeze(0)?)
    });
}

fn block_against_torch(dtype: DType) {
    let mut model = block(dtype);
    model.set_training(false);
    let file = fixture("block", dtype);
    load_parameters(&model, &file, dtype);
    let label = format!("block {dtype:?}");
    check(&label, &model, &file, dtype, |v| {
        let out = model.forward(&v[0].try_unsqueeze(0)?)?;
        class_loss(&out, &v[1].try_unsqueeze(0)?)
    });
}

#[test]
fn mlp_f64_matches_torch_func() {
    mlp_against_torch(DType::F64);
}

#[test]
fn mlp_f32_matches_torch_func() {
    mlp_against_torch(DType::F32);
}

#[test]
fn cnn_f64_matches_torch_func() {
    cnn_against_torch(DType::F64);
}

#[test]
fn cnn_f32_matches_torch_func() {
    cnn_against_torch(DType::F32);
}

#[test]
fn block_f64_matches_torch_func() {
    block_against_torch(DType::F64);
}

#[test]
fn block_f32_matches_torch_func() {
    block_against_torch(DType::F32);
}

/// The MLP's per-sample gradients against one ordinary backward pass per
/// example, in f64: within 1e-14 relative to max(1, |value|). They were
/// equal bit for bit when this was written; the margin lets a batching
/// rule add in another order without failing this.
#[test]
fn mlp_per_sample_gradients_equal_one_backward_per_example() {
    let dtype = DType::F64;
    let model = mlp(dtype);
    let file = fixture("mlp", dtype);
    load_parameters(&model, &file, dtype);
    let input = file.tensor("input", dtype).unwrap();
    let target = file.tensor("target", dtype).unwrap();
    let data = [&input, &target];
    let grads = try_per_sample_gradients(&model, |v| mlp_loss(&model, v), &data, Randomness::Error)
        .unwrap_or_else(|e| panic!("mlp F64: per-sample gradients failed: {e}"));
    let mut worst = 0.0f64;
    let mut bitwise = true;
    for b in 0..input.shape()[0] {
        let g = Graph::new();
        let x = g.constant(input.select(0, b).unwrap().contiguous());
        let t = g.constant(target.select(0, b).unwrap().contiguous());
        let single = mlp_loss(&model, &[x, t]).unwrap().backward().unwrap();
        for ((name, p), (_, per)) in model.parameters().iter().zip(&grads) {
            let want = single.of(p);
            let got = per.select(0, b).unwrap().contiguous();
            let d = deviation(&got, &want);
            assert!(
                d <= 1e-14,
                "example {b}, {name}: per-sample gradient {:?} vs one backward {:?} (deviation {d:.3e})",
                got.to_f64_vec(),
                want.to_f64_vec()
            );
            worst = worst.max(d);
            bitwise &= got.to_f64_vec() == want.to_f64_vec();
        }
    }
    if std::env::var_os("PER_SAMPLE_DEVIATIONS").is_some() {
        eprintln!(
            "mlp F64 against one backward per example: largest deviation {worst:.3e}, bit for bit: {bitwise}"
        );
    }
}
