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
//! ```

#[path = "support/mnist_cnn.rs"]
mod mnist_cnn;
#[path = "support/reload_check.rs"]
mod reload_check;
#[path = "support/run_outputs.rs"]
mod run_outputs;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use retrograd::data::{mnist, random_shift, Batches, Dataset};
use retrograd::nn::{accuracy, evaluate_accuracy, Forward, Module, Sequential};
use retrograd::optim::{grad_norm, Adam, AdamConfig, CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::viz::VizOptions;
use retrograd::{DType, Graph, Result};
use run_outputs::{RunOutputs, StepFigures};

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
  --min-accuracy A    exit with an error below this test accuracy, e.g. 0.98
  --out FILE          checkpoint path (default target/train_mnist_cnn.safetensors);
                      the run's log goes next to it (train_mnist_cnn.log.jsonl)
  --plot DIR          draw the training curves as SVG in DIR after every epoch
  --graph-svg FILE    write a picture of the first training step's graph
  --graph-html FILE   write a page stepping through that step's backward sweep
  --quiet             no progress bar
  --ddp               data-parallel training under mpirun (feature mpi): each of the
                      N ranks takes batch-size / N images of each step, rank 0 prints
  -h, --help          this text";

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
    min_accuracy: Option<f64>,
    out: PathBuf,
    plot: Option<PathBuf>,
    graph_svg: Option<PathBuf>,
    graph_html: Option<PathBuf>,
    quiet: bool,
    ddp: bool,
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
        min_accuracy: None,
        out: PathBuf::from("target/train_mnist_cnn.safetensors"),
        plot: None,
        graph_svg: None,
        graph_html: None,
        quiet: false,
        ddp: false,
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
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if args.epochs == 0 || args.batch_size == 0 || args.hidden == 0 {
        return Err("--epochs, --batch-size and --hidden must be > 0".into());
    }
    Ok(Some(args))
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
/// the generator of shuffles and shifts and the steps taken; and the run's log.
struct Trainer {
    model: Sequential,
    optimizer: Adam,
    scheduler: LrScheduler,
    rng: ChaCha8Rng,
    step: usize,
    outputs: RunOutputs,
}

impl Trainer {
    /// One epoch; returns the mean training loss and the training accuracy.
    fn epoch(
        &mut self,
        args: &Args,
        train: &Dataset,
        progress: &ProgressBar,
        epoch: usize,
    ) -> Result<(f64, f64)> {
        let (mut loss_sum, mut correct, mut seen) = (0.0, 0.0, 0usize);
        let background = -mnist::MEAN / mnist::STD;
        let batches: Vec<_> =
            Batches::shuffled(train, args.batch_size, DType::F32, &mut self.rng)?.collect();
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
                let picture = (args.graph_svg.is_some() || args.graph_html.is_some())
                    && epoch == 1
                    && seen == 0;
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
                correct += accuracy(logits.value(), &batch.labels)? * n as f64;
                (loss.value().try_item()?, grads)
            };
            loss_sum += loss * n as f64;
            let (lr, norm) = (self.optimizer.lr(), grad_norm(&grads, 2.0)?);
            self.optimizer.step(&grads)?;
            self.scheduler.step(&mut self.optimizer);
            let millis = 1e3 * started.elapsed().as_secs_f64();
            self.outputs.log_step(
                self.step,
                StepFigures {
                    loss,
                    lr,
                    grad_norm: norm,
                    millis: Some(millis),
                },
            )?;
            self.step += 1;
            seen += n;
            progress.inc(1);
            progress.set_message(format!(
                "epoch {epoch}/{}  loss {:.4}  acc {:.2}%",
                args.epochs,
                loss_sum / seen as f64,
                100.0 * correct / seen as f64
            ));
        }
        Ok((loss_sum / seen as f64, correct / seen as f64))
    }
}

