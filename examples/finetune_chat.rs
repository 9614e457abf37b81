//! Fine-tunes SmolLM2-135M-Instruct with LoRA to answer in Shakespeare's
//! voice: pairs from tiny Shakespeare (a speech as the user's turn, the
//! next speaker's reply as the assistant's), rendered with the model's chat
//! template, the loss on the assistant's tokens only. The base weights
//! stay frozen in their 4-bit blocks (QLoRA): gradients reach the adapters
//! through the transposed quantized products, and no f32 copy of a base
//! matrix is made. Writes the adapter as a PEFT folder that
//! `peft.PeftModel.from_pretrained` loads, and `chat --adapter DIR` uses.
//!
//! ```sh
//! scripts/fetch_smollm2.sh                        # once: the model, into .cache/
//! cargo run --release --example finetune_chat
//! cargo run --release --example chat -- --adapter target/finetune_chat/adapter --prompt "How fares the king?"
//! ```

// finetune_chat has no --ddp mode, so resume's entry for one goes unused.
#[allow(dead_code)]
#[path = "support/resume.rs"]
mod resume;
// The backward-sweep page of run_outputs is for the jobs that draw one.
#[allow(dead_code)]
#[path = "support/run_outputs.rs"]
mod run_outputs;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use resume::Stopped;
use retrograd::data::shakespeare;
use retrograd::data::speakers::seeded_permutation;
use retrograd::distributed::SingleProcess;
use retrograd::gguf::GgufFile;
use retrograd::hub::{save_peft_adapter, GgufSaveOptions, PeftSaveOptions, WeightPrecision};
use retrograd::llm::{ChatModel, GenerateOptions, Message, Role, Sampling, TrainingExample};
use retrograd::nn::lora::{LoraConfig, LoraModel, LoraTargets};
use retrograd::nn::{Module, IGNORE_LABEL};
use retrograd::optim::{
    clip_grad_norm, Adam, AdamConfig, LinearLr, LrScheduler, Optimizer, WarmupLr,
};
use retrograd::quant::GgmlType;
use retrograd::train::{Progress, RankState, TrainingState};
use retrograd::{Graph, Result};
use run_outputs::{RunOutputs, StepFigures};

const USAGE: &str = "\
usage: finetune_chat [options]

options:
  --model FILE        the GGUF model (default .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf)
  --out DIR           where the adapter folder goes (default target/finetune_chat/adapter)
  --steps N           optimizer steps (default 150)
  --batch-size N      conversations per step (default 4)
  --max-length N      tokens per conversation, cut beyond (default 256)
  --rank R            adapter rank (default 8)
  --alpha A           adapter alpha (default 16)
  --dropout P         dropout on the adapters' input (default 0.05)
  --targets LIST      layers to adapt: names such as q_proj,v_proj, or all-linear (default)
  --lr RATE           peak learning rate (default 2e-4)
  --warmup F          share of the steps spent warming up (default 0.05)
  --weight-decay WD   AdamW weight decay (default 0.0)
  --val N             held-out conversations for the validation loss (default 64)
  --samples N         sample replies printed before and after (default 3)
  --seed N            seed of the split, the adapters and the batch order (default 0)
  --f32               train on the weights dequantized to f32 instead of in their blocks
  --gradient-checkpointing  recompute each layer in backward: far less memory, about a third
                      more time (needs --dropout 0)
  --merged-gguf FILE  also write the model with the adapter merged in as one GGUF file
                      that llama.cpp runs (its matrices in --merged-type)
  --merged-type T     F16, Q8_0, Q4_1, ... (default Q8_0)
  --min-improvement D fail unless the validation loss falls by at least D
  --plot DIR          draw the training curves as SVG in DIR
  --quiet             no progress bar
  -h, --help          this text";

