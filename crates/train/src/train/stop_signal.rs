//! [`StopSignal`]: SIGTERM and SIGINT ask a training run to stop after the
//! step in progress (the first one), or end the process at once (a second).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use retrograd_engine::{Error, Result};

/// What a preempted run received: SIGTERM (a scheduler's notice, `kill`)
/// or SIGINT (Ctrl-C).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM.
    Terminate,
    /// SIGINT.
    Interrupt,
}

impl Signal {
    /// The signal's name, `"SIGTERM"` or `"SIGINT"`.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Terminate => "SIGTERM",
            Signal::Interrupt => "SIGINT",
        }
    }

    /// The signal's number on this platform.
    pub fn number(self) -> i32 {
        match self {
            Signal::Terminate => signal_hook::consts::SIGTERM,
            Signal::Interrupt => signal_hook::consts::SIGINT,
        }
    }

    /// The exit status a shell gives a process this signal ended: 128 plus
    /// the signal's number (143 for SIGTERM, 130 for SIGINT).
    pub fn exit_code(self) -> u8 {
        (128 + self.number()) as u8
    }

    fn from_number(n: usize) -> Option<Self> {
        [Signal::Terminate, Signal::Interrupt]
            .into_iter()
            .find(|s| s.number() as usize == n)
    }
}

/// The process-wide record of the signals (handlers are process-wide).
struct Handlers {
    received: Arc<AtomicBool>,
    which: Arc<AtomicUsize>,
}

static HANDLERS: OnceLock<std::result::Result<Handlers, String>> = OnceLock::new();

/// A request to stop, made by SIGTERM or SIGINT.
///
/// [`install`](Self::install) sets up the handlers once per process. The
/// first SIGTERM or SIGINT only sets a flag, which a training loop reads
/// between steps ([`received`](Self::received)) to finish the step in
/// progress, write a checkpoint and exit with a clear message. A second
/// one ends the process at once, with exit status 128 + the signal's
/// number, without running anything else (a checkpoint being written is
/// left as a stray temporary file, never in place of a good one).
///
/// ```
/// use retrograd::train::StopSignal;
/// let stop = StopSignal::install()?;
/// assert_eq!(stop.received(), None);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Copy, Debug)]
pub struct StopSignal {
    _private: (),
}

impl StopSignal {
    /// Installs the SIGTERM and SIGINT handlers (the first call does; later
    /// ones return the same flag).
    pub fn install() -> Result<Self> {
        let handlers = HANDLERS.get_or_init(|| {
            let received = Arc::new(AtomicBool::new(false));
            let which = Arc::new(AtomicUsize::new(0));
            for signal in [Signal::Terminate, Signal::Interrupt] {
                let n = signal.number();
                // In this order: the shutdown check sees the flag as the
                // previous signal left it, then the flag is set.
                signal_hook::flag::register_conditional_shutdown(
                    n,
                    i32::from(signal.exit_code()),
                    Arc::clone(&received),
                )
                .and_then(|_| signal_hook::flag::register(n, Arc::clone(&received)))
                .and_then(|_| signal_hook::flag::register_usize(n, Arc::clone(&which), n as usize))
                .map_err(|e| format!("cannot handle {}: {e}", signal.name()))?;
            }
            Ok(Handlers { received, which })
        });
        match handlers {
            Ok(_) => Ok(StopSignal { _private: () }),
            Err(reason) => Err(Error::Io {
                op: "StopSignal::install",
                path: String::new(),
                message: reason.clone(),
            }),
        }
    }

    /// The signal received since the handlers were installed, if any.
    pub fn received(&self) -> Option<Signal> {
        let Some(Ok(h)) = HANDLERS.get() else {
            return None;
        };
        if !h.received.load(Ordering::SeqCst) {
            return None;
        }
        Signal::from_number(h.which.load(Ordering::SeqCst)).or(Some(Signal::Terminate))
    }
}
