//! The [`Communicator`] trait: the few collectives data-parallel training
//! needs, so that the wrapper does not depend on MPI itself (NCCL could
//! serve GPUs behind the same trait). [`SingleProcess`] is the one-rank
//! communicator; `MpiCommunicator` (feature `mpi`) runs over MPI.

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::tensor::DType;

/// A flat buffer of one bucket's gradients, in the bucket's dtype.
#[derive(Clone, Debug, PartialEq)]
pub enum FlatBuf {
    /// f32 gradients.
    F32(Vec<f32>),
    /// f64 gradients.
    F64(Vec<f64>),
}

impl FlatBuf {
    /// A zeroed buffer of `len` elements of `dtype` (f32 or f64).
    pub fn zeros(dtype: DType, len: usize) -> Result<Self> {
        match dtype {
            DType::F32 => Ok(FlatBuf::F32(vec![0.0; len])),
            DType::F64 => Ok(FlatBuf::F64(vec![0.0; len])),
            other => Err(Error::NotFloat {
                op: "FlatBuf::zeros",
                found: other,
            }),
        }
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        match self {
            FlatBuf::F32(v) => v.len(),
            FlatBuf::F64(v) => v.len(),
        }
    }

    /// Whether the buffer holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The size in bytes.
    pub fn bytes(&self) -> usize {
        match self {
            FlatBuf::F32(v) => 4 * v.len(),
            FlatBuf::F64(v) => 8 * v.len(),
        }
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            FlatBuf::F32(_) => DType::F32,
            FlatBuf::F64(_) => DType::F64,
        }
    }
}

/// What [`Communicator::all_reduce_overlapped`] hands the code that
/// computes the buckets: a way to start each bucket's all-reduce as soon as
/// its contents are known.
pub trait BucketSink {
    /// Fills bucket `index`'s send buffer with `fill`, then starts its
    /// all-reduce (a sum over ranks) without waiting for it (the last
    /// bucket's may finish before this returns: nothing is left to overlap
    /// it with). Every rank must start the buckets in the same order
    /// (collectives match by order).
    fn start(
        &mut self,
        index: usize,
        fill: &mut dyn FnMut(&mut FlatBuf) -> Result<()>,
    ) -> Result<()>;

    /// Lets started all-reduces make progress (MPI advances a non-blocking
    /// collective only inside MPI calls); cheap, call it often.
    fn progress(&mut self) {}
}

/// The collectives of data-parallel training, over `size()` ranks.
///
/// Every method is collective: all ranks call it, in the same order.
pub trait Communicator {
    /// This process's rank, `0..size()`.
    fn rank(&self) -> usize;

    /// The number of ranks.
    fn size(&self) -> usize;

    /// Every rank's `mine`, by rank.
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>>;

    /// Makes `data` on every rank a copy of `data` on rank `root`.
    fn broadcast_bytes(&self, root: usize, data: &mut Vec<u8>) -> Result<()>;

    /// Runs `produce`, which starts the all-reduce of each bucket through
    /// the sink while it computes (so communication overlaps computing),
    /// then waits for them all. On success `recv[i]` holds the sum over
    /// ranks of `send[i]` (same lengths and dtypes). Every bucket must be
    /// started exactly once, in index order: anything else is an
    /// [`Error::Communication`], as is an error of `produce`, returned once
    /// the all-reduces already started have finished.
    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()>;
}

/// A shared reference serves as the communicator it points to (so a
/// wrapper can borrow one that the program keeps).
impl<C: Communicator + ?Sized> Communicator for &C {
    fn rank(&self) -> usize {
        (**self).rank()
    }

    fn size(&self) -> usize {
        (**self).size()
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        (**self).all_gather_bytes(mine)
    }

    fn broadcast_bytes(&self, root: usize, data: &mut Vec<u8>) -> Result<()> {
        (**self).broadcast_bytes(root, data)
    }

    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        (**self).all_reduce_overlapped(send, recv, produce)
    }
}

/// Checks a bucket start against what is expected next.
pub(crate) fn check_start(next: usize, index: usize, count: usize) -> Result<()> {
    if index != next || index >= count {
        return Err(Error::Communication {
            op: "all_reduce_overlapped",
            detail: format!(
                "bucket {index} started where bucket {next} of {count} was due (buckets start once each, in order)"
            ),
        });
    }
    Ok(())
}

/// Checks that every bucket was started.
pub(crate) fn check_all_started(started: usize, count: usize) -> Result<()> {
    if started != count {
        return Err(Error::Communication {
            op: "all_reduce_overlapped",
            detail: format!("{started} of {count} buckets were started"),
        });
    }
    Ok(())
}

