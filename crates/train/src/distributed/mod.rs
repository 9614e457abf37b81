//! Data-parallel training: the same program on several processes (or
//! machines), each computing gradients on its own shard of the batch, the
//! gradients averaged so every replica stays identical (PyTorch's
//! DistributedDataParallel).
//!
//! - [`DataParallel`] wraps a [`Module`](retrograd_engine::nn::Module): replica checks,
//!   rank 0's weights to everyone, bucketed gradient all-reduce overlapped
//!   with backward (an eager graph's, or a compiled step's replay:
//!   `run_compiled`), `no_sync` accumulation, checkpoints written by rank 0.
//! - [`DistributedSampler`]: each rank's shard of a dataset, per epoch.
//! - [`any_rank`], [`all_succeeded`], [`same_on_every_rank`]: decisions
//!   every rank takes together (stop, success, matching settings).
//! - [`Communicator`]: the collectives used, behind a trait.
//!   [`SingleProcess`] is one rank; with feature `mpi`, `MpiCommunicator`
//!   runs over MPI (OpenMPI through the `mpi` crate), and `run` starts MPI,
//!   runs a training function and turns an error or panic on any rank into
//!   an `MPI_Abort` of the whole job, so no rank waits for a dead one.
//!
//! Where things are: data-parallel training over MPI: `DataParallel`
//! (`data_parallel.rs`: replica check on gathered descriptions, rank 0's
//! parameters and buffers broadcast, bucketed gradient all-reduce started
//! from `backward_notifying` (or, for a compiled step, from the replay as
//! each gradient is final: `DataParallel::run_compiled`), `no_sync`, buffers follow rank 0, checkpoints
//! written by rank 0 and loaded by all with an agreed outcome), the bucket
//! plan (`buckets.rs`: reverse parameter order, one dtype per bucket, 25
//! MiB with a 1 MiB first bucket), `Communicator`/`BucketSink`/`FlatBuf`
//! and `SingleProcess` (`comm.rs`), the MPI backend `MpiCommunicator` and
//! `run` (`over_mpi.rs`, feature `mpi`), `DistributedSampler`
//! (`sampler.rs`), tensor bytes for broadcasts (`wire.rs`), decisions
//! every rank takes together: `any_rank`, `all_succeeded`,
//! `same_on_every_rank` (`agreement.rs`).

mod agreement;
mod buckets;
mod comm;
mod data_parallel;
#[cfg(feature = "mpi")]
mod over_mpi;
mod sampler;
mod wire;

pub use agreement::{all_succeeded, any_rank, same_on_every_rank};
pub use buckets::{DEFAULT_BUCKET_BYTES, FIRST_BUCKET_BYTES};
pub use comm::{BucketSink, Communicator, FlatBuf, SingleProcess};
pub use data_parallel::DataParallel;
#[cfg(feature = "mpi")]
pub use over_mpi::{run, MpiCommunicator};
pub use sampler::DistributedSampler;
