//! The chat scheduler: continuous batching. One thread owns the model and
//! loops: admit waiting requests into free slots (each runs its prompt
//! through its own key/value cache and draws its first token), then run
//! one decode step for every active sequence together
//! ([`Llama::try_forward_decode_batch`]: the weight products once for all
//! rows, attention per sequence), then hand each sequence its token. A
//! sequence leaves at an end-of-turn token, a stop string, its
//! `max_tokens` or a full context, and at once when its client has gone
//! (the receiving end of its channel was dropped): its slot is free for
//! the next step. Each sequence draws, streams and ends exactly as
//! [`ChatModel::generate`] would alone ([`Decoding`]), and a quantized
//! model's batched logits equal its single-sequence ones, so a greedy
//! answer does not depend on what else ran beside it.
//!
//! [`Llama::try_forward_decode_batch`]: retrograd::nn::Llama::try_forward_decode_batch

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use retrograd::llm::{ChatModel, Decoding, FinishReason, GenerateOptions};
use retrograd::nn::LlamaCache;
use retrograd::Graph;
use tokio::sync::mpsc::UnboundedSender;

use super::errors::ApiError;
use super::metrics::Metrics;
use super::queue::{BoundedQueue, Refused};

/// Settings of the scheduler.
#[derive(Clone, Debug)]
pub struct ChatConfig {
    /// Sequences decoded together at most.
    pub slots: usize,
    /// Requests waiting for a slot at most; more get 429.
    pub queue: usize,
}

impl Default for ChatConfig {
    fn default() -> Self {
        ChatConfig {
            slots: 8,
            queue: 64,
        }
    }
}

/// What a request hears from the scheduler.
#[derive(Clone, Debug, PartialEq)]
pub enum ChatEvent {
    /// Text that became final.
    Text(String),
    /// The end: why, and the token counts.
    Done {
        finish_reason: &'static str,
        prompt_tokens: usize,
        completion_tokens: usize,
    },
    /// The model failed on this request.
    Failed(String),
}

/// One accepted request.
pub struct ChatJob {
    pub prompt: Vec<u32>,
    pub options: GenerateOptions,
    pub events: UnboundedSender<ChatEvent>,
    pub accepted: Instant,
}

/// What the routes hold: the model (to render and tokenize prompts), its
/// name and context, and the queue into the scheduler.
pub struct Chat {
    pub id: String,
    pub model: Arc<ChatModel>,
    pub context: usize,
    pub slots: usize,
    queue: Arc<BoundedQueue<ChatJob>>,
    metrics: Arc<Metrics>,
}

impl Chat {
    /// Starts the scheduler thread on `model`.
    pub fn start(
        model: Arc<ChatModel>,
        id: String,
        config: ChatConfig,
        metrics: Arc<Metrics>,
    ) -> Result<(Chat, JoinHandle<()>), String> {
        let queue = Arc::new(BoundedQueue::new(config.queue));
        let slots = config.slots.max(1);
        let chat = Chat {
            id,
            context: model.model().config().max_position_embeddings,
            model: model.clone(),
            slots,
            queue: queue.clone(),
            metrics: metrics.clone(),
        };
        metrics.set("retrograd_chat_slots", &[], slots as f64);
        metrics.set("retrograd_chat_active_sequences", &[], 0.0);
        metrics.set("retrograd_queue_depth", &[("queue", "chat")], 0.0);
        let handle = std::thread::Builder::new()
            .name("chat-scheduler".into())
            .spawn(move || Scheduler::new(model, queue, slots, metrics).run())
            .map_err(|e| format!("cannot start a worker thread: {e}"))?;
        Ok((chat, handle))
    }

    /// Queues a request; 429 when the queue is full, 503 when stopping.
    pub fn submit(&self, job: ChatJob) -> Result<(), ApiError> {
        match self.queue.push(job) {
            Ok(depth) => {
                self.metrics
                    .set("retrograd_queue_depth", &[("queue", "chat")], depth as f64);
                Ok(())
            }
            Err((_, Refused::Full)) => Err(ApiError::queue_full("chat", 1)),
            Err((_, Refused::Closed)) => Err(ApiError::unavailable("the server is stopping")),
        }
    }

    /// Lets the scheduler finish what is queued and active, and stop.
    pub fn close(&self) {
        self.queue.close();
    }
}

/// A sequence in a slot.
struct Active {
    job: ChatJob,
    cache: LlamaCache,
    /// Prompt and generated tokens the cache holds or is about to.
    history: Vec<u32>,
    decoding: Decoding,
    /// The token the next step runs.
    next: u32,
}

struct Scheduler {
    /// Sequences in slots, published to the gauge as soon as one enters
    /// or leaves (before its last event goes out, so a client that has
    /// its answer sees its slot free).
    live: std::cell::Cell<usize>,
    model: Arc<ChatModel>,
    queue: Arc<BoundedQueue<ChatJob>>,
    slots: usize,
    metrics: Arc<Metrics>,
    active: Vec<Active>,
    context: usize,
}

impl Scheduler {
    fn new(
        model: Arc<ChatModel>,
        queue: Arc<BoundedQueue<ChatJob>>,
        slots: usize,
        metrics: Arc<Metrics>,
    ) -> Self {
        let context = model.model().config().max_position_embeddings;
        Scheduler {
            live: std::cell::Cell::new(0),
            model,
            queue,
            slots,
            metrics,
            active: Vec::new(),
            context,
        }
    }

