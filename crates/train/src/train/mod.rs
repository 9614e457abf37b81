//! Training that survives interruption: a resumed run is the same run,
//! bit for bit.
//!
//! - [`TrainingState`]: everything that decides the next step (parameters,
//!   buffers and random streams, optimizer state and rate, the schedule's
//!   position, [`Progress`] counters, each rank's generators and numbers in
//!   a [`RankState`], the default generator, the run's settings), captured
//!   as values, saved and loaded whole as a versioned checkpoint with a
//!   checksum, restored all or nothing.
//! - [`CheckpointDir`]: periodic states in a directory, the newest `keep`
//!   kept, written atomically; the newest good one found again, a damaged
//!   newer one reported and passed over.
//! - [`StopSignal`]: SIGTERM/SIGINT ask for a checkpoint and a clean stop;
//!   a second signal ends the process at once.
//! - [`Checkpointing`]: the three together for a training loop, on one
//!   process or every rank of a data-parallel run (rank 0 writes, all ranks
//!   decide together, a signal to one rank stops them all after one
//!   checkpoint).
//!
//! A loop that resumes: build the model, optimizer and schedule as the
//! first run did, restore the state, take the generators and counters
//! back, skip the batches of the current epoch already trained on
//! ([`Batches::skip_batches`](retrograd_engine::data::Batches::skip_batches)), go on.
//! The `train_*` examples do exactly this (`examples/support/resume.rs`).
//!
//! Where things are: `TrainingState`, `Progress`, `RankState` (`state.rs`:
//! capture as values, restore all or nothing, gather every rank's part),
//! its file layout, version and parsing (`format.rs`), ChaCha8 generator
//! states as text (`generator.rs`), `CheckpointDir` (`checkpoint_dir.rs`:
//! periodic files, keep N, newest good with fallback, stray temporaries
//! removed), `StopSignal` (`stop_signal.rs`: SIGTERM/SIGINT through
//! `signal-hook`), `Checkpointing` (`checkpointing.rs`: the per-step
//! decisions of a loop on one process or every rank).

mod checkpoint_dir;
mod checkpointing;
mod format;
mod generator;
mod state;
mod stop_signal;

pub use checkpoint_dir::{CheckpointDir, FoundState};
pub use checkpointing::{
    AfterStep, CheckpointOptions, Checkpointing, ResumeFrom, Resumed, StopReason,
};
pub use format::TRAINING_STATE_VERSION;
pub use state::{Progress, RankState, TrainingState};
pub use stop_signal::{Signal, StopSignal};
