//! [`MpiCommunicator`]: the collectives over MPI (rsmpi over OpenMPI), and
//! [`run`], which starts MPI and ends the whole job if any rank fails.

use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::request::{LocalScope, Request};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;
// rsmpi's own `Communicator` trait (its methods), under no name: ours is `Communicator`.
use mpi::topology::Communicator as _;
use mpi::Count;

use super::comm::{
    all_reduce_buckets, check_root, BucketReduce, BucketSink, Communicator, FlatBuf,
};
use retrograd_engine::base::error::{Error, Result};

/// Bytes per broadcast call: MPI counts are `i32`.
const CHUNK: usize = 1 << 30;

/// `MPI_COMM_WORLD`: every process `mpirun` started. Made by [`run`].
pub struct MpiCommunicator {
    world: SimpleCommunicator,
}

impl MpiCommunicator {
    /// The underlying rsmpi communicator, for collectives of the program's
    /// own (every rank must issue them in the same order as the wrapper's).
    pub fn world(&self) -> &SimpleCommunicator {
        &self.world
    }

    /// Ends every process of the job with exit code `code` (`MPI_Abort`).
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }

    /// Blocks until every rank has called it.
    pub fn barrier(&self) {
        self.world.barrier();
    }

    /// Splits the ranks into groups: those passing the same `Some(group)`
    /// get a communicator of their own (ranks numbered in their old
    /// order); a rank passing `None` gets none. Collective (every rank
    /// calls it), as `MPI_Comm_split`.
    pub fn split(&self, group: Option<u16>) -> Option<MpiCommunicator> {
        let color = match group {
            Some(g) => mpi::topology::Color::with_value(i32::from(g)),
            None => mpi::topology::Color::undefined(),
        };
        self.world
            .split_by_color(color)
            .map(|world| MpiCommunicator { world })
    }
}

fn count(op: &'static str, n: usize) -> Result<Count> {
    Count::try_from(n).map_err(|_| Error::Communication {
        op,
        detail: format!("{n} elements exceed MPI's count limit"),
    })
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    fn size(&self) -> usize {
        self.world.size() as usize
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        // One leading byte per rank: OpenMPI refuses an all-gather whose
        // buffers are all empty (MPI_ERR_ARG).
        let mine: Vec<u8> = std::iter::once(0).chain(mine.iter().copied()).collect();
        let mine = &mine[..];
        let n = self.size();
        let mut counts: Vec<Count> = vec![0; n];
        self.world
            .all_gather_into(&count("all_gather_bytes", mine.len())?, &mut counts[..]);
        let displs: Vec<Count> = counts
            .iter()
            .scan(0, |at, &c| {
                let d = *at;
                *at += c;
                Some(d)
            })
            .collect();
        let total: usize = counts.iter().map(|&c| c as usize).sum();
        count("all_gather_bytes", total)?;
        let mut all = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut all[..], &counts[..], &displs[..]);
            self.world.all_gather_varcount_into(mine, &mut part);
        }
        Ok(counts
            .iter()
            .zip(&displs)
            .map(|(&c, &d)| all[d as usize + 1..(d + c) as usize].to_vec())
            .collect())
    }

    fn broadcast_bytes(&self, root: usize, data: &mut Vec<u8>) -> Result<()> {
        check_root(root, self.size())?;
        let from = self.world.process_at_rank(root as i32);
        let mut len = data.len() as u64;
        from.broadcast_into(&mut len);
        data.resize(len as usize, 0);
        for chunk in data.chunks_mut(CHUNK) {
            from.broadcast_into(chunk);
        }
        Ok(())
    }

    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        mpi::request::scope(|scope| {
            let reduce = MpiReduce {
                world: &self.world,
                scope,
                running: Vec::new(),
            };
            // MPI owns the buffers of a started all-reduce until it ends:
            // finish them whatever happened (if a peer failed instead, `run`
            // there aborts the job, which ends this wait too).
            let finish = |reduce: MpiReduce<'_, '_>| {
                for r in reduce.running {
                    r.wait();
                }
            };
            all_reduce_buckets(send, recv, reduce, produce, finish)
        })
    }
}