struct Args {
    model: PathBuf,
    out: PathBuf,
    steps: usize,
    batch_size: usize,
    max_length: usize,
    rank: usize,
    alpha: f64,
    dropout: f64,
    targets: LoraTargets,
    lr: f64,
    warmup: f64,
    weight_decay: f64,
    val: usize,
    samples: usize,
    seed: u64,
    f32: bool,
    checkpointing: bool,
    merged_gguf: Option<PathBuf>,
    merged_type: GgmlType,
    min_improvement: Option<f64>,
    plot: Option<PathBuf>,
    quiet: bool,
    checkpoints: resume::Flags,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let mut args = Args {
        model: root.join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf"),
        out: root.join("target/finetune_chat/adapter"),
        steps: 150,
        batch_size: 4,
        max_length: 256,
        rank: 8,
        alpha: 16.0,
        dropout: 0.05,
        targets: LoraTargets::AllLinear,
        lr: 2e-4,
        warmup: 0.05,
        weight_decay: 0.0,
        val: 64,
        samples: 3,
        seed: 0,
        f32: false,
        checkpointing: false,
        merged_gguf: None,
        merged_type: GgmlType::Q8_0,
        min_improvement: None,
        plot: None,
        quiet: false,
        checkpoints: resume::Flags::new("finetune_chat", 50),
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        let err = |e: lexopt::Error| e.to_string();
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("model") => args.model = parser.value().map_err(err)?.into(),
            Long("out") => args.out = parser.value().map_err(err)?.into(),
            Long("steps") => args.steps = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("batch-size") => {
                args.batch_size = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("max-length") => {
                args.max_length = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("rank") => args.rank = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("alpha") => args.alpha = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("dropout") => args.dropout = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("targets") => {
                let text: String = parser.value().map_err(err)?.parse().map_err(err)?;
                args.targets = LoraTargets::try_parse(&text).map_err(|e| e.to_string())?;
            }
            Long("lr") => args.lr = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("warmup") => args.warmup = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("weight-decay") => {
                args.weight_decay = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("val") => args.val = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("samples") => args.samples = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("seed") => args.seed = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("f32") => args.f32 = true,
            Long("gradient-checkpointing") => args.checkpointing = true,
            Long("merged-gguf") => args.merged_gguf = Some(parser.value().map_err(err)?.into()),
            Long("merged-type") => {
                let name: String = parser.value().map_err(err)?.parse().map_err(err)?;
                args.merged_type = GgmlType::ALL
                    .into_iter()
                    .find(|t| t.name().eq_ignore_ascii_case(&name))
                    .ok_or_else(|| format!("--merged-type: unknown format {name}"))?;
            }
            Long("min-improvement") => {
                args.min_improvement = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            Long("plot") => args.plot = Some(parser.value().map_err(err)?.into()),
            Long("quiet") => args.quiet = true,
            Long(name) if resume::Flags::owns(name) => {
                let name = name.to_string();
                args.checkpoints.parse(&name, &mut parser)?
            }
            other => return Err(other.unexpected().to_string()),
        }
    }
    if args.steps == 0 || args.batch_size == 0 || args.max_length < 8 {
        return Err("--steps and --batch-size must be positive, --max-length at least 8".into());
    }
    if args.checkpointing && args.dropout > 0.0 {
        return Err("--gradient-checkpointing recomputes each layer, which would draw other dropout masks: add --dropout 0".into());
    }
    if !(0.0..1.0).contains(&args.warmup) {
        return Err("--warmup must be in [0, 1)".into());
    }
    Ok(Some(args))
}

/// Consecutive speeches by two different speakers, as (user, assistant).
fn reply_pairs() -> Result<Vec<(String, String)>> {
    let speeches = shakespeare::speeches(&shakespeare::load_bundled()?);
    Ok(speeches
        .windows(2)
        .filter(|w| w[0].speaker != w[1].speaker)
        .map(|w| (w[0].text.clone(), w[1].text.clone()))
        .collect())
}

fn conversation(user: &str, assistant: Option<&str>) -> Vec<Message> {
    let mut m = vec![Message::new(Role::User, user)];
    if let Some(a) = assistant {
        m.push(Message::new(Role::Assistant, a));
    }
    m
}

/// The conversations as rows cut to `max_length`, those with an
/// assistant token left.
fn examples(
    chat: &ChatModel,
    pairs: &[&(String, String)],
    max_length: usize,
) -> Result<Vec<TrainingExample>> {
    let mut out = Vec::with_capacity(pairs.len());
    for (user, assistant) in pairs {
        let mut e = chat.try_training_example(&conversation(user, Some(assistant)))?;
        e.truncate(max_length);
        if e.labelled() > 0 {
            out.push(e);
        }
    }
    Ok(out)
}

/// Rows of one batch, padded on the right to the longest (padding is
/// never attended to by the real tokens before it, and carries no label).
fn pad(rows: &[&TrainingExample], pad_id: usize) -> (Vec<usize>, Vec<i64>, usize) {
    let t = rows.iter().map(|r| r.ids.len()).max().unwrap_or(0);
    let (mut ids, mut labels) = (Vec::new(), Vec::new());
    for r in rows {
        ids.extend(&r.ids);
        ids.extend(std::iter::repeat_n(pad_id, t - r.ids.len()));
        labels.extend(&r.labels);
        labels.extend(std::iter::repeat_n(IGNORE_LABEL, t - r.labels.len()));
    }
    (ids, labels, rows.len())
}

/// The mean loss per labelled token over `rows`, in batches.
fn validation_loss(
    chat: &mut ChatModel,
    rows: &[TrainingExample],
    batch: usize,
    pad_id: usize,
) -> Result<f64> {
    chat.model_mut().set_training(false);
    let (mut sum, mut count) = (0.0, 0usize);
    for chunk in rows.chunks(batch) {
        let refs: Vec<&TrainingExample> = chunk.iter().collect();
        let (ids, labels, b) = pad(&refs, pad_id);
        let n: usize = chunk.iter().map(labelled_targets).sum();
        let graph = Graph::new();
        let loss = graph.no_grad(|| chat.model().try_causal_lm_loss(&graph, &ids, &labels, b))?;
        sum += loss.value().try_item()? * n as f64;
        count += n;
    }
    chat.model_mut().set_training(true);
    Ok(sum / count.max(1) as f64)
}

/// Labelled positions that a previous position predicts (the first token
/// has none before it): what the loss averages over.
fn labelled_targets(e: &TrainingExample) -> usize {
    e.labels
        .iter()
        .skip(1)
        .filter(|&&l| l != IGNORE_LABEL)
        .count()
}

/// Greedy replies to the sample prompts.
fn replies(chat: &mut ChatModel, prompts: &[&str]) -> Result<Vec<String>> {
    chat.model_mut().set_training(false);
    let options = GenerateOptions {
        max_tokens: 48,
        sampling: Sampling::greedy(),
        ..GenerateOptions::default()
    };
    let out = prompts
        .iter()
        .map(|p| Ok(chat.chat(&conversation(p, None), &options, |_| true)?.text))
        .collect();
    chat.model_mut().set_training(true);
    out
}

fn settings(args: &Args) -> BTreeMap<String, String> {
    [
        ("model", args.model.display().to_string()),
        ("steps", args.steps.to_string()),
        ("batch-size", args.batch_size.to_string()),
        ("max-length", args.max_length.to_string()),
        ("rank", args.rank.to_string()),
        ("alpha", args.alpha.to_string()),
        ("dropout", args.dropout.to_string()),
        ("targets", format!("{:?}", args.targets)),
        ("lr", args.lr.to_string()),
        ("warmup", args.warmup.to_string()),
        ("weight-decay", args.weight_decay.to_string()),
        ("val", args.val.to_string()),
        ("seed", args.seed.to_string()),
        ("f32", args.f32.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn train(args: &Args) -> Result<Option<Stopped>> {
    let started = Instant::now();
    let precision = if args.f32 {
        WeightPrecision::F32
    } else {
        WeightPrecision::Quantized
    };
    let mut chat = ChatModel::from_gguf(&args.model, precision)?;
    let pad_id = *chat.end_ids().first().unwrap_or(&0) as usize;

    // A seeded split of the reply pairs: the first --val held out.
    let pairs = reply_pairs()?;
    let order = seeded_permutation(pairs.len(), args.seed);
    let val_pairs: Vec<&(String, String)> = order[..args.val].iter().map(|&i| &pairs[i]).collect();
    let train_pairs: Vec<&(String, String)> =
        order[args.val..].iter().map(|&i| &pairs[i]).collect();
    let val = examples(&chat, &val_pairs, args.max_length)?;
    let prompts: Vec<&str> = val_pairs
        .iter()
        .take(args.samples)
        .map(|(u, _)| u.as_str())
        .collect();

    let lora = LoraConfig::new(args.rank, args.alpha)
        .targets(args.targets.clone())
        .dropout(args.dropout)
        .seed(args.seed);
    let adapted = chat.model_mut().try_add_adapter("default", &lora)?;
    chat.model_mut()
        .set_gradient_checkpointing(args.checkpointing);
    let params = chat.model().adapter_parameters("default");
    let trainable: usize = params.iter().map(|(_, p)| p.numel()).sum();
    println!(
        "model: {} ({}), {} reply pairs ({} held out)",
        args.model.display(),
        if args.f32 { "f32" } else { "quantized blocks" },
        pairs.len(),
        args.val
    );
    println!(
        "LoRA: rank {}, alpha {}, dropout {} on {} layers: {trainable} trainable numbers",
        args.rank,
        args.alpha,
        args.dropout,
        adapted.len()
    );
    let config = AdamConfig::adamw()
        .lr(args.lr)
        .weight_decay(args.weight_decay);
    let mut opt = Adam::new(params, config)?;
    let warmup = (args.steps as f64 * args.warmup).round() as usize;
    let mut sched = LrScheduler::new(
        WarmupLr::new(warmup, 0.0, LinearLr::new(1.0, 0.0, args.steps - warmup)?)?,
        &mut opt,
    );
    let (mut session, resumed) = resume::Session::start(
        "finetune_chat",
        SingleProcess,
        &args.checkpoints,
        settings(args),
    )?;
    let mut first = 0;
    let mut before = None;
    if let Some(saved) = &resumed {
        let rank = saved.restore(chat.model(), Some(&mut opt), Some(&mut sched))?;
        first = saved.progress().step as usize;
        before = rank.value("val_loss_before").ok();
    }
    let before = match before {
        Some(v) => v,
        None => validation_loss(&mut chat, &val, args.batch_size, pad_id)?,
    };
    // The base model's replies (on a resumed run too: the adapter is off).
    chat.model_mut().try_set_adapters(&[])?;
    let samples_before = replies(&mut chat, &prompts)?;
    chat.model_mut().try_set_adapters(&["default"])?;
    println!(
        "validation loss before: {before:.4} (perplexity {:.1}) over {} conversations",
        before.exp(),
        val.len()
    );

    let bar = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(args.steps as u64)
    };
    bar.set_style(
        ProgressStyle::with_template("step {pos}/{len} [{bar:30}] {msg} eta {eta}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    bar.set_position(first as u64);
    let log_path = args.out.with_extension("safetensors");
    let mut outputs = RunOutputs::start(&log_path, args.plot.clone(), resumed.is_some())?;
    // Epochs of the training pairs in a seeded order; each step's batch
    // follows from the step number, so a resumed run sees the same ones.
    let per_epoch = train_pairs.len() / args.batch_size;
    for step in first..args.steps {
        let (epoch, index) = (step / per_epoch, step % per_epoch);
        let order = seeded_permutation(train_pairs.len(), args.seed ^ ((epoch as u64 + 1) << 32));
        let batch_pairs: Vec<&(String, String)> = order
            [index * args.batch_size..(index + 1) * args.batch_size]
            .iter()
            .map(|&i| train_pairs[i])
            .collect();
        let rows = examples(&chat, &batch_pairs, args.max_length)?;
        if rows.is_empty() {
            continue;
        }
        let refs: Vec<&TrainingExample> = rows.iter().collect();
        let (ids, labels, b) = pad(&refs, pad_id);
        let step_started = Instant::now();
        let graph = Graph::new();
        let loss = chat.model().try_causal_lm_loss(&graph, &ids, &labels, b)?;
        let value = loss.value().try_item()?;
        let mut grads = loss.backward()?;
        drop(loss);
        drop(graph);
        let norm = clip_grad_norm(&mut grads, 1.0, 2.0)?;
        opt.step(&grads)?;
        drop(grads);
        // Batches differ in length, so the buffers a step leaves for the
        // next rarely fit it: hand them back, so the peak stays one step's.
        Graph::release_spare_buffers();
        let lr = opt.lr();
        sched.step(&mut opt);
        let millis = 1e3 * step_started.elapsed().as_secs_f64();
        outputs.log_step(
            step,
            StepFigures {
                loss: value,
                lr,
                grad_norm: norm,
                millis: Some(millis),
            },
        )?;
        bar.inc(1);
        bar.set_message(format!("loss {value:.4}, {:.1} s/step", millis / 1e3));
        if args.quiet {
            println!(
                "step {:>4}: loss {value:.4}, lr {lr:.2e}, {:.1} s",
                step + 1,
                millis / 1e3
            );
        }
        let at = Progress {
            step: step as u64 + 1,
            epoch: epoch as u64,
            batch: index as u64 + 1,
        };
        let capture = || {
            let rank = RankState::new().with_value("val_loss_before", before);
            TrainingState::capture(chat.model(), Some(&opt), Some(&sched), at, rank)
        };
        if let Some(stopped) = session.after_step(at, capture)? {
            bar.finish_and_clear();
            outputs.evaluated()?;
            return Ok(Some(stopped));
        }
    }
    bar.finish_and_clear();
    if let Some(line) = session.summary() {
        println!("{line}");
    }
    let after = validation_loss(&mut chat, &val, args.batch_size, pad_id)?;
    outputs.log(args.steps, &[("val/loss", after)])?;
    outputs.evaluated()?;
    println!(
        "validation loss: before {before:.4}, after {after:.4} (perplexity {:.1} -> {:.1})",
        before.exp(),
        after.exp()
    );
    let samples_after = replies(&mut chat, &prompts)?;
    for ((prompt, b), a) in prompts.iter().zip(&samples_before).zip(&samples_after) {
        let first_line = prompt.lines().next().unwrap_or("");
        println!(
            "\nuser:   {first_line} ...\nbefore: {}\nafter:  {}",
            b.trim(),
            a.trim()
        );
    }
    let options = PeftSaveOptions {
        base_model_name_or_path: Some(
            args.model
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        ),
    };
    save_peft_adapter(chat.model(), "default", &args.out, &options)?;
    println!(
        "\nadapter: {} (PEFT's format; chat --adapter {} uses it)",
        args.out.display(),
        args.out.display()
    );
    if let Some(path) = &args.merged_gguf {
        let source = GgufFile::try_open(&args.model)?;
        let options = GgufSaveOptions {
            quantize: Some(args.merged_type),
            tokenizer_from: Some(&source),
        };
        chat.model().save_gguf(path, options)?;
        println!(
            "merged model: {} ({} matrices, the tokenizer of {})",
            path.display(),
            args.merged_type.name(),
            args.model.display()
        );
    }
    println!("{}", outputs.describe());
    println!("total time: {:.1} s", started.elapsed().as_secs_f64());
    if let Some(margin) = args.min_improvement
        && after > before - margin
    {
        return Err(retrograd::Error::InvalidArgument {
            op: "finetune_chat",
            reason: format!(
                "the validation loss fell by {:.4}, less than --min-improvement {margin}",
                before - after
            ),
        });
    }
    Ok(None)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}\n\n{}", resume::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}\n\n{}", resume::USAGE);
            return ExitCode::FAILURE;
        }
    };
    if !args.model.exists() {
        eprintln!(
            "error: {} is missing; run scripts/fetch_smollm2.sh",
            args.model.display()
        );
        return ExitCode::FAILURE;
    }
    resume::exit(train(&args))
}
