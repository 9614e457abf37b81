//! Train a character-level GPT on the bundled tiny Shakespeare text,
//! nanoGPT's documented CPU run of `shakespeare_char`: block 64, batch 12,
//! 4 layers, 4 heads, width 128, no dropout, no biases, tied embeddings;
//! AdamW (lr 1e-3, betas 0.9/0.99, weight decay 0.1 on matrices only) with
//! 100 warm-up iterations and cosine decay to 1e-4 at iteration 2,000,
//! gradients clipped to norm 1. The first 90% of the text trains, the last
//! 10% validates. It reports the validation loss every 250 iterations,
//! keeps the best model in an atomic checkpoint (with the tokenizer and the
//! model's sizes) and ends with 500 sampled characters.
//!
//! ```sh
//! cargo run --release --example train_shakespeare
//! cargo run --release --example train_shakespeare -- --iters 500 --quiet
//! cargo run --release --example train_shakespeare -- --compile   # the step captured once, replayed
//! cargo run --release --example train_shakespeare -- --plot target/gpt_curves --graph-html step.html
//! cargo run --release --example train_shakespeare -- --sample --checkpoint target/train_shakespeare.safetensors
//! cargo build --release --features mpi --example train_shakespeare
//! mpirun -n 2 target/release/examples/train_shakespeare --ddp
//! cargo run --release --example train_shakespeare -- --resume   # continue an interrupted run
//! ```

#[path = "support/resume.rs"]
mod resume;
#[path = "support/run_outputs.rs"]
mod run_outputs;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use retrograd::data::{shakespeare, train_val_split, CharTokenizer};
use retrograd::distributed::SingleProcess;
use retrograd::io::{checkpoint_metadata, load_checkpoint, save_checkpoint_with_metadata};
use retrograd::nn::{manual_seed, Gpt, GptConfig, Module};
use retrograd::optim::{
    clip_grad_norm, decay_groups, grad_norm, Adam, AdamConfig, LrSchedule, Optimizer,
    WarmupCosineLr,
};
use retrograd::train::{Progress, RankState, TrainingState};
use retrograd::{compile, CompileOptions, Compiled, Error, Graph, Result, Tensor, Var};
use run_outputs::{RunOutputs, StepFigures};

use resume::Stopped;

/// Iterations between training states unless `--checkpoint-every` says otherwise.
const CHECKPOINT_EVERY: u64 = 250;

const USAGE: &str = "\
usage: train_shakespeare [options]