    fn run(mut self) {
        loop {
            // Admit into free slots; with nothing to decode, wait for work.
            while self.active.len() < self.slots {
                let job = if self.active.is_empty() {
                    match self.queue.pop_wait() {
                        Some(job) => job,
                        None => return,
                    }
                } else {
                    match self.queue.try_pop() {
                        Some(job) => job,
                        None => break,
                    }
                };
                self.metrics.set(
                    "retrograd_queue_depth",
                    &[("queue", "chat")],
                    self.queue.len() as f64,
                );
                self.admit(job);
            }
            self.drop_departed();
            if !self.active.is_empty() {
                self.step();
            }
        }
    }

    /// `entered` sequences took slots and `left` gave theirs back.
    fn occupy(&self, entered: usize, left: usize) {
        self.live.set(self.live.get() + entered - left);
        self.metrics.set(
            "retrograd_chat_active_sequences",
            &[],
            self.live.get() as f64,
        );
    }

    /// Runs a new request's prompt and draws its first token.
    fn admit(&mut self, job: ChatJob) {
        self.metrics.observe(
            "retrograd_queue_wait_seconds",
            &[("queue", "chat")],
            job.accepted.elapsed().as_secs_f64(),
        );
        if job.events.is_closed() {
            self.metrics.add("retrograd_chat_cancelled_total", &[], 1.0);
            return;
        }
        let decoding = match Decoding::new(&job.options) {
            Ok(d) => d,
            Err(e) => {
                let _ = job.events.send(ChatEvent::Failed(e.to_string()));
                return;
            }
        };
        let mut cache = LlamaCache::new();
        let ids: Vec<usize> = job.prompt.iter().map(|&i| i as usize).collect();
        let graph = Graph::new();
        let logits = self
            .model
            .model()
            .forward_cached(&graph, &ids, &mut cache, true)
            .and_then(|l| l.value().to_vec::<f32>());
        drop(graph);
        match logits {
            Ok(logits) => {
                let mut seq = Active {
                    history: job.prompt.clone(),
                    job,
                    cache,
                    decoding,
                    next: 0,
                };
                self.occupy(1, 0);
                if self.advance(&mut seq, &logits) {
                    self.active.push(seq);
                }
            }
            Err(e) => {
                let _ = job
                    .events
                    .send(ChatEvent::Failed(format!("the prompt failed: {e}")));
            }
        }
    }

    /// Drops the sequences whose clients went away.
    fn drop_departed(&mut self) {
        let before = self.active.len();
        self.active.retain(|s| !s.job.events.is_closed());
        let gone = before - self.active.len();
        if gone > 0 {
            self.occupy(0, gone);
            self.metrics
                .add("retrograd_chat_cancelled_total", &[], gone as f64);
        }
    }

    /// One decode step for every active sequence.
    fn step(&mut self) {
        let started = Instant::now();
        let tokens: Vec<usize> = self.active.iter().map(|s| s.next as usize).collect();
        let graph = Graph::new();
        let logits = {
            let mut caches: Vec<&mut LlamaCache> =
                self.active.iter_mut().map(|s| &mut s.cache).collect();
            self.model
                .model()
                .try_forward_decode_batch(&graph, &tokens, &mut caches)
                .and_then(|l| l.value().to_vec::<f32>())
        };
        drop(graph);
        let n = self.active.len();
        self.metrics
            .observe("retrograd_chat_decode_batch_size", &[], n as f64);
        self.metrics.observe(
            "retrograd_decode_step_seconds",
            &[],
            started.elapsed().as_secs_f64(),
        );
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                self.occupy(0, n);
                for s in self.active.drain(..) {
                    let _ = s
                        .job
                        .events
                        .send(ChatEvent::Failed(format!("a decode step failed: {e}")));
                }
                return;
            }
        };
        let vocab = logits.len() / n;
        let active = std::mem::take(&mut self.active);
        for (i, mut seq) in active.into_iter().enumerate() {
            if self.advance(&mut seq, &logits[i * vocab..(i + 1) * vocab]) {
                self.active.push(seq);
            }
        }
    }

    /// Hands a sequence the logits of its last position: draws a token,
    /// sends its text, and says whether the sequence goes on (the token
    /// then runs in the next step), as [`ChatModel::generate`]'s loop does.
    fn advance(&self, seq: &mut Active, logits: &[f32]) -> bool {
        let first = seq.decoding.ids().is_empty();
        if !seq.decoding.can_continue(seq.history.len(), self.context) {
            self.finish(seq, FinishReason::Length);
            return false;
        }
        let token = match seq.decoding.next(&self.model, logits, &seq.history) {
            Ok(t) => t,
            Err(e) => {
                self.occupy(0, 1);
                let _ = seq.job.events.send(ChatEvent::Failed(e.to_string()));
                return false;
            }
        };
        if first {
            self.metrics.observe(
                "retrograd_time_to_first_token_seconds",
                &[],
                seq.job.accepted.elapsed().as_secs_f64(),
            );
        }
        if !token.text.is_empty() && seq.job.events.send(ChatEvent::Text(token.text)).is_err() {
            self.occupy(0, 1);
            self.metrics.add("retrograd_chat_cancelled_total", &[], 1.0);
            return false;
        }
        if let Some(reason) = token.finished {
            self.finish(seq, reason);
            return false;
        }
        seq.history.push(token.id);
        seq.next = token.id;
        true
    }

    fn finish(&self, seq: &mut Active, reason: FinishReason) {
        self.occupy(0, 1);
        let rest = seq.decoding.finish(&self.model, reason).unwrap_or_default();
        if !rest.is_empty() {
            let _ = seq.job.events.send(ChatEvent::Text(rest));
        }
        let completion = seq.decoding.ids().len();
        self.metrics
            .add("retrograd_completion_tokens_total", &[], completion as f64);
        let _ = seq.job.events.send(ChatEvent::Done {
            finish_reason: reason.as_str(),
            prompt_tokens: seq.job.prompt.len(),
            completion_tokens: completion,
        });
    }
}
