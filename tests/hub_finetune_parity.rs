//! Fine-tuning parity with PyTorch (tests/reference/finetune_parity.py, in
//! the style of bench/nanogpt_parity.py): all-MiniLM-L6-v2 with a
//! sequence-classification head from the same initial weights, dropout
//! off, 50 AdamW steps with warm-up, linear decay and clipping on the same
//! batches. Every step's loss stays within 1e-4 of `transformers`'.
//!
//! 50 training steps of a 22.7M-parameter model need a release build:
//! `.ci/run` runs it in release (`tests/release_checks.rs`); a
//! debug build prints one skip line, as does a machine without the model.

#![cfg(feature = "tokenizers")]

#[path = "support/minilm.rs"]
mod minilm;

use std::path::Path;

use rand::SeedableRng;
use retrograd::data::shakespeare;
use retrograd::data::speakers::speaker_task;
use retrograd::hub::{Padding, Tokenizer, Weights};
use retrograd::nn::{BertForSequenceClassification, Module};
use retrograd::optim::{
    clip_grad_norm, decay_groups, Adam, AdamConfig, LinearLr, LrScheduler, Optimizer, WarmupLr,
};
use retrograd::{DType, Graph, Tensor};

#[test]
fn fifty_steps_follow_pytorch_within_1e_4() {
    let Some(dir) = minilm::model_dir("fifty_steps_follow_pytorch_within_1e_4") else {
        return;
    };
    if cfg!(debug_assertions) {
        println!(
            "skipped: fifty_steps_follow_pytorch_within_1e_4: needs a release build \
             (cargo test --release --test hub_finetune_parity; .ci/run runs it in tests/release_checks.rs)"
        );
        return;
    }
    let fixture = Weights::open(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/finetune_parity.safetensors"),
    )
    .unwrap();
    let batches = fixture.tensor("batches", DType::F32).unwrap();
    let want_labels = fixture
        .tensor("labels", DType::F32)
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    let want = fixture
        .tensor("losses", DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let [steps, batch] = batches.shape()[..] else {
        panic!("batches are [steps, batch]")
    };
    let order = batches.to_vec::<i64>().unwrap();

    let task = speaker_task(
        &shakespeare::speeches(&shakespeare::load_bundled().unwrap()),
        10,
        0.2,
        0,
    )
    .unwrap();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let (mut model, _) =
        BertForSequenceClassification::from_pretrained(&dir, 10, &mut rng).unwrap();
    // The same head as PyTorch's; evaluation mode switches every dropout off.
    for (name, p) in model.classifier().parameters() {
        p.set(
            fixture
                .tensor(&format!("classifier.{name}"), DType::F32)
                .unwrap(),
        )
        .unwrap();
    }
    model.set_training(false);
    let tokenizer = Tokenizer::from_pretrained(&dir)
        .unwrap()
        .with_truncation(Some(64))
        .unwrap()
        .with_padding(Some(Padding::Longest));
    let config = AdamConfig::adamw().lr(5e-5).eps(1e-8);
    let mut opt = Adam::with_groups(decay_groups(model.parameters(), 0.01), config).unwrap();
    let schedule = WarmupLr::new(5, 0.0, LinearLr::new(1.0, 0.0, steps - 5).unwrap()).unwrap();
    let mut sched = LrScheduler::new(schedule, &mut opt);
    let mut worst = 0f64;
    for step in 0..steps {
        let items: Vec<_> = order[step * batch..(step + 1) * batch]
            .iter()
            .map(|&i| &task.train[i as usize])
            .collect();
        let labels: Vec<i64> = items.iter().map(|s| s.label).collect();
        assert_eq!(
            labels,
            want_labels[step * batch..(step + 1) * batch],
            "the same task"
        );
        let texts: Vec<&str> = items.iter().map(|s| s.text.as_str()).collect();
        let enc = tokenizer.encode_batch(&texts).unwrap();
        let g = Graph::new();
        let loss = model
            .loss(
                &g.constant(enc.input_ids),
                Some(&g.constant(enc.attention_mask)),
                Some(&g.constant(enc.token_type_ids)),
                &Tensor::from_vec(labels, &[batch]).unwrap(),
            )
            .unwrap();
        let got = loss.value().try_item().unwrap();
        worst = worst.max((got - want[step]).abs());
        assert!(
            (got - want[step]).abs() <= 1e-4,
            "step {step}: loss {got} against PyTorch's {}",
            want[step]
        );
        let mut grads = loss.backward().unwrap();
        clip_grad_norm(&mut grads, 1.0, 2.0).unwrap();
        opt.step(&grads).unwrap();
        sched.step(&mut opt);
    }
    println!("{steps} steps: worst |loss - PyTorch's loss| {worst:.3e}");
}
