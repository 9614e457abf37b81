//! Fine-tunes a pretrained BERT (all-MiniLM-L6-v2) end to end to tell who
//! speaks a speech of tiny Shakespeare: the 10 speakers with the most
//! speeches, a seeded 80/20 split per speaker, a sequence-classification
//! head on the pooled output, AdamW with linear warm-up and decay,
//! gradients clipped to norm 1 (`transformers`' Trainer recipe, which
//! `bench/finetune_speakers.py` runs in PyTorch on the same split).
//!
//! ```sh
//! scripts/fetch_minilm.sh                      # once: the model, into .cache/
//! cargo run --release --example finetune_speakers
//! cargo run --release --example finetune_speakers -- --epochs 1 --train-limit 160   # a quick look
//! ```

#[path = "support/minilm_dir.rs"]
mod minilm_dir;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;

use retrograd::data::shakespeare;
use retrograd::data::speakers::{seeded_permutation, speaker_task, Labelled};
use retrograd::hub::{ModelConfig, Padding, Tokenizer};
use retrograd::nn::{BertForSequenceClassification, Module};
use retrograd::optim::{
    clip_grad_norm, decay_groups, Adam, AdamConfig, LinearLr, LrScheduler, Optimizer, WarmupLr,
};
use retrograd::{Graph, Result, Var};

const USAGE: &str = "\
usage: finetune_speakers [options]

options:
  --model DIR         a BERT folder (default .cache/models/all-MiniLM-L6-v2)
  --speakers N        how many of the most frequent speakers (default 10)
  --epochs N          passes over the training speeches (default 4)
  --batch-size N      speeches per step (default 16)
  --lr RATE           peak learning rate (default 1e-4)
  --warmup F          share of the steps spent warming up (default 0.1)
  --weight-decay WD   AdamW weight decay on matrices (default 0.01)
  --max-length N      tokens per speech, cut beyond (default 128)
  --train-limit N     train on the first N training speeches only
  --seed N            seed of the split, the head and the batch order (default 0)
  --out DIR           where the fine-tuned model is saved (default target/finetune_speakers)
  --quiet             no progress bar
  -h, --help          this text";

struct Args {
    model: PathBuf,
    speakers: usize,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    warmup: f64,
    weight_decay: f64,
    max_length: usize,
    train_limit: Option<usize>,
    seed: u64,
    out: PathBuf,
    quiet: bool,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        model: minilm_dir::default_dir(),
        speakers: 10,
        epochs: 4,
        batch_size: 16,
        lr: 1e-4,
        warmup: 0.1,
        weight_decay: 0.01,
        max_length: 128,
        train_limit: None,
        seed: 0,
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/finetune_speakers"),
        quiet: false,
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        fn text(parser: &mut lexopt::Parser, name: &str) -> std::result::Result<String, String> {
            Ok(parser
                .value()
                .map_err(|e| format!("{name}: {e}"))?
                .to_string_lossy()
                .into_owned())
        }
        fn number<T: std::str::FromStr>(
            parser: &mut lexopt::Parser,
            name: &str,
        ) -> std::result::Result<T, String> {
            text(parser, name)?
                .parse()
                .map_err(|_| format!("{name} takes a number"))
        }
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("model") => args.model = text(&mut parser, "--model")?.into(),
            Long("speakers") => args.speakers = number(&mut parser, "--speakers")?,
            Long("epochs") => args.epochs = number(&mut parser, "--epochs")?,
            Long("batch-size") => args.batch_size = number(&mut parser, "--batch-size")?,
            Long("lr") => args.lr = number(&mut parser, "--lr")?,
            Long("warmup") => args.warmup = number(&mut parser, "--warmup")?,
            Long("weight-decay") => args.weight_decay = number(&mut parser, "--weight-decay")?,
            Long("max-length") => args.max_length = number(&mut parser, "--max-length")?,
            Long("train-limit") => args.train_limit = Some(number(&mut parser, "--train-limit")?),
            Long("seed") => args.seed = number(&mut parser, "--seed")?,
            Long("out") => args.out = text(&mut parser, "--out")?.into(),
            Long("quiet") => args.quiet = true,
            other => return Err(other.unexpected().to_string()),
        }
    }
    if args.batch_size == 0 || args.epochs == 0 || !(0.0..1.0).contains(&args.warmup) {
        return Err("--batch-size and --epochs must be positive, --warmup in [0, 1)".into());
    }
    Ok(Some(args))
}

/// The loss (or logits) of a batch of speeches, tokenized and padded.
fn batch_inputs(tokenizer: &Tokenizer, items: &[&Labelled]) -> Result<retrograd::hub::Encoded> {
    let texts: Vec<&str> = items.iter().map(|s| s.text.as_str()).collect();
    tokenizer.encode_batch(&texts)
}

/// Accuracy of `model` on `items`, in evaluation mode, on the inference graph.
fn evaluate(
    model: &mut BertForSequenceClassification,
    tokenizer: &Tokenizer,
    items: &[Labelled],
) -> Result<f64> {
    model.set_training(false);
    let mut correct = 0;
    for chunk in items.chunks(64) {
        let refs: Vec<&Labelled> = chunk.iter().collect();
        let batch = batch_inputs(tokenizer, &refs)?;
        let logits = model.forward(
            &Var::from(batch.input_ids),
            Some(&Var::from(batch.attention_mask)),
            Some(&Var::from(batch.token_type_ids)),
        )?;
        let predicted = logits
            .try_argmax(Some(-1), false)?
            .value()
            .to_vec::<i64>()?;
        correct += predicted
            .iter()
            .zip(chunk)
            .filter(|(p, s)| **p == s.label)
            .count();
    }
    model.set_training(true);
    Ok(correct as f64 / items.len() as f64)
}

