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
    let mut secs: Vec<f64> = (0..repeats)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .collect();
    secs.sort_by(f64::total_cmp);
    Stats {
        median: secs[secs.len() / 2],
        min: secs[0],
        max: secs[secs.len() - 1],
    }
}

/// A JSON value of a result line.
pub enum Value {
    Str(String),
    Num(f64),
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
            Value::Num(_) => write!(line, "null"),
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