training (nanoGPT's shakespeare_char CPU run by default):
  --iters N           training iterations (default 2000)
  --batch-size N      sequences per iteration (default 12)
  --block-size N      context length (default 64)
  --layers N          transformer blocks (default 4)
  --heads N           attention heads (default 4)
  --embd N            model width (default 128)
  --dropout P         dropout (default 0)
  --lr RATE           peak learning rate (default 0.001)
  --min-lr RATE       learning rate at the end of the cosine (default 0.0001)
  --warmup N          warm-up iterations (default 100)
  --weight-decay WD   AdamW weight decay of the matrices (default 0.1)
  --grad-clip NORM    clip the gradient norm (default 1.0; 0 = off)
  --eval-interval N   evaluate every N iterations (default 250)
  --eval-iters N      batches per loss estimate (default 20)
  --max-val-loss L    exit with an error if the final validation loss is above L
  --out FILE          checkpoint path (default target/train_shakespeare.safetensors);
                      the run's log goes next to it (train_shakespeare.log.jsonl)
  --plot DIR          draw the training curves as SVG in DIR at every evaluation
  --graph-html FILE   write a page stepping through the first iteration's backward
                      sweep (repeated transformer blocks collapsed into one node)

sampling:
  --sample            sample from --checkpoint without training
  --checkpoint FILE   the model to sample from (with --sample)
  --chars N           characters to sample (default 500)
  --temperature T     softmax temperature (default 0.8)
  --top-k K           sample among the K likeliest characters (default 200; 0 = all)
  --prompt TEXT       the text to continue (default a newline)

  --compile           capture the training step once and replay it (retrograd::compile:
                      fused, no graph recorded per iteration)
  --ddp               data-parallel training under mpirun (feature mpi): each of the
                      N ranks draws batch-size / N windows per iteration
  --seed N            seed of the weights, batches and sampling (default 1337)
  --quiet             no progress bar
  -h, --help          this text
  (--checkpoint-every is 250 by default)";

struct Args {
    iters: usize,
    batch_size: usize,
    config: GptConfig,
    lr: f64,
    min_lr: f64,
    warmup: usize,
    weight_decay: f64,
    grad_clip: f64,
    eval_interval: usize,
    eval_iters: usize,
    max_val_loss: Option<f64>,
    out: PathBuf,
    plot: Option<PathBuf>,
    graph_html: Option<PathBuf>,
    sample_only: bool,
    checkpoint: Option<PathBuf>,
    chars: usize,
    temperature: f64,
    top_k: usize,
    prompt: String,
    seed: u64,
    quiet: bool,
    compile: bool,
    ddp: bool,
    checkpoints: resume::Flags,
}

/// What a resumed run must share with the run it continues (and every
/// rank with rank 0).
fn settings(args: &Args, ids: &[i64]) -> BTreeMap<String, String> {
    let bytes: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    [
        ("iters", args.iters.to_string()),
        ("batch-size", args.batch_size.to_string()),
        ("model", args.config.to_metadata()),
        ("lr", args.lr.to_string()),
        ("min-lr", args.min_lr.to_string()),
        ("warmup", args.warmup.to_string()),
        ("weight-decay", args.weight_decay.to_string()),
        ("grad-clip", args.grad_clip.to_string()),
        ("eval-interval", args.eval_interval.to_string()),
        ("eval-iters", args.eval_iters.to_string()),
        ("seed", args.seed.to_string()),
        ("ddp", args.ddp.to_string()),
        (
            "data",
            format!(
                "{} tokens, crc32 {:08x}",
                ids.len(),
                crc32fast::hash(&bytes)
            ),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        iters: 2000,
        batch_size: 12,
        config: GptConfig::shakespeare_char(0),
        lr: 1e-3,
        min_lr: 1e-4,
        warmup: 100,
        weight_decay: 0.1,
        grad_clip: 1.0,
        eval_interval: 250,
        eval_iters: 20,
        max_val_loss: None,
        out: PathBuf::from("target/train_shakespeare.safetensors"),
        plot: None,
        graph_html: None,
        sample_only: false,
        checkpoint: None,
        chars: 500,
        temperature: 0.8,
        top_k: 200,
        prompt: "\n".to_string(),
        seed: 1337,
        quiet: false,
        compile: false,
        ddp: false,
        checkpoints: resume::Flags::new("train_shakespeare", CHECKPOINT_EVERY),
    };
    let mut parser = lexopt::Parser::from_env();
    let err = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(err)? {
        macro_rules! value {
            () => {
                parser.value().map_err(err)?.parse().map_err(err)?
            };
        }
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("iters") => args.iters = value!(),
            Long("batch-size") => args.batch_size = value!(),
            Long("block-size") => args.config.block_size = value!(),
            Long("layers") => args.config.n_layer = value!(),
            Long("heads") => args.config.n_head = value!(),
            Long("embd") => args.config.n_embd = value!(),
            Long("dropout") => args.config.dropout = value!(),
            Long("lr") => args.lr = value!(),
            Long("min-lr") => args.min_lr = value!(),
            Long("warmup") => args.warmup = value!(),
            Long("weight-decay") => args.weight_decay = value!(),
            Long("grad-clip") => args.grad_clip = value!(),
            Long("eval-interval") => args.eval_interval = value!(),
            Long("eval-iters") => args.eval_iters = value!(),
            Long("max-val-loss") => args.max_val_loss = Some(value!()),
            Long("out") => args.out = parser.value().map_err(err)?.into(),
            Long("plot") => args.plot = Some(parser.value().map_err(err)?.into()),
            Long("graph-html") => args.graph_html = Some(parser.value().map_err(err)?.into()),
            Long("sample") => args.sample_only = true,
            Long("checkpoint") => args.checkpoint = Some(parser.value().map_err(err)?.into()),
            Long("chars") => args.chars = value!(),
            Long("temperature") => args.temperature = value!(),
            Long("top-k") => args.top_k = value!(),
            Long("prompt") => args.prompt = value!(),
            Long("seed") => args.seed = value!(),
            Long("quiet") => args.quiet = true,
            Long("compile") => args.compile = true,
            Long("ddp") if cfg!(feature = "mpi") => args.ddp = true,
            Long("ddp") => {
                return Err("--ddp needs the mpi feature: cargo build --release --features mpi --example train_shakespeare".into())
            }
            Long(name) if resume::Flags::owns(name) => {
                let name = name.to_string();
                args.checkpoints.parse(&name, &mut parser)?;
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if args.batch_size == 0 || args.eval_interval == 0 || args.eval_iters == 0 {
        return Err("--batch-size, --eval-interval and --eval-iters must be > 0".into());
    }
    if args.sample_only && args.checkpoint.is_none() {
        return Err("--sample needs --checkpoint FILE".into());
    }
    Ok(Some(args))
}

/// nanoGPT's schedule: linear warm-up, then cosine decay from `lr` to
/// `min_lr` at the last iteration.
fn schedule(args: &Args) -> Result<WarmupCosineLr> {
    WarmupCosineLr::new(args.warmup, args.iters, args.min_lr)
}

/// `batch` random windows of `block` tokens and the tokens one step later
/// (nanoGPT's `get_batch`), both `[batch, block]`.
fn batch(data: &[i64], batch: usize, block: usize, rng: &mut impl Rng) -> Result<(Tensor, Tensor)> {
    if data.len() <= block {
        return Err(Error::InvalidArgument {
            op: "train_shakespeare",
            reason: format!(
                "{} tokens cannot fill a context of {block} and its targets",
                data.len()
            ),
        });
    }
    let (mut x, mut y) = (
        Vec::with_capacity(batch * block),
        Vec::with_capacity(batch * block),
    );
    for _ in 0..batch {
        let i = rng.random_range(0..data.len() - block);
        x.extend_from_slice(&data[i..i + block]);
        y.extend_from_slice(&data[i + 1..i + 1 + block]);
    }
    Ok((
        Tensor::from_vec(x, &[batch, block])?,
        Tensor::from_vec(y, &[batch, block])?,
    ))
}

/// The mean loss over every non-overlapping window of `data` (the
/// targets one token later), evaluated without a graph: a deterministic
/// figure, where one of 20 random batches varies by about 0.015 from one
/// draw to the next.
fn split_loss(model: &Gpt, data: &[i64], batch: usize) -> Result<f64> {
    let block = model.config().block_size;
    let starts: Vec<usize> = (0..data.len().saturating_sub(1) / block)
        .map(|w| w * block)
        .collect();
    let (mut sum, mut count) = (0.0, 0usize);
    for chunk in starts.chunks(batch) {
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for &i in chunk {
            x.extend_from_slice(&data[i..i + block]);
            y.extend_from_slice(&data[i + 1..i + 1 + block]);
        }
        let shape = [chunk.len(), block];
        let loss = model.loss(
            &Var::from(Tensor::from_vec(x, &shape)?),
            &Tensor::from_vec(y, &shape)?,
        )?;
        sum += loss.value().try_item()? * chunk.len() as f64;
        count += chunk.len();
    }
    Ok(sum / count.max(1) as f64)
}

/// The mean loss over `iters` random batches, evaluated without a graph.
fn estimate_loss(model: &Gpt, data: &[i64], args: &Args, rng: &mut impl Rng) -> Result<f64> {
    let mut sum = 0.0;
    for _ in 0..args.eval_iters {
        let (x, y) = batch(data, args.batch_size, model.config().block_size, rng)?;
        sum += model.loss(&Var::from(x), &y)?.value().try_item()?;
    }
    Ok(sum / args.eval_iters as f64)
}

fn sample(model: &Gpt, tokenizer: &CharTokenizer, args: &Args) -> Result<String> {
    let prompt = tokenizer.encode(&args.prompt)?;
    let top_k = (args.top_k > 0).then_some(args.top_k);
    let mut rng = ChaCha8Rng::seed_from_u64(args.seed);
    let tokens = model.generate(&prompt, args.chars, args.temperature, top_k, &mut rng)?;
    tokenizer.decode(&tokens)
}

/// The model, tokenizer and sizes saved in `path`.
fn load_model(path: &PathBuf) -> Result<(Gpt, CharTokenizer)> {
    let metadata = checkpoint_metadata(path)?;
    let entry = |key: &str| {
        metadata.get(key).ok_or_else(|| Error::Format {
            op: "train_shakespeare",
            path: path.display().to_string(),
            reason: format!("not a train_shakespeare checkpoint: no `{key}` metadata"),
        })
    };
    let tokenizer = CharTokenizer::from_metadata(entry(CharTokenizer::METADATA_KEY)?)?;
    let model = Gpt::new(GptConfig::from_metadata(entry(GptConfig::METADATA_KEY)?)?)?;
    load_checkpoint(path, &model, None)?;
    Ok((model, tokenizer))
}

/// What training starts from, on one rank or many: the tokenized corpus and
/// the metadata its checkpoints carry (tokenizer and model sizes).
struct Setup {
    tokenizer: CharTokenizer,
    ids: Vec<i64>,
    metadata: BTreeMap<String, String>,
}

/// Loads and tokenizes the corpus, sizes the model's vocabulary to it, seeds
/// the default generator the model is drawn from, and makes the
/// checkpoint's directory.
fn setup(args: &mut Args) -> Result<Setup> {
    let text = shakespeare::load_bundled()?;
    let tokenizer = CharTokenizer::from_text(&text);
    let ids = tokenizer.encode(&text)?;
    args.config.vocab_size = tokenizer.vocab_size();
    manual_seed(args.seed);
    let metadata = BTreeMap::from([
        (
            CharTokenizer::METADATA_KEY.to_string(),
            tokenizer.to_metadata(),
        ),
        (
            GptConfig::METADATA_KEY.to_string(),
            args.config.to_metadata(),
        ),
    ]);
    if let Some(dir) = args.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            op: "create_dir_all",
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
    }
    Ok(Setup {
        tokenizer,
        ids,
        metadata,
    })
}

/// nanoGPT's AdamW: betas (0.9, 0.99), weight decay on matrices only.
fn adamw(args: &Args, model: &Gpt) -> Result<Adam> {
    let config = AdamConfig::adamw().lr(args.lr).betas(0.9, 0.99);
    Adam::with_groups(decay_groups(model.parameters(), args.weight_decay), config)
}

/// The generators and numbers of a rank of `train_shakespeare`: its batch
/// draws, the evaluation's draws, the best and last validation estimates
/// and the training time so far.
struct Loop {
    batch_rng: ChaCha8Rng,
    eval_rng: ChaCha8Rng,
    best_val: f64,
    last_val: f64,
    train_time: f64,
}

impl Loop {
    fn new(batch_seed: u64, eval_seed: u64) -> Self {
        Loop {
            batch_rng: ChaCha8Rng::seed_from_u64(batch_seed),
            eval_rng: ChaCha8Rng::seed_from_u64(eval_seed),
            best_val: f64::INFINITY,
            last_val: f64::INFINITY,
            train_time: 0.0,
        }
    }

    fn save(&self) -> RankState {
        RankState::new()
            .with_generator("batches", &self.batch_rng)
            .with_generator("eval", &self.eval_rng)
            .with_value("best_val", self.best_val)
            .with_value("last_val", self.last_val)
            .with_value("train_time", self.train_time)
    }

    fn restore(mine: &RankState) -> Result<Self> {
        Ok(Loop {
            batch_rng: mine.generator("batches")?,
            eval_rng: mine.generator("eval")?,
            best_val: mine.value("best_val")?,
            last_val: mine.value("last_val")?,
            train_time: mine.value("train_time")?,
        })
    }
}

/// The function of a compiled step.
type StepFn = Box<dyn for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>>;

/// `--compile`: the model's loss on a batch (the tokens and their targets,
/// the step's two inputs) captured once and replayed every iteration; the
/// step owns a clone of the model, which shares its parameters.
/// Iteration `k` draws dropout's masks from `seed` and `k`.
fn compiled_step(model: &Gpt, seed: u64) -> Compiled<StepFn> {
    fn boxed(f: impl for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>> + 'static) -> StepFn {
        Box::new(f)
    }
    let replica = model.clone();
    let f = boxed(move |_: &Graph, x: &[Var<'_>]| replica.loss(&x[0], x[1].value()));
    compile(
        f,
        CompileOptions::new().params(model.parameters()).seed(seed),
    )
}

/// One iteration's loss and gradients, eager or (`step`) compiled.
fn loss_and_grads(
    model: &Gpt,
    step: Option<&mut Compiled<StepFn>>,
    it: usize,
    x: Tensor,
    y: Tensor,
) -> Result<(f64, retrograd::Gradients)> {
    let Some(step) = step else {
        let graph = Graph::new();
        let loss = model.loss(&graph.constant(x), &y)?;
        return Ok((loss.value().try_item()?, loss.backward()?));
    };
    step.set_run_count(it as u64);
    let out = step.run(&[x, y])?;
    Ok((out.loss(), out.grads().clone()))
}

/// The position of a run of iterations after `done` of them.
fn progress_after(done: usize) -> Progress {
    Progress {
        step: done as u64,
        epoch: 0,
        batch: done as u64,
    }
}

fn train(args: &mut Args) -> Result<Option<Stopped>> {
    let Setup {
        tokenizer,
        ids,
        metadata,
    } = setup(args)?;
    let (train, val) = train_val_split(&ids, shakespeare::TRAIN_FRACTION)?;
    let model = Gpt::new(args.config)?;
    println!(
        "tiny Shakespeare: {} characters, vocabulary {}, {} for training and {} for validation",
        ids.len(),
        tokenizer.vocab_size(),
        train.len(),
        val.len()
    );
    println!(
        "GPT: {} layers, {} heads, width {}, context {}: {:.2}M parameters; {} iterations at batch {}",
        args.config.n_layer,
        args.config.n_head,
        args.config.n_embd,
        args.config.block_size,
        model.num_parameters() as f64 / 1e6,
        args.iters,
        args.batch_size
    );
    let mut optimizer = adamw(args, &model)?;
    let schedule = schedule(args)?;
    let (mut session, resumed) = resume::Session::start(
        "train_shakespeare",
        SingleProcess,
        &args.checkpoints,
        settings(args, &ids),
    )?;
    let mut state = Loop::new(args.seed, args.seed ^ 0xe7a1);
    let mut first = 0;
    if let Some(saved) = &resumed {
        state = Loop::restore(&saved.restore(&model, Some(&mut optimizer), None)?)?;
        first = saved.progress().step as usize;
    }

    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(args.iters as u64)
    };
    progress.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed} < {eta}]")
            .expect("a valid template"),
    );
    progress.set_position(first as u64);
    let started = Instant::now();
    let mut outputs = RunOutputs::start(&args.out, args.plot.clone(), resumed.is_some())?;
    let mut compiled = args.compile.then(|| compiled_step(&model, args.seed));
    for it in first..=args.iters {
        if it % args.eval_interval == 0 || it == args.iters {
            let train_loss = estimate_loss(&model, train, args, &mut state.eval_rng)?;
            state.last_val = estimate_loss(&model, val, args, &mut state.eval_rng)?;
            let estimates = [
                ("train_estimate/loss", train_loss),
                ("val/loss", state.last_val),
            ];
            outputs.log(it, &estimates)?;
            outputs.evaluated()?;
            let mut line = format!(
                "step {it:>5}: train loss {train_loss:.4}, val loss {:.4}",
                state.last_val
            );
            if state.last_val < state.best_val {
                state.best_val = state.last_val;
                save_checkpoint_with_metadata(&args.out, &model, Some(&optimizer), &metadata)?;
                line.push_str(&format!("  (saved {})", args.out.display()));
            }
            progress.suspend(|| println!("{line}"));
        }
        if it == args.iters {
            break;
        }
        let step_started = Instant::now();
        optimizer.set_lr(schedule.lr_at(args.lr, it));
        let (x, y) = batch(
            train,
            args.batch_size,
            args.config.block_size,
            &mut state.batch_rng,
        )?;
        let page = args.graph_html.as_ref().filter(|_| it == 0);
        let (loss, mut grads) = if let Some(path) = page {
            let graph = Graph::new();
            run_outputs::name_parameters(&graph, &model);
            let loss = model.loss(&graph.constant(x), &y)?;
            let grads = loss.backward()?;
            let title = "one GPT training step: embeddings, 4 transformer blocks, cross-entropy";
            run_outputs::write_step_page(&graph, &loss, path, title)?;
            (loss.value().try_item()?, grads)
        } else {
            loss_and_grads(&model, compiled.as_mut(), it, x, y)?
        };
        let norm = if args.grad_clip > 0.0 {
            clip_grad_norm(&mut grads, args.grad_clip, 2.0)?
        } else {
            grad_norm(&grads, 2.0)?
        };
        optimizer.step(&grads)?;
        let seconds = step_started.elapsed().as_secs_f64();
        state.train_time += seconds;
        let figures = StepFigures {
            loss,
            lr: optimizer.lr(),
            grad_norm: norm,
            millis: Some(1e3 * seconds),
        };
        outputs.log_step(it, figures)?;
        progress.inc(1);
        progress.set_message(format!("loss {loss:.4}  lr {:.2e}", optimizer.lr()));
        let at = progress_after(it + 1);
        let capture = || {
            TrainingState::capture(&model, Some(&optimizer), None, at, state.save())?
                .with_metadata(&metadata)
        };
        if let Some(stopped) = session.after_step(at, capture)? {
            progress.finish_and_clear();
            return Ok(Some(stopped));
        }
    }
    progress.finish_and_clear();
    if let Some(line) = session.summary() {
        println!("{line}");
    }
    let Loop {
        best_val,
        last_val,
        train_time,
        ..
    } = state;
    println!(
        "\ntrained {} iterations in {:.1} s ({:.1} ms per iteration, evaluation excluded; {:.1} s in all)",
        args.iters,
        train_time,
        1e3 * train_time / args.iters.max(1) as f64,
        started.elapsed().as_secs_f64()
    );
    // The periodic figures are estimates from 20 random batches (they vary
    // by about 0.015 from one draw to the next), so the checkpoint they chose
    // is checked against the final model on every window of the split, and
    // the better of the two is kept.
    let final_whole = split_loss(&model, val, args.batch_size)?;
    let mut line = format!(
        "validation loss over the whole split: {final_whole:.4} after {} iterations",
        args.iters
    );
    if best_val < last_val {
        let (saved, _) = load_model(&args.out)?;
        let saved_whole = split_loss(&saved, val, args.batch_size)?;
        line.push_str(&format!(
            ", {saved_whole:.4} for the checkpoint of the best estimate"
        ));
        if final_whole < saved_whole {
            save_checkpoint_with_metadata(&args.out, &model, Some(&optimizer), &metadata)?;
            line.push_str("; the final model replaces it");
        }
    }
    println!("{line}");
    if let Some(path) = &args.graph_html {
        println!(
            "the first iteration's backward sweep, step by step: {}",
            path.display()
        );
    }
    println!("{}", outputs.describe());

    // The checkpoint must give back the kept model, tokenizer and sizes included.
    let (restored, restored_tokenizer) = load_model(&args.out)?;
    let whole = split_loss(&restored, val, args.batch_size)?;
    println!(
        "reloaded {}: validation loss {whole:.4} over the whole split",
        args.out.display()
    );
    println!(
        "\n--- {} sampled characters (temperature {}, top-k {}) ---",
        args.chars, args.temperature, args.top_k
    );
    println!("{}", sample(&restored, &restored_tokenizer, args)?);
    if let Some(limit) = args.max_val_loss
        && whole > limit
    {
        return Err(Error::InvalidArgument {
                op: "train_shakespeare",
                reason: format!(
                    "the checkpoint's validation loss {whole:.4} (whole split) is above --max-val-loss {limit}"
                ),
            });
    }
    Ok(None)
}

fn main() -> ExitCode {
    let mut args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}\n\n{}", resume::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("error: {message}\n\n{USAGE}\n\n{}", resume::USAGE);
            return ExitCode::FAILURE;
        }
    };
    if args.sample_only {
        let path = args.checkpoint.clone().expect("checked in parse_args");
        let sampled = load_model(&path).and_then(|(model, tokenizer)| {
            println!("{}", sample(&model, &tokenizer, &args)?);
            Ok(None)
        });
        return resume::exit(sampled);
    }
    #[cfg(feature = "mpi")]
    if args.ddp {
        return resume::ddp_main(|comm| ddp::train(&mut args, comm));
    }
    resume::exit(train(&mut args))
}

