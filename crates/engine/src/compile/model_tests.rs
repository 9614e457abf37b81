//! The README jobs' models at test size, compiled against eager: the CNN
//! with batch norm in training mode (its running statistics a state
//! update of the capture), batch norm's cumulative average, the GPT
//! (in `tests/compiled_models.rs`, beside the other crates' models).
//! Eager and compiled copies train side by side from the same weights.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::*;
use crate::nn::{
    Activation, BatchNorm1d, BatchNorm2d, BatchNormOptions, Buffer, Conv2d, Flatten, Forward,
    Linear, MaxPool2d, Module, Sequential,
};
use crate::ops::nn::{Conv2dOptions, CrossEntropyOptions, MaxPool2dOptions};
use crate::optim::{Adam, AdamConfig, Optimizer};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// `train_mnist_cnn`'s model, small: conv (no bias), batch norm, relu, max
/// pool, flatten, linear; no dropout (its masks differ by design).
fn cnn(seed: u64) -> Sequential {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut m = Sequential::new();
    let same = Conv2dOptions::new().padding(1);
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
    m
}

fn buffers_bits(m: &impl Module) -> Vec<(String, Vec<u64>)> {
    m.buffers()
        .into_iter()
        .map(|(name, b)| (name, bits(&b.value())))
        .collect()
}

fn params_bits(m: &impl Module) -> Vec<(String, Vec<u64>)> {
    m.parameters()
        .into_iter()
        .map(|(name, p)| (name, bits(&p.value())))
        .collect()
}

/// Images `[n, 1, 8, 8]` and labels, drawn from `seed`.
fn images(n: usize, seed: u64) -> (Tensor, Tensor) {
    let x = Tensor::randn(&[n, 1, 8, 8], DType::F32, seed).unwrap();
    let labels: Vec<i64> = (0..n as i64).map(|i| (i * 7 + seed as i64) % 10).collect();
    (x, Tensor::from_vec(labels, &[n]).unwrap())
}

#[test]
fn the_cnn_with_batch_norm_trains_to_the_eager_bits_and_running_statistics() {
    let (eager_model, compiled_model) = (cnn(5), cnn(5));
    let adam = |m: &Sequential| Adam::new(m.parameters(), AdamConfig::default().lr(0.01)).unwrap();
    let (mut eager_opt, mut compiled_opt) = (adam(&eager_model), adam(&compiled_model));
    let ce = CrossEntropyOptions::default();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| {
            let logits = compiled_model.forward(&x[0])?;
            g.capture_output("logits", &logits);
            logits.try_cross_entropy_input(&x[1], &ce)
        },
        CompileOptions::new().params(compiled_model.parameters()),
    );
    // Four batches of 8, then one of 5: two signatures.
    for (i, n) in [8, 8, 8, 8, 5].into_iter().enumerate() {
        let (x, y) = images(n, 100 + i as u64);
        let labels: Vec<i64> = y.to_f64_vec().iter().map(|&v| v as i64).collect();
        let (eager_loss, eager_logits) = {
            let g = Graph::new();
            let logits = eager_model.forward(&g.constant(x.clone())).unwrap();
            let loss = logits.try_cross_entropy(&labels).unwrap();
            eager_opt.step(&loss.backward().unwrap()).unwrap();
            (loss.value().clone(), logits.value().clone())
        };
        let out = step.run(&[x, y]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(&eager_loss), "batch {i}");
        assert_eq!(bits(out.output("logits").unwrap()), bits(&eager_logits));
        compiled_opt.step(out.grads()).unwrap();
        assert_eq!(
            params_bits(&compiled_model),
            params_bits(&eager_model),
            "batch {i}"
        );
        // running_mean, running_var and num_batches_tracked, every step.
        assert_eq!(
            buffers_bits(&compiled_model),
            buffers_bits(&eager_model),
            "batch {i}"
        );
    }
    assert_eq!(step.capture_count(), 2);
    let bn = &compiled_model.buffers()[0].1;
    assert!(bits(&bn.value()) != bits(&Tensor::zeros(&[4], DType::F32).unwrap()));
    let explain = step.capture().unwrap().explain();
    assert!(
        explain.contains("state update BatchNorm2d running statistics")
            && explain.contains("after each run: BatchNorm2d num_batches_tracked += 1")
            && explain.contains("batch_norm_running_stats"),
        "{explain}"
    );
}

/// `momentum: None` (a cumulative average) reads `num_batches_tracked` at
/// every run for its factor; the statistics match eager's bit for bit.
#[test]
fn batch_norm_cumulative_average_replays_its_factor() {
    let options = BatchNormOptions::default().momentum(None);
    let make = || {
        let mut m = Sequential::new();
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        m.push(
            Linear::builder(3, 4)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        );
        m.push(BatchNorm1d::with_options(4, options, DType::F64).unwrap());
        m
    };
    let (eager_model, compiled_model) = (make(), make());
    let mut step = compile(
        |_: &Graph, x: &[Var<'_>]| compiled_model.forward(&x[0])?.try_sum(),
        CompileOptions::new(),
    );
    for i in 0..4 {
        let x = Tensor::randn(&[6, 3], DType::F64, 40 + i).unwrap();
        let g = Graph::new();
        let eager = eager_model.forward(&g.constant(x.clone())).unwrap().sum();
        let out = step.run(&[x]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(eager.value()));
        assert_eq!(
            buffers_bits(&compiled_model),
            buffers_bits(&eager_model),
            "step {i}"
        );
    }
    let buffers = compiled_model.buffers();
    let tracked = buffers
        .iter()
        .find(|(n, _)| n.ends_with("num_batches_tracked"));
    let tracked = tracked.unwrap().1.value().try_item().unwrap();
    assert_eq!(tracked, 4.0);
}

/// A state update of the wrong shape is the layer's typed error, from the run.
#[test]
fn a_state_update_that_fails_is_the_runs_error() {
    let buffer = Buffer::new(Tensor::zeros(&[3], DType::F64).unwrap());
    let target = buffer.clone();
    let mut step = compile(
        move |g: &Graph, x: &[Var<'_>]| {
            let sink = target.clone();
            g.capture_update("wrong", &x[0], move |t| sink.set(t.clone()));
            x[0].try_sum()
        },
        CompileOptions::new().grad_inputs(&[0]),
    );
    let e = step
        .run(&[Tensor::zeros(&[2], DType::F64).unwrap()])
        .err()
        .unwrap();
    assert!(e.to_string().contains("Buffer::set"), "{e}");
}
