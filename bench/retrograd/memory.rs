//! Memory: peak resident-set growth per recorded node of W1 (C = 1000), and
//! of five W2 steps at batch 4096 (once the MLP workload exists).
//!
//! Peak RSS comes from the kernel's own accounting (`VmHWM` in
//! /proc/self/status), reset before each measurement by writing 5 to
//! /proc/self/clear_refs, so one process can measure several workloads.

use std::fs;

use crate::report::{emit, Value};
use crate::Options;

/// Current and peak resident set, in bytes (Linux only).
pub fn rss_and_peak() -> Option<(u64, u64)> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = status.lines().find(|l| l.starts_with(name))?;
        let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kib * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Environment variable that tells a child process which measurement to make.
const CHILD: &str = "RETROGRAD_BENCH_CHILD";

/// Peak-memory figures are only meaningful in a fresh process: the allocator
/// keeps freed memory, so an earlier run would hide the growth. When this
/// process is not a child, re-run the bench binary as the child for `label`
/// (with the same options) and return `true`: the caller should skip the
/// measurement. In a child, returns whether `label` is someone else's.
pub fn delegated(label: &str, opts: &Options) -> bool {
    if let Ok(child) = std::env::var(CHILD) {
        // A child makes exactly the measurement it was started for.
        return child != label;
    }
    let mut cmd = std::process::Command::new(std::env::current_exe().expect("own path"));
    cmd.env(CHILD, label)
        .arg(label.split(':').next().unwrap_or(label));
    if opts.quick {
        cmd.arg("--quick");
    }
    match cmd.status() {
        Ok(s) if s.success() => {}
        other => eprintln!("{label}: child process failed: {other:?}"),
    }
    true
}

/// Starts a new peak: from here `VmHWM` counts from the current RSS.
pub fn reset_peak() -> Option<()> {
    fs::write("/proc/self/clear_refs", "5").ok()
}

/// Peak RSS growth (bytes) while `f` runs.
pub fn peak_growth(f: impl FnOnce()) -> Option<u64> {
    reset_peak()?;
    let (base, _) = rss_and_peak()?;
    f();
    let (_, peak) = rss_and_peak()?;
    Some(peak.saturating_sub(base))
}

pub fn run_w1(opts: &Options) {
    if delegated("mem_w1", opts) {
        return;
    }
    let chains = if opts.quick { 100 } else { 1000 };
    let nodes = super::w1::nodes(chains, 1);
    match peak_growth(|| {
        super::w1::run_once(chains, 1, retrograd::DType::F32);
    }) {
        Some(bytes) => emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "mem_w1".into()),
                ("chains", chains.into()),
                ("nodes", nodes.into()),
                ("unit", "bytes_per_node".into()),
                ("median", Value::Num(bytes as f64 / nodes as f64)),
            ],
            None,
        ),
        None => eprintln!("mem_w1: /proc/self/status or clear_refs is not available here"),
    }
}

pub fn run_w2(opts: &Options) {
    if delegated("mem_w2", opts) {
        return;
    }
    let batch = if opts.quick { 256 } else { 4096 };
    let params = super::w2::mlp_params(0);
    let (x, y) = super::w2::mlp_data(batch, 1);
    match peak_growth(|| {
        for _ in 0..5 {
            super::w2::step(&params, &x, &y).expect("a valid step");
        }
    }) {
        Some(bytes) => emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "mem_w2".into()),
                ("batch", batch.into()),
                ("steps", 5usize.into()),
                ("unit", "MiB_peak_rss_growth".into()),
                ("median", Value::Num(bytes as f64 / (1024.0 * 1024.0))),
            ],
            None,
        ),
        None => eprintln!("mem_w2: /proc/self/status or clear_refs is not available here"),
    }
}
