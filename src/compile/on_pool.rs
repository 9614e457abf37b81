//! Runs a replay on a worker of rayon's pool rather than the caller's thread.
//!
//! A parallel kernel called from a thread outside the pool hands its job to
//! the pool and sleeps until it is done (rayon's cold path): two futex
//! wake-ups and two context switches per parallel op, a few hundred per W4
//! step. Called from a worker, the same kernel pushes half of its work onto
//! its own deque and runs the other half itself, and the waiting goes away
//! (ARCHITECTURE.md, PERF: "A replay runs on the pool").

use crate::Result;

/// Runs `replay` on one of rayon's workers when it has `parallel` work (on
/// this thread when it is a worker already, or when the pool has one
/// thread), and returns its result.
pub(crate) fn on_pool<R: Send>(
    parallel: bool,
    replay: impl FnOnce() -> Result<R> + Send,
) -> Result<R> {
    if !parallel || rayon::current_thread_index().is_some() || rayon::current_num_threads() < 2 {
        return replay();
    }
    rayon::scope(|_| replay())
}
