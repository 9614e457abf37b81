//! What `GET /metrics` reports, in Prometheus' text format (version
//! 0.0.4): counters of requests by endpoint and status and of tokens,
//! gauges of the queues and of the chat slots in use, histograms of batch
//! sizes, latencies and time to the first token. One mutex guards it all:
//! it is taken a few times per request and per batch, never while a model
//! runs.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Every metric: its name, kind and help line, in the order printed.
const METRICS: &[(&str, Kind, &str)] = &[
    (
        "retrograd_http_requests_total",
        Kind::Counter,
        "HTTP requests answered, by endpoint and status code.",
    ),
    (
        "retrograd_prompt_tokens_total",
        Kind::Counter,
        "Prompt tokens of accepted chat requests.",
    ),
    (
        "retrograd_completion_tokens_total",
        Kind::Counter,
        "Tokens generated.",
    ),
    (
        "retrograd_embedding_tokens_total",
        Kind::Counter,
        "Tokens of embedded texts.",
    ),
    (
        "retrograd_chat_cancelled_total",
        Kind::Counter,
        "Chat requests dropped because their client went away.",
    ),
    (
        "retrograd_queue_depth",
        Kind::Gauge,
        "Requests waiting to be admitted, by queue.",
    ),
    (
        "retrograd_chat_active_sequences",
        Kind::Gauge,
        "Chat slots in use (sequences being generated).",
    ),
    (
        "retrograd_chat_slots",
        Kind::Gauge,
        "Chat slots (sequences decoded together at most).",
    ),
    (
        "retrograd_chat_decode_batch_size",
        Kind::Histogram,
        "Sequences per batched decode step.",
    ),
    (
        "retrograd_embedding_batch_size",
        Kind::Histogram,
        "Texts per embedding batch.",
    ),
    (
        "retrograd_embedding_batch_tokens",
        Kind::Histogram,
        "Tokens per embedding batch.",
    ),
    (
        "retrograd_decode_step_seconds",
        Kind::Histogram,
        "Seconds per batched decode step.",
    ),
    (
        "retrograd_queue_wait_seconds",
        Kind::Histogram,
        "Seconds from acceptance to admission, by queue.",
    ),
    (
        "retrograd_time_to_first_token_seconds",
        Kind::Histogram,
        "Seconds from acceptance to the first generated token.",
    ),
    (
        "retrograd_request_duration_seconds",
        Kind::Histogram,
        "Seconds from the request to the head of its answer (a streamed answer: its first byte), by endpoint.",
    ),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Counter,
    Gauge,
    Histogram,
}

fn buckets(name: &str) -> &'static [f64] {
    match name {
        "retrograd_chat_decode_batch_size" | "retrograd_embedding_batch_size" => {
            &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]
        }
        "retrograd_embedding_batch_tokens" => &[64.0, 256.0, 1024.0, 4096.0, 16384.0],
        _ => &[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
        ],
    }
}

#[derive(Clone, Debug, Default)]
struct Histogram {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// Labels as `key="value"` pairs, in the order given.
pub type Labels<'a> = &'a [(&'a str, &'a str)];

#[derive(Debug, Default)]
struct Inner {
    /// (name, rendered labels) -> value.
    scalars: BTreeMap<(&'static str, String), f64>,
    histograms: BTreeMap<(&'static str, String), Histogram>,
}

/// The server's metrics (see the module docs).
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

fn render_labels(labels: Labels<'_>) -> String {
    let mut s = String::new();
    for (i, (k, v)) in labels.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let v = v
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n");
        let _ = write!(s, "{k}=\"{v}\"");
    }
    s
}

fn known(name: &str) -> &'static str {
    METRICS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(n, _, _)| *n)
        .unwrap_or("retrograd_unknown")
}

impl Metrics {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock leaves plain numbers: keep them.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds `by` to a counter.
    pub fn add(&self, name: &str, labels: Labels<'_>, by: f64) {
        *self
            .lock()
            .scalars
            .entry((known(name), render_labels(labels)))
            .or_default() += by;
    }

    /// Sets a gauge.
    pub fn set(&self, name: &str, labels: Labels<'_>, value: f64) {
        self.lock()
            .scalars
            .insert((known(name), render_labels(labels)), value);
    }

    /// Records one observation in a histogram.
    pub fn observe(&self, name: &str, labels: Labels<'_>, value: f64) {
        let name = known(name);
        let bounds = buckets(name);
        let mut inner = self.lock();
        let h = inner
            .histograms
            .entry((name, render_labels(labels)))
            .or_insert_with(|| Histogram {
                counts: vec![0; bounds.len()],
                ..Histogram::default()
            });
        for (c, &b) in h.counts.iter_mut().zip(bounds) {
            if value <= b {
                *c += 1;
            }
        }
        h.sum += value;
        h.count += 1;
    }

    /// Everything in Prometheus' text format.
    pub fn render(&self) -> String {
        let inner = self.lock();
        let mut out = String::new();
        for &(name, kind, help) in METRICS {
            let kind_name = match kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind_name}");
            let braces = |labels: &str, extra: &str| -> String {
                match (labels.is_empty(), extra.is_empty()) {
                    (true, true) => String::new(),
                    (false, true) => format!("{{{labels}}}"),
                    (true, false) => format!("{{{extra}}}"),
                    (false, false) => format!("{{{labels},{extra}}}"),
                }
            };
            if kind == Kind::Histogram {
                for ((n, labels), h) in inner.histograms.iter() {
                    if *n != name {
                        continue;
                    }
                    for (&b, &c) in buckets(name).iter().zip(&h.counts) {
                        let le = format!("le=\"{b}\"");
                        let _ = writeln!(out, "{name}_bucket{} {c}", braces(labels, &le));
                    }
                    let inf = braces(labels, "le=\"+Inf\"");
                    let _ = writeln!(out, "{name}_bucket{inf} {}", h.count);
                    let _ = writeln!(out, "{name}_sum{} {}", braces(labels, ""), h.sum);
                    let _ = writeln!(out, "{name}_count{} {}", braces(labels, ""), h.count);
                }
            } else {
                for ((n, labels), v) in inner.scalars.iter() {
                    if *n == name {
                        let _ = writeln!(out, "{name}{} {v}", braces(labels, ""));
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_prometheus_text() {
        let m = Metrics::new();
        m.add(
            "retrograd_http_requests_total",
            &[("endpoint", "/health"), ("status", "200")],
            1.0,
        );
        m.set("retrograd_chat_active_sequences", &[], 3.0);
        m.observe("retrograd_chat_decode_batch_size", &[], 3.0);
        let text = m.render();
        assert!(
            text.contains("retrograd_http_requests_total{endpoint=\"/health\",status=\"200\"} 1")
        );
        assert!(text.contains("retrograd_chat_active_sequences 3"));
        assert!(text.contains("retrograd_chat_decode_batch_size_bucket{le=\"4\"} 1"));
        assert!(text.contains("retrograd_chat_decode_batch_size_bucket{le=\"2\"} 0"));
        assert!(text.contains("retrograd_chat_decode_batch_size_count 1"));
    }
}
