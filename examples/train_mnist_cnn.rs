//! Train a small CNN on the bundled MNIST digits (5,000 real 28x28 images):
//! 4,000 for training and 1,000 for testing on a seeded shuffle, shifted-image
//! augmentation, Adam with a cosine schedule, a per-epoch table, then a
//! checkpoint (parameters, batch-norm buffers and optimizer state) that is
//! reloaded into a fresh model and checked to score the same, bit for bit.
//!
//! ```sh
//! cargo run --release --example train_mnist_cnn
//! cargo run --release --example train_mnist_cnn -- --compile   # the step captured once, replayed
//! cargo run --release --example train_mnist_cnn -- --epochs 5 --no-batch-norm --shift 0
//! cargo run --release --example train_mnist_cnn -- --graph-svg step.svg   # picture of one step
//! cargo run --release --example train_mnist_cnn -- --plot target/mnist_curves --graph-html step.html
//! # data-parallel over 2 processes (global batch 64 = 2 x 32; the book's chapter docs/src/distributed.md)
//! cargo build --release --features mpi --example train_mnist_cnn
//! mpirun -n 2 target/release/examples/train_mnist_cnn --ddp
//! # continue an interrupted run (alone, or under mpirun with --ddp)
//! cargo run --release --example train_mnist_cnn -- --resume
//! ```

#[path = "support/compiled_step.rs"]
mod compiled_step;
#[cfg(feature = "mpi")]
#[path = "support/ddp_epochs.rs"]
mod ddp_epochs;
#[path = "support/dp_training.rs"]
mod dp_training;
#[path = "support/epoch_trainer.rs"]
mod epoch_trainer;
#[path = "support/epochs.rs"]
mod epochs;
#[path = "support/mnist_cnn.rs"]
mod mnist_cnn;
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
#[cfg(feature = "mpi")]
use rand_chacha::ChaCha8Rng;

