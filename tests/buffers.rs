//! Module buffers (batch norm's running statistics): named and nested like
//! PyTorch's state dict keys, saved and loaded with state dicts and
//! checkpoints (strict, all or nothing, errors naming the buffer), switched
//! by train/eval mode, and never touched by an optimizer.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::io::{load_checkpoint, load_tensors, save_checkpoint};
use retrograd::nn::{
    Activation, BatchNorm1d, BatchNorm2d, BatchNormOptions, Forward, GroupNorm, Linear, Module,
    Sequential,
};
use retrograd::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use retrograd::{DType, Error, Graph, Tensor, TensorProblem};

/// Linear(4, 3) -> BatchNorm1d(3) -> ReLU -> Linear(3, 2), seeded.
fn model(seed: u64) -> Sequential {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Sequential::new()
        .with(
            Linear::builder(4, 3)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
        .with(BatchNorm1d::new(3, DType::F64).unwrap())
        .with(Activation::Relu)
        .with(
            Linear::builder(3, 2)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
}

fn batch(k: u64) -> Tensor {
    Tensor::randn(&[8, 4], DType::F64, 100 + k).unwrap()
}

/// One training step of `model` with `opt` on batch `k`.
fn step(model: &Sequential, opt: &mut dyn Optimizer, k: u64) {
    let g = Graph::new();
    let y = model.forward(&g.constant(batch(k))).unwrap();
    let grads = (&y * &y).sum().backward().unwrap();
    opt.step(&grads).unwrap();
}

#[test]
fn buffers_are_named_like_pytorch_and_kept_apart_from_parameters() {
    let m = model(1);
    let names: Vec<String> = m.buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    let params: Vec<String> = m.parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        params,
        ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
    );
    let state = m.state_dict();
    assert_eq!(state.len(), 9);
    assert_eq!(state["1.running_var"].to_f64_vec(), vec![1.0; 3]);
    assert_eq!(state["1.num_batches_tracked"].shape(), &[] as &[usize]);
    // Box<dyn Forward> forwards buffers too.
    let boxed: Box<dyn Forward> = Box::new(model(1));
    assert_eq!(boxed.buffers().len(), 3);
    // No running statistics, no buffers; no affine, no parameters.
    let opts = BatchNormOptions::default()
        .track_running_stats(false)
        .affine(false);
    let bare = BatchNorm2d::with_options(3, opts, DType::F32).unwrap();
    assert!(bare.buffers().is_empty() && bare.parameters().is_empty());
}

#[test]
fn optimizers_never_touch_buffers_and_training_updates_them() {
    let m = model(2);
    let mut opt = Sgd::new(m.parameters(), SgdConfig::new(0.1).momentum(0.9)).unwrap();
    assert!(opt.state_dict().keys().all(|k| !k.contains("running")));
    step(&m, &mut opt, 0);
    let after_one = m.state_dict();
    assert_eq!(after_one["1.num_batches_tracked"].try_item().unwrap(), 1.0);
    // An optimizer step alone (no forward) leaves the buffers as they were.
    let g = Graph::new();
    let loss = m
        .parameters()
        .iter()
        .fold(g.constant(Tensor::scalar(0.0)), |acc, (_, p)| {
            acc + g.param(p).sum()
        });
    opt.step(&loss.backward().unwrap()).unwrap();
    for (name, b) in m.buffers() {
        assert_eq!(
            b.value(),
            after_one[&name],
            "{name} changed in an optimizer step"
        );
    }
}

#[test]
fn train_and_eval_modes_switch_what_batch_norm_uses() {
    let mut m = model(3);
    let mut opt = Adam::new(m.parameters(), AdamConfig::default().lr(0.01)).unwrap();
    for k in 0..3 {
        step(&m, &mut opt, k);
    }
    let tracked = |m: &Sequential| m.state_dict()["1.num_batches_tracked"].try_item().unwrap();
    assert_eq!(tracked(&m), 3.0);
    m.set_training(false);
    let before = m.state_dict();
    let g = Graph::new();
    let x = g.constant(batch(9));
    let eval_full = m.forward(&x).unwrap().value().clone();
    // Eval mode: the running statistics, so a row's output does not depend on the rest of the batch.
    let first = m.forward(&x.narrow(0, 0, 1)).unwrap().value().to_f64_vec();
    assert_eq!(first, eval_full.to_f64_vec()[..2]);
    assert_eq!(m.state_dict(), before, "eval mode changed a buffer");
    // Train mode: batch statistics (one row per channel is an error).
    m.set_training(true);
    let train_full = m.forward(&x).unwrap().value().clone();
    assert_ne!(train_full, eval_full);
    assert_eq!(tracked(&m), 4.0);
    assert!(m.forward(&x.narrow(0, 0, 1)).is_err());
    assert_eq!(tracked(&m), 4.0, "a failed forward updates nothing");
}

#[test]
fn state_dict_round_trip_includes_buffers_and_is_strict() {
    let a = model(4);
    let mut opt = Sgd::new(a.parameters(), SgdConfig::new(0.1)).unwrap();
    step(&a, &mut opt, 0);
    let b = model(5);
    b.load_state_dict(&a.state_dict()).unwrap();
    assert_eq!(b.state_dict(), a.state_dict());

    let c = model(6);
    let before = c.state_dict();
    let mut missing = a.state_dict();
    missing.remove("1.running_var");
    let e = c.load_state_dict(&missing).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Missing, .. } if name == "1.running_var"),
        "{e}"
    );
    let mut wrong = a.state_dict();
    wrong.insert(
        "1.running_mean".into(),
        Tensor::zeros(&[4], DType::F64).unwrap(),
    );
    let e = c.load_state_dict(&wrong).unwrap_err();
    assert!(e.to_string().contains("1.running_mean"), "{e}");
    let mut extra = a.state_dict();
    extra.insert("1.running_max".into(), Tensor::scalar(0.0));
    let e = c.load_state_dict(&extra).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Unexpected, .. } if name == "1.running_max"),
        "{e}"
    );
    assert_eq!(c.state_dict(), before, "a failed load changed something");
}