/// Checks the send and receive buffers pair up.
pub(crate) fn check_buffers(send: &[FlatBuf], recv: &[FlatBuf]) -> Result<()> {
    let fits = send.len() == recv.len()
        && send
            .iter()
            .zip(recv)
            .all(|(s, r)| s.len() == r.len() && s.dtype() == r.dtype());
    if !fits {
        return Err(Error::Communication {
            op: "all_reduce_overlapped",
            detail: "send and receive buckets differ in count, length or dtype".to_string(),
        });
    }
    Ok(())
}

/// How a communicator sums one bucket over the ranks: the part of
/// [`Communicator::all_reduce_overlapped`] that differs between
/// communicators; [`all_reduce_buckets`] is the rest.
pub(crate) trait BucketReduce<'a> {
    /// Checks that `send`, just filled, can be summed (before the bucket
    /// counts as started).
    fn admit(&self, send: &FlatBuf) -> Result<()> {
        let _ = send;
        Ok(())
    }

    /// Starts `recv = Σ over ranks of send` (same length and dtype), which
    /// may finish later; `last` for the last bucket.
    fn start(&mut self, send: &'a FlatBuf, recv: &'a mut FlatBuf, last: bool);

    /// Lets started sums make progress.
    fn progress(&mut self) {}
}

/// [`Communicator::all_reduce_overlapped`] over `reduce`, written once for
/// every communicator: checks the buffers pair up, runs `produce` with a
/// sink that starts each bucket once and in order (filled, then handed to
/// `reduce`), calls `finish` (which must end every started sum) whatever
/// `produce` returned, then checks every bucket was started.
pub(crate) fn all_reduce_buckets<'a, R: BucketReduce<'a>>(
    send: &'a mut [FlatBuf],
    recv: &'a mut [FlatBuf],
    reduce: R,
    produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    finish: impl FnOnce(R),
) -> Result<()> {
    check_buffers(send, recv)?;
    let total = send.len();
    let mut sink = Buckets {
        send: send.iter_mut().map(Some).collect(),
        recv: recv.iter_mut().map(Some).collect(),
        next: 0,
        reduce,
    };
    let produced = produce(&mut sink);
    let next = sink.next;
    finish(sink.reduce);
    produced?;
    check_all_started(next, total)
}

/// The sink of [`all_reduce_buckets`]: the buffers of the buckets not yet
/// started, and the next bucket due.
struct Buckets<'a, R> {
    send: Vec<Option<&'a mut FlatBuf>>,
    recv: Vec<Option<&'a mut FlatBuf>>,
    next: usize,
    reduce: R,
}

impl<'a, R: BucketReduce<'a>> BucketSink for Buckets<'a, R> {
    fn start(
        &mut self,
        index: usize,
        fill: &mut dyn FnMut(&mut FlatBuf) -> Result<()>,
    ) -> Result<()> {
        check_start(self.next, index, self.send.len())?;
        let send = self.send[index].take().expect("each bucket starts once");
        fill(send)?;
        let send: &'a FlatBuf = send;
        self.reduce.admit(send)?;
        let recv = self.recv[index].take().expect("each bucket starts once");
        self.next += 1;
        let last = self.next == self.send.len();
        self.reduce.start(send, recv, last);
        self.reduce.progress();
        Ok(())
    }

    fn progress(&mut self) {
        self.reduce.progress();
    }
}

/// Checks that `root` is a rank of a world of `size` ranks (the root of a
/// broadcast).
pub(crate) fn check_root(root: usize, size: usize) -> Result<()> {
    if root >= size {
        let ranks = if size == 1 { "rank" } else { "ranks" };
        return Err(Error::Communication {
            op: "broadcast_bytes",
            detail: format!("root {root} of {size} {ranks}"),
        });
    }
    Ok(())
}

/// The communicator of a single process: rank 0 of 1. Collectives are
/// copies; data-parallel code runs unchanged without MPI.
///
/// ```
/// use retrograd::distributed::{Communicator, SingleProcess};
/// let c = SingleProcess;
/// assert_eq!((c.rank(), c.size()), (0, 1));
/// assert_eq!(c.all_gather_bytes(b"hi")?, vec![b"hi".to_vec()]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }

    fn size(&self) -> usize {
        1
    }

    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        Ok(vec![mine.to_vec()])
    }

    fn broadcast_bytes(&self, root: usize, _data: &mut Vec<u8>) -> Result<()> {
        check_root(root, 1)
    }

    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        /// One rank's sum is its own buffer.
        struct Copy;
        impl<'a> BucketReduce<'a> for Copy {
            fn start(&mut self, send: &'a FlatBuf, recv: &'a mut FlatBuf, _last: bool) {
                recv.clone_from(send);
            }
        }
        all_reduce_buckets(send, recv, Copy, produce, |_| {})
    }
}
