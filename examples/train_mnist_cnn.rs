//! Train a small CNN on the bundled MNIST digits (5,000 real 28x28 images):
//! 4,000 for training and 1,000 for testing on a seeded shuffle, shifted-image
//! augmentation, Adam with a cosine schedule, a per-epoch table, then a
//! checkpoint (parameters, batch-norm buffers and optimizer state) that is
//! reloaded into a fresh model and checked to score the same, bit for bit.
//!
//! ```sh
//! cargo run --release --example train_mnist_cnn
//! cargo run --release --example train_mnist_cnn -- --epochs 5 --no-batch-norm --shift 0
//! cargo run --release --example train_mnist_cnn -- --graph-svg step.svg   # picture of one step
//! cargo run --release --example train_mnist_cnn -- --plot target/mnist_curves --graph-html step.html
//! # data-parallel over 2 processes (global batch 64 = 2 x 32; README, "Training on several processes")
//! cargo build --release --features mpi --example train_mnist_cnn
//! mpirun -n 2 target/release/examples/train_mnist_cnn --ddp
//! # continue an interrupted run (alone, or under mpirun with --ddp)
//! cargo run --release --example train_mnist_cnn -- --resume
//! ```

#[cfg(feature = "mpi")]
#[path = "support/ddp_epochs.rs"]
mod ddp_epochs;
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

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use retrograd::data::{mnist, random_shift, Dataset};
use retrograd::distributed::SingleProcess;
use retrograd::nn::{accuracy, evaluate_accuracy, Forward, Module, Sequential};
use retrograd::optim::{grad_norm, Adam, AdamConfig, CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::train::{Progress, RankState, TrainingState};
use retrograd::viz::VizOptions;
use retrograd::{DType, Graph, Result};
use run_outputs::{RunOutputs, StepFigures};

use epochs::EpochSums;
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
    ddp: bool,
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
        ddp: false,
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

fn build_optimizer(args: &Args, model: &Sequential) -> Result<Adam> {
    Adam::new(
        model.parameters(),
        AdamConfig::default()
            .lr(args.lr)
            .weight_decay(args.weight_decay),
    )
}

/// What changes during training: the model, its optimizer, the schedule,
/// the generator of shuffles and shifts (and a copy as the epoch began),
/// where the run is and the epoch's sums: all of it in each training state;
/// and the run's log.
struct Trainer {
    model: Sequential,
    optimizer: Adam,
    scheduler: LrScheduler,
    rng: ChaCha8Rng,
    epoch_start: ChaCha8Rng,
    at: Progress,
    sums: EpochSums,
    outputs: RunOutputs,
}

impl Trainer {
    fn capture(&self) -> Result<TrainingState> {
        let mine = RankState::new()
            .with_generator("shuffle_and_shift", &self.rng)
            .with_generator("epoch_start", &self.epoch_start);
        TrainingState::capture(
            &self.model,
            Some(&self.optimizer),
            Some(&self.scheduler),
            self.at,
            self.sums.save(mine),
        )
    }

    fn restore(&mut self, state: &TrainingState) -> Result<()> {
        let mine = state.restore(
            &self.model,
            Some(&mut self.optimizer),
            Some(&mut self.scheduler),
        )?;
        self.rng = mine.generator("shuffle_and_shift")?;
        self.epoch_start = mine.generator("epoch_start")?;
        self.sums = EpochSums::restore(&mine)?;
        self.at = state.progress();
        Ok(())
    }

    /// The rest of the current epoch; `Some` if the run must stop (a
    /// training state was saved).
    fn epoch(
        &mut self,
        args: &Args,
        train: &Dataset,
        progress: &ProgressBar,
        session: &mut resume::Session<SingleProcess>,
    ) -> Result<Option<Stopped>> {
        if self.at.batch == 0 {
            self.sums = EpochSums::starting(self.optimizer.lr());
        }
        let epoch = self.at.epoch + 1;
        let background = -mnist::MEAN / mnist::STD;
        let batches = epochs::shuffled_epoch(
            train,
            args.batch_size,
            &mut self.rng,
            &mut self.epoch_start,
            self.at.batch,
        )?;
        for batch in batches {
            let n = batch.labels.len();
            let images = if args.shift > 0 {
                random_shift(&batch.features, args.shift, background, &mut self.rng)?
            } else {
                batch.features
            };
            let started = Instant::now();
            let (loss, grads) = {
                let graph = Graph::new();
                let picture =
                    (args.graph_svg.is_some() || args.graph_html.is_some()) && self.at.step == 0;
                if picture {
                    run_outputs::name_parameters(&graph, &self.model);
                }
                let x = graph.constant(images).named("images");
                let logits = self.model.forward(&x)?;
                let loss = logits.try_cross_entropy(&batch.labels)?;
                let grads = loss.backward()?;
                let title = "one training step: CNN forward, cross-entropy, gradients";
                if let (true, Some(path)) = (picture, &args.graph_svg) {
                    let options = VizOptions::new().root(&loss).gradients(&grads).title(title);
                    graph.write_svg(path, &options)?;
                }
                if let (true, Some(path)) = (picture, &args.graph_html) {
                    run_outputs::write_step_page(&graph, &loss, path, title)?;
                }
                let loss_value = loss.value().try_item()?;
                self.sums.loss += loss_value * n as f64;
                self.sums.correct += accuracy(logits.value(), &batch.labels)? * n as f64;
                (loss_value, grads)
            };
            let (lr, norm) = (self.optimizer.lr(), grad_norm(&grads, 2.0)?);
            self.optimizer.step(&grads)?;
            self.scheduler.step(&mut self.optimizer);
            let millis = 1e3 * started.elapsed().as_secs_f64();
            self.outputs.log_step(
                self.at.step as usize,
                StepFigures {
                    loss,
                    lr,
                    grad_norm: norm,
                    millis: Some(millis),
                },
            )?;
            self.sums.seen += n as f64;
            self.at.step += 1;
            self.at.batch += 1;
            progress.inc(1);
            progress.set_message(format!(
                "epoch {epoch}/{}  loss {:.4}  acc {:.2}%",
                args.epochs,
                self.sums.loss / self.sums.seen,
                100.0 * self.sums.correct / self.sums.seen
            ));
            if let Some(stopped) = session.after_step(self.at, || self.capture())? {
                return Ok(Some(stopped));
            }
        }
        Ok(None)
    }
}

fn run(args: &Args) -> Result<Option<Stopped>> {
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
    let scheduler = LrScheduler::new(CosineAnnealingLr::new(total_steps, 0.0)?, &mut optimizer);
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
    let rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x5eed);
    let mut trainer = Trainer {
        model,
        optimizer,
        scheduler,
        epoch_start: rng.clone(),
        rng,
        at: Progress::default(),
        sums: EpochSums::default(),
        outputs: RunOutputs::start(&args.out, args.plot.clone(), resumed.is_some())?,
    };
    if let Some(state) = &resumed {
        trainer.restore(state)?;
    }

    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total_steps as u64)
    };
    progress.set_position(trainer.at.step);
    progress.set_style(
        ProgressStyle::with_template("{bar:32.cyan/blue} {pos:>5}/{len} {msg}")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let header = format!(
        "{:>5} | {:>10} | {:>9} | {:>8} | {:>9} | {:>7}",
        "epoch", "train loss", "train acc", "test acc", "lr", "elapsed"
    );
    progress.suspend(|| println!("{header}\n{}", "-".repeat(header.len())));

    while trainer.at.epoch < args.epochs as u64 {
        let epoch = trainer.at.epoch + 1;
        trainer.model.set_training(true);
        if let Some(stopped) = trainer.epoch(args, &train, &progress, &mut session)? {
            progress.finish_and_clear();
            return Ok(Some(stopped));
        }
        let EpochSums {
            lr,
            loss,
            correct,
            seen,
        } = trainer.sums;
        trainer.model.set_training(false);
        let test_acc = evaluate_accuracy(&trainer.model, &test, 500, DType::F32)?;
        let accuracies = [
            ("train/accuracy", correct / seen),
            ("test/accuracy", test_acc),
        ];
        trainer.outputs.log(trainer.at.step as usize, &accuracies)?;
        trainer.outputs.evaluated()?;
        let elapsed = start.elapsed().as_secs_f64();
        progress.suspend(|| {
            println!(
                "{epoch:>5} | {:>10.4} | {:>8.2}% | {:>7.2}% | {lr:>9.2e} | {elapsed:>6.2}s",
                loss / seen,
                100.0 * correct / seen,
                100.0 * test_acc
            )
        });
        trainer.at.epoch += 1;
        trainer.at.batch = 0;
    }
    progress.finish_and_clear();
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
    // A fresh model with other weights, restored from the file, must score the same.
    let mut restored = build_model(args, args.seed.wrapping_add(1))?;
    let mut restored_optimizer = build_optimizer(args, &restored)?;
    restored.set_training(false);
    let test_acc = reload_check::checkpoint_and_reload(
        "train_mnist_cnn",
        &args.out,
        &model,
        &optimizer,
        &restored,
        &mut restored_optimizer,
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
            |m| Ok(Box::new(build_optimizer(args, m)?) as Box<dyn Optimizer>),
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