#[test]
fn checkpoints_save_and_load_buffers_all_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bn.safetensors");
    let a = model(7);
    let mut opt = Adam::new(a.parameters(), AdamConfig::default().lr(0.01)).unwrap();
    for k in 0..2 {
        step(&a, &mut opt, k);
    }
    save_checkpoint(&path, &a, Some(&opt)).unwrap();
    let names: Vec<String> = load_tensors(&path).unwrap().tensors.into_keys().collect();
    assert!(names.contains(&"1.running_mean".to_string()));
    assert!(names.contains(&"1.num_batches_tracked".to_string()));
    assert!(!names.iter().any(|n| n.starts_with("optimizer.1.running")));

    let b = model(8);
    let mut opt_b = Adam::new(b.parameters(), AdamConfig::default().lr(0.5)).unwrap();
    load_checkpoint(&path, &b, Some(&mut opt_b)).unwrap();
    assert_eq!(b.state_dict(), a.state_dict());
    // Training continues identically, buffers included.
    step(&a, &mut opt, 5);
    step(&b, &mut opt_b, 5);
    assert_eq!(b.state_dict(), a.state_dict());

    // A model whose batch norm has another width: the error names the buffer... or the parameter.
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let other = Sequential::new()
        .with(
            Linear::builder(4, 3)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
        .with(
            BatchNorm1d::with_options(3, BatchNormOptions::default().affine(false), DType::F64)
                .unwrap(),
        )
        .with(Activation::Relu)
        .with(
            Linear::builder(3, 2)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        );
    let before = other.state_dict();
    let e = load_checkpoint(&path, &other, None).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Unexpected, .. } if name == "1.bias" || name == "1.weight"),
        "{e}"
    );
    assert_eq!(other.state_dict(), before);
    // Without tracked statistics the file's buffers are unexpected.
    let no_stats = Sequential::new()
        .with(
            Linear::builder(4, 3)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
        .with(
            BatchNorm1d::with_options(
                3,
                BatchNormOptions::default().track_running_stats(false),
                DType::F64,
            )
            .unwrap(),
        )
        .with(Activation::Relu)
        .with(
            Linear::builder(3, 2)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        );
    let before = no_stats.state_dict();
    let e = load_checkpoint(&path, &no_stats, None).unwrap_err();
    assert!(
        e.to_string().contains("running") || e.to_string().contains("num_batches_tracked"),
        "{e}"
    );
    assert_eq!(no_stats.state_dict(), before);
    // A checkpoint of parameters only lacks the buffers: a Missing error naming one.
    let params_only = dir.path().join("params.safetensors");
    save_checkpoint(&params_only, &a.parameters(), None).unwrap();
    let e = load_checkpoint(&params_only, &b, None).unwrap_err();
    assert!(
        matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Missing, .. } if name == "1.running_mean"),
        "{e}"
    );
}

#[test]
fn batch_norm_1d_on_sequences_and_group_norm_train() {
    let bn = BatchNorm1d::new(3, DType::F32).unwrap();
    let g = Graph::new();
    let x = g.variable(Tensor::randn(&[4, 3, 6], DType::F32, 3).unwrap());
    let y = bn.forward(&x).unwrap();
    assert_eq!(y.shape(), &[4, 3, 6]);
    assert!(bn
        .forward(&g.variable(Tensor::randn(&[4, 3, 2, 2], DType::F32, 3).unwrap()))
        .is_err());
    let grads = (&y * &y).sum().backward().unwrap();
    assert_eq!(grads.of(bn.weight().unwrap()).shape(), &[3]);

    let gn = GroupNorm::new(2, 4, DType::F32).unwrap();
    assert!(gn.buffers().is_empty());
    let x = g.variable(Tensor::randn(&[2, 4, 3, 3], DType::F32, 4).unwrap());
    let z = gn.forward(&x).unwrap();
    let grads = (&z * &z).sum().backward().unwrap();
    assert_eq!(grads.of(gn.bias().unwrap()).shape(), &[4]);
    assert!(GroupNorm::new(0, 4, DType::F32).is_err());
    assert!(BatchNorm2d::with_options(
        3,
        BatchNormOptions::default().momentum(Some(2.0)),
        DType::F32
    )
    .is_err());
}
