//! `func`: the function transforms of `retrograd::func` against the
//! ordinary computations beside them, f32. Three measurements, each a pair
//! timed alternately (`time_pair`) so both sides see the same load:
//!
//! - per-sample gradients: the CNN of `train_mnist_cnn` (conv3x3(32) -
//!   relu - maxpool2 -> conv3x3(64) - relu - maxpool2 -> linear(128) - relu
//!   -> linear(10); no batch norm, no dropout) on 64 standard-normal
//!   1x28x28 images with uniform labels. `try_per_sample_gradients` of one
//!   image's cross-entropy (`[64, ...]` per parameter: one batched forward
//!   and backward) against one ordinary backward of the batch's mean loss.
//!   The mean of the per-sample gradients is checked against that backward.
//! - jacobian: `try_jacrev` of `x -> W2 tanh(W1 x + b1) + b2` with `x` of
//!   256 features, 256 hidden, 256 outputs (normal weights scaled by
//!   1/sqrt(256)) at one input, against `jacobian_with(.., Reverse)`, which
//!   runs one backward per output row; the two Jacobians are compared.
//! - ensemble: 8 copies of the `train_digits` MLP (64-128-64-10, relu) run
//!   as one model (`try_stack_module_state`, `VMap` over the stacked
//!   parameters of `try_functional_call`) on 128 shared inputs: forward,
//!   the sum of the 8 mean cross-entropies, one backward to the stacked
//!   parameters; against one MLP's forward and backward at batch 8 x 128.
//!   Each copy's loss is checked against that copy run alone.
//!
//! Each row: `framework`, `workload`, `variant`, the sizes, median/min/max
//! in ms; the first row of a pair carries the ratio of the medians
//! (`over_<other variant>`) and its check (`max_abs_diff`). At least 5
//! timed repeats of each side after a warm-up of each; `--quick` runs the
//! harness at toy sizes (8 images, width 32, 2 models of 16 inputs).
//! `bench/func_torch.py` prints the same rows for `torch.func`.

use retrograd::func::{
    try_functional_call, try_jacrev, try_per_sample_gradients, try_stack_module_state, Randomness,
    VMap,
};
use retrograd::nn::{Forward, Mlp, Module, Sequential};
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::{jacobian_with, DType, Graph, JacobianMode, Result, Tensor, Var};

use crate::report::{emit, time_pair, Stats, Value};
use crate::Options;

#[path = "../../examples/support/mnist_cnn.rs"]
mod mnist_cnn;

/// Images of the per-sample gradient workload.
const CNN_BATCH: usize = 64;
/// Features, hidden units and outputs of the Jacobian's MLP.
const JAC_WIDTH: usize = 256;
/// Models of the ensemble and the inputs they share.
const ENSEMBLE: usize = 8;
const ENSEMBLE_BATCH: usize = 128;
/// The `train_digits` MLP: 8x8 pixels in, two hidden layers, 10 classes.
const DIGITS_SIZES: [usize; 4] = [64, 128, 64, 10];

pub fn run(opts: &Options) {
    run_per_sample(opts);
    run_jacobian(opts);
    run_ensemble(opts);
}

pub fn run_per_sample(opts: &Options) {
    per_sample(opts, repeats(opts)).expect("per-sample gradients");
}

pub fn run_jacobian(opts: &Options) {
    jacobian(opts, repeats(opts)).expect("jacobian");
}

pub fn run_ensemble(opts: &Options) {
    ensemble(opts, repeats(opts)).expect("ensemble");
}

/// At least 5 timed repeats of each side outside --quick.
fn repeats(opts: &Options) -> usize {
    if opts.quick {
        opts.repeats
    } else {
        opts.repeats.max(5)
    }
}

/// Uniform class labels `[n]` (i64) from `seed`.
fn labels(n: usize, classes: usize, seed: u64) -> Result<Tensor> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    Tensor::from_vec(
        (0..n)
            .map(|_| rng.random_range(0..classes as i64))
            .collect::<Vec<i64>>(),
        &[n],
    )
}

/// The largest elementwise difference of two same-shaped tensors.
fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape(), "compared tensors differ in shape");
    a.to_f64_vec()
        .iter()
        .zip(b.to_f64_vec())
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

