//! [`Checkpointing`]: the decisions a training loop takes after each step
//! (save a state? stop?), on one process or on every rank of a
//! data-parallel run together.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::checkpoint_dir::CheckpointDir;
use super::state::{Progress, TrainingState};
use super::stop_signal::{Signal, StopSignal};
use crate::distributed::{all_succeeded, same_on_every_rank, Communicator};
use retrograd_engine::{Error, Result};

/// Where a run continues from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResumeFrom {
    /// The newest state in the checkpoint directory that loads (the run
    /// starts from scratch if there is none).
    Newest,
    /// This file.
    File(PathBuf),
}

/// When and where [`Checkpointing`] saves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointOptions {
    /// The directory of periodic states.
    pub dir: PathBuf,
    /// Save every this many steps (`None`: only when stopping).
    pub every: Option<u64>,
    /// How many states to keep (at least 1).
    pub keep: usize,
    /// Save and stop once this many steps are done (a time-limited job's
    /// slice of a long run; also how tests interrupt a run at an exact step).
    pub stop_after: Option<u64>,
    /// Whether SIGTERM and SIGINT stop the run after the current step, with
    /// a checkpoint ([`StopSignal`]).
    pub handle_signals: bool,
}

impl CheckpointOptions {
    /// States in `dir` every `every` steps, the last 3 kept, signals handled.
    pub fn new(dir: impl Into<PathBuf>, every: Option<u64>) -> Self {
        CheckpointOptions {
            dir: dir.into(),
            every,
            keep: 3,
            stop_after: None,
            handle_signals: true,
        }
    }
}

/// Why a run stops before its end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// A signal reached some rank.
    Signal(Signal),
    /// [`CheckpointOptions::stop_after`] steps are done.
    StepLimit(u64),
}

/// What [`Checkpointing::after_step`] did and decided.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AfterStep {
    /// The state written, if one was.
    pub saved: Option<PathBuf>,
    /// Set when the run must stop now (a state was saved first).
    pub stop: Option<StopReason>,
}

/// A state a run resumed from.
#[derive(Debug)]
pub struct Resumed {
    /// The file.
    pub path: PathBuf,
    /// The state (restore it with [`TrainingState::restore_rank`]).
    pub state: TrainingState,
    /// Newer states that did not load, newest first, with why (reported,
    /// then passed over).
    pub skipped: Vec<(PathBuf, Error)>,
}

/// Periodic training states, resumption and preemption for a training
/// loop, on one process (`SingleProcess`) or on every rank of a
/// data-parallel run (`MpiCommunicator`): every decision is taken by all
/// ranks together, rank 0 writes, and every rank hears of a failure.
///
/// - [`new`](Self::new) checks that every rank was started with the same
///   settings (the `config` lines: flags, a fingerprint of the data) and
///   installs the signal handlers.
/// - [`resume`](Self::resume) finds the state to continue from (the newest
///   good one, or a named file), checks it was written by a run with the
///   same settings and that every rank found the same one.
/// - [`after_step`](Self::after_step), called after every optimizer step,
///   saves a state every `every` steps and when the run must stop: a
///   signal reached any rank (one all-gather of a byte per step), or
///   `stop_after` steps are done.
///
/// ```
/// use std::collections::BTreeMap;
/// use retrograd::distributed::SingleProcess;
/// use retrograd::{nn::Linear, train::*};
/// let tmp = tempfile::tempdir().unwrap();
/// let mut options = CheckpointOptions::new(tmp.path(), Some(2));
/// options.stop_after = Some(3);
/// let config = BTreeMap::from([("lr".to_string(), "0.01".to_string())]);
/// let mut ckpt = Checkpointing::new(SingleProcess, options, config)?;
/// assert!(ckpt.resume(&ResumeFrom::Newest)?.is_none()); // nothing yet
/// let model = Linear::new(2, 1)?;
/// let mut saved = Vec::new();
/// for step in 1..=5 {
///     // ... one training step ...
///     let progress = Progress { step, ..Progress::default() };
///     let after = ckpt.after_step(progress, || {
///         TrainingState::capture(&model, None, None, progress, RankState::new())
///     })?;
///     saved.extend(after.saved);
///     if let Some(reason) = after.stop {
///         assert_eq!(reason, StopReason::StepLimit(3));
///         break;
///     }
/// }
/// assert_eq!(saved.len(), 2); // step 2 (every 2) and step 3 (the stop)
/// let resumed = ckpt.resume(&ResumeFrom::Newest)?.unwrap();
/// assert_eq!(resumed.state.progress().step, 3);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Checkpointing<C: Communicator> {
    comm: C,
    dir: CheckpointDir,
    every: Option<u64>,
    stop_after: Option<u64>,
    signal: Option<StopSignal>,
    config: BTreeMap<String, String>,
    saves: usize,
    save_time: Duration,
}

impl<C: Communicator> Checkpointing<C> {
    /// Opens the checkpoint directory (rank 0 removes temporary files left
    /// by an interrupted save), checks every rank has the same `config`
    /// (an [`Error::ReplicaMismatch`] naming the first setting that
    /// differs), and installs the signal handlers if asked. Collective.
    pub fn new(
        comm: C,
        options: CheckpointOptions,
        config: BTreeMap<String, String>,
    ) -> Result<Self> {
        if options.every == Some(0) {
            return Err(Error::invalid(
                "Checkpointing::new",
                "checkpoints every 0 steps (use None for none but the last)",
            ));
        }
        let lines: Vec<String> = config.iter().map(|(k, v)| format!("{k} = {v}")).collect();
        same_on_every_rank(&comm, "Checkpointing::new (settings)", &lines)?;
        let opened = if comm.rank() == 0 {
            CheckpointDir::open(&options.dir, options.keep).map(Some)
        } else {
            Ok(None)
        };
        all_succeeded(&comm, "Checkpointing::new", opened)?;
        // Other ranks need the directory only to read from it.
        let dir = CheckpointDir::open_existing(&options.dir, options.keep);
        let signal = if options.handle_signals {
            Some(StopSignal::install()?)
        } else {
            None
        };
        Ok(Checkpointing {
            comm,
            dir,
            every: options.every,
            stop_after: options.stop_after,
            signal,
            config,
            saves: 0,
            save_time: Duration::ZERO,
        })
    }

