//! W6: a pretrained model, all-MiniLM-L6-v2 (`scripts/fetch_minilm.sh`),
//! f32. Pairs with `bench/pytorch_reference.py` (sentence-transformers and
//! transformers on the same folder, and onnxruntime on the model
//! `torch.onnx.export` writes).
//!
//! - `w6_embed`: `SentenceTransformer::encode` of the first 256 speeches
//!   of tiny Shakespeare at batch 32 (sorted by length into batches, as
//!   sentence-transformers' `encode`), each batch's real tokens packed
//!   (the default: no work on padding); ms per 256.
//! - `w6_embed_padded`: the same with each batch padded to its longest
//!   text, the work sentence-transformers does.
//! - `w6_step`: one fine-tuning step of `BertForSequenceClassification`
//!   (10 labels, training mode: dropout on) at batch 16, sequence 128
//!   (speeches cut and padded to 128 tokens): forward, cross-entropy,
//!   backward, AdamW; ms per step.
//! - `w6_load`, in a fresh process: ms from the folder to the first
//!   embedding (load, tokenizer, one text), then the peak RSS of the
//!   process after embedding the 256 speeches (`mem_w6`, MiB).

use std::path::PathBuf;
use std::time::Instant;

use rand::SeedableRng;

use retrograd::data::shakespeare;
use retrograd::hub::{Padding, SentenceTransformer, Tokenizer};
use retrograd::nn::{BertForSequenceClassification, Module};
use retrograd::optim::{decay_groups, Adam, AdamConfig, Optimizer};
use retrograd::{Graph, Tensor};

use crate::memory::{delegated, rss_and_peak};
use crate::report::{emit, time, Value};
use crate::Options;

fn model_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("RETROGRAD_MINILM").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/models/all-MiniLM-L6-v2"),
        PathBuf::from,
    );
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        eprintln!(
            "w6: no model in {} (run scripts/fetch_minilm.sh)",
            dir.display()
        );
        None
    }
}

/// The first `n` speeches of tiny Shakespeare.
fn speeches(n: usize) -> Vec<String> {
    let text = shakespeare::load_bundled().expect("bundled text");
    shakespeare::speeches(&text)
        .into_iter()
        .take(n)
        .map(|s| s.text)
        .collect()
}

pub fn run_embed(opts: &Options) {
    embed(opts, true)
}

pub fn run_embed_padded(opts: &Options) {
    embed(opts, false)
}

fn embed(opts: &Options, packed: bool) {
    let Some(dir) = model_dir() else { return };
    let model = SentenceTransformer::from_pretrained(&dir)
        .expect("model")
        .packed(packed);
    let texts = speeches(256);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let repeats = if opts.quick { 1 } else { opts.repeats.max(5) };
    let mut checksum = 0.0;
    let stats = time(repeats, || {
        let e = model.encode(&refs, 32, |_, _| {}).expect("encode");
        checksum = e.to_f64_vec()[..8].iter().sum();
    });
    emit(
        vec![
            (
                "workload",
                if packed {
                    "w6_embed"
                } else {
                    "w6_embed_padded"
                }
                .into(),
            ),
            ("framework", "retrograd".into()),
            ("dtype", "f32".into()),
            ("batch", 32usize.into()),
            ("texts", 256usize.into()),
            ("first_values_sum", Value::Num(checksum)),
        ],
        Some(stats),
    );
}

pub fn run_step(opts: &Options) {
    let Some(dir) = model_dir() else { return };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let (mut model, _) =
        BertForSequenceClassification::from_pretrained(&dir, 10, &mut rng).expect("model");
    model.set_training(true);
    let tokenizer = Tokenizer::from_pretrained(&dir)
        .expect("tokenizer")
        .with_truncation(Some(128))
        .expect("truncation")
        .with_padding(Some(Padding::Fixed(128)));
    let texts = speeches(16 * 40);
    // The 16 longest speeches: all 128 tokens once cut.
    let mut by_length: Vec<&str> = texts.iter().map(String::as_str).collect();
    by_length.sort_by_key(|t| std::cmp::Reverse(t.len()));
    let batch = tokenizer.encode_batch(&by_length[..16]).expect("batch");
    assert_eq!(batch.input_ids.shape(), &[16, 128]);
    let labels =
        Tensor::from_vec((0..16).map(|i| i % 10).collect::<Vec<i64>>(), &[16]).expect("labels");
    let config = AdamConfig::adamw().lr(1e-5).eps(1e-8);
    let mut opt = Adam::with_groups(decay_groups(model.parameters(), 0.01), config).expect("adamw");
    let repeats = if opts.quick { 1 } else { opts.repeats.max(10) };
    let stats = time(repeats, || {
        let g = Graph::new();
        let loss = model
            .loss(
                &g.constant(batch.input_ids.clone()),
                Some(&g.constant(batch.attention_mask.clone())),
                Some(&g.constant(batch.token_type_ids.clone())),
                &labels,
            )
            .expect("loss");
        let grads = loss.backward().expect("backward");
        opt.step(&grads).expect("step");
    });
    emit(
        vec![
            ("workload", "w6_step".into()),
            ("framework", "retrograd".into()),
            ("dtype", "f32".into()),
            ("batch", 16usize.into()),
            ("seq", 128usize.into()),
        ],
        Some(stats),
    );
}

pub fn run_load(opts: &Options) {
    if delegated("w6_load", opts) {
        return;
    }
    let Some(dir) = model_dir() else { return };
    let texts = speeches(256);
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let start = Instant::now();
    let model = SentenceTransformer::from_pretrained(&dir).expect("model");
    let first = model.embed_batch(&refs[..1]).expect("first embedding");
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    std::hint::black_box(first);
    emit(
        vec![
            ("workload", "w6_load".into()),
            ("framework", "retrograd".into()),
            ("dtype", "f32".into()),
            ("unit", "ms_folder_to_first_embedding".into()),
            ("median", Value::Num(load_ms)),
        ],
        None,
    );
    model.encode(&refs, 32, |_, _| {}).expect("encode");
    let (_, peak) = rss_and_peak().unwrap_or((0, 0));
    emit(
        vec![
            ("workload", "mem_w6".into()),
            ("framework", "retrograd".into()),
            ("dtype", "f32".into()),
            ("unit", "MiB_peak_rss_load_and_embed".into()),
            ("median", Value::Num(peak as f64 / (1 << 20) as f64)),
        ],
        None,
    );
}