/// A started all-reduce.
enum Running<'a, 'b> {
    F32(Request<'a, [f32], &'b LocalScope<'a>>),
    F64(Request<'a, [f64], &'b LocalScope<'a>>),
}

impl<'a, 'b> Running<'a, 'b> {
    fn wait(self) {
        match self {
            Running::F32(r) => {
                r.wait();
            }
            Running::F64(r) => {
                r.wait();
            }
        }
    }

    /// `None` once finished; otherwise the request, still running.
    fn test(self) -> Option<Self> {
        match self {
            Running::F32(r) => r.test().err().map(Running::F32),
            Running::F64(r) => r.test().err().map(Running::F64),
        }
    }
}

/// `r = Σ over ranks of s`: at once when `blocking`, else started and
/// returned as the request to finish.
fn sum_into<'a, 'b, T: Equivalence>(
    world: &'b SimpleCommunicator,
    scope: &'b LocalScope<'a>,
    s: &'a [T],
    r: &'a mut [T],
    blocking: bool,
) -> Option<Request<'a, [T], &'b LocalScope<'a>>> {
    let sum = SystemOperation::sum();
    if blocking {
        world.all_reduce_into(s, r, sum);
        None
    } else {
        Some(world.immediate_all_reduce_into(scope, s, r, sum))
    }
}

/// The sums of [`MpiCommunicator::all_reduce_overlapped`]: the all-reduces
/// started and not yet seen to finish.
struct MpiReduce<'a, 'b> {
    world: &'b SimpleCommunicator,
    scope: &'b LocalScope<'a>,
    running: Vec<Running<'a, 'b>>,
}

impl<'a, 'b> BucketReduce<'a> for MpiReduce<'a, 'b> {
    fn admit(&self, send: &FlatBuf) -> Result<()> {
        count("all_reduce_overlapped", send.len()).map(|_| ())
    }

    fn start(&mut self, send: &'a FlatBuf, recv: &'a mut FlatBuf, last: bool) {
        // The last bucket fills when the last gradient is final: nothing is
        // left to overlap, and Open MPI's blocking all-reduce (coll/tuned)
        // beats its non-blocking one (coll/libnbc): PERF in ARCHITECTURE.md.
        let running = match (send, recv) {
            (FlatBuf::F32(s), FlatBuf::F32(r)) => {
                sum_into(self.world, self.scope, s, r, last).map(Running::F32)
            }
            (FlatBuf::F64(s), FlatBuf::F64(r)) => {
                sum_into(self.world, self.scope, s, r, last).map(Running::F64)
            }
            _ => unreachable!("check_buffers matched the dtypes"),
        };
        self.running.extend(running);
    }

    fn progress(&mut self) {
        let running = std::mem::take(&mut self.running);
        self.running = running.into_iter().filter_map(Running::test).collect();
    }
}

/// Starts MPI, runs `train` with the world communicator and shuts MPI down.
///
/// If `train` returns an error or panics on any rank, that rank prints
/// `rank R of N failed: ...` to stderr and calls `MPI_Abort`, which ends
/// every process of the job (exit code 1) at once: no rank is left waiting
/// in a collective for one that will never come. A rank that dies outright
/// is handled by `mpirun`, which then ends the others. An `Err` comes back
/// only if MPI cannot be started (it was already).
pub fn run(train: impl FnOnce(&MpiCommunicator) -> Result<()>) -> Result<()> {
    let Some(universe) = mpi::initialize() else {
        return Err(Error::Communication {
            op: "distributed::run",
            detail: "MPI was already initialised in this process".to_string(),
        });
    };
    let comm = MpiCommunicator {
        world: universe.world(),
    };
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| train(&comm)));
    let failure = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(panic) => Some(
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic".to_string()),
        ),
    };
    if let Some(why) = failure {
        eprintln!(
            "retrograd: rank {} of {} failed: {why}; aborting every rank",
            comm.rank(),
            comm.size()
        );
        comm.abort(1);
    }
    drop(comm);
    drop(universe);
    Ok(())
}
