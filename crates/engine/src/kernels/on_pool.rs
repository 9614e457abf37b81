//! Runs a run of many parallel kernels (a compiled step's replay, a
//! language model's decode step) on a worker of rayon's pool rather than
//! the caller's thread.
//!
//! A parallel kernel called from a thread outside the pool hands its job to
//! the pool and sleeps until it is done (rayon's cold path): two futex
//! wake-ups and two context switches per parallel op, a few hundred per W4
//! step and 121 per generated token of a 30-layer model. Called from a
//! worker, the same kernel pushes half of its work onto its own deque and
//! runs the other half itself, and the waiting goes away (ARCHITECTURE.md,
//! PERF: "A replay runs on the pool").

/// Runs `work` on one of rayon's workers when it has `parallel` work (on
/// this thread when it is a worker already, or when the pool has one
/// thread), and returns its result.
pub fn on_pool<R: Send>(parallel: bool, work: impl FnOnce() -> R + Send) -> R {
    if !parallel || rayon::current_thread_index().is_some() || rayon::current_num_threads() < 2 {
        return work();
    }
    rayon::scope(|_| work())
}
