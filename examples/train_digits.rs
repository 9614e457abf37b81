//! Train an MLP on the bundled handwritten digits (8x8 images, 10 classes):
//! a seeded stratified split, shuffled mini-batches, an optimizer with a
//! cosine learning-rate schedule, a per-epoch table, then a checkpoint that
//! is reloaded into a fresh model and checked to score the same.
//!
//! ```sh
//! cargo run --release --example train_digits
//! cargo run --release --example train_digits -- --compile   # the step captured once, replayed
//! cargo run --release --example train_digits -- --hidden 256,128 --optimizer sgd --lr 0.1
//! cargo run --release --example train_digits -- --graph-svg step.svg   # picture of one step
//! cargo run --release --example train_digits -- --resume   # continue an interrupted run
//! # data-parallel over 2 processes (global batch 32 = 2 x 16)
//! cargo build --release --features mpi --example train_digits
//! mpirun -n 2 target/release/examples/train_digits --ddp
//! cargo run --release --example train_digits -- --plot target/digits_curves --graph-html step.html
//! ```

#[path = "support/compiled_step.rs"]
mod compiled_step;
#[cfg(feature = "mpi")]
#[path = "support/ddp_epochs.rs"]
mod ddp_epochs;
#[path = "support/epoch_trainer.rs"]
mod epoch_trainer;
#[path = "support/epochs.rs"]
mod epochs;
#[path = "support/reload_check.rs"]
mod reload_check;
#[path = "support/resume.rs"]
mod resume;
#[path = "support/run_outputs.rs"]
mod run_outputs;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::ProgressBar;

use retrograd::data::{digits, Dataset};
use retrograd::distributed::SingleProcess;
use retrograd::nn::{Activation, Mlp, Module};
use retrograd::optim::{
    grad_norm, optimizer_kind, optimizer_kinds, CosineAnnealingLr, LrScheduler, Optimizer,
    OptimizerKind, OptimizerSettings,
};
use retrograd::{DType, Result};
use run_outputs::{RunOutputs, StepFigures};

use epoch_trainer::{progress_and_header, StepSettings, Trainer};
use resume::Stopped;

/// Steps between training states unless `--checkpoint-every` says otherwise.
const CHECKPOINT_EVERY: u64 = 500;

/// The usage text, with the registered optimizers.
fn usage() -> String {
    let mut text = USAGE.to_string();
    text.push_str("\n\noptimizers (--optimizer):");
    for kind in optimizer_kinds() {
        text.push_str(&format!("\n  {:<10}{}", kind.name, kind.summary));
    }
    text.push_str(&format!("\n\n{}", resume::USAGE));
    text
}

const USAGE: &str = "\
usage: train_digits [options]

options:
  --hidden SIZES      hidden layer sizes, comma-separated (default 128,64)
  --activation NAME   relu, leaky_relu, tanh, sigmoid, gelu, gelu_tanh, silu,
                      identity (default relu)
  --dropout P         dropout after each hidden layer (default 0)
  --epochs N          passes over the training set (default 30)
  --batch-size N      examples per step (default 32)
  --optimizer NAME    any registered optimizer, listed below (default adam)
  --lr RATE           peak learning rate (default 0.002; cosine-annealed to 0)
  --momentum M        momentum of sgd and rmsprop (default 0.9)
  --weight-decay WD   weight decay (default 0; 0.01 for adamw)
  --test-fraction F   share of each class held out for testing (default 0.2)
  --seed N            seed of the split, the weights and the shuffling (default 0)
  --out FILE          checkpoint path (default target/train_digits.safetensors);
                      the run's log goes next to it (train_digits.log.jsonl)
  --plot DIR          draw the training curves as SVG in DIR after every epoch
  --graph-svg FILE    write a picture of the first training step's graph
  --graph-html FILE   write a page stepping through that step's backward sweep
  --quiet             no progress bar
  --compile           capture the training step once per batch shape and replay it
                      (retrograd::compile: fused, no graph recorded per step)
  --ddp               data-parallel training under mpirun (feature mpi): each of the
                      N ranks takes batch-size / N images of each step, rank 0 prints
  -h, --help          this text
  (--checkpoint-every is 500 by default)";