fn run(args: &Args) -> Result<()> {
    let start = Instant::now();
    let (train, test) = mnist::load_bundled_split(args.seed)?;
    let (train, test) = (
        train.normalized(mnist::MEAN, mnist::STD)?,
        test.normalized(mnist::MEAN, mnist::STD)?,
    );
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

    let progress = if args.quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total_steps as u64)
    };
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

    let mut trainer = Trainer {
        model,
        optimizer,
        scheduler,
        rng: ChaCha8Rng::seed_from_u64(args.seed ^ 0x5eed),
        step: 0,
        outputs: RunOutputs::start(&args.out, args.plot.clone(), false)?,
    };
    for epoch in 1..=args.epochs {
        let lr = trainer.optimizer.lr();
        trainer.model.set_training(true);
        let (loss, train_acc) = trainer.epoch(args, &train, &progress, epoch)?;
        trainer.model.set_training(false);
        let test_acc = evaluate_accuracy(&trainer.model, &test, 500, DType::F32)?;
        let accuracies = [("train/accuracy", train_acc), ("test/accuracy", test_acc)];
        trainer.outputs.log(trainer.step, &accuracies)?;
        trainer.outputs.evaluated()?;
        let elapsed = start.elapsed().as_secs_f64();
        progress.suspend(|| {
            println!(
                "{epoch:>5} | {loss:>10.4} | {:>8.2}% | {:>7.2}% | {lr:>9.2e} | {elapsed:>6.2}s",
                100.0 * train_acc,
                100.0 * test_acc
            )
        });
    }
    progress.finish_and_clear();
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
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    #[cfg(feature = "mpi")]
    if args.ddp {
        return match retrograd::distributed::run(|comm| ddp::run(&args, comm)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--ddp`: the same training, data-parallel over the ranks of `mpirun`.
/// Rank 0's initial weights go to every rank; each rank takes its
/// `DistributedSampler` shard of every epoch in steps of `batch-size / N`
/// images (batch norm's statistics are per rank, its running buffers follow
/// rank 0); the averaged gradients keep the replicas identical. Rank 0
/// prints the table (losses and accuracies over all ranks' images) and
/// writes the checkpoint.
#[cfg(feature = "mpi")]
mod ddp {
    use super::*;
    use retrograd::distributed::{Communicator, DataParallel, DistributedSampler, MpiCommunicator};

    /// Sums `values` over ranks (a few numbers: gathered as bytes).
    fn sum_over_ranks(comm: &MpiCommunicator, values: &[f64]) -> Result<Vec<f64>> {
        let mine: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut total = vec![0.0; values.len()];
        for theirs in comm.all_gather_bytes(&mine)? {
            for (t, chunk) in total.iter_mut().zip(theirs.chunks_exact(8)) {
                *t += f64::from_le_bytes(chunk.try_into().expect("8 bytes"));
            }
        }
        Ok(total)
    }

    pub fn run(args: &Args, comm: &MpiCommunicator) -> Result<()> {
        let start = Instant::now();
        let (rank, size) = (comm.rank(), comm.size());
        let lead = rank == 0;
        if !args.batch_size.is_multiple_of(size) {
            return Err(retrograd::Error::InvalidArgument {
                op: "train_mnist_cnn --ddp",
                reason: format!(
                    "--batch-size {} is not a multiple of {size} ranks",
                    args.batch_size
                ),
            });
        }
        let per_rank = args.batch_size / size;
        let (train, test) = mnist::load_bundled_split(args.seed)?;
        let (train, test) = (
            train.normalized(mnist::MEAN, mnist::STD)?,
            test.normalized(mnist::MEAN, mnist::STD)?,
        );
        let mut ddp = DataParallel::new(build_model(args, args.seed)?, comm)?;
        let mut optimizer = build_optimizer(args, ddp.module())?;
        let mut sampler = DistributedSampler::new(train.len(), size, rank)?.seed(args.seed);
        let steps_per_epoch = sampler.num_samples().div_ceil(per_rank);
        let total_steps = steps_per_epoch * args.epochs;
        let mut scheduler =
            LrScheduler::new(CosineAnnealingLr::new(total_steps, 0.0)?, &mut optimizer);
        // Each rank shifts its own images differently.
        let mut rng = ChaCha8Rng::seed_from_u64(args.seed ^ 0x5eed ^ ((rank as u64) << 32));
        if lead {
            println!(
                "data-parallel: {size} ranks x {per_rank} images = global batch {}; {} parameters (f32), {} gradient buckets, {:.2} MiB all-reduced per step",
                args.batch_size,
                ddp.module().num_parameters(),
                ddp.bucket_count(),
                ddp.bytes_per_step() as f64 / (1 << 20) as f64
            );
            println!(
                "training: Adam lr {} (cosine to 0 over {total_steps} steps), {} epochs, shifts up to {} px\n",
                args.lr, args.epochs, args.shift
            );
            let header = format!(
                "{:>5} | {:>10} | {:>9} | {:>8} | {:>9} | {:>7}",
                "epoch", "train loss", "train acc", "test acc", "lr", "elapsed"
            );
            println!("{header}\n{}", "-".repeat(header.len()));
        }
        let background = -mnist::MEAN / mnist::STD;
        let mut test_acc = 0.0;
        // Rank 0 logs: its own shard's loss per step, accuracies per epoch.
        let mut outputs = match lead {
            true => Some(RunOutputs::start(&args.out, args.plot.clone(), false)?),
            false => None,
        };
        let mut step = 0;
        for epoch in 1..=args.epochs {
            let lr = optimizer.lr();
            sampler.set_epoch(epoch as u64);
            ddp.module_mut().set_training(true);
            let (mut loss_sum, mut correct, mut seen) = (0.0, 0.0, 0.0);
            let batches: Vec<_> = sampler.batches(&train, per_rank, DType::F32)?.collect();
            for batch in batches {
                let n = batch.labels.len() as f64;
                let images = if args.shift > 0 {
                    random_shift(&batch.features, args.shift, background, &mut rng)?
                } else {
                    batch.features
                };
                let (loss, grads) = {
                    let graph = Graph::new();
                    let logits = ddp.forward(&graph.constant(images))?;
                    let loss = logits.try_cross_entropy(&batch.labels)?;
                    let value = loss.value().try_item()?;
                    loss_sum += value * n;
                    correct += accuracy(logits.value(), &batch.labels)? * n;
                    seen += n;
                    (value, ddp.backward(&loss)?)
                };
                if let Some(outputs) = &mut outputs {
                    outputs.log(step, &[("train/loss", loss), ("lr", optimizer.lr())])?;
                }
                step += 1;
                optimizer.step(&grads)?;
                scheduler.step(&mut optimizer);
            }
            let totals = sum_over_ranks(comm, &[loss_sum, correct, seen])?;
            ddp.module_mut().set_training(false);
            if let Some(outputs) = &mut outputs {
                test_acc = evaluate_accuracy(ddp.module(), &test, 500, DType::F32)?;
                let train_acc = totals[1] / totals[2];
                outputs.log(
                    step,
                    &[("train/accuracy", train_acc), ("test/accuracy", test_acc)],
                )?;
                outputs.evaluated()?;
                println!(
                    "{epoch:>5} | {:>10.4} | {:>8.2}% | {:>7.2}% | {lr:>9.2e} | {:>6.2}s",
                    totals[0] / totals[2],
                    100.0 * totals[1] / totals[2],
                    100.0 * test_acc,
                    start.elapsed().as_secs_f64()
                );
            }
        }
        let meta =
            std::collections::BTreeMap::from([("epochs".to_string(), args.epochs.to_string())]);
        ddp.save_checkpoint(&args.out, Some(&optimizer), &meta)?;
        if let Some(outputs) = &outputs {
            println!("checkpoint (written by rank 0): {}", args.out.display());
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
        }
        Ok(())
    }
}