fn run(args: &Args) -> Result<()> {
    let start = Instant::now();
    let speeches = shakespeare::speeches(&shakespeare::load_bundled()?);
    let mut task = speaker_task(&speeches, args.speakers, 0.2, args.seed)?;
    if let Some(limit) = args.train_limit {
        let order = seeded_permutation(task.train.len(), args.seed ^ 0x11);
        let keep: Vec<Labelled> = order
            .iter()
            .take(limit)
            .map(|&i| task.train[i].clone())
            .collect();
        task.train = keep;
    }
    println!(
        "speakers: {} ({} train / {} test speeches, seeded 80/20 split per speaker, seed {})",
        task.speakers.join(", "),
        task.train.len(),
        task.test.len(),
        args.seed
    );
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let (mut model, report) =
        BertForSequenceClassification::from_pretrained(&args.model, task.speakers.len(), &mut rng)?;
    model.set_training(true);
    let tokenizer = Tokenizer::from_pretrained(&args.model)?
        .with_truncation(Some(args.max_length))?
        .with_padding(Some(Padding::Longest));
    println!(
        "model: {} ({} parameters; new: {}), max {} tokens per speech",
        args.model.display(),
        model.num_parameters(),
        report.initialized.join(", "),
        args.max_length
    );
    let steps_per_epoch = task.train.len().div_ceil(args.batch_size);
    let total = steps_per_epoch * args.epochs;
    let warmup = (total as f64 * args.warmup).round() as usize;
    let config = AdamConfig::adamw().lr(args.lr).eps(1e-8);
    let mut opt = Adam::with_groups(decay_groups(model.parameters(), args.weight_decay), config)?;
    let mut sched = LrScheduler::new(
        WarmupLr::new(warmup, 0.0, LinearLr::new(1.0, 0.0, total - warmup)?)?,
        &mut opt,
    );
    println!(
        "training: AdamW lr {} (linear warm-up {warmup} steps, then linear to 0 at {total}), weight decay {} on matrices, batch {}, {} epochs, clip 1.0\n",
        args.lr, args.weight_decay, args.batch_size, args.epochs
    );
    let accuracy0 = evaluate(&mut model, &tokenizer, &task.test)?;
    println!(
        "before fine-tuning: test accuracy {:.2}% (chance {:.2}%)\n",
        100.0 * accuracy0,
        100.0 / task.speakers.len() as f64
    );
    println!("epoch | train loss | train acc | test acc |        lr | elapsed");
    println!("---------------------------------------------------------------");
    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("step {pos}/{len} [{bar:30}] loss {msg} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let mut test_accuracy = accuracy0;
    for epoch in 0..args.epochs {
        let order = seeded_permutation(
            task.train.len(),
            args.seed.wrapping_mul(1000) + epoch as u64 + 1,
        );
        let (mut loss_sum, mut correct) = (0.0, 0usize);
        for step in order.chunks(args.batch_size) {
            let items: Vec<&Labelled> = step.iter().map(|&i| &task.train[i]).collect();
            let batch = batch_inputs(&tokenizer, &items)?;
            let labels = retrograd::Tensor::from_vec(
                items.iter().map(|s| s.label).collect(),
                &[items.len()],
            )?;
            let graph = Graph::new();
            let logits = model.forward(
                &graph.constant(batch.input_ids),
                Some(&graph.constant(batch.attention_mask)),
                Some(&graph.constant(batch.token_type_ids)),
            )?;
            let loss = logits.try_cross_entropy(&labels)?;
            let predicted = logits
                .try_argmax(Some(-1), false)?
                .value()
                .to_vec::<i64>()?;
            correct += predicted
                .iter()
                .zip(&items)
                .filter(|(p, s)| **p == s.label)
                .count();
            let value = loss.value().try_item()?;
            loss_sum += value * items.len() as f64;
            let mut grads = loss.backward()?;
            clip_grad_norm(&mut grads, 1.0, 2.0)?;
            opt.step(&grads)?;
            sched.step(&mut opt);
            bar.set_message(format!("{value:.4}"));
            bar.inc(1);
        }
        test_accuracy = evaluate(&mut model, &tokenizer, &task.test)?;
        bar.suspend(|| {
            println!(
                "{:>5} | {:>10.4} | {:>8.2}% | {:>7.2}% | {:>9.2e} | {:>6.1}s",
                epoch + 1,
                loss_sum / task.train.len() as f64,
                100.0 * correct as f64 / task.train.len() as f64,
                100.0 * test_accuracy,
                opt.lr(),
                start.elapsed().as_secs_f64()
            )
        });
    }
    bar.finish_and_clear();
    model.save_pretrained(&args.out, &ModelConfig::read(&args.model)?, &task.speakers)?;
    println!(
        "\nfinal test accuracy: {:.2}% ({} of {} held-out speeches)",
        100.0 * test_accuracy,
        (test_accuracy * task.test.len() as f64).round(),
        task.test.len()
    );
    println!(
        "saved: {} (loads in transformers as BertForSequenceClassification)",
        args.out.display()
    );
    println!("total time: {:.1} s", start.elapsed().as_secs_f64());
    Ok(())
}

fn main() -> ExitCode {
    minilm_dir::main(USAGE, parse_args, |args| &args.model, run)
}
