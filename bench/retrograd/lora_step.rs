//! One LoRA training step of SmolLM2-135M-Instruct, the work
//! `bench/lora_step_peft.py` times in `transformers` + `peft`: rank 8,
//! alpha 16, no dropout, on q/k/v/o and the feed-forward's three
//! projections of all 30 layers, AdamW over the adapters, batch 4 x 256
//! tokens. The batches are tiny Shakespeare's reply pairs through the
//! chat template, one stream cut into 256-token windows with labels on the
//! assistants' turns, as the Python script builds them (the pairs' order
//! differs: a seeded permutation here, numpy's there).
//!
//! `lora_step` trains through the 4-bit blocks (QLoRA), `lora_step_ckpt`
//! the same with each decoder layer recomputed in backward (gradient
//! checkpointing), `lora_step_f32` on the weights dequantized to f32, as
//! PyTorch runs them. Each runs in a
//! fresh process, so its peak RSS is its own. Needs the model file
//! (scripts/fetch_smollm2.sh); without it prints a skip line.

use std::path::PathBuf;
use std::time::Instant;

use retrograd::data::shakespeare;
use retrograd::data::speakers::seeded_permutation;
use retrograd::hub::WeightPrecision;
use retrograd::llm::{ChatModel, Message, Role};
use retrograd::nn::lora::{LoraConfig, LoraModel, LoraTargets};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::Graph;

use crate::memory::{delegated, rss_and_peak};
use crate::report::{emit, Value};
use crate::Options;

const BATCH: usize = 4;
const SEQ: usize = 256;

fn model_path() -> Option<PathBuf> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if p.exists() {
        Some(p)
    } else {
        println!(
            "skip: {} is missing; run scripts/fetch_smollm2.sh",
            p.display()
        );
        None
    }
}

/// `steps · BATCH` windows of SEQ tokens of the rendered reply pairs.
fn windows(chat: &ChatModel, count: usize) -> Vec<(Vec<usize>, Vec<i64>)> {
    let speeches = shakespeare::speeches(&shakespeare::load_bundled().expect("bundled text"));
    let pairs: Vec<(&str, &str)> = speeches
        .windows(2)
        .filter(|w| w[0].speaker != w[1].speaker)
        .map(|w| (w[0].text.as_str(), w[1].text.as_str()))
        .collect();
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    for i in seeded_permutation(pairs.len(), 0) {
        if ids.len() >= count * SEQ {
            break;
        }
        let (user, assistant) = pairs[i];
        let e = chat
            .try_training_example(&[
                Message::new(Role::User, user),
                Message::new(Role::Assistant, assistant),
            ])
            .expect("a rendered pair");
        ids.extend(e.ids);
        labels.extend(e.labels);
    }
    (0..count)
        .map(|w| {
            let r = w * SEQ..(w + 1) * SEQ;
            (ids[r.clone()].to_vec(), labels[r].to_vec())
        })
        .collect()
}

fn run_with(label: &str, precision: WeightPrecision, checkpointing: bool, opts: &Options) {
    if delegated(label, opts) {
        return;
    }
    let Some(path) = model_path() else {
        return;
    };
    let steps = if opts.quick {
        2
    } else {
        opts.repeats.max(2) + 1
    };
    let mut chat = ChatModel::from_gguf(&path, precision).expect("the model");
    let config = LoraConfig::new(8, 16.0).targets(LoraTargets::parse(
        "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
    ));
    chat.model_mut()
        .try_add_adapter("default", &config)
        .expect("adapters");
    chat.model_mut().set_gradient_checkpointing(checkpointing);
    let params = chat.model().adapter_parameters("default");
    let trainable: usize = params.iter().map(|(_, p)| p.numel()).sum();
    let mut opt = Adam::new(params, AdamConfig::adamw().lr(2e-4)).expect("optimizer");
    let after_load = rss_and_peak().map_or(0, |(_, peak)| peak);
    let batches = windows(&chat, steps * BATCH);
    let (mut times, mut losses) = (Vec::new(), Vec::new());
    for step in batches.chunks(BATCH) {
        let ids: Vec<usize> = step.iter().flat_map(|(i, _)| i.iter().copied()).collect();
        let labels: Vec<i64> = step.iter().flat_map(|(_, l)| l.iter().copied()).collect();
        let started = Instant::now();
        let graph = Graph::new();
        let loss = chat
            .model()
            .try_causal_lm_loss(&graph, &ids, &labels, BATCH)
            .expect("the loss");
        let grads = loss.backward().expect("gradients");
        opt.step(&grads).expect("the update");
        times.push(started.elapsed().as_secs_f64());
        losses.push(loss.value().try_item().expect("a scalar"));
    }
    let timed = &mut times[1..].to_vec();
    timed.sort_by(f64::total_cmp);
    let peak = rss_and_peak().map_or(0, |(_, peak)| peak);
    let mib = |b: u64| Value::Num(b as f64 / (1 << 20) as f64);
    let losses: Vec<String> = losses.iter().map(|l| format!("{l:.4}")).collect();
    emit(
        vec![
            ("workload", label.into()),
            ("batch", Value::Int(BATCH as u64)),
            ("seq", Value::Int(SEQ as u64)),
            ("r", Value::Int(8)),
            ("trainable_params", Value::Int(trainable as u64)),
            ("threads", Value::Int(rayon::current_num_threads() as u64)),
            ("median_s", Value::Num(timed[timed.len() / 2])),
            ("min_s", Value::Num(timed[0])),
            ("max_s", Value::Num(timed[timed.len() - 1])),
            ("warmup_s", Value::Num(times[0])),
            ("losses", Value::Str(losses.join(" "))),
            ("rss_after_load_mib", mib(after_load)),
            ("peak_rss_mib", mib(peak)),
        ],
        None,
    );
}

/// Through the quantized blocks.
pub fn run(opts: &Options) {
    run_with("lora_step", WeightPrecision::Quantized, false, opts)
}

/// Through the quantized blocks, each decoder layer recomputed in backward.
pub fn run_checkpointed(opts: &Options) {
    run_with("lora_step_ckpt", WeightPrecision::Quantized, true, opts)
}

/// On the weights dequantized to f32.
pub fn run_f32(opts: &Options) {
    run_with("lora_step_f32", WeightPrecision::F32, false, opts)
}
