//! `train_mnist_cnn --dp`: the CNN trained with differential privacy
//! (DP-SGD, as Opacus's `make_private_with_epsilon` sets it up). Each step
//! draws every training image with probability `q = batch / images`
//! (Poisson sampling), takes each drawn image's own gradient (`vmap` of
//! the gradient: one batched forward and backward), clips each to a norm,
//! sums them and adds Gaussian noise whose multiplier is the smallest that
//! keeps the whole run within the target epsilon; the RDP accountant
//! tracks what each step spends.

use std::time::Instant;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use retrograd::data::{Batches, Dataset};
use retrograd::func::{try_per_sample_gradients, Randomness};
use retrograd::nn::{evaluate_accuracy, Forward, Module, Sequential};
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::optim::privacy::{try_noise_multiplier_for_epsilon, DpOptimizer, DpSgdConfig};
use retrograd::optim::Optimizer;
use retrograd::{DType, Result, Tensor, Var};

/// The privacy settings of a run.
#[derive(Clone, Copy, Debug)]
pub struct Privacy {
    /// The target epsilon of the whole run.
    pub epsilon: f64,
    /// Its delta.
    pub delta: f64,
    /// The norm each image's gradient is clipped to.
    pub max_grad_norm: f64,
}

/// What a private run ends with.
pub struct Finished {
    /// Test accuracy after the last epoch.
    pub test_accuracy: f64,
    /// The `privacy:` line.
    pub summary: String,
}

/// Trains `model` privately for `epochs` passes of `batch_size` images on
/// average, printing each epoch's test accuracy and epsilon spent.
#[allow(clippy::too_many_arguments)]
pub fn train(
    model: &mut Sequential,
    optimizer: Box<dyn Optimizer>,
    train: &Dataset,
    test: &Dataset,
    epochs: usize,
    batch_size: usize,
    privacy: Privacy,
    seed: u64,
    quiet: bool,
) -> Result<Finished> {
    let sample_rate = batch_size as f64 / train.len() as f64;
    let steps_per_epoch = train.len().div_ceil(batch_size);
    let steps = epochs * steps_per_epoch;
    let sigma = try_noise_multiplier_for_epsilon(
        privacy.epsilon,
        privacy.delta,
        sample_rate,
        steps as u64,
    )?;
    let config = DpSgdConfig {
        max_grad_norm: privacy.max_grad_norm,
        noise_multiplier: sigma,
        sample_rate,
        expected_batch_size: batch_size,
        seed: seed ^ 0x5eed,
    };
    println!(
        "privacy: DP-SGD to epsilon {} (delta {}): noise multiplier {sigma:.4}, clipping norm {}, \
         Poisson sampling at rate {sample_rate:.5}, {steps} steps\n",
        privacy.epsilon, privacy.delta, privacy.max_grad_norm
    );
    let mut dp = DpOptimizer::try_new(optimizer, model.parameters(), config)?;
    let mut draw = ChaCha8Rng::seed_from_u64(seed ^ 0xd9);
    let start = Instant::now();
    let mut test_accuracy = 0.0;
    for epoch in 1..=epochs {
        model.set_training(true);
        for _ in 0..steps_per_epoch {
            let drawn: Vec<usize> = (0..train.len())
                .filter(|_| draw.random::<f64>() < sample_rate)
                .collect();
            let per_sample = per_sample_gradients(model, train, drawn)?;
            dp.try_step(&per_sample)?;
        }
        model.set_training(false);
        test_accuracy = evaluate_accuracy(&*model, test, 500, DType::F32)?;
        if !quiet {
            println!(
                "epoch {epoch:>3} | test accuracy {:.4} | epsilon {:.3} | {:.1} s",
                test_accuracy,
                dp.epsilon(privacy.delta),
                start.elapsed().as_secs_f64()
            );
        }
    }
    let epsilon = dp.epsilon(privacy.delta);
    let summary = format!(
        "privacy: epsilon {epsilon:.3} (delta {}, noise multiplier {sigma:.4}, sample rate {sample_rate:.5}, \
         steps {steps}, RDP accountant)",
        privacy.delta
    );
    Ok(Finished {
        test_accuracy,
        summary,
    })
}

/// Each drawn image's gradient, per parameter `[drawn, ...shape]` (empty
/// when nothing was drawn).
fn per_sample_gradients(
    model: &Sequential,
    train: &Dataset,
    drawn: Vec<usize>,
) -> Result<Vec<Tensor>> {
    if drawn.is_empty() {
        return model
            .parameters()
            .iter()
            .map(|(_, p)| {
                let mut shape = vec![0];
                shape.extend_from_slice(p.value().shape());
                Tensor::zeros(&shape, p.value().dtype())
            })
            .collect();
    }
    let n = drawn.len();
    let batch = Batches::from_indices(train, drawn, n, DType::F32)?
        .next()
        .expect("one batch of the drawn images");
    let labels: Vec<i64> = batch.labels.iter().map(|&l| l as i64).collect();
    let labels = Tensor::from_vec(labels, &[n])?;
    let grads = try_per_sample_gradients(
        model,
        |v| image_loss(model, v),
        &[&batch.features, &labels],
        Randomness::Different,
    )?;
    Ok(grads.into_iter().map(|(_, g)| g).collect())
}

/// One image's cross-entropy, from its pixels and its label.
fn image_loss<'g>(model: &Sequential, v: &[Var<'g>]) -> Result<Var<'g>> {
    let logits = model.forward(&v[0].try_unsqueeze(0)?)?;
    logits.try_cross_entropy_input(&v[1].try_unsqueeze(0)?, &CrossEntropyOptions::default())
}
