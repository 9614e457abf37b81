//! Checkpoints, resuming and preemption, shared by the three training jobs:
//! the flags (`--checkpoint-dir`, `--checkpoint-every`, `--keep`,
//! `--resume [FILE]`, `--stop-after`), what is printed, and how a stopped
//! run exits. The work itself is `retrograd::train::Checkpointing`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use lexopt::ValueExt;
use retrograd::distributed::Communicator;
use retrograd::train::{
    CheckpointOptions, Checkpointing, Progress, ResumeFrom, StopReason, TrainingState,
};
use retrograd::{Error, Result};

/// The flags' help text.
pub const USAGE: &str = "\
checkpoints (training states that a run resumes from, bit for bit):
  --checkpoint-dir DIR    where they go (default target/<job>.checkpoints)
  --checkpoint-every N    save one every N steps (0 = only when stopping; default below)
  --keep N                keep the newest N (default 3)
  --resume [FILE]         continue from FILE, or from the newest good one in the directory
  --stop-after N          save one and stop once N steps are done
  SIGTERM or SIGINT (Ctrl-C) finishes the step, saves one and exits (a second one exits at once)";

/// The flags' values.
#[derive(Clone, Debug)]
pub struct Flags {
    job: &'static str,
    pub dir: Option<PathBuf>,
    pub every: u64,
    pub keep: usize,
    pub resume: Option<ResumeFrom>,
    pub stop_after: Option<u64>,
}

impl Flags {
    /// The flags of `job`, checkpointing every `default_every` steps unless told.
    pub fn new(job: &'static str, default_every: u64) -> Self {
        Flags {
            job,
            dir: None,
            every: default_every,
            keep: 3,
            resume: None,
            stop_after: None,
        }
    }

    /// Whether `name` (a long flag without its dashes) is one of these.
    pub fn owns(name: &str) -> bool {
        [
            "checkpoint-dir",
            "checkpoint-every",
            "keep",
            "resume",
            "stop-after",
        ]
        .contains(&name)
    }

    /// Reads the value of flag `name` (one that [`owns`](Self::owns)).
    pub fn parse(
        &mut self,
        name: &str,
        parser: &mut lexopt::Parser,
    ) -> std::result::Result<(), String> {
        let err = |e: lexopt::Error| format!("--{name}: {e}");
        match name {
            "checkpoint-dir" => self.dir = Some(parser.value().map_err(err)?.into()),
            "checkpoint-every" => self.every = parser.value().map_err(err)?.parse().map_err(err)?,
            "keep" => {
                self.keep = parser.value().map_err(err)?.parse().map_err(err)?;
                if self.keep == 0 {
                    return Err("--keep must be at least 1".into());
                }
            }
            "stop-after" => {
                self.stop_after = Some(parser.value().map_err(err)?.parse().map_err(err)?)
            }
            "resume" => {
                // `--resume=FILE`, `--resume FILE`, or `--resume` alone.
                let file = match parser.optional_value() {
                    Some(v) => Some(PathBuf::from(v)),
                    None => {
                        let mut raw = parser.raw_args().map_err(err)?;
                        let next_is_value = raw
                            .peek()
                            .and_then(|a| a.to_str())
                            .is_some_and(|a| !a.starts_with('-'));
                        if next_is_value {
                            raw.next().map(PathBuf::from)
                        } else {
                            None
                        }
                    }
                };
                self.resume = Some(file.map_or(ResumeFrom::Newest, ResumeFrom::File));
            }
            other => return Err(format!("--{other} is not a checkpoint flag")),
        }
        Ok(())
    }

    /// The checkpoint directory.
    pub fn dir(&self) -> PathBuf {
        self.dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(format!("target/{}.checkpoints", self.job)))
    }
}

/// A run that stopped before its end, with a state to resume from.
pub struct Stopped {
    job: &'static str,
    reason: StopReason,
    step: u64,
    path: PathBuf,
}

impl Stopped {
    /// What to print.
    pub fn message(&self) -> String {
        let how = match self.reason {
            StopReason::Signal(s) => format!("received {}: stopped", s.name()),
            StopReason::StepLimit(n) => format!("stopped as asked (--stop-after {n})"),
        };
        format!(
            "{}: {how} after step {}; training state saved to {}\ncontinue with the same flags and --resume",
            self.job,
            self.step,
            self.path.display()
        )
    }

    /// How the process exits: as a signal would have ended it (143 for
    /// SIGTERM, 130 for SIGINT), or 0 for `--stop-after`.
    pub fn exit_code(&self) -> ExitCode {
        match self.reason {
            StopReason::Signal(s) => ExitCode::from(s.exit_code()),
            StopReason::StepLimit(_) => ExitCode::SUCCESS,
        }
    }
}

