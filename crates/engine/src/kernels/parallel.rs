//! When to go parallel, and helpers to split output buffers across rayon.
//!
//! Waking rayon's pool costs a few microseconds, more than an elementwise pass
//! over tens of thousands of elements; below the threshold kernels stay on the
//! calling thread so graphs of small tensors never pay for thread wake-ups.

use std::mem::MaybeUninit;

use rayon::prelude::*;

/// Element count above which elementwise kernels split work across threads.
/// Chosen by measurement (`bench elementwise`, its `threshold_*` rows: one
/// thread against rayon on an f32 add, alternated). A 2-core AVX-512
/// machine broke even at 2^16 elements; a 2-core AMD EPYC Zen 3 virtual
/// machine, where waking a sleeping worker costs tens of microseconds,
/// lost with rayon up to 2^18 (0.51x at 2^16, 0.70x at 2^18) and won from
/// 2^19 (1.12x). Below 2^18 the serial pass takes under 50 microseconds,
/// so the most a serial op gives up on the faster-waking machine is a few
/// microseconds.
pub const PARALLEL_THRESHOLD: usize = 1 << 18;

/// Elements per parallel task: big enough to amortise scheduling, small enough to balance.
pub const CHUNK: usize = 1 << 14;

/// Whether a kernel over `n` elements should use the thread pool.
#[inline(always)]
pub fn should_parallelize(n: usize) -> bool {
    n >= PARALLEL_THRESHOLD && rayon::current_num_threads() > 1
}

/// Runs `task(t)` for every `t` in `0..tasks` on the pool and merges the
/// results left to right in task order. Rayon's own `reduce`/`fold`/`sum`
/// group partial results by how the work happened to be split (which varies
/// with scheduling), and float addition is not associative: reductions built
/// on them could differ in the last bits from run to run. Fixed tasks merged
/// in a fixed order are bit-identical every time (for a given thread count
/// when callers size `tasks` by it).
pub(crate) fn ordered_reduce<R: Send>(
    tasks: usize,
    task: impl Fn(usize) -> R + Sync + Send,
    merge: impl FnMut(R, R) -> R,
) -> Option<R> {
    let parts: Vec<R> = (0..tasks).into_par_iter().map(task).collect();
    parts.into_iter().reduce(merge)
}

/// Runs `f(offset, chunk)` over chunks of `out`, in parallel when `out` is large.
#[inline]
pub fn for_each_chunk<T: Send>(
    out: &mut [MaybeUninit<T>],
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    for_each_chunk_init(out, f)
}

/// Runs `f(offset, chunk)` over chunks of an initialised `out`, in parallel when large.
#[inline]
pub fn for_each_chunk_init<T: Send>(out: &mut [T], f: impl Fn(usize, &mut [T]) + Sync + Send) {
    for_each_part(out, CHUNK, 1, should_parallelize(out.len()), f)
}

/// Runs `f(first, part)` over parts of `out` of `units` units of
/// `unit_len` elements each (the last part may be shorter), `first` the
/// index of the part's first unit, on the pool when `parallel`; otherwise
/// once, `f(0, out)`.
#[inline]
pub(crate) fn for_each_part<T: Send>(
    out: &mut [T],
    units: usize,
    unit_len: usize,
    parallel: bool,
    f: impl Fn(usize, &mut [T]) + Sync + Send,
) {
    if parallel {
        out.par_chunks_mut(units * unit_len)
            .enumerate()
            .for_each(|(i, part)| f(i * units, part));
    } else {
        f(0, out);
    }
}