/// A row of the workload; `pair` is the other variant's name and median
/// (the ratio of this median to it) and the check's value.
fn row(
    workload: &str,
    variant: &str,
    sizes: Vec<(&str, Value)>,
    stats: Stats,
    pair: Option<(&str, f64, f64)>,
) {
    let ratio_key = pair.map(|(other, _, _)| format!("over_{other}"));
    let mut fields = vec![
        ("framework", "retrograd".into()),
        ("workload", workload.into()),
        ("variant", variant.into()),
        ("dtype", "f32".into()),
    ];
    fields.extend(sizes);
    if let (Some(key), Some((_, other_median, diff))) = (&ratio_key, pair) {
        fields.push((key, Value::Num(stats.median / other_median)));
        fields.push(("max_abs_diff", Value::Num(diff)));
    }
    emit(fields, Some(stats));
}

/// One image's cross-entropy: `v = [pixels [1, 28, 28], label []]`.
fn image_loss<'g>(model: &Sequential, v: &[Var<'g>]) -> Result<Var<'g>> {
    let logits = model.forward(&v[0].try_unsqueeze(0)?)?;
    logits.try_cross_entropy_input(&v[1].try_unsqueeze(0)?, &CrossEntropyOptions::default())
}

fn per_sample(opts: &Options, repeats: usize) -> Result<()> {
    let batch = if opts.quick { 8 } else { CNN_BATCH };
    let model = mnist_cnn::build(&[32, 64], 128, false, 0.0, 0)?;
    let x = Tensor::randn(&[batch, 1, 28, 28], DType::F32, 1)?;
    let y = labels(batch, 10, 2)?;
    let per_sample_grads = || {
        try_per_sample_gradients(
            &model,
            |v| image_loss(&model, v),
            &[&x, &y],
            Randomness::Error,
        )
    };
    let batched_backward = || -> Result<Vec<Tensor>> {
        let g = Graph::new();
        let loss = model
            .forward(&g.constant(x.clone()))?
            .try_cross_entropy_input(&g.constant(y.clone()), &CrossEntropyOptions::default())?;
        let grads = loss.backward()?;
        Ok(model
            .parameters()
            .iter()
            .map(|(_, p)| grads.of(p))
            .collect())
    };

    // The check: the mean of the per-sample gradients is the batch's.
    let diff = per_sample_grads()?
        .iter()
        .zip(batched_backward()?)
        .map(|((_, g), b)| {
            let mean = Graph::inference()
                .constant(g.clone())
                .try_mean_axes(&[0], false)?;
            Ok(max_abs_diff(mean.value(), &b))
        })
        .collect::<Result<Vec<f64>>>()?
        .into_iter()
        .fold(0.0, f64::max);

    let (vmapped, ordinary) = time_pair(
        repeats,
        || {
            per_sample_grads().expect("per-sample gradients");
        },
        || {
            batched_backward().expect("batched backward");
        },
    );
    let sizes = || {
        vec![
            ("model", "mnist_cnn[32,64] h128".into()),
            ("batch", batch.into()),
            ("params", model.num_parameters().into()),
        ]
    };
    row(
        "func_per_sample_grads",
        "vmap_grad",
        sizes(),
        vmapped,
        Some(("batched_backward", ordinary.median, diff)),
    );
    row(
        "func_per_sample_grads",
        "batched_backward",
        sizes(),
        ordinary,
        None,
    );
    Ok(())
}

/// The weights of the Jacobian's MLP.
struct TanhMlp {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    b2: Tensor,
}

impl TanhMlp {
    fn new(width: usize) -> Result<Self> {
        let scale = 1.0 / (width as f64).sqrt();
        let normal = |shape: &[usize], seed| -> Result<Tensor> {
            let t = Graph::inference().constant(Tensor::randn(shape, DType::F32, seed)?);
            Ok((&t * scale).into_value())
        };
        Ok(TanhMlp {
            w1: normal(&[width, width], 11)?,
            b1: normal(&[width], 12)?,
            w2: normal(&[width, width], 13)?,
            b2: normal(&[width], 14)?,
        })
    }

    /// `W2 tanh(W1 x + b1) + b2` for `x` of shape `[width]`.
    fn apply<'s>(&self, x: &Var<'s>) -> Result<Var<'s>> {
        let g = x.graph();
        let h = g
            .constant(self.w1.clone())
            .try_matmul(x)?
            .try_add(&g.constant(self.b1.clone()))?
            .try_tanh()?;
        g.constant(self.w2.clone())
            .try_matmul(&h)?
            .try_add(&g.constant(self.b2.clone()))
    }
}

