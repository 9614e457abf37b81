//! Large tensor buffers backed by transparent huge pages where the kernel
//! offers them.
//!
//! A buffer of more than a few megabytes comes from the allocator as a fresh
//! mapping, and every 4 KiB page of it faults on first write: per-sample
//! gradients of a small CNN (a `[64, 128, 3136]` weight gradient, 103 MB)
//! spent a third of their time in those faults. Where Linux runs transparent
//! huge pages in `madvise` mode (the usual default), asking for them on the
//! buffer's 2 MiB-aligned interior before it is written makes each fault
//! map 2 MiB, 512 times fewer. PyTorch does the same for its CPU tensors
//! (`THP_MEM_ALLOC_ENABLE`). The advice changes no contents and no
//! semantics; where the kernel has huge pages off, or on other systems, it
//! is a no-op.

use std::mem::MaybeUninit;

/// Buffers at least this large (in bytes) are advised. Smaller ones rarely
/// hold a whole aligned huge page, and come from the allocator's heap.
pub(crate) const MIN_ADVISED_BYTES: usize = 4 << 20;

/// The size of an x86-64 and AArch64 (4 KiB base pages) transparent huge page.
#[cfg(target_os = "linux")]
const HUGE_PAGE_BYTES: usize = 2 << 20;

/// Asks for huge pages behind `slots` (not yet written) when it is large.
#[inline]
pub(crate) fn advise<T>(slots: &mut [MaybeUninit<T>]) {
    let bytes = std::mem::size_of_val(slots);
    if bytes < MIN_ADVISED_BYTES {
        return;
    }
    advise_range(slots.as_mut_ptr() as usize, bytes);
}

#[cfg(target_os = "linux")]
#[cold]
fn advise_range(start: usize, bytes: usize) {
    let first = start.next_multiple_of(HUGE_PAGE_BYTES);
    let end = (start + bytes) / HUGE_PAGE_BYTES * HUGE_PAGE_BYTES;
    if end <= first {
        return;
    }
    // SAFETY: `first..end` lies inside the caller's allocation (rounded
    // inwards to whole huge pages, so page-aligned as madvise requires), and
    // MADV_HUGEPAGE only changes how the kernel backs those pages, never
    // their contents or which addresses are valid. A refusal (huge pages
    // compiled out, an old kernel) leaves the mapping as it was, so the
    // result is not needed.
    unsafe {
        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_range(_start: usize, _bytes: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_buffer_is_advised_and_written_as_usual() {
        let n = MIN_ADVISED_BYTES / 4 * 3 + 7;
        let mut v: Vec<MaybeUninit<f32>> = Vec::with_capacity(n);
        // SAFETY: MaybeUninit needs no initialisation.
        unsafe { v.set_len(n) };
        advise(&mut v);
        for (i, slot) in v.iter_mut().enumerate() {
            slot.write(i as f32);
        }
        // SAFETY: every slot was written above.
        let sum: f64 = v.iter().map(|s| unsafe { s.assume_init() } as f64).sum();
        assert_eq!(sum, (n as f64 - 1.0) * n as f64 / 2.0);
    }

    #[test]
    fn a_small_buffer_is_left_alone() {
        let mut v = [MaybeUninit::<f64>::uninit(); 16];
        advise(&mut v);
    }
}
