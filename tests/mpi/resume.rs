//! Training states under `mpirun -n 2` (`retrograd::train`):
//!
//! - `resume DIR`: a data-parallel loop (dropout, Adam on a cosine
//!   schedule, a `DistributedSampler`, a generator of its own on each rank)
//!   stopped after step k by `Checkpointing` and resumed from rank 0's
//!   file ends bit for bit where the uninterrupted run ends, for k inside
//!   an epoch, at an epoch's end and at the last step;
//! - `differ DIR`: ranks started with other settings, or resuming from
//!   other files, all get `ReplicaMismatch` naming the difference;
//! - `kill-in-allreduce`: rank 1 is killed (SIGKILL) inside an all-reduce;
//! - `kill-while-saving DIR`: rank 1 is killed while rank 0 writes a
//!   training state (the script checks the job ends within 10 s, then
//!   `states-load DIR` that every state left loads);
//! - `same-content A B`: two checkpoint files hold the same tensors and
//!   metadata (checksum, training time and paths aside), for the jobs'
//!   resume checks in `.ci/mpi-tests`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::data::Dataset;
use retrograd::distributed::{
    BucketSink, Communicator, DataParallel, DistributedSampler, FlatBuf, MpiCommunicator,
};
use retrograd::io::load_tensors;
use retrograd::nn::{Activation, Dropout, Linear, Module, Sequential};
use retrograd::optim::{Adam, AdamConfig, CosineAnnealingLr, LrScheduler, Optimizer};
use retrograd::train::{
    CheckpointDir, CheckpointOptions, Checkpointing, Progress, RankState, ResumeFrom, TrainingState,
};
use retrograd::{DType, Error, Graph, Result, Tensor};

use super::fail;

const EXAMPLES: usize = 40;
const EPOCHS: u64 = 3;
/// 40 examples over 2 ranks in batches of 6: 4 steps an epoch (6, 6, 6, 2).
const PER_RANK_BATCH: usize = 6;

fn dataset() -> Result<Dataset> {
    let mut rng = ChaCha8Rng::seed_from_u64(21);
    let features = (0..EXAMPLES * 6)
        .map(|_| rng.random::<f64>() - 0.5)
        .collect();
    Dataset::new(features, 6, (0..EXAMPLES).map(|i| i % 3).collect(), 3)
}

fn model(seed: u64) -> Result<Sequential> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok(Sequential::new()
        .with(
            Linear::builder(6, 12)
                .dtype(DType::F32)
                .build_with(&mut rng)?,
        )
        .with(Activation::Tanh)
        .with(Dropout::new(0.2, seed)?)
        .with(
            Linear::builder(12, 3)
                .dtype(DType::F32)
                .build_with(&mut rng)?,
        ))
}

/// One data-parallel run: straight through, or stopped after `stop_after`
/// steps, or resumed from the newest state in `dir`. Returns this rank's
/// losses (as bits), the final parameters and whether it stopped early.
fn run(
    comm: &MpiCommunicator,
    dir: &Path,
    stop_after: Option<u64>,
    resume: bool,
) -> Result<(Vec<u32>, Vec<Tensor>, bool)> {
    let (rank, size) = (comm.rank(), comm.size());
    let data = dataset()?;
    // Each rank builds other weights and dropout seeds: rank 0's win, then the state's.
    let mut ddp = DataParallel::new(model(50 + rank as u64)?, comm)?;
    let mut opt = Adam::new(ddp.module().parameters(), AdamConfig::default().lr(0.05))?;
    let mut sampler = DistributedSampler::new(data.len(), size, rank)?.seed(9);
    let per_epoch = sampler.num_samples().div_ceil(PER_RANK_BATCH) as u64;
    let total = (per_epoch * EPOCHS) as usize;
    let mut sched = LrScheduler::new(CosineAnnealingLr::new(total, 0.0)?, &mut opt);
    // A generator of each rank's own (input noise).
    let mut noise = ChaCha8Rng::seed_from_u64(1000 + rank as u64);
    let mut options = CheckpointOptions::new(dir, Some(3));
    options.stop_after = stop_after;
    options.handle_signals = false;
    let config = BTreeMap::from([("case".to_string(), "resume".to_string())]);
    let mut ckpt = Checkpointing::new(comm, options, config)?;
    let mut at = Progress::default();
    if resume {
        let resumed = ckpt
            .resume(&ResumeFrom::Newest)?
            .ok_or_else(|| fail("no state to resume from".to_string()))?;
        let mine = resumed.state.restore_rank(
            ddp.module(),
            Some(&mut opt),
            Some(&mut sched),
            rank,
            size,
        )?;
        noise = mine.generator("noise")?;
        at = resumed.state.progress();
    }
    let mut losses = Vec::new();
    while at.epoch < EPOCHS {
        sampler.set_epoch(at.epoch);
        let batches = sampler
            .batches(&data, PER_RANK_BATCH, DType::F32)?
            .skip_batches(at.batch as usize);
        for batch in batches {
            let scale: f32 = 1.0 + 0.1 * noise.random::<f32>();
            let grads = {
                let g = Graph::new();
                let x = g.constant(batch.features) * f64::from(scale);
                let loss = ddp.forward(&x)?.try_cross_entropy(&batch.labels)?;
                losses.push((loss.value().try_item()? as f32).to_bits());
                ddp.backward(&loss)?
            };
            opt.step(&grads)?;
            sched.step(&mut opt);
            at.step += 1;
            at.batch += 1;
            let capture = || {
                let mine = RankState::new().with_generator("noise", &noise);
                TrainingState::capture(ddp.module(), Some(&opt), Some(&sched), at, mine)
            };
            if ckpt.after_step(at, capture)?.stop.is_some() {
                let params = ddp
                    .module()
                    .parameters()
                    .iter()
                    .map(|(_, p)| p.value())
                    .collect();
                return Ok((losses, params, true));
            }
        }
        at.epoch += 1;
        at.batch = 0;
    }
    let params = ddp
        .module()
        .parameters()
        .iter()
        .map(|(_, p)| p.value())
        .collect();
    Ok((losses, params, false))
}

