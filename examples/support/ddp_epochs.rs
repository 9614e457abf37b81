//! `--ddp` for the two epoch-based jobs (`train_digits`, `train_mnist_cnn`):
//! the same training, data-parallel over the ranks of `mpirun`. Rank 0's
//! initial weights go to every rank; each rank takes its
//! `DistributedSampler` shard of every epoch in steps of `batch-size / N`
//! examples (batch norm's statistics are per rank, its running buffers
//! follow rank 0; each rank augments with its own generator); the averaged
//! gradients keep the replicas identical. Rank 0 prints the table (losses
//! and accuracies over all ranks' examples). Training states are saved and
//! resumed on every rank together (`--checkpoint-every`, `--resume`, a
//! signal to any rank). Rank 0 keeps the run's log (its own shard's loss
//! per step, the accuracies per epoch) and, with `--plot`, its curves.
//! With `--compile` each rank replays its captured step and the gradients
//! are all-reduced in the same buckets, each started while the replay's
//! backward still runs, once its gradients are final
//! (`DataParallel::run_compiled`), as the eager step's are.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::data::Dataset;
use retrograd::distributed::{Communicator, DataParallel, DistributedSampler, MpiCommunicator};
use retrograd::nn::{accuracy, evaluate_accuracy, Forward, Module};
use retrograd::optim::{CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::train::{Progress, RankState, TrainingState};
use retrograd::{DType, Error, Graph, Result, Tensor};

use super::compiled_step::{CompiledClassifier, Shared};
use super::epochs::EpochSums;
use super::resume::{self, Stopped};
use super::run_outputs::RunOutputs;

/// What a job hands the data-parallel loop.
pub struct Job<'a> {
    /// The job's name, for messages and the checkpoint directory.
    pub name: &'static str,
    pub epochs: usize,
    /// The global batch: `batch_size / ranks` examples per rank and step.
    pub batch_size: usize,
    pub seed: u64,
    pub train: &'a Dataset,
    pub test: &'a Dataset,
    /// Examples per forward pass when testing.
    pub eval_batch: usize,
    pub checkpoints: &'a resume::Flags,
    /// What every rank and a resumed run must share.
    pub settings: BTreeMap<String, String>,
    /// Printed by rank 0 under the data-parallel line, given the number of
    /// steps: the optimizer, the schedule.
    pub describe: &'a dyn Fn(usize) -> String,
    /// The checkpoint path; the run's log goes next to it.
    pub out: &'a Path,
    /// `--plot DIR`: where rank 0 redraws the curves every epoch.
    pub plot: Option<PathBuf>,
    /// `--compile`: the step captured once per batch shape and replayed;
    /// its gradient buckets all-reduced while its backward runs.
    pub compile: bool,
}

/// The trained replica and its optimizer, the last test accuracy (rank 0),
/// and whether the run stopped early.
pub struct Trained<M: Forward, C: Communicator> {
    pub ddp: DataParallel<Shared<M>, C>,
    pub optimizer: Box<dyn Optimizer>,
    pub test_acc: f64,
    pub stopped: Option<Stopped>,
    /// Rank 0's run log.
    pub outputs: Option<RunOutputs>,
}

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

