//! W3: convolutional networks, f32.
//!
//! - `w3`: one training step of model C1 (Conv2d(1,16,5,p2)-ReLU-MaxPool2 ->
//!   Conv2d(16,32,5,p2)-ReLU-MaxPool2 -> Flatten -> Linear(1568,128)-ReLU ->
//!   Linear(128,10); cross-entropy; Adam lr 1e-3) at batch 64 and 256 on
//!   fixed-seed normal inputs and labels. Median ms per step.
//! - `w3c`: the same step compiled (`retrograd::compile`: forward, loss
//!   and backward captured once and replayed; Adam after it), timed
//!   alternately with the eager step of the same run (rows `w3` and
//!   `w3_compiled`). C1 has no batch norm.
//! - `w3_conv`: a 3x3 conv2d, 64 -> 64 channels, padding 1, batch 32, 32x32
//!   images: forward and backward (gradients of the output's sum with
//!   respect to input and weight). Median ms.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::nn::{Activation, Conv2d, Flatten, Forward, Linear, MaxPool2d, Module, Sequential};
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::ops::nn::{Conv2dOptions, MaxPool2dOptions};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{compile, CompileOptions, DType, Graph, Result, Tensor, Var};

use crate::report::{alternate, emit, emit_times, time, Value};
use crate::Options;

/// Model C1, PyTorch's default initialisation from `seed`.
pub fn c1(seed: u64) -> Result<Sequential> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let pad2 = Conv2dOptions::new().padding(2);
    Ok(Sequential::new()
        .with(Conv2d::new(1, 16, 5, pad2, DType::F32, &mut rng)?)
        .with(Activation::Relu)
        .with(MaxPool2d::new(MaxPool2dOptions::new(2)))
        .with(Conv2d::new(16, 32, 5, pad2, DType::F32, &mut rng)?)
        .with(Activation::Relu)
        .with(MaxPool2d::new(MaxPool2dOptions::new(2)))
        .with(Flatten::new())
        .with(
            Linear::builder(1568, 128)
                .dtype(DType::F32)
                .build_with(&mut rng)?,
        )
        .with(Activation::Relu)
        .with(
            Linear::builder(128, 10)
                .dtype(DType::F32)
                .build_with(&mut rng)?,
        ))
}

/// One training step of `model`; returns the loss.
pub fn step(model: &Sequential, opt: &mut Adam, x: &Tensor, y: &[usize]) -> Result<f64> {
    let (grads, loss) = {
        let graph = Graph::new();
        let loss = model
            .forward(&graph.constant(x.clone()))?
            .try_cross_entropy(y)?;
        (loss.backward()?, loss.value().try_item()?)
    };
    opt.step(&grads)?;
    Ok(loss)
}

/// Fixed-seed standard-normal images `[batch, 1, 28, 28]` and uniform labels.
pub fn data(batch: usize, seed: u64) -> (Tensor, Vec<usize>) {
    let x = Tensor::randn(&[batch, 1, 28, 28], DType::F32, seed).expect("valid shape");
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    (x, (0..batch).map(|_| rng.random_range(0..10)).collect())
}

pub fn run_step(opts: &Options) {
    let (steps, warmup) = if opts.quick { (3, 1) } else { (30, 5) };
    let batches: &[usize] = if opts.quick { &[8] } else { &[64, 256] };
    for &batch in batches {
        let model = c1(0).expect("model C1");
        let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(1e-3)).expect("Adam");
        let (x, y) = data(batch, 1);
        for _ in 0..warmup {
            step(&model, &mut opt, &x, &y).expect("a valid step");
        }
        let mut loss = 0.0;
        let stats = time(steps, || {
            loss = step(&model, &mut opt, &x, &y).expect("a valid step")
        });
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "w3".into()),
                ("batch", batch.into()),
                ("unit", "ms_per_step".into()),
                ("loss", Value::Exact(loss)),
            ],
            Some(stats),
        );
    }
}

/// `w3c`: the W3 step eager and compiled, alternately; see the module docs.
pub fn run_compiled(opts: &Options) {
    let (blocks, warmup) = if opts.quick { (1, 1) } else { (3, 3) };
    let batches: &[usize] = if opts.quick { &[8] } else { &[64, 256] };
    for &batch in batches {
        let (x, y) = data(batch, 1);
        let eager_model = c1(0).expect("model C1");
        let adam = AdamConfig::default().lr(1e-3);
        let mut eager_opt = Adam::new(eager_model.parameters(), adam.clone()).expect("Adam");
        let model = c1(0).expect("model C1");
        let mut opt = Adam::new(model.parameters(), adam).expect("Adam");
        let ce = CrossEntropyOptions::default();
        let mut compiled = compile(
            |_: &Graph, v: &[Var<'_>]| model.forward(&v[0])?.try_cross_entropy_input(&v[1], &ce),
            CompileOptions::new().params(model.parameters()),
        );
        let targets =
            Tensor::from_vec(y.iter().map(|&c| c as i64).collect(), &[batch]).expect("valid shape");
        let inputs = [x.clone(), targets];
        let run = alternate(
            blocks,
            warmup,
            || step(&eager_model, &mut eager_opt, &x, &y).expect("a valid step"),
            || {
                let out = compiled.run(&inputs).expect("a valid compiled step");
                opt.step(out.grads()).expect("Adam");
                out.loss()
            },
        );
        let same = run.eager_loss.to_bits() == run.compiled_loss.to_bits();
        emit_times(
            "w3",
            batch,
            "ms_per_step",
            run.eager_ms,
            run.eager_loss,
            vec![],
        );
        emit_times(
            "w3_compiled",
            batch,
            "ms_per_step",
            run.compiled_ms,
            run.compiled_loss,
            vec![("same_bits_as_eager", if same { "yes" } else { "no" }.into())],
        );
    }
}

pub fn run_conv(opts: &Options) {
    let (batch, size) = if opts.quick { (2, 8) } else { (32, 32) };
    let x = Tensor::randn(&[batch, 64, size, size], DType::F32, 1).expect("valid shape");
    let w = Tensor::randn(&[64, 64, 3, 3], DType::F32, 2).expect("valid shape");
    let conv = Conv2dOptions::new().padding(1);
    let pass = || {
        let g = Graph::new();
        let (xv, wv) = (g.variable(x.clone()), g.variable(w.clone()));
        let y = xv.conv2d(&wv, None, &conv);
        let grads = y.sum().backward().expect("backward");
        std::hint::black_box((grads.wrt(&xv), grads.wrt(&wv)));
    };
    pass();
    let stats = time(opts.repeats.max(3) * 2, pass);
    let flops = 3.0 * 2.0 * (batch * 64 * size * size * 64 * 9) as f64;
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", "w3_conv".into()),
            ("batch", batch.into()),
            ("unit", "ms_fwd_bwd".into()),
            ("gflops", Value::Num(flops / stats.median / 1e9)),
        ],
        Some(stats),
    );
}