fn bits(ts: &[Tensor]) -> Vec<Vec<u64>> {
    ts.iter()
        .map(|t| t.to_f64_vec().iter().map(|v| v.to_bits()).collect())
        .collect()
}

/// The case `resume DIR`.
pub fn resume(comm: &MpiCommunicator, dir: &str) -> Result<()> {
    let dir = Path::new(dir);
    let rank = comm.rank();
    let (want_losses, want_params, _) = run(comm, &dir.join("straight"), None, false)?;
    let total = want_losses.len() as u64;
    // Inside epoch 1, at its end (4 steps an epoch), inside the last, the last.
    for k in [2, 4, 7, total] {
        let sub = dir.join(format!("k{k}"));
        let (mut losses, _, stopped) = run(comm, &sub, Some(k), false)?;
        if !stopped {
            return Err(fail(format!("the run did not stop after step {k}")));
        }
        let (rest, params, _) = run(comm, &sub, None, true)?;
        losses.extend(rest);
        if losses != want_losses || bits(&params) != bits(&want_params) {
            return Err(fail(format!(
                "rank {rank}: the run stopped after step {k} and resumed differs from the straight run"
            )));
        }
        println!("resume: rank {rank}: stopped after step {k} of {total}, resumed: losses and parameters bit-identical");
    }
    Ok(())
}

/// The case `differ DIR`: other settings on rank 1, then other files.
pub fn differ(comm: &MpiCommunicator, dir: &str) -> Result<()> {
    let rank = comm.rank();
    let mut options = CheckpointOptions::new(Path::new(dir).join("differ"), None);
    options.handle_signals = false;
    let config = BTreeMap::from([(
        "lr".to_string(),
        if rank == 1 { "0.02" } else { "0.01" }.to_string(),
    )]);
    match Checkpointing::new(comm, options.clone(), config) {
        Err(Error::ReplicaMismatch {
            rank: 1, detail, ..
        }) if detail.contains("lr = 0.01") && detail.contains("lr = 0.02") => {
            println!("differ: rank {rank}: other settings refused: {detail}")
        }
        other => return Err(fail(format!("other settings gave {:?}", other.err()))),
    }
    // Each rank resumes from a file of its own.
    let config = BTreeMap::new();
    let ckpt = Checkpointing::new(comm, options, config)?;
    let own = Path::new(dir).join(format!("own-{rank}.safetensors"));
    let m = model(1)?;
    let progress = Progress {
        step: 10 + rank as u64,
        ..Progress::default()
    };
    TrainingState::capture(&m, None, None, progress, RankState::new())?
        .gather(&retrograd::distributed::SingleProcess)?
        .save(&own)?;
    match ckpt.resume(&ResumeFrom::File(own.clone())) {
        Err(Error::ReplicaMismatch {
            rank: 1, detail, ..
        }) if detail.contains("own-1") => {
            println!("differ: rank {rank}: other checkpoint files refused: {detail}")
        }
        other => return Err(fail(format!("other files gave {:?}", other.err()))),
    }
    Ok(())
}

/// A communicator that kills rank 1 inside the `n`-th all-reduce, once
/// its first bucket is on the way.
struct KillInAllReduce<'a> {
    inner: &'a MpiCommunicator,
    calls: std::cell::Cell<usize>,
    at: usize,
}