/// Trains `model` data-parallel with the optimizer `optimizer` makes and a
/// cosine schedule, `augment`ing each rank's batches with that rank's
/// generator.
pub fn train<'c, M: Forward + 'static>(
    job: Job<'_>,
    comm: &'c MpiCommunicator,
    model: M,
    optimizer: impl FnOnce(&M) -> Result<Box<dyn Optimizer>>,
    mut augment: impl FnMut(Tensor, &mut ChaCha8Rng) -> Result<Tensor>,
) -> Result<Trained<M, &'c MpiCommunicator>> {
    let start = Instant::now();
    let (rank, size) = (comm.rank(), comm.size());
    let lead = rank == 0;
    if !job.batch_size.is_multiple_of(size) {
        return Err(Error::InvalidArgument {
            op: "--ddp",
            reason: format!(
                "--batch-size {} is not a multiple of {size} ranks",
                job.batch_size
            ),
        });
    }
    let per_rank = job.batch_size / size;
    let mut ddp = DataParallel::new(Shared::new(model), comm)?;
    let mut compiled = job
        .compile
        .then(|| CompiledClassifier::new(ddp.module(), job.seed ^ ((rank as u64) << 32)));
    let mut optimizer = optimizer(&ddp.module().get())?;
    let mut sampler = DistributedSampler::new(job.train.len(), size, rank)?.seed(job.seed);
    let total_steps = sampler.num_samples().div_ceil(per_rank) * job.epochs;
    let mut scheduler = LrScheduler::new(
        CosineAnnealingLr::new(total_steps, 0.0)?,
        optimizer.as_mut(),
    );
    // Each rank augments its own examples differently.
    let mut rng = ChaCha8Rng::seed_from_u64(job.seed ^ 0x5eed ^ ((rank as u64) << 32));
    let (mut session, resumed) =
        resume::Session::start(job.name, comm, job.checkpoints, job.settings)?;
    let (mut at, mut sums) = (Progress::default(), EpochSums::default());
    if let Some(state) = &resumed {
        let mine = state.restore_rank(
            ddp.module(),
            Some(optimizer.as_mut()),
            Some(&mut scheduler),
            rank,
            size,
        )?;
        rng = mine.generator("augment")?;
        sums = EpochSums::restore(&mine)?;
        at = state.progress();
    }
    if lead {
        println!(
            "data-parallel: {size} ranks x {per_rank} images = global batch {}; {} parameters (f32), {} gradient buckets, {:.2} MiB all-reduced per step",
            job.batch_size,
            ddp.module().num_parameters(),
            ddp.bucket_count(),
            ddp.bytes_per_step() as f64 / (1 << 20) as f64
        );
        println!("{}\n", (job.describe)(total_steps));
        let header = format!(
            "{:>5} | {:>10} | {:>9} | {:>8} | {:>9} | {:>7}",
            "epoch", "train loss", "train acc", "test acc", "lr", "elapsed"
        );
        println!("{header}\n{}", "-".repeat(header.len()));
    }
    let mut test_acc = 0.0;
    let mut outputs = match lead {
        true => Some(RunOutputs::start(
            job.out,
            job.plot.clone(),
            resumed.is_some(),
        )?),
        false => None,
    };
    while at.epoch < job.epochs as u64 {
        let epoch = at.epoch + 1;
        if at.batch == 0 {
            sums = EpochSums::starting(optimizer.lr());
        }
        sampler.set_epoch(epoch);
        ddp.module_mut().set_training(true);
        let done = usize::try_from(at.batch).unwrap_or(usize::MAX);
        for batch in sampler
            .batches(job.train, per_rank, DType::F32)?
            .skip_batches(done)
        {
            let n = batch.labels.len() as f64;
            let examples = augment(batch.features, &mut rng)?;
            let (value, share, grads) = match &mut compiled {
                Some(step) => {
                    let done =
                        step.run_data_parallel(&mut ddp, at.step, examples, &batch.labels)?;
                    (done.loss, done.accuracy, done.grads)
                }
                None => {
                    let graph = Graph::new();
                    let logits = ddp.forward(&graph.constant(examples))?;
                    let loss = logits.try_cross_entropy(&batch.labels)?;
                    let share = accuracy(logits.value(), &batch.labels)?;
                    (loss.value().try_item()?, share, ddp.backward(&loss)?)
                }
            };
            if let Some(outputs) = &mut outputs {
                outputs.log(
                    at.step as usize,
                    &[("train/loss", value), ("lr", optimizer.lr())],
                )?;
            }
            sums.loss += value * n;
            sums.correct += share * n;
            sums.seen += n;
            optimizer.step(&grads)?;
            scheduler.step(optimizer.as_mut());
            at.step += 1;
            at.batch += 1;
            let capture = || {
                let mine = RankState::new().with_generator("augment", &rng);
                TrainingState::capture(
                    ddp.module(),
                    Some(optimizer.as_ref()),
                    Some(&scheduler),
                    at,
                    sums.save(mine),
                )
            };
            if let Some(stopped) = session.after_step(at, capture)? {
                return Ok(Trained {
                    ddp,
                    optimizer,
                    test_acc,
                    stopped: Some(stopped),
                    outputs,
                });
            }
        }
        let totals = sum_over_ranks(comm, &[sums.loss, sums.correct, sums.seen])?;
        ddp.module_mut().set_training(false);
        if let Some(outputs) = &mut outputs {
            test_acc = evaluate_accuracy(ddp.module(), job.test, job.eval_batch, DType::F32)?;
            let accuracies = [
                ("train/accuracy", totals[1] / totals[2]),
                ("test/accuracy", test_acc),
            ];
            outputs.log(at.step as usize, &accuracies)?;
            outputs.evaluated()?;
            println!(
                "{epoch:>5} | {:>10.4} | {:>8.2}% | {:>7.2}% | {:>9.2e} | {:>6.2}s",
                totals[0] / totals[2],
                100.0 * totals[1] / totals[2],
                100.0 * test_acc,
                sums.lr,
                start.elapsed().as_secs_f64()
            );
        }
        at.epoch += 1;
        at.batch = 0;
    }
    if let Some(line) = session.summary() {
        println!("{line}");
    }
    Ok(Trained {
        ddp,
        optimizer,
        test_acc,
        stopped: None,
        outputs,
    })
}
