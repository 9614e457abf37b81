//! A tensor's buffer that the allocator refuses becomes
//! [`Error::OutOfMemory`] at the op that asked for it, not an abort.
//!
//! Kernels build their outputs through the infallible [`Tensor::build`], so
//! a refusal cannot come back as a `Result` from where it happens. Instead,
//! a large buffer is first asked for fallibly (one `try_reserve`, freed at
//! once: an address-space reservation, no page is touched); if that fails
//! while an op boundary is [`catching`] on this thread, `build` unwinds with
//! [`Refused`] (through `resume_unwind`, so no panic message is printed) and
//! the boundary turns it into the typed error. Outside any boundary the
//! allocation goes ahead and fails as Rust's allocator does.

use std::cell::Cell;
use std::panic::{self, AssertUnwindSafe};

use crate::base::error::{Error, Result};

/// Buffers smaller than this are allocated without asking first: refusing
/// them means the process is out of memory anyway.
const ASK_FIRST_BYTES: usize = 1 << 26;

thread_local! {
    /// How many op boundaries on this thread turn a refusal into an error.
    static CATCHING: Cell<u32> = const { Cell::new(0) };
}

/// The unwinding payload of a refused buffer.
struct Refused {
    shape: Vec<usize>,
    bytes: usize,
}

/// Unwinds with [`Refused`] if a buffer of `len` `T`s for `shape` cannot be
/// had and a boundary on this thread is catching.
#[inline]
pub(crate) fn ensure_obtainable<T>(shape: &[usize], len: usize) {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if bytes >= ASK_FIRST_BYTES {
        ask_first::<T>(shape, len, bytes);
    }
}

/// `Error::OutOfMemory` naming `op` if a buffer of `len` `T`s for `shape`
/// cannot be had: for kernels that know their output's size before they
/// build it, with no unwinding (the elementwise kernels).
#[inline(always)]
pub(crate) fn obtainable<T>(op: &str, shape: &[usize], len: usize) -> Result<()> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>());
    if bytes >= ASK_FIRST_BYTES {
        return ask_first_fallibly::<T>(op, shape, len, bytes);
    }
    Ok(())
}

#[cold]
#[inline(never)]
fn ask_first_fallibly<T>(op: &str, shape: &[usize], len: usize, bytes: usize) -> Result<()> {
    match Vec::<T>::new().try_reserve_exact(len) {
        Ok(()) => Ok(()),
        Err(_) => Err(Error::OutOfMemory {
            op: op.to_string(),
            shape: shape.to_vec(),
            bytes,
        }),
    }
}

#[cold]
#[inline(never)]
fn ask_first<T>(shape: &[usize], len: usize, bytes: usize) {
    let refused = Vec::<T>::new().try_reserve_exact(len).is_err();
    if refused && CATCHING.with(Cell::get) > 0 {
        panic::resume_unwind(Box::new(Refused {
            shape: shape.to_vec(),
            bytes,
        }));
    }
}

/// Runs `f`, turning a buffer refused inside it into `Error::OutOfMemory`
/// naming `op`; any other panic goes on unwinding.
#[inline(always)]
pub(crate) fn catching<R>(op: impl FnOnce() -> String, f: impl FnOnce() -> Result<R>) -> Result<R> {
    struct Depth;
    impl Drop for Depth {
        fn drop(&mut self) {
            CATCHING.with(|c| c.set(c.get() - 1));
        }
    }
    CATCHING.with(|c| c.set(c.get() + 1));
    let depth = Depth;
    let outcome = panic::catch_unwind(AssertUnwindSafe(f));
    drop(depth);
    match outcome {
        Ok(result) => result,
        Err(payload) => Err(refused_error(op(), payload)),
    }
}

#[cold]
fn refused_error(op: String, payload: Box<dyn std::any::Any + Send>) -> Error {
    match payload.downcast::<Refused>() {
        Ok(refused) => Error::OutOfMemory {
            op,
            shape: refused.shape,
            bytes: refused.bytes,
        },
        Err(other) => panic::resume_unwind(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_buffer_is_an_error_inside_a_boundary_only() {
        let huge = [1usize << 58];
        let caught = catching(
            || "test".to_string(),
            || {
                ensure_obtainable::<f64>(&huge, 1 << 58);
                Ok(())
            },
        );
        let e = caught.unwrap_err();
        assert!(
            matches!(&e, Error::OutOfMemory { op, .. } if op == "test"),
            "{e}"
        );
        // The count is back to zero: outside a boundary nothing unwinds.
        assert_eq!(CATCHING.with(Cell::get), 0);
        ensure_obtainable::<f64>(&[1 << 20], 1 << 20);
    }

    #[test]
    fn other_panics_go_on_unwinding() {
        let r = std::panic::catch_unwind(|| {
            catching(
                || "test".to_string(),
                || -> Result<()> { panic!("not ours") },
            )
        });
        assert!(r.is_err());
        assert_eq!(CATCHING.with(Cell::get), 0);
    }
}
