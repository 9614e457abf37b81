//! The table runner: every case runs under `catch_unwind`, so a panic is
//! reported as a failure naming the case instead of ending the run.

use std::panic::{self, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use retrograd::Error;

/// What a case found wrong (a panic is reported separately).
pub type Outcome = Result<(), String>;

/// One named bad input and the check of what came back.
pub struct Case {
    pub name: String,
    pub run: Box<dyn Fn() -> Outcome>,
}

/// The list each module adds its cases to.
#[derive(Default)]
pub struct Table {
    cases: Vec<Case>,
}

impl Table {
    pub fn add(&mut self, name: impl Into<String>, run: impl Fn() -> Outcome + 'static) {
        self.cases.push(Case {
            name: name.into(),
            run: Box::new(run),
        });
    }

    /// Runs every case (those whose name contains `BAD_INPUT_FILTER`, when
    /// it is set) and returns how many ran and the failures, one line each.
    /// `BAD_INPUT_VERBOSE=1` names each case before it runs (to find one
    /// that aborts the process, which `catch_unwind` cannot report).
    pub fn run(self) -> (usize, Vec<String>) {
        let filter = std::env::var("BAD_INPUT_FILTER").ok();
        let verbose = std::env::var_os("BAD_INPUT_VERBOSE").is_some();
        let last_panic = Arc::new(Mutex::new(String::new()));
        let previous_hook = panic::take_hook();
        {
            // Keep the panic message for the report instead of printing it.
            let last_panic = Arc::clone(&last_panic);
            panic::set_hook(Box::new(move |info| {
                let at = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                *last_panic.lock().unwrap() = format!("{}{at}", panic_text(info.payload()));
                if verbose {
                    eprintln!("{}", std::backtrace::Backtrace::force_capture());
                }
            }));
        }
        let mut ran = 0;
        let mut failures = Vec::new();
        for case in self.cases {
            if filter.as_deref().is_some_and(|f| !case.name.contains(f)) {
                continue;
            }
            ran += 1;
            if verbose {
                eprintln!("bad_input: {}", case.name);
            }
            match panic::catch_unwind(AssertUnwindSafe(|| (case.run)())) {
                Ok(Ok(())) => {}
                Ok(Err(why)) => failures.push(format!("{}: {why}", case.name)),
                Err(_) => failures.push(format!(
                    "{}: PANICKED: {}",
                    case.name,
                    last_panic.lock().unwrap()
                )),
            }
        }
        panic::set_hook(previous_hook);
        (ran, failures)
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "(non-string panic payload)".to_string()
    }
}

/// Checks that `result` is an error accepted by `is_expected` whose message
/// contains every string of `mentions` (the op, the shapes, the names).
pub fn expect_err<T>(
    result: retrograd::Result<T>,
    is_expected: impl Fn(&Error) -> bool,
    mentions: &[&str],
) -> Outcome {
    match result {
        Ok(_) => Err(format!(
            "expected an error, got Ok({})",
            std::any::type_name::<T>()
        )),
        Err(e) => check_error(&e, is_expected, mentions),
    }
}

/// Checks the variant and the message of an error.
pub fn check_error(e: &Error, is_expected: impl Fn(&Error) -> bool, mentions: &[&str]) -> Outcome {
    if !is_expected(e) {
        return Err(format!("unexpected error variant: {e:?}"));
    }
    let message = e.to_string();
    for m in mentions {
        if !message.contains(m) {
            return Err(format!("message `{message}` does not mention `{m}`"));
        }
    }
    Ok(())
}

/// Asserts a condition of a documented result.
pub fn ensure(ok: bool, what: impl FnOnce() -> String) -> Outcome {
    if ok {
        Ok(())
    } else {
        Err(what())
    }
}

/// Debug output cut to a readable length (a huge tensor must not flood the report).
pub fn short_debug<T: std::fmt::Debug>(v: &T) -> String {
    let s = format!("{v:?}");
    if s.len() > 200 {
        format!("{}...", s.chars().take(200).collect::<String>())
    } else {
        s
    }
}

/// Lifts an unexpected error of a setup step into a failure.
pub fn setup<T>(r: retrograd::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("setup failed: {e}"))
}

/// `expect_err` with the variant given as a pattern.
#[macro_export]
macro_rules! expect_err {
    ($result:expr, $pattern:pat, [$($mention:expr),* $(,)?]) => {
        $crate::harness::expect_err($result, |e| matches!(e, $pattern), &[$($mention),*])
    };
    ($result:expr, $pattern:pat if $guard:expr, [$($mention:expr),* $(,)?]) => {
        $crate::harness::expect_err($result, |e| matches!(e, $pattern if $guard), &[$($mention),*])
    };
}
