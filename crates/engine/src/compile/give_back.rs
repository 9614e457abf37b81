//! Hands the memory a capture freed back to the operating system.
//!
//! A capture's values are freed once its first replay has drawn the plan's
//! buffers, but glibc's `free` keeps what it takes back mapped for later
//! `malloc`s: a freed chunk below the mmap threshold (which glibc raises to
//! the largest block freed so far, so a step's activations all fall below
//! it) stays in the heap, and in the resident set. A compiled step
//! allocates nothing of its own after that, so nothing would reuse it;
//! `malloc_trim(0)` returns the free pages of every arena instead (W4:
//! BENCHMARKS.md, "The compiled step's memory").

/// Returns the allocator's free pages to the system, where it can (glibc).
pub(crate) fn give_back_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        unsafe extern "C" {
            fn malloc_trim(pad: usize) -> i32;
        }
        // SAFETY: glibc's `malloc_trim` takes a byte count, reads and writes
        // only the allocator's own state under its locks, and may be called
        // at any time from any thread.
        unsafe {
            malloc_trim(0);
        }
    }
}