use retrograd::data::{mnist, random_shift, Dataset};
use retrograd::distributed::SingleProcess;
use retrograd::nn::{Module, Sequential};
use retrograd::optim::{grad_norm, Adam, AdamConfig, CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::Result;
use run_outputs::{RunOutputs, StepFigures};

use epoch_trainer::{progress_and_header, StepSettings, Trainer};
use resume::Stopped;

/// Steps between training states unless `--checkpoint-every` says otherwise.
const CHECKPOINT_EVERY: u64 = 100;

const USAGE: &str = "\
usage: train_mnist_cnn [options]

options:
  --channels A,B      channels of the two 3x3 convolution blocks (default 32,64)
  --hidden N          width of the hidden linear layer (default 128)
  --no-batch-norm     leave out batch norm after each convolution
  --dropout P         dropout before the last layer (default 0.25)
  --shift N           random image shifts of up to N pixels (default 2; 0 = off)
  --epochs N          passes over the training set (default 15)
  --batch-size N      images per step (default 64)
  --lr RATE           peak Adam learning rate (default 0.002; cosine-annealed to 0)
  --weight-decay WD   Adam L2 weight decay (default 0)
  --seed N            seed of the split, the weights, shuffling and shifts (default 0)
  --train-images N    train on the first N training images only (quick trials)
  --test-images N     test on the first N test images only
  --min-accuracy A    exit with an error below this test accuracy, e.g. 0.98
  --out FILE          checkpoint path (default target/train_mnist_cnn.safetensors);
                      the run's log goes next to it (train_mnist_cnn.log.jsonl)
  --plot DIR          draw the training curves as SVG in DIR after every epoch
  --graph-svg FILE    write a picture of the first training step's graph
  --graph-html FILE   write a page stepping through that step's backward sweep
  --quiet             no progress bar
  --compile           capture the training step once per batch shape and replay it
  --dp                train with differential privacy (DP-SGD: Poisson sampling, per-image
                      gradients clipped and noised; no batch norm, no shifts)
  --epsilon E         the privacy target of --dp (default 3)
  --delta D           its delta (default 1e-5)
  --max-grad-norm C   the norm each image's gradient is clipped to (default 1)
                      (retrograd::compile: fused, no graph recorded per step)
  --ddp               data-parallel training under mpirun (feature mpi): each of the
                      N ranks takes batch-size / N images of each step, rank 0 prints
  -h, --help          this text
  (--checkpoint-every is 100 by default)";

struct Args {
    channels: [usize; 2],
    hidden: usize,
    batch_norm: bool,
    dropout: f64,
    shift: usize,
    epochs: usize,
    batch_size: usize,
    lr: f64,
    weight_decay: f64,
    seed: u64,
    train_images: Option<usize>,
    test_images: Option<usize>,
    min_accuracy: Option<f64>,
    out: PathBuf,
    plot: Option<PathBuf>,
    graph_svg: Option<PathBuf>,
    graph_html: Option<PathBuf>,
    quiet: bool,
    compile: bool,
    ddp: bool,
    dp: bool,
    privacy: dp_training::Privacy,
    checkpoints: resume::Flags,
}

/// What a resumed run must share with the run it continues (and every
/// rank with rank 0).
fn settings(args: &Args, train: &Dataset) -> BTreeMap<String, String> {
    [
        ("channels", format!("{:?}", args.channels)),
        ("hidden", args.hidden.to_string()),
        ("batch-norm", args.batch_norm.to_string()),
        ("dropout", args.dropout.to_string()),
        ("shift", args.shift.to_string()),
        ("epochs", args.epochs.to_string()),
        ("batch-size", args.batch_size.to_string()),
        ("lr", args.lr.to_string()),
        ("weight-decay", args.weight_decay.to_string()),
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
        channels: [32, 64],
        hidden: 128,
        batch_norm: true,
        dropout: 0.25,
        shift: 2,
        epochs: 15,
        batch_size: 64,
        lr: 0.002,
        weight_decay: 0.0,
        seed: 0,
        train_images: None,
        test_images: None,
        min_accuracy: None,
        out: PathBuf::from("target/train_mnist_cnn.safetensors"),
        plot: None,
        graph_svg: None,
        graph_html: None,
        quiet: false,
        compile: false,
        ddp: false,
        dp: false,
        privacy: dp_training::Privacy {
            epsilon: 3.0,
            delta: 1e-5,
            max_grad_norm: 1.0,
        },
        checkpoints: resume::Flags::new("train_mnist_cnn", CHECKPOINT_EVERY),
    };
    let mut parser = lexopt::Parser::from_env();
    let err = |e: lexopt::Error| e.to_string();
    while let Some(arg) = parser.next().map_err(err)? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("channels") => {
                let v: String = parser.value().map_err(err)?.string().map_err(err)?;
                let sizes: Vec<usize> = v
                    .split(',')
                    .map(|s| s.trim().parse::<usize>().ok().filter(|&n| n > 0))
                    .collect::<Option<_>>()
                    .ok_or(format!("--channels: `{v}` is not two positive sizes"))?;
                let [a, b] = sizes[..] else {
                    return Err(format!("--channels: `{v}` is not two sizes"));
                };
                args.channels = [a, b];
            }
            Long("hidden") => args.hidden = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("no-batch-norm") => args.batch_norm = false,
            Long("dropout") => args.dropout = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("shift") => args.shift = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("epochs") => args.epochs = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("batch-size") => {
                args.batch_size = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("lr") => args.lr = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("weight-decay") => {
                args.weight_decay = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("seed") => args.seed = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("train-images") => {
                args.train_images = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            Long("test-images") => {
                args.test_images = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            Long("min-accuracy") => {
                args.min_accuracy = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            Long("out") => args.out = parser.value().map_err(err)?.into(),
            Long("plot") => args.plot = Some(parser.value().map_err(err)?.into()),
            Long("graph-svg") => args.graph_svg = Some(parser.value().map_err(err)?.into()),
            Long("graph-html") => args.graph_html = Some(parser.value().map_err(err)?.into()),
            Long("quiet") => args.quiet = true,
            Long("compile") => args.compile = true,
            Long("dp") => args.dp = true,
            Long("epsilon") => {
                args.privacy.epsilon = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("delta") => args.privacy.delta = parser.value().map_err(err)?.parse().map_err(err)?,
            Long("max-grad-norm") => {
                args.privacy.max_grad_norm = parser.value().map_err(err)?.parse().map_err(err)?
            }
            Long("ddp") if cfg!(feature = "mpi") => args.ddp = true,
            Long("ddp") => {
                return Err("--ddp needs the mpi feature: cargo build --release --features mpi --example train_mnist_cnn".into())
            }
            Long(name) if resume::Flags::owns(name) => {
                let name = name.to_string();
                args.checkpoints.parse(&name, &mut parser)?;
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if args.epochs == 0 || args.batch_size == 0 || args.hidden == 0 {
        return Err("--epochs, --batch-size and --hidden must be > 0".into());
    }
    if args.dp
        && (args.compile || args.ddp || args.graph_svg.is_some() || args.graph_html.is_some())
    {
        return Err("--dp trains eagerly on one process: leave out --compile, --ddp, --graph-svg and --graph-html".into());
    }
    if args.compile && (args.graph_svg.is_some() || args.graph_html.is_some()) {
        return Err("--graph-svg and --graph-html draw an eager step: leave out --compile".into());
    }
    Ok(Some(args))
}

/// The bundled split, normalised, cut to `--train-images` and `--test-images`.
fn load_data(args: &Args) -> Result<(Dataset, Dataset)> {
    let (train, test) = mnist::load_bundled_split(args.seed)?;
    let first = |ds: Dataset, n: Option<usize>| match n {
        Some(n) if n < ds.len() => ds.subset(&(0..n).collect::<Vec<_>>()),
        _ => Ok(ds),
    };
    Ok((
        first(train, args.train_images)?.normalized(mnist::MEAN, mnist::STD)?,
        first(test, args.test_images)?.normalized(mnist::MEAN, mnist::STD)?,
    ))
}

/// The CNN of `support/mnist_cnn.rs` with this run's sizes.
fn build_model(args: &Args, seed: u64) -> Result<Sequential> {
    mnist_cnn::build(
        &args.channels,
        args.hidden,
        args.batch_norm,
        args.dropout,
        seed,
    )
}

fn build_optimizer(args: &Args, model: &impl Module) -> Result<Box<dyn Optimizer>> {
    let config = AdamConfig::default()
        .lr(args.lr)
        .weight_decay(args.weight_decay);
    Ok(Box::new(Adam::new(model.parameters(), config)?))
}

/// The rest of the current epoch; `Some` if the run must stop (a training
/// state was saved).
fn epoch(
    trainer: &mut Trainer<Sequential>,
    args: &Args,
    train: &Dataset,
    progress: &ProgressBar,
    session: &mut resume::Session<SingleProcess>,
) -> Result<Option<Stopped>> {
    let settings = StepSettings {
        graph_svg: args.graph_svg.as_deref(),
        graph_html: args.graph_html.as_deref(),
        title: "one training step: CNN forward, cross-entropy, gradients",
    };
    let background = -mnist::MEAN / mnist::STD;
    for batch in trainer.epoch_batches(train, args.batch_size)? {
        let n = batch.labels.len();
        let images = if args.shift > 0 {
            random_shift(&batch.features, args.shift, background, &mut trainer.rng)?
        } else {
            batch.features
        };
        let started = Instant::now();
        let index = trainer.at.step;
        let step = trainer
            .runner
            .step(index, images, &batch.labels, &settings)?;
        let (lr, norm) = (trainer.optimizer.lr(), grad_norm(&step.grads, 2.0)?);
        trainer.optimizer.step(&step.grads)?;
        trainer.scheduler.step(trainer.optimizer.as_mut());
        let figures = StepFigures {
            loss: step.loss,
            lr,
            grad_norm: norm,
            millis: Some(1e3 * started.elapsed().as_secs_f64()),
        };
        if let Some(stopped) =
            trainer.after_step(figures, n, step.accuracy, args.epochs, progress, session)?
        {
            return Ok(Some(stopped));
        }
    }
    Ok(None)
}

fn run(args: &Args) -> Result<Option<Stopped>> {
    if args.dp {
        return run_private(args);
    }
    let start = Instant::now();
    let (train, test) = load_data(args)?;
    println!(
        "mnist: {} images, {} train / {} test (seeded shuffle, seed {})",
        train.len() + test.len(),
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
    let [c1, c2] = args.channels;
    println!(
        "model: CNN conv3x3({c1}){bn}-relu-maxpool2 -> conv3x3({c2}){bn}-relu-maxpool2 -> linear({})-relu{} -> linear(10); {} parameters (f32)",
        args.hidden,
        if args.dropout > 0.0 { format!("-dropout({})", args.dropout) } else { String::new() },
        model.num_parameters(),
        bn = if args.batch_norm { "-batchnorm" } else { "" },
    );
    println!(
        "training: Adam lr {} (cosine to 0 over {total_steps} steps), batch {}, {} epochs, shifts up to {} px\n",
        args.lr, args.batch_size, args.epochs, args.shift
    );

    let (mut session, resumed) = resume::Session::start(
        "train_mnist_cnn",
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
        "shuffle_and_shift",
        outputs,
        args.compile,
    );
    if let Some(state) = &resumed {
        trainer.restore(state)?;
    }
    let progress = progress_and_header(args.quiet, total_steps as u64, trainer.at.step);
    if let Some(stopped) = trainer.run_epochs(args.epochs, &test, 500, start, &progress, |t| {
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
    let test_acc = reload_check::checkpoint_and_reload(
        "train_mnist_cnn",
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
    if let Some(min) = args.min_accuracy
        && test_acc < min
    {
        return Err(retrograd::Error::InvalidArgument {
            op: "train_mnist_cnn",
            reason: format!("test accuracy {test_acc} is below --min-accuracy {min}"),
        });
    }
    Ok(None)
}

/// `--dp`: the same CNN trained with DP-SGD (see `support/dp_training.rs`).
/// Batch norm is left out (its statistics mix the images of a batch, so an
/// image's gradient would depend on the others), as are shifts (the
/// private recipe trains on the images as they are).
fn run_private(args: &Args) -> Result<Option<Stopped>> {
    let start = Instant::now();
    let (train, test) = load_data(args)?;
    let mut model = mnist_cnn::build(&args.channels, args.hidden, false, args.dropout, args.seed)?;
    let optimizer = build_optimizer(args, &model)?;
    let [c1, c2] = args.channels;
    println!(
        "mnist: {} train / {} test images; model: CNN conv3x3({c1})-relu-maxpool2 -> conv3x3({c2})-relu-maxpool2 -> linear({})-relu -> linear(10), no batch norm; Adam lr {}, batch {} on average, {} epochs",
        train.len(),
        test.len(),
        args.hidden,
        args.lr,
        args.batch_size,
        args.epochs
    );
    let finished = dp_training::train(
        &mut model,
        optimizer,
        &train,
        &test,
        args.epochs,
        args.batch_size,
        args.privacy,
        args.seed,
        args.quiet,
    )?;
    println!("{}", finished.summary);
    println!("test accuracy: {:.4}", finished.test_accuracy);
    println!("total time: {:.2} s", start.elapsed().as_secs_f64());
    if let Some(min) = args.min_accuracy
        && finished.test_accuracy < min
    {
        return Err(retrograd::Error::InvalidArgument {
            op: "train_mnist_cnn",
            reason: format!(
                "test accuracy {} is below --min-accuracy {min}",
                finished.test_accuracy
            ),
        });
    }
    Ok(None)
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}\n\n{}", resume::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}\n\n{}", resume::USAGE);
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
        let (train, test) = load_data(args)?;
        let describe = |steps: usize| {
            format!(
                "training: Adam lr {} (cosine to 0 over {steps} steps), {} epochs, shifts up to {} px",
                args.lr, args.epochs, args.shift
            )
        };
        let job = ddp_epochs::Job {
            name: "train_mnist_cnn",
            epochs: args.epochs,
            batch_size: args.batch_size,
            seed: args.seed,
            train: &train,
            test: &test,
            eval_batch: 500,
            checkpoints: &args.checkpoints,
            settings: settings(args, &train),
            describe: &describe,
            out: &args.out,
            plot: args.plot.clone(),
            compile: args.compile,
        };
        let background = -mnist::MEAN / mnist::STD;
        let shift = |images: retrograd::Tensor, rng: &mut ChaCha8Rng| {
            if args.shift > 0 {
                random_shift(&images, args.shift, background, rng)
            } else {
                Ok(images)
            }
        };
        let trained = ddp_epochs::train(
            job,
            comm,
            build_model(args, args.seed)?,
            |m| build_optimizer(args, m),
            shift,
        )?;
        if trained.stopped.is_some() {
            return Ok(trained.stopped);
        }
        let meta =
            std::collections::BTreeMap::from([("epochs".to_string(), args.epochs.to_string())]);
        trained
            .ddp
            .save_checkpoint(&args.out, Some(trained.optimizer.as_ref()), &meta)?;
        if let Some(outputs) = &trained.outputs {
            println!("checkpoint (written by rank 0): {}", args.out.display());
            println!("{}", outputs.describe());
            println!("total time: {:.2} s", start.elapsed().as_secs_f64());
            if let Some(min) = args.min_accuracy
                && trained.test_acc < min
            {
                return Err(retrograd::Error::InvalidArgument {
                    op: "train_mnist_cnn",
                    reason: format!(
                        "test accuracy {} is below --min-accuracy {min}",
                        trained.test_acc
                    ),
                });
            }
        }
        Ok(None)
    }
}