/// `--ddp`: the same training, data-parallel over the ranks of `mpirun`.
/// Rank 0's initial weights go to every rank; each rank draws `batch-size /
/// N` windows per iteration from its own generator; the averaged gradients
/// keep the replicas identical, so every rank's loss estimates (same
/// evaluation seed, same weights) agree and they save together (rank 0
/// writes). Rank 0 prints and samples.
#[cfg(feature = "mpi")]
mod ddp {
    use super::*;
    use retrograd::distributed::{Communicator, DataParallel, MpiCommunicator};

    pub fn train(args: &mut Args, comm: &MpiCommunicator) -> Result<Option<Stopped>> {
        let (rank, size) = (comm.rank(), comm.size());
        let lead = rank == 0;
        if !args.batch_size.is_multiple_of(size) {
            return Err(Error::InvalidArgument {
                op: "train_shakespeare --ddp",
                reason: format!(
                    "--batch-size {} is not a multiple of {size} ranks",
                    args.batch_size
                ),
            });
        }
        let per_rank = args.batch_size / size;
        // Rank 0 samples with the tokenizer saved in the checkpoint.
        let Setup { ids, metadata, .. } = setup(args)?;
        let (train, val) = train_val_split(&ids, shakespeare::TRAIN_FRACTION)?;
        let mut ddp = DataParallel::new(Gpt::new(args.config)?, comm)?;
        let mut optimizer = adamw(args, ddp.module())?;
        let schedule = schedule(args)?;
        if lead {
            println!(
                "data-parallel: {size} ranks x {per_rank} windows = global batch {}; {:.2}M parameters, {} gradient buckets, {:.2} MiB all-reduced per iteration",
                args.batch_size,
                ddp.module().num_parameters() as f64 / 1e6,
                ddp.bucket_count(),
                ddp.bytes_per_step() as f64 / (1 << 20) as f64
            );
        }
        let (mut session, resumed) = resume::Session::start(
            "train_shakespeare",
            comm,
            &args.checkpoints,
            settings(args, &ids),
        )?;
        let mut state = Loop::new(args.seed ^ ((rank as u64) << 32), args.seed ^ 0xe7a1);
        let mut first = 0;
        if let Some(saved) = &resumed {
            let mine = saved.restore_rank(ddp.module(), Some(&mut optimizer), None, rank, size)?;
            state = Loop::restore(&mine)?;
            first = saved.progress().step as usize;
        }
        let started = Instant::now();
        let seed = args.seed ^ ((rank as u64) << 32);
        let mut compiled = args.compile.then(|| compiled_step(ddp.module(), seed));
        // Rank 0 logs: its own windows' loss per iteration, the estimates.
        let mut outputs = match lead {
            true => Some(RunOutputs::start(
                &args.out,
                args.plot.clone(),
                resumed.is_some(),
            )?),
            false => None,
        };
        for it in first..=args.iters {
            if it % args.eval_interval == 0 || it == args.iters {
                let train_loss = estimate_loss(ddp.module(), train, args, &mut state.eval_rng)?;
                let val_loss = estimate_loss(ddp.module(), val, args, &mut state.eval_rng)?;
                if let Some(outputs) = &mut outputs {
                    let estimates = [("train_estimate/loss", train_loss), ("val/loss", val_loss)];
                    outputs.log(it, &estimates)?;
                    outputs.evaluated()?;
                }
                let improved = val_loss < state.best_val;
                if improved {
                    state.best_val = val_loss;
                    ddp.save_checkpoint(&args.out, Some(&optimizer), &metadata)?;
                }
                if lead {
                    println!(
                        "step {it:>5}: train loss {train_loss:.4}, val loss {val_loss:.4}{}  [{:.1} s]",
                        if improved { "  (saved)" } else { "" },
                        started.elapsed().as_secs_f64()
                    );
                }
            }
            if it == args.iters {
                break;
            }
            optimizer.set_lr(schedule.lr_at(args.lr, it));
            let (x, y) = batch(
                train,
                per_rank,
                args.config.block_size,
                &mut state.batch_rng,
            )?;
            let (loss, mut grads) = match &mut compiled {
                Some(step) => {
                    // Each bucket's all-reduce starts while the replay's backward runs.
                    step.set_run_count(it as u64);
                    let out = ddp.run_compiled(step, &[x, y])?;
                    (out.loss(), out.grads().clone())
                }
                None => {
                    let graph = Graph::new();
                    let loss = ddp.module().loss(&graph.constant(x), &y)?;
                    (loss.value().try_item()?, ddp.backward(&loss)?)
                }
            };
            let norm = if args.grad_clip > 0.0 {
                clip_grad_norm(&mut grads, args.grad_clip, 2.0)?
            } else {
                grad_norm(&grads, 2.0)?
            };
            optimizer.step(&grads)?;
            if let Some(outputs) = &mut outputs {
                let figures = StepFigures {
                    loss,
                    lr: optimizer.lr(),
                    grad_norm: norm,
                    millis: None,
                };
                outputs.log_step(it, figures)?;
            }
            let at = progress_after(it + 1);
            let capture = || {
                TrainingState::capture(ddp.module(), Some(&optimizer), None, at, state.save())?
                    .with_metadata(&metadata)
            };
            if let Some(stopped) = session.after_step(at, capture)? {
                return Ok(Some(stopped));
            }
        }
        if let Some(outputs) = &outputs {
            if let Some(line) = session.summary() {
                println!("{line}");
            }
            println!("{}", outputs.describe());
            let (restored, restored_tokenizer) = load_model(&args.out)?;
            println!(
                "best validation estimate {:.4}, kept in {}: validation loss {:.4} over the whole split",
                state.best_val,
                args.out.display(),
                split_loss(&restored, val, args.batch_size)?
            );
            println!("{}", sample(&restored, &restored_tokenizer, args)?);
        }
        Ok(None)
    }
}
