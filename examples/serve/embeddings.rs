//! The embedding batcher: one thread owns the sentence encoder and runs
//! the texts of whatever requests are waiting as one packed batch
//! ([`SentenceTransformer::embed_batch`]: the texts' real tokens one after
//! another, no padding), up to a token budget per batch. Under load,
//! concurrent single-text requests become batches as large as the budget
//! allows, so a server fed one text per request runs like `encode` fed
//! them all; alone, a request runs at once. A request's texts may span
//! batches when they exceed the budget; a request whose client went away
//! before its turn is skipped.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use retrograd::hub::{SentenceTransformer, Tokenizer};
use tokio::sync::oneshot;

use super::errors::ApiError;
use super::metrics::Metrics;
use super::queue::{BoundedQueue, Refused};

/// Settings of the batcher.
#[derive(Clone, Debug)]
pub struct EmbedConfig {
    /// Tokens per batch at most (a single longer request runs in parts).
    pub batch_tokens: usize,
    /// Requests waiting at most; more get 429.
    pub queue: usize,
    /// How long a batch that could still grow waits for more requests.
    pub batch_wait: Duration,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        EmbedConfig {
            batch_tokens: 8192,
            queue: 1024,
            batch_wait: Duration::from_millis(2),
        }
    }
}

/// One request's texts and where their embeddings go.
pub struct EmbedJob {
    pub texts: Vec<String>,
    /// Tokens of each text (special tokens included).
    pub tokens: Vec<usize>,
    pub reply: oneshot::Sender<Result<Vec<Vec<f32>>, String>>,
    pub accepted: Instant,
}

/// What the routes hold: the model's name and sizes, a tokenizer to count
/// (and refuse over-long) inputs, and the queue into the batcher.
pub struct Embedder {
    pub id: String,
    pub dim: usize,
    pub max_tokens: usize,
    counter: Tokenizer,
    queue: Arc<BoundedQueue<EmbedJob>>,
    metrics: Arc<Metrics>,
}

impl Embedder {
    /// Starts the batcher thread on `model`.
    pub fn start(
        model: SentenceTransformer,
        id: String,
        config: EmbedConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Embedder, JoinHandle<()>), String> {
        let counter = model
            .tokenizer()
            .clone()
            .with_truncation(None)
            .map_err(|e| e.to_string())?;
        let queue = Arc::new(BoundedQueue::new(config.queue));
        let embedder = Embedder {
            id,
            dim: model.dim(),
            max_tokens: model.max_seq_length(),
            counter,
            queue: queue.clone(),
            metrics: metrics.clone(),
        };
        metrics.set("retrograd_queue_depth", &[("queue", "embeddings")], 0.0);
        let handle = std::thread::Builder::new()
            .name("embed-batcher".into())
            .spawn(move || run(model, queue, config, metrics))
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        Ok((embedder, handle))
    }

    /// Tokens of `text` as the model sees it, before any truncation.
    pub fn count_tokens(&self, text: &str) -> Result<usize, ApiError> {
        self.counter
            .encode(text)
            .map(|ids| ids.len())
            .map_err(|e| ApiError::invalid(format!("cannot tokenize the input: {e}")))
    }

    /// Queues a job; 429 when the queue is full, 503 when stopping.
    pub fn submit(&self, job: EmbedJob) -> Result<(), ApiError> {
        match self.queue.push(job) {
            Ok(depth) => {
                self.metrics.set(
                    "retrograd_queue_depth",
                    &[("queue", "embeddings")],
                    depth as f64,
                );
                Ok(())
            }
            Err((_, Refused::Full)) => Err(ApiError::queue_full("embeddings", 1)),
            Err((_, Refused::Closed)) => Err(ApiError::unavailable("the server is stopping")),
        }
    }

    /// Lets the batcher finish what is queued and stop.
    pub fn close(&self) {
        self.queue.close();
    }
}

/// A job being embedded: its rows so far.
struct Pending {
    job: EmbedJob,
    rows: Vec<Vec<f32>>,
}

fn run(
    model: SentenceTransformer,
    queue: Arc<BoundedQueue<EmbedJob>>,
    config: EmbedConfig,
    metrics: Arc<Metrics>,
) {
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let take = |job: EmbedJob, pending: &mut VecDeque<Pending>| {
        metrics.observe(
            "retrograd_queue_wait_seconds",
            &[("queue", "embeddings")],
            job.accepted.elapsed().as_secs_f64(),
        );
        // A client that went away needs no answer.
        if !job.reply.is_closed() {
            let rows = Vec::with_capacity(job.texts.len());
            pending.push_back(Pending { job, rows });
        }
    };
    loop {
        if pending.is_empty() {
            match queue.pop_wait() {
                Some(job) => take(job, &mut pending),
                None => return,
            }
        }
        // Whatever else waits joins, up to the budget; a batch that could
        // grow waits a moment for requests on their way.
        let deadline = Instant::now() + config.batch_wait;
        loop {
            let queued: usize = pending
                .iter()
                .map(|p| p.job.tokens[p.rows.len()..].iter().sum::<usize>())
                .sum();
            if queued >= config.batch_tokens {
                break;
            }
            match queue.pop_until(deadline) {
                Some(job) => take(job, &mut pending),
                None => break,
            }
        }
        metrics.set(
            "retrograd_queue_depth",
            &[("queue", "embeddings")],
            queue.len() as f64,
        );
        // The batch: texts in arrival order, at least one, within budget.
        let (mut texts, mut owners, mut tokens) = (Vec::new(), Vec::new(), 0usize);
        'fill: for (j, p) in pending.iter().enumerate() {
            for t in p.rows.len()..p.job.texts.len() {
                let n = p.job.tokens[t];
                if !texts.is_empty() && tokens + n > config.batch_tokens {
                    break 'fill;
                }
                texts.push(p.job.texts[t].as_str());
                owners.push(j);
                tokens += n;
            }
        }
        if texts.is_empty() {
            pending.clear();
            continue;
        }
        metrics.observe("retrograd_embedding_batch_size", &[], texts.len() as f64);
        metrics.observe("retrograd_embedding_batch_tokens", &[], tokens as f64);
        let result = model.embed_batch(&texts).and_then(|e| e.to_vec::<f32>());
        let dim = model.dim();
        match result {
            Ok(values) => {
                for (row, &j) in values.chunks_exact(dim).zip(&owners) {
                    pending[j].rows.push(row.to_vec());
                }
                metrics.add("retrograd_embedding_tokens_total", &[], tokens as f64);
            }
            Err(e) => {
                let message = format!("the encoder failed: {e}");
                let last = owners.last().copied().unwrap_or(0);
                for p in pending.drain(..=last) {
                    let _ = p.job.reply.send(Err(message.clone()));
                }
                continue;
            }
        }
        while pending
            .front()
            .is_some_and(|p| p.rows.len() == p.job.texts.len())
        {
            let p = pending.pop_front().expect("a finished job");
            let _ = p.job.reply.send(Ok(p.rows));
        }
        // Drop jobs whose clients left while they waited.
        pending.retain(|p| !p.job.reply.is_closed());
    }
}
