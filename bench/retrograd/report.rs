//! Timing and one-line JSON output (hand-written: flat objects of strings
//! and numbers need no serializer).

use std::fmt::Write;
use std::time::Instant;

/// Median, min and max of a set of timings, in seconds.
#[derive(Clone, Copy, Debug)]
pub struct Stats {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

/// Runs `f` once to warm up, then `repeats` timed times.
pub fn time(repeats: usize, mut f: impl FnMut()) -> Stats {
    f();
    let secs: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    stats_of(secs)
}

/// Times `a` and `b` alternately (`a`, `b`, `a`, `b`, ...) after one warm-up
/// each, so both see the same background load on a shared machine: the
/// fair way to compare two variants of one computation.
pub fn time_pair(repeats: usize, mut a: impl FnMut(), mut b: impl FnMut()) -> (Stats, Stats) {
    a();
    b();
    let (mut ta, mut tb) = (Vec::with_capacity(repeats), Vec::with_capacity(repeats));
    for _ in 0..repeats {
        let t = Instant::now();
        a();
        ta.push(t.elapsed().as_secs_f64());
        let t = Instant::now();
        b();
        tb.push(t.elapsed().as_secs_f64());
    }
    (stats_of(ta), stats_of(tb))
}

fn stats_of(mut secs: Vec<f64>) -> Stats {
    secs.sort_by(f64::total_cmp);
    Stats {
        median: secs[secs.len() / 2],
        min: secs[0],
        max: secs[secs.len() - 1],
    }
}

impl Stats {
    /// Every figure divided by `k` (per-call times of a batch of `k` calls).
    pub fn per(self, k: usize) -> Stats {
        let k = k as f64;
        Stats {
            median: self.median / k,
            min: self.min / k,
            max: self.max / k,
        }
    }
}

/// A JSON value of a result line.
pub enum Value {
    Str(String),
    /// Printed to four significant digits (timings).
    Num(f64),
    /// Printed exactly (cross-check values).
    Exact(f64),
    Int(u64),
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.to_string())
    }
}
impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s)
    }
}
impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Num(v)
    }
}
impl From<usize> for Value {
    fn from(v: usize) -> Self {
        Value::Int(v as u64)
    }
}

/// One result: `fields` first, then the timing in milliseconds.
pub fn emit(fields: Vec<(&str, Value)>, stats: Option<Stats>) {
    let mut line = String::from("{");
    let mut push = |k: &str, v: &Value| {
        if line.len() > 1 {
            line.push_str(", ");
        }
        let _ = write!(line, "\"{}\": ", escape(k));
        let _ = match v {
            Value::Str(s) => write!(line, "\"{}\"", escape(s)),
            Value::Num(x) if x.is_finite() => write!(line, "{}", round(*x)),
            Value::Exact(x) if x.is_finite() => write!(line, "{x}"),
            Value::Num(_) | Value::Exact(_) => write!(line, "null"),
            Value::Int(i) => write!(line, "{i}"),
        };
    };
    for (k, v) in &fields {
        push(k, v);
    }
    if let Some(s) = stats {
        push("median_ms", &Value::Num(s.median * 1e3));
        push("min_ms", &Value::Num(s.min * 1e3));
        push("max_ms", &Value::Num(s.max * 1e3));
    }
    line.push('}');
    println!("{line}");
}

/// Four significant digits are plenty for timings.
fn round(x: f64) -> f64 {
    if x == 0.0 {
        return 0.0;
    }
    let scale = 10f64.powi(3 - x.abs().log10().floor() as i32);
    (x * scale).round() / scale
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Milliseconds per call of an eager step and its compiled form, run
/// alternately in blocks of 10 calls after `warmup` calls of each (so load
/// changes reach both); each step returns its loss, and the last losses
/// come back too.
pub struct Alternated {
    pub eager_ms: Vec<f64>,
    pub compiled_ms: Vec<f64>,
    pub eager_loss: f64,
    pub compiled_loss: f64,
}

pub fn alternate(
    blocks: usize,
    warmup: usize,
    mut eager: impl FnMut() -> f64,
    mut compiled: impl FnMut() -> f64,
) -> Alternated {
    for _ in 0..warmup {
        eager();
        compiled();
    }
    let mut out = Alternated {
        eager_ms: Vec::new(),
        compiled_ms: Vec::new(),
        eager_loss: 0.0,
        compiled_loss: 0.0,
    };
    for _ in 0..blocks {
        for _ in 0..10 {
            let t = Instant::now();
            out.eager_loss = eager();
            out.eager_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
        for _ in 0..10 {
            let t = Instant::now();
            out.compiled_loss = compiled();
            out.compiled_ms.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    out
}

/// One row of per-step times: `workload`, `batch`, `unit`, the median,
/// least and most of `times` (ms), `loss`, then `extra` fields.
pub fn emit_times(
    workload: &str,
    batch: usize,
    unit: &str,
    mut times: Vec<f64>,
    loss: f64,
    extra: Vec<(&str, Value)>,
) {
    times.sort_by(f64::total_cmp);
    let mut fields = vec![
        ("framework", "retrograd".into()),
        ("workload", workload.into()),
        ("batch", batch.into()),
        ("unit", unit.into()),
        ("median", Value::Num(times[times.len() / 2])),
        ("min", Value::Num(times[0])),
        ("max", Value::Num(times[times.len() - 1])),
        ("loss", Value::Exact(loss)),
    ];
    fields.extend(extra);
    emit(fields, None);
}