impl Communicator for KillInAllReduce<'_> {
    pass_through_to_inner!();
    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        let n = self.calls.get() + 1;
        self.calls.set(n);
        let kill = n == self.at && self.inner.rank() == 1;
        self.inner.all_reduce_overlapped(send, recv, &mut |sink| {
            if !kill {
                return produce(sink);
            }
            struct Killing<'s>(&'s mut dyn BucketSink);
            impl BucketSink for Killing<'_> {
                fn start(
                    &mut self,
                    index: usize,
                    fill: &mut dyn FnMut(&mut FlatBuf) -> Result<()>,
                ) -> Result<()> {
                    self.0.start(index, fill)?;
                    eprintln!(
                        "kill-in-allreduce: rank 1 kills itself inside an all-reduce at {}",
                        unix_ms()
                    );
                    let _ = signal_hook::low_level::raise(signal_hook::consts::SIGKILL);
                    Ok(())
                }
            }
            produce(&mut Killing(sink))
        })
    }
}

/// The case `kill-in-allreduce`: never returns on rank 1; rank 0 is ended by mpirun.
pub fn kill_in_allreduce(comm: &MpiCommunicator) -> Result<()> {
    let faulty = KillInAllReduce {
        inner: comm,
        calls: std::cell::Cell::new(0),
        at: 3,
    };
    let data = dataset()?;
    let mut ddp = DataParallel::with_bucket_bytes(model(5)?, &faulty, 256)?;
    let mut opt = Adam::new(ddp.module().parameters(), AdamConfig::default())?;
    for step in 0..10_000 {
        let rows: Vec<usize> = (0..6).map(|i| (step * 6 + i) % EXAMPLES).collect();
        let batch = retrograd::data::Batches::from_indices(&data, rows, 6, DType::F32)?
            .next()
            .ok_or_else(|| fail("no batch".to_string()))?;
        let g = Graph::new();
        let loss = ddp
            .forward(&g.constant(batch.features))?
            .try_cross_entropy(&batch.labels)?;
        let grads = ddp.backward(&loss)?;
        opt.step(&grads)?;
    }
    Err(fail("the run went on without rank 1".to_string()))
}

/// The case `kill-while-saving DIR`: rank 1 dies once its part of a state
/// is gathered, while rank 0 writes; states are saved every step.
pub fn kill_while_saving(comm: &MpiCommunicator, dir: &str) -> Result<()> {
    let mut options = CheckpointOptions::new(dir, Some(1));
    options.handle_signals = false;
    let mut ckpt = Checkpointing::new(comm, options, BTreeMap::new())?;
    // A large model, so that rank 0 is still writing when rank 1 dies.
    let big = Linear::builder(512, 4096).dtype(DType::F32).build()?;
    for step in 1..=100u64 {
        let at = Progress {
            step,
            ..Progress::default()
        };
        let dies = comm.rank() == 1 && step == 3;
        ckpt.after_step(at, || {
            let state = TrainingState::capture(&big, None, None, at, RankState::new());
            if dies {
                // Gathering happens right after capture; die just after it.
                std::thread::spawn(|| {
                    std::thread::sleep(std::time::Duration::from_millis(5));
                    eprintln!(
                        "kill-while-saving: rank 1 kills itself while rank 0 writes at {}",
                        unix_ms()
                    );
                    let _ = signal_hook::low_level::raise(signal_hook::consts::SIGKILL);
                });
            }
            state
        })?;
    }
    Err(fail("the run went on without rank 1".to_string()))
}

/// Milliseconds since 1970, for the script to time how long the job takes to end.
pub fn unix_ms() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

/// The case `states-load DIR` (one process): every training state left in
/// DIR loads; prints how many and the newest step.
pub fn states_load(dir: &str) -> Result<()> {
    let temporaries = || -> Result<usize> {
        Ok(std::fs::read_dir(dir)
            .map_err(|e| fail(e.to_string()))?
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            })
            .count())
    };
    let cut_short = temporaries()?;
    let listed: Vec<(u64, PathBuf)> = CheckpointDir::open(dir, 1_000)?.list()?;
    for (_, path) in &listed {
        TrainingState::load(path)?;
    }
    println!(
        "states-load: {} states in {dir}, every one loads (newest: step {:?}); {cut_short} write(s) cut short left a temporary file, removed on opening",
        listed.len(),
        listed.last().map(|(s, _)| s)
    );
    if temporaries()? > 0 || listed.is_empty() {
        return Err(fail("temporary files remain, or no state".to_string()));
    }
    Ok(())
}

/// The case `same-content A B` (one process).
pub fn same_content(a: &str, b: &str) -> Result<()> {
    type Content = (Vec<(String, Vec<u64>)>, Vec<(String, String)>);
    let read = |p: &str| -> Result<Content> {
        let f = load_tensors(p)?;
        let tensors = f
            .tensors
            .iter()
            .map(|(k, t)| {
                (
                    k.clone(),
                    t.to_f64_vec().iter().map(|v| v.to_bits()).collect(),
                )
            })
            .collect();
        let metadata = f
            .metadata
            .into_iter()
            .filter(|(k, _)| k != "checksum" && !k.ends_with("value.train_time"))
            .collect();
        Ok((tensors, metadata))
    };
    if read(a)? != read(b)? {
        return Err(fail(format!("{a} and {b} differ")));
    }
    println!("same-content: {a} and {b} hold the same tensors and state");
    Ok(())
}