    /// The communicator.
    pub fn comm(&self) -> &C {
        &self.comm
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> &Path {
        self.dir.dir()
    }

    /// The steps of the states in the directory, oldest first (for a
    /// warning when a run starts afresh beside them).
    pub fn saved_steps(&self) -> Result<Vec<u64>> {
        if !self.dir.dir().exists() {
            return Ok(Vec::new());
        }
        Ok(self.dir.list()?.into_iter().map(|(s, _)| s).collect())
    }

    /// How many states this process saved (rank 0) or took part in saving,
    /// and the time it spent in them.
    pub fn save_stats(&self) -> (usize, Duration) {
        (self.saves, self.save_time)
    }

    /// Finds the state to continue from: the newest good one in the
    /// directory or `from`'s file. `None` when resuming from the newest and
    /// there is none. The state must have been written by a run with the
    /// same settings and as many ranks; every rank must find the same file
    /// with the same content (or each rank gets an
    /// [`Error::ReplicaMismatch`] naming the first that differs).
    /// Collective.
    pub fn resume(&self, from: &ResumeFrom) -> Result<Option<Resumed>> {
        let local = match from {
            ResumeFrom::Newest => self.dir.newest_good().map(|found| {
                found.map(|f| Resumed {
                    path: f.path,
                    state: f.state,
                    skipped: f.skipped,
                })
            }),
            ResumeFrom::File(path) => TrainingState::load(path).map(|state| {
                Some(Resumed {
                    path: path.clone(),
                    state,
                    skipped: Vec::new(),
                })
            }),
        };
        let local = all_succeeded(&self.comm, "resume", local)?;
        let description = match &local {
            None => "no checkpoint".to_string(),
            Some(r) => format!(
                "checkpoint {} (step {}, {})",
                r.path.display(),
                r.state.progress().step,
                r.state
                    .contents
                    .metadata
                    .get("checksum")
                    .map_or("no checksum", String::as_str)
            ),
        };
        same_on_every_rank(&self.comm, "resume (checkpoint files)", &[description])?;
        if let Some(r) = &local {
            r.state.check_config(&self.config)?;
            if r.state.num_ranks() != self.comm.size() {
                return Err(Error::invalid(
                    "resume",
                    format!(
                        "{} was written by {} rank(s); this run has {} (resume with as many processes)",
                        r.path.display(),
                        r.state.num_ranks(),
                        self.comm.size()
                    ),
                ));
            }
        }
        Ok(local)
    }

    /// After an optimizer step (`progress` counts it): decides, on every
    /// rank alike, whether to stop (a signal reached any rank, or
    /// `stop_after` steps are done) and whether to save (every `every`
    /// steps, and before stopping); saving calls `capture` on every rank
    /// (this rank's state), gathers the ranks' own parts to rank 0, which
    /// writes. Collective: every rank calls it after every step.
    pub fn after_step(
        &mut self,
        progress: Progress,
        capture: impl FnOnce() -> Result<TrainingState>,
    ) -> Result<AfterStep> {
        let stop = self.stop_requested(progress.step)?;
        let due = self
            .every
            .is_some_and(|every| progress.step.is_multiple_of(every));
        let saved = if stop.is_some() || due {
            Some(self.save(capture)?)
        } else {
            None
        };
        Ok(AfterStep { saved, stop })
    }

    /// Saves a state now (`capture` gives this rank's). Collective.
    pub fn save(&mut self, capture: impl FnOnce() -> Result<TrainingState>) -> Result<PathBuf> {
        let started = Instant::now();
        let state = capture()?.with_config(self.config.clone());
        let path = self.dir.path_for(state.progress().step);
        let state = state.gather(&self.comm)?;
        let written = if self.comm.rank() == 0 {
            self.dir.save(&state).map(drop)
        } else {
            Ok(())
        };
        all_succeeded(&self.comm, "Checkpointing::save", written)?;
        self.saves += 1;
        self.save_time += started.elapsed();
        Ok(path)
    }

    /// Why the run must stop after `step`, agreed by every rank.
    fn stop_requested(&self, step: u64) -> Result<Option<StopReason>> {
        let mine = self.signal.and_then(|s| s.received());
        // Without handlers (the same choice on every rank) no rank can be
        // signalled, and no collective is needed.
        let signal = if self.comm.size() == 1 || self.signal.is_none() {
            mine
        } else {
            let byte = mine.map_or(0, |s| s.number() as u8);
            let all = self.comm.all_gather_bytes(&[byte])?;
            all.iter()
                .filter_map(|b| b.first().copied())
                .find(|&b| b != 0)
                .map(|n| {
                    if i32::from(n) == Signal::Interrupt.number() {
                        Signal::Interrupt
                    } else {
                        Signal::Terminate
                    }
                })
        };
        Ok(match (signal, self.stop_after) {
            (Some(s), _) => Some(StopReason::Signal(s)),
            (None, Some(limit)) if step >= limit => Some(StopReason::StepLimit(limit)),
            _ => None,
        })
    }
}