struct Args {
    hidden: Vec<usize>,
    activation: Activation,
    dropout: f64,
    epochs: usize,
    batch_size: usize,
    optimizer: &'static OptimizerKind,
    lr: f64,
    momentum: f64,
    weight_decay: Option<f64>,
    test_fraction: f64,
    seed: u64,
    out: PathBuf,
    plot: Option<PathBuf>,
    graph_svg: Option<PathBuf>,
    graph_html: Option<PathBuf>,
    quiet: bool,
    compile: bool,
    ddp: bool,
    checkpoints: resume::Flags,
}

/// What a resumed run must share with the run it continues.
fn settings(args: &Args, train: &Dataset) -> BTreeMap<String, String> {
    [
        ("hidden", format!("{:?}", args.hidden)),
        ("activation", args.activation.to_string()),
        ("dropout", args.dropout.to_string()),
        ("epochs", args.epochs.to_string()),
        ("batch-size", args.batch_size.to_string()),
        ("optimizer", args.optimizer.name.to_string()),
        ("lr", args.lr.to_string()),
        ("momentum", args.momentum.to_string()),
        ("weight-decay", format!("{:?}", args.weight_decay)),
        ("test-fraction", args.test_fraction.to_string()),
        ("seed", args.seed.to_string()),
        ("ddp", args.ddp.to_string()),
        (
            "data",
            format!("{} images, crc32 {:08x}", train.len(), train.checksum()),
        ),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        hidden: vec![128, 64],
        activation: Activation::Relu,
        dropout: 0.0,
        epochs: 30,
        batch_size: 32,
        optimizer: optimizer_kind("adam").map_err(|e| e.to_string())?,
        lr: 0.002,
        momentum: 0.9,
        weight_decay: None,
        test_fraction: 0.2,
        seed: 0,
        out: PathBuf::from("target/train_digits.safetensors"),
        plot: None,
        graph_svg: None,
        graph_html: None,
        quiet: false,
        compile: false,
        ddp: false,
        checkpoints: resume::Flags::new("train_digits", CHECKPOINT_EVERY),
    };
    let mut parser = lexopt::Parser::from_env();
    let err = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(err)? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("hidden") => {
                let v: String = parser.value().map_err(err)?.string().map_err(err)?;
                args.hidden = v
                    .split(',')
                    .filter(|s| !s.trim().is_empty())
                    .map(|s| {
                        s.trim()
                            .parse::<usize>()
                            .ok()
                            .filter(|&n| n > 0)
                            .ok_or(format!("--hidden: `{s}` is not a positive size"))
                    })
                    .collect::<std::result::Result<_, _>>()?;
            }
            Long("activation") => {
                let v: String = parser.value().map_err(err)?.string().map_err(err)?;
                args.activation = v.parse().map_err(|e: retrograd::Error| e.to_string())?;
            }
            Long("dropout") => args.dropout = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("epochs") => args.epochs = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("batch-size") => {
                args.batch_size = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("optimizer") => {
                let v: String = parser.value().map_err(err)?.string().map_err(err)?;
                args.optimizer = optimizer_kind(&v).map_err(|e| format!("--optimizer: {e}"))?;
            }
            Long("lr") => args.lr = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("momentum") => {
                args.momentum = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("weight-decay") => {
                args.weight_decay = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            Long("test-fraction") => {
                args.test_fraction = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("seed") => args.seed = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("out") => args.out = parser.value().map_err(err)?.into(),
            Long("plot") => args.plot = Some(parser.value().map_err(err)?.into()),
            Long("graph-svg") => args.graph_svg = Some(parser.value().map_err(err)?.into()),
            Long("graph-html") => args.graph_html = Some(parser.value().map_err(err)?.into()),
            Long("quiet") => args.quiet = true,
            Long("compile") => args.compile = true,
            Long("ddp") if cfg!(feature = "mpi") => args.ddp = true,
            Long("ddp") => {
                return Err("--ddp needs the mpi feature: cargo build --release --features mpi --example train_digits".into())
            }
            Long(name) if resume::Flags::owns(name) => {
                let name = name.to_string();
                args.checkpoints.parse(&name, &mut parser)?;
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if args.epochs == 0 || args.batch_size == 0 {
        return Err("--epochs and --batch-size must be > 0".into());
    }
    if args.compile && (args.graph_svg.is_some() || args.graph_html.is_some()) {
        return Err("--graph-svg and --graph-html draw an eager step: leave out --compile".into());
    }
    Ok(Some(args))
}

fn build_model(args: &Args, seed: u64) -> Result<Mlp> {
    let mut sizes = vec![digits::NUM_PIXELS];
    sizes.extend(&args.hidden);
    sizes.push(digits::NUM_CLASSES);
    Mlp::builder(&sizes)
        .activation(args.activation)
        .dropout(args.dropout)
        .dtype(DType::F32)
        .seed(seed)
        .build()
}

fn build_optimizer(args: &Args, model: &Mlp) -> Result<Box<dyn Optimizer>> {
    let settings = OptimizerSettings {
        lr: args.lr,
        weight_decay: args.weight_decay,
        momentum: Some(args.momentum),
    };
    args.optimizer.build(model.parameters(), &settings)
}

/// The rest of the current epoch; `Some` if the run must stop (a training
/// state was saved).
fn epoch(
    trainer: &mut Trainer<Mlp>,
    args: &Args,
    train: &Dataset,
    progress: &ProgressBar,
    session: &mut resume::Session<SingleProcess>,
) -> Result<Option<Stopped>> {
    let settings = StepSettings {
        graph_svg: args.graph_svg.as_deref(),
        graph_html: args.graph_html.as_deref(),
        title: "one training step: MLP forward, cross-entropy, gradients",
    };
    for batch in trainer.epoch_batches(train, args.batch_size)? {
        let n = batch.labels.len();
        let started = Instant::now();
        let lr = trainer.optimizer.lr();
        let index = trainer.at.step;
        let runner = &mut trainer.runner;
        // The closure form: L-BFGS evaluates it several times a step; the
        // statistics and the logged figures come from the first evaluation.
        let mut first = None; // (loss, accuracy, gradient norm)
        trainer.optimizer.step_with_closure(&mut || {
            let images = batch.features.clone();
            let step = runner.step(index, images, &batch.labels, &settings)?;
            if first.is_none() {
                first = Some((step.loss, step.accuracy, grad_norm(&step.grads, 2.0)?));
            }
            Ok((step.loss, step.grads))
        })?;
        trainer.scheduler.step(trainer.optimizer.as_mut());
        let (loss, accuracy, norm) = first.expect("the optimizer evaluated the step");
        let figures = StepFigures {
            loss,
            lr,
            grad_norm: norm,
            millis: Some(1e3 * started.elapsed().as_secs_f64()),
        };
        if let Some(stopped) =
            trainer.after_step(figures, n, accuracy, args.epochs, progress, session)?
        {
            return Ok(Some(stopped));
        }
    }
    Ok(None)
}

fn run(args: &Args) -> Result<Option<Stopped>> {
    let start = Instant::now();
    let data = digits::load_bundled()?;
    let (train, test) = data.stratified_split(args.test_fraction, args.seed)?;
    println!(
        "digits: {} images, {} train / {} test (stratified split, seed {})",
        data.len(),
        train.len(),
        test.len(),
        args.seed
    );

    let model = build_model(args, args.seed)?;
    let mut optimizer = build_optimizer(args, &model)?;
    let steps_per_epoch = train.len().div_ceil(args.batch_size);
    let total_steps = steps_per_epoch * args.epochs;
    let scheduler = LrScheduler::new(
        CosineAnnealingLr::new(total_steps, 0.0)?,
        optimizer.as_mut(),
    );
    let sizes: Vec<String> = model.sizes().iter().map(|s| s.to_string()).collect();
    println!(
        "model: MLP {} ({}{}), {} parameters (f32)",
        sizes.join("-"),
        args.activation,
        if args.dropout > 0.0 {
            format!(", dropout {}", args.dropout)
        } else {
            String::new()
        },
        model.num_parameters()
    );
    println!(
        "training: {} lr {} (cosine to 0 over {total_steps} steps), batch {}, {} epochs\n",
        optimizer.kind(),
        args.lr,
        args.batch_size,
        args.epochs
    );

    let (mut session, resumed) = resume::Session::start(
        "train_digits",
        SingleProcess,
        &args.checkpoints,
        settings(args, &train),
    )?;
    let outputs = RunOutputs::start(&args.out, args.plot.clone(), resumed.is_some())?;
    let mut trainer = Trainer::new(
        model,
        optimizer,
        scheduler,
        args.seed,
        "shuffle",
        outputs,
        args.compile,
    );
    if let Some(state) = &resumed {
        trainer.restore(state)?;
    }
    let progress = progress_and_header(args.quiet, total_steps as u64, trainer.at.step);
    if let Some(stopped) = trainer.run_epochs(args.epochs, &test, 512, start, &progress, |t| {
        epoch(t, args, &train, &progress, &mut session)
    })? {
        return Ok(Some(stopped));
    }
    if let Some(line) = session.summary() {
        println!("{line}");
    }
    let Trainer {
        mut model,
        optimizer,
        outputs,
        ..
    } = trainer;

    model.set_training(false);
    let model = model.get();
    // A fresh model with other weights, restored from the file, must score the same.
    let mut restored = build_model(args, args.seed.wrapping_add(1))?;
    let mut restored_optimizer = build_optimizer(args, &restored)?;
    restored.set_training(false);
    reload_check::checkpoint_and_reload(
        "train_digits",
        &args.out,
        &*model,
        optimizer.as_ref(),
        &restored,
        restored_optimizer.as_mut(),
        &test,
    )?;
    if let Some(path) = &args.graph_svg {
        println!("graph of one training step: {}", path.display());
    }
    if let Some(path) = &args.graph_html {
        println!("its backward sweep, step by step: {}", path.display());
    }
    println!("{}", outputs.describe());
    println!("total time: {:.2} s", start.elapsed().as_secs_f64());
    Ok(None)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{}", usage());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{}", usage());
            return ExitCode::from(2);
        }
    };
    #[cfg(feature = "mpi")]
    if args.ddp {
        return resume::ddp_main(|comm| ddp::run(&args, comm));
    }
    resume::exit(run(&args))
}

/// `--ddp`: the same training, data-parallel over the ranks of `mpirun`
/// (`support/ddp_epochs.rs`); rank 0 writes the checkpoint.
#[cfg(feature = "mpi")]
mod ddp {
    use super::*;
    use retrograd::distributed::MpiCommunicator;

    pub fn run(args: &Args, comm: &MpiCommunicator) -> Result<Option<Stopped>> {
        let start = Instant::now();
        let (train, test) =
            digits::load_bundled()?.stratified_split(args.test_fraction, args.seed)?;
        let describe = |steps: usize| {
            format!(
                "training: lr {} (cosine to 0 over {steps} steps), batch {}, {} epochs",
                args.lr, args.batch_size, args.epochs
            )
        };
        let job = ddp_epochs::Job {
            name: "train_digits",
            epochs: args.epochs,
            batch_size: args.batch_size,
            seed: args.seed,
            train: &train,
            test: &test,
            eval_batch: 512,
            checkpoints: &args.checkpoints,
            settings: settings(args, &train),
            describe: &describe,
            out: &args.out,
            plot: args.plot.clone(),
            compile: args.compile,
        };
        let trained = ddp_epochs::train(
            job,
            comm,
            build_model(args, args.seed)?,
            |m| build_optimizer(args, m),
            |x, _| Ok(x),
        )?;
        if trained.stopped.is_some() {
            return Ok(trained.stopped);
        }
        let meta = BTreeMap::from([("epochs".to_string(), args.epochs.to_string())]);
        trained
            .ddp
            .save_checkpoint(&args.out, Some(trained.optimizer.as_ref()), &meta)?;
        if let Some(outputs) = &trained.outputs {
            println!(
                "final test accuracy: {:.2}%; checkpoint (written by rank 0): {}",
                100.0 * trained.test_acc,
                args.out.display()
            );
            println!("{}", outputs.describe());
            println!("total time: {:.2} s", start.elapsed().as_secs_f64());
        }
        Ok(None)
    }
}