fn jacobian(opts: &Options, repeats: usize) -> Result<()> {
    let width = if opts.quick { 32 } else { JAC_WIDTH };
    let mlp = TanhMlp::new(width)?;
    let x = Tensor::randn(&[width], DType::F32, 15)?;
    let jacrev = || -> Result<Tensor> {
        let g = Graph::new();
        Ok(try_jacrev(|x| mlp.apply(x), &g.variable(x.clone()))?.into_value())
    };
    let rows = || jacobian_with(|x| mlp.apply(x), &x, JacobianMode::Reverse);
    let diff = max_abs_diff(&jacrev()?, &rows()?);
    let (vmapped, looped) = time_pair(
        repeats,
        || {
            jacrev().expect("jacrev");
        },
        || {
            rows().expect("jacobian_with");
        },
    );
    let sizes = || {
        vec![
            ("model", format!("tanh mlp {width}-{width}-{width}").into()),
            ("batch", 1usize.into()),
        ]
    };
    row(
        "func_jacobian",
        "jacrev",
        sizes(),
        vmapped,
        Some(("row_loop", looped.median, diff)),
    );
    row("func_jacobian", "row_loop", sizes(), looped, None);
    Ok(())
}

fn ensemble(opts: &Options, repeats: usize) -> Result<()> {
    let (models_n, batch) = if opts.quick {
        (2, 16)
    } else {
        (ENSEMBLE, ENSEMBLE_BATCH)
    };
    let build = |seed| {
        Mlp::builder(&DIGITS_SIZES)
            .dtype(DType::F32)
            .seed(seed)
            .build()
    };
    let models = (0..models_n as u64)
        .map(build)
        .collect::<Result<Vec<_>>>()?;
    let stacked = try_stack_module_state(&models)?;
    let k = stacked.len();
    let x = Tensor::randn(&[batch, DIGITS_SIZES[0]], DType::F32, 21)?;
    let y = labels(batch, 10, 22)?;
    let big_x = Tensor::randn(&[models_n * batch, DIGITS_SIZES[0]], DType::F32, 23)?;
    let big_y = labels(models_n * batch, 10, 24)?;
    let base = &models[0];
    let ce = CrossEntropyOptions::default();

    // Forward of the 8 stacked models and one backward: the per-model
    // losses and the gradients of the stacked parameters.
    let vmapped = || -> Result<(Tensor, Vec<Tensor>)> {
        let g = Graph::new();
        let params: Vec<Var<'_>> = stacked.iter().map(|(_, t)| g.variable(t.clone())).collect();
        let (xv, yv) = (g.constant(x.clone()), g.constant(y.clone()));
        let mut inputs: Vec<&Var<'_>> = params.iter().collect();
        inputs.extend([&xv, &yv]);
        let mut in_axes = vec![Some(0); k];
        in_axes.extend([None, None]);
        let losses = VMap::new()
            .in_axes(&in_axes)
            .try_call(
                |v| {
                    let loss = try_functional_call(base, &v[..k], || {
                        base.forward(&v[k])?.try_cross_entropy_input(&v[k + 1], &ce)
                    })?;
                    Ok(vec![loss])
                },
                &inputs,
            )?
            .remove(0);
        let grads = losses.try_sum()?.backward()?;
        let grads = params
            .iter()
            .map(|p| grads.try_wrt(p))
            .collect::<Result<_>>()?;
        Ok((losses.into_value(), grads))
    };
    let one_model = || -> Result<Vec<Tensor>> {
        let g = Graph::new();
        let loss = base
            .forward(&g.constant(big_x.clone()))?
            .try_cross_entropy_input(&g.constant(big_y.clone()), &ce)?;
        let grads = loss.backward()?;
        Ok(base.parameters().iter().map(|(_, p)| grads.of(p)).collect())
    };

    // The check: each copy's loss is that copy's own on the shared batch.
    let (losses, grads) = vmapped()?;
    assert_eq!(grads.len(), k);
    let alone = models
        .iter()
        .map(|m| {
            let g = Graph::inference();
            m.forward(&g.constant(x.clone()))?
                .try_cross_entropy_input(&g.constant(y.clone()), &ce)?
                .value()
                .try_item()
        })
        .collect::<Result<Vec<f64>>>()?;
    let diff = losses
        .to_f64_vec()
        .iter()
        .zip(&alone)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max);

    let (stacked_time, one_time) = time_pair(
        repeats,
        || {
            vmapped().expect("ensemble step");
        },
        || {
            one_model().expect("one model step");
        },
    );
    let sizes = |n: usize, b: usize| {
        vec![
            ("model", "digits mlp 64-128-64-10".into()),
            ("models", n.into()),
            ("batch", b.into()),
        ]
    };
    row(
        "func_ensemble",
        "vmap_stacked",
        sizes(models_n, batch),
        stacked_time,
        Some(("one_model_big_batch", one_time.median, diff)),
    );
    row(
        "func_ensemble",
        "one_model_big_batch",
        sizes(1, models_n * batch),
        one_time,
        None,
    );
    Ok(())
}