/// Ends a one-process job: its error, the message of a stopped run, or success.
pub fn exit(result: Result<Option<Stopped>>) -> ExitCode {
    match result {
        Ok(None) => ExitCode::SUCCESS,
        Ok(Some(stopped)) => {
            println!("{}", stopped.message());
            stopped.exit_code()
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs a job's `--ddp` training under `mpirun` (`retrograd::distributed::run`:
/// an error on any rank ends every rank) and ends the process: if the run
/// stopped, rank 0 says why before any rank exits (a rank that exits
/// non-zero makes `mpirun` end the others), then every rank exits with the
/// stop's code.
#[cfg(feature = "mpi")]
pub fn ddp_main(
    train: impl FnOnce(&retrograd::distributed::MpiCommunicator) -> Result<Option<Stopped>>,
) -> ExitCode {
    let mut stopped = None;
    let result = retrograd::distributed::run(|comm| {
        stopped = train(comm)?;
        if let Some(s) = &stopped
            && comm.rank() == 0
        {
            println!("{}", s.message());
        }
        comm.barrier();
        Ok(())
    });
    match result {
        Ok(()) => stopped.map_or(ExitCode::SUCCESS, |s| s.exit_code()),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The checkpointing of one run (on one rank of it under `--ddp`).
pub struct Session<C: Communicator> {
    job: &'static str,
    inner: Checkpointing<C>,
    lead: bool,
}

impl<C: Communicator> Session<C> {
    /// Starts checkpointing `job` on `comm` with `settings` (what must be
    /// the same on every rank and in the state resumed from); returns the
    /// state to resume from, if `--resume` found one. Rank 0 prints where
    /// it resumes from and any newer state it had to pass over.
    pub fn start(
        job: &'static str,
        comm: C,
        flags: &Flags,
        settings: BTreeMap<String, String>,
    ) -> Result<(Self, Option<TrainingState>)> {
        let lead = comm.rank() == 0;
        let mut options =
            CheckpointOptions::new(flags.dir(), (flags.every > 0).then_some(flags.every));
        options.keep = flags.keep;
        options.stop_after = flags.stop_after;
        let inner = Checkpointing::new(comm, options, settings)?;
        let dir = inner.dir().display().to_string();
        let resumed = match &flags.resume {
            None => None,
            Some(from) => inner.resume(from).map_err(|e| match e {
                // Settings that differ: say how to start afresh instead.
                Error::InvalidArgument {
                    op: "resume",
                    reason,
                } => Error::InvalidArgument {
                    op: "resume",
                    reason: format!(
                        "{reason} (to start afresh, remove {dir} or pass another --checkpoint-dir)"
                    ),
                },
                other => other,
            })?,
        };
        if lead {
            if let Some(r) = &resumed {
                for (path, e) in &r.skipped {
                    eprintln!("warning: cannot resume from {}: {e}", path.display());
                }
                let p = r.state.progress();
                println!(
                    "resuming from {}: step {}, epoch {}, batch {} of it",
                    r.path.display(),
                    p.step,
                    p.epoch + 1,
                    p.batch
                );
            } else if flags.resume.is_some() {
                println!("--resume: no training state in {dir}; starting from the beginning");
            } else if let Some(last) = inner.saved_steps()?.last() {
                println!(
                    "note: {dir} holds training states up to step {last}; this run starts from the beginning (--resume continues one)"
                );
            }
        }
        Ok((Session { job, inner, lead }, resumed.map(|r| r.state)))
    }

    /// After each optimizer step: saves a state when due, and tells the
    /// job to stop (after saving) when a signal came or `--stop-after`
    /// steps are done.
    pub fn after_step(
        &mut self,
        at: Progress,
        capture: impl FnOnce() -> Result<TrainingState>,
    ) -> Result<Option<Stopped>> {
        let after = self.inner.after_step(at, capture)?;
        Ok(after.stop.map(|reason| Stopped {
            job: self.job,
            reason,
            step: at.step,
            path: after.saved.unwrap_or_default(),
        }))
    }

    /// A line on the states written, for the end of a run (rank 0 only).
    pub fn summary(&self) -> Option<String> {
        let (count, time) = self.inner.save_stats();
        (self.lead && count > 0).then(|| {
            format!(
                "training states: {count} saved in {} ({:.1} ms each)",
                self.inner.dir().display(),
                1e3 * time.as_secs_f64() / count as f64
            )
        })
    }
}
