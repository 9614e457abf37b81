//! The README jobs' models at test size, compiled against eager, where the
//! model or its data come from outside the engine: the digits MLP on the
//! bundled digits, and the GPT. Eager and compiled copies train side by
//! side from the same weights; losses and parameters agree bit for bit.

use retrograd::nn::{Gpt, GptConfig, Module};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

fn params_bits(m: &impl Module) -> Vec<(String, Vec<u64>)> {
    m.parameters()
        .into_iter()
        .map(|(name, p)| (name, bits(&p.value())))
        .collect()
}

/// The digits MLP's training step (README job 1): Mlp, cross-entropy with
/// the labels as an input, Adam. Eager and compiled copies of the model
/// train side by side on the first batches of the bundled data; losses and
/// parameters agree bit for bit after every step, and the last, smaller
/// batch of the epoch captures a second signature.
#[test]
fn the_digits_mlp_trains_to_the_eager_bits() {
    use retrograd::data::{digits, Batches};
    use retrograd::nn::{Forward, Mlp, Module};
    use retrograd::ops::nn::CrossEntropyOptions;
    use retrograd::optim::{Adam, AdamConfig, Optimizer};

    let data = digits::load_bundled().unwrap();
    let model = || {
        Mlp::builder(&[digits::NUM_PIXELS, 32, digits::NUM_CLASSES])
            .dtype(DType::F32)
            .seed(3)
            .build()
            .unwrap()
    };
    let (eager_model, compiled_model) = (model(), model());
    let adam = |m: &Mlp| Adam::new(m.parameters(), AdamConfig::adamw().lr(0.01)).unwrap();
    let (mut eager_opt, mut compiled_opt) = (adam(&eager_model), adam(&compiled_model));
    let ce = CrossEntropyOptions::default();
    let mut step = compile(
        |_: &Graph, x: &[Var<'_>]| {
            compiled_model
                .forward(&x[0])?
                .try_cross_entropy_input(&x[1], &ce)
        },
        CompileOptions::new().params(compiled_model.parameters()),
    );
    // 8 batches of 224 and the epoch's last of 5: two signatures.
    let batches: Vec<_> = Batches::sequential(&data, 224, DType::F32)
        .unwrap()
        .collect();
    assert_eq!(batches.last().unwrap().labels.len(), data.len() % 224);
    for (i, batch) in batches.iter().enumerate() {
        let eager_loss = {
            let g = Graph::new();
            let loss = eager_model
                .forward(&g.constant(batch.features.clone()))
                .unwrap()
                .try_cross_entropy(&batch.labels)
                .unwrap();
            eager_opt.step(&loss.backward().unwrap()).unwrap();
            loss.value().clone()
        };
        let labels: Vec<i64> = batch.labels.iter().map(|&l| l as i64).collect();
        let n = labels.len();
        let inputs = [
            batch.features.clone(),
            Tensor::from_vec(labels, &[n]).unwrap(),
        ];
        let out = step.run(&inputs).unwrap();
        assert_eq!(bits(out.loss_value()), bits(&eager_loss), "batch {i}");
        compiled_opt.step(out.grads()).unwrap();
        for ((name, a), (_, b)) in eager_model
            .parameters()
            .iter()
            .zip(compiled_model.parameters())
        {
            assert!(
                bits(&a.value()) == bits(&b.value()),
                "{name} differs after batch {i}"
            );
        }
    }
    assert_eq!(step.capture_count(), 2);
    // Bias + relu run as one pass into a planned buffer.
    let explain = step.captures()[0].explain();
    assert!(
        explain.contains("nodes[1] add, nodes[2] relu") && explain.contains("buffer 0: f32"),
        "{explain}"
    );
}

fn tiny_gpt() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
        ..GptConfig::shakespeare_char(11)
    }
}

/// `train_shakespeare`'s model, small: a few AdamW steps with clipping,
/// compiled and eager from the same weights.
#[test]
fn a_gpt_trains_to_the_eager_bits() {
    let (eager_model, compiled_model) =
        (Gpt::new(tiny_gpt()).unwrap(), Gpt::new(tiny_gpt()).unwrap());
    for ((_, a), (_, b)) in eager_model
        .parameters()
        .iter()
        .zip(compiled_model.parameters())
    {
        b.set(a.value()).unwrap();
    }
    let adamw = |m: &Gpt| {
        Adam::new(
            m.parameters(),
            AdamConfig::adamw().lr(1e-2).betas(0.9, 0.99),
        )
        .unwrap()
    };
    let (mut eager_opt, mut compiled_opt) = (adamw(&eager_model), adamw(&compiled_model));
    let mut step = compile(
        |_: &Graph, x: &[Var<'_>]| compiled_model.loss(&x[0], x[1].value()),
        CompileOptions::new().params(compiled_model.parameters()),
    );
    for i in 0..3u64 {
        let ids: Vec<i64> = (0..3 * 9).map(|k| ((k * 5 + i * 3) % 11) as i64).collect();
        let x: Vec<i64> = ids.chunks(9).flat_map(|c| c[..8].to_vec()).collect();
        let y: Vec<i64> = ids.chunks(9).flat_map(|c| c[1..].to_vec()).collect();
        let (x, y) = (
            Tensor::from_vec(x, &[3, 8]).unwrap(),
            Tensor::from_vec(y, &[3, 8]).unwrap(),
        );
        let eager_loss = {
            let g = Graph::new();
            let loss = eager_model.loss(&g.constant(x.clone()), &y).unwrap();
            let mut grads = loss.backward().unwrap();
            retrograd::optim::clip_grad_norm(&mut grads, 1.0, 2.0).unwrap();
            eager_opt.step(&grads).unwrap();
            loss.value().clone()
        };
        let out = step.run(&[x, y]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(&eager_loss), "step {i}");
        retrograd::optim::clip_grad_norm(out.grads_mut(), 1.0, 2.0).unwrap();
        compiled_opt.step(out.grads()).unwrap();
        assert_eq!(
            params_bits(&compiled_model),
            params_bits(&eager_model),
            "step {i}"
        );
    }
    assert_eq!(step.capture_count(), 1);
}
