//! The HTTP side: the router, each endpoint's checks, and the answers.
//! Every body is read as bytes under the size limit and parsed here, so
//! that whatever is wrong with it (not JSON, a wrong type, a missing
//! field, a value out of range, an unknown model, an empty or over-long
//! input) comes back as OpenAI's JSON error with a 4xx code naming the
//! parameter, never as a panic or a plain-text rejection.

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use futures_util::stream;
use retrograd::llm::{GenerateOptions, Message, Role, Sampling};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::chat::{Chat, ChatEvent, ChatJob};
use super::embeddings::{EmbedJob, Embedder};
use super::errors::ApiError;
use super::metrics::Metrics;
use super::openai::{
    AssistantMessage, ChatChunk, ChatCompletion, ChatRequest, Choice, ChunkChoice, Content, Delta,
    Embedding, EmbeddingList, EmbeddingRequest, EmbeddingUsage, Model, ModelList, Stop, Usage,
    Vector,
};

/// Limits on what one request may ask.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Bytes of a request body.
    pub max_body_bytes: usize,
    /// Texts in one embeddings request.
    pub max_inputs: usize,
    /// Tokens one chat request may generate (`max_tokens` above it is an
    /// error; without it, generation runs to this or the context's end).
    pub max_tokens: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 2 << 20,
            max_inputs: 2048,
            max_tokens: 4096,
        }
    }
}

/// Everything a handler reaches.
pub struct AppState {
    pub embed: Option<Embedder>,
    pub chat: Option<Chat>,
    pub metrics: Arc<Metrics>,
    pub limits: Limits,
    /// Unix seconds at start (the models' `created`).
    pub created: u64,
    next_id: AtomicU64,
}

impl AppState {
    pub fn new(
        embed: Option<Embedder>,
        chat: Option<Chat>,
        metrics: Arc<Metrics>,
        limits: Limits,
    ) -> Self {
        AppState {
            embed,
            chat,
            metrics,
            limits,
            created: unix_now(),
            next_id: AtomicU64::new(0),
        }
    }

    fn served(&self) -> Vec<String> {
        let mut ids = Vec::new();
        ids.extend(self.embed.as_ref().map(|e| e.id.clone()));
        ids.extend(self.chat.as_ref().map(|c| c.id.clone()));
        ids
    }

    fn completion_id(&self) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("chatcmpl-{:x}{n:06x}", self.created)
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The server's routes over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.limits.max_body_bytes;
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/models", get(models))
        .route("/v1/embeddings", post(embeddings))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(middleware::from_fn_with_state(state.clone(), count))
        .with_state(state)
}

/// Counts each answer by endpoint and status, and times it to its head.
async fn count(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    // Fuzzed paths must not become labels: unknown ones are one label.
    let endpoint = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    let m = &state.metrics;
    m.add(
        "retrograd_http_requests_total",
        &[("endpoint", &endpoint), ("status", &status)],
        1.0,
    );
    m.observe(
        "retrograd_request_duration_seconds",
        &[("endpoint", &endpoint)],
        started.elapsed().as_secs_f64(),
    );
    response
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::no_route(method.as_str(), uri.path())
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(method.as_str(), uri.path())
}

async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(serde_json::json!({
        "status": "ok",
        "embeddings": state.embed.as_ref().map(|e| e.id.clone()),
        "chat": state.chat.as_ref().map(|c| c.id.clone()),
    }))
}

async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        state.metrics.render(),
    )
        .into_response()
}

async fn models(State(state): State<Arc<AppState>>) -> Json<ModelList> {
    let data = state
        .served()
        .into_iter()
        .map(|id| Model {
            id,
            object: "model",
            created: state.created,
            owned_by: "retrograd",
        })
        .collect();
    Json(ModelList {
        object: "list",
        data,
    })
}

/// The body as `T`: 413 over the limit, 400 naming the parameter for a
/// value of the wrong type, 400 `invalid_json` for anything unparsable.
fn parse<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    limit: usize,
) -> Result<T, ApiError> {
    let bytes = body.map_err(|r| {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(limit)
        } else {
            ApiError::malformed(format!("cannot read the request body: {r}"))
        }
    })?;
    let mut de = serde_json::Deserializer::from_slice(&bytes);
    let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_data() && path != "." {
            ApiError::bad_param(&path, format!("invalid value for `{path}`: {inner}"))
        } else if inner.is_data() {
            ApiError::invalid(format!("invalid request body: {inner}"))
        } else {
            ApiError::malformed(format!("the request body is not valid JSON: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::malformed(format!("trailing data after the JSON body: {e}")))?;
    Ok(value)
}

/// The request's model, checked against the one that serves it.
fn check_model(state: &AppState, asked: &str, serving: Option<&str>) -> Result<(), ApiError> {
    match serving {
        Some(id) if id == asked => Ok(()),
        _ => Err(ApiError::unknown_model(asked, &state.served())),
    }
}

async fn embeddings(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: EmbeddingRequest = parse(body, state.limits.max_body_bytes)?;
    check_model(
        &state,
        &req.model,
        state.embed.as_ref().map(|e| e.id.as_str()),
    )?;
    let embed = state.embed.as_ref().expect("checked by check_model");
    let texts = input_texts(req.input, state.limits.max_inputs)?;
    let base64 = match req.encoding_format.as_deref() {
        None | Some("float") => false,
        Some("base64") => true,
        Some(other) => {
            return Err(ApiError::bad_param(
                "encoding_format",
                format!("encoding_format must be `float` or `base64`, got `{other}`"),
            ))
        }
    };
    if let Some(d) = req.dimensions
        && d as usize != embed.dim
    {
        return Err(ApiError::bad_param(
            "dimensions",
            format!(
                "this model's embeddings have {} dimensions, not {d}",
                embed.dim
            ),
        ));
    }
    let mut tokens = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        let n = embed.count_tokens(text)?;
        if n > embed.max_tokens {
            return Err(ApiError::too_long(
                "input",
                format!(
                    "input[{i}] has {n} tokens; this model takes at most {}",
                    embed.max_tokens
                ),
            ));
        }
        tokens.push(n);
    }
    let total: usize = tokens.iter().sum();
    let (reply, answer) = oneshot::channel();
    embed.submit(EmbedJob {
        texts,
        tokens,
        reply,
        accepted: Instant::now(),
    })?;
    let rows = answer
        .await
        .map_err(|_| ApiError::unavailable("the embedding worker stopped"))?
        .map_err(ApiError::internal)?;
    let data = rows
        .into_iter()
        .enumerate()
        .map(|(index, row)| Embedding {
            object: "embedding",
            index,
            embedding: if base64 {
                let bytes: Vec<u8> = row.iter().flat_map(|v| v.to_le_bytes()).collect();
                Vector::Base64(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                Vector::Float(row)
            },
        })
        .collect();
    Ok(Json(EmbeddingList {
        object: "list",
        data,
        model: embed.id.clone(),
        usage: EmbeddingUsage {
            prompt_tokens: total,
            total_tokens: total,
        },
    })
    .into_response())
}

/// `input` as texts: a string or a non-empty list of non-empty strings.
fn input_texts(input: Value, max_inputs: usize) -> Result<Vec<String>, ApiError> {
    let bad = |m: String| ApiError::bad_param("input", m);
    let texts = match input {
        Value::String(s) => vec![s],
        Value::Array(items) => {
            if items.is_empty() {
                return Err(bad("input is an empty list".into()));
            }
            if items.len() > max_inputs {
                return Err(bad(format!(
                    "input has {} texts; at most {max_inputs} per request",
                    items.len()
                )));
            }
            items
                .into_iter()
                .enumerate()
                .map(|(i, v)| match v {
                    Value::String(s) => Ok(s),
                    Value::Number(_) | Value::Array(_) => Err(bad(
                        "token arrays are not supported as input: send the texts".into(),
                    )),
                    other => Err(bad(format!("input[{i}] must be a string, got {other}"))),
                })
                .collect::<Result<Vec<_>, _>>()?
        }
        other => {
            return Err(bad(format!(
                "input must be a string or a list of strings, got {other}"
            )))
        }
    };
    if let Some(i) = texts.iter().position(|t| t.is_empty()) {
        return Err(bad(format!("input[{i}] is empty")));
    }
    Ok(texts)
}

/// The checked generation settings and messages of a chat request.
fn chat_options(
    req: &ChatRequest,
    chat: &Chat,
    limits: &Limits,
) -> Result<(Vec<Message>, GenerateOptions), ApiError> {
    if let Some(n) = req.n
        && n != 1
    {
        return Err(ApiError::bad_param("n", format!("n must be 1, got {n}")));
    }
    if req.tools.as_ref().is_some_and(|t| !t.is_null()) {
        return Err(ApiError::bad_param("tools", "tools are not supported"));
    }
    if req.logprobs == Some(true) {
        return Err(ApiError::bad_param(
            "logprobs",
            "logprobs are not supported",
        ));
    }
    for (name, v) in [
        ("frequency_penalty", req.frequency_penalty),
        ("presence_penalty", req.presence_penalty),
    ] {
        if v.is_some_and(|v| v != 0.0) {
            return Err(ApiError::bad_param(
                name,
                format!("{name} is not supported (only 0)"),
            ));
        }
    }
    if req.messages.is_empty() {
        return Err(ApiError::bad_param("messages", "messages is an empty list"));
    }
    let mut messages = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].role"),
                    format!("role `{other}` is not supported (system, developer, user, assistant)"),
                ))
            }
        };
        let text = match &m.content {
            Some(Content::Text(t)) => t.clone(),
            Some(Content::Parts(parts)) => {
                let mut text = String::new();
                for p in parts {
                    match (p.kind.as_str(), &p.text) {
                        ("text", Some(t)) => text.push_str(t),
                        (kind, _) => {
                            return Err(ApiError::bad_param(
                                &format!("messages[{i}].content"),
                                format!(
                                    "content parts of type `{kind}` are not supported (text only)"
                                ),
                            ))
                        }
                    }
                }
                text
            }
            None => {
                return Err(ApiError::bad_param(
                    &format!("messages[{i}].content"),
                    "each message needs a content",
                ))
            }
        };
        messages.push(Message::new(role, text));
    }
    let mut sampling = Sampling::default();
    if let Some(t) = req.temperature {
        if !(0.0..=2.0).contains(&t) {
            return Err(ApiError::bad_param(
                "temperature",
                format!("temperature must be in [0, 2], got {t}"),
            ));
        }
        sampling.temperature = t as f32;
    }
    if let Some(p) = req.top_p {
        if !(p > 0.0 && p <= 1.0) {
            return Err(ApiError::bad_param(
                "top_p",
                format!("top_p must be in (0, 1], got {p}"),
            ));
        }
        sampling.top_p = p as f32;
    }
    sampling.seed = match req.seed {
        Some(s) => s as u64,
        None => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    };
    let max_tokens = match req.max_completion_tokens.or(req.max_tokens) {
        Some(0) => {
            return Err(ApiError::bad_param(
                "max_tokens",
                "max_tokens must be at least 1",
            ))
        }
        Some(n) if n as usize > limits.max_tokens => {
            return Err(ApiError::bad_param(
                "max_tokens",
                format!(
                    "max_tokens is {n}; this server allows at most {}",
                    limits.max_tokens
                ),
            ))
        }
        Some(n) => n as usize,
        None => limits.max_tokens.min(chat.context),
    };
    let stop = match &req.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > 4 || stop.iter().any(String::is_empty) {
        return Err(ApiError::bad_param(
            "stop",
            "stop takes at most 4 non-empty strings",
        ));
    }
    Ok((
        messages,
        GenerateOptions {
            max_tokens,
            sampling,
            stop,
        },
    ))
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let req: ChatRequest = parse(body, state.limits.max_body_bytes)?;
    check_model(
        &state,
        &req.model,
        state.chat.as_ref().map(|c| c.id.as_str()),
    )?;
    let chat = state.chat.as_ref().expect("checked by check_model");
    let (messages, options) = chat_options(&req, chat, &state.limits)?;
    let rendered = chat.model.render(&messages).map_err(|e| {
        ApiError::bad_param(
            "messages",
            format!("the chat template refused the messages: {e}"),
        )
    })?;
    let prompt = chat
        .model
        .encode(&rendered)
        .map_err(|e| ApiError::internal(format!("cannot tokenize the prompt: {e}")))?;
    if prompt.len() >= chat.context {
        return Err(ApiError::too_long(
            "messages",
            format!(
                "the messages make a prompt of {} tokens; this model's context holds {}",
                prompt.len(),
                chat.context
            ),
        ));
    }
    let prompt_tokens = prompt.len();
    let (events, mut heard) = mpsc::unbounded_channel();
    chat.submit(ChatJob {
        prompt,
        options,
        events,
        accepted: Instant::now(),
    })?;
    state
        .metrics
        .add("retrograd_prompt_tokens_total", &[], prompt_tokens as f64);
    let id = state.completion_id();
    let created = unix_now();
    let model = chat.id.clone();
    if req.stream == Some(true) {
        let usage = req
            .stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false);
        return Ok(sse(heard, id, created, model, usage));
    }
    let mut content = String::new();
    while let Some(event) = heard.recv().await {
        match event {
            ChatEvent::Text(t) => content.push_str(&t),
            ChatEvent::Done {
                finish_reason,
                prompt_tokens,
                completion_tokens,
            } => {
                return Ok(Json(ChatCompletion {
                    id,
                    object: "chat.completion",
                    created,
                    model,
                    choices: vec![Choice {
                        index: 0,
                        message: AssistantMessage {
                            role: "assistant",
                            content,
                        },
                        finish_reason,
                        logprobs: None,
                    }],
                    usage: Usage::new(prompt_tokens, completion_tokens),
                })
                .into_response())
            }
            ChatEvent::Failed(m) => return Err(ApiError::internal(m)),
        }
    }
    Err(ApiError::unavailable("the chat worker stopped"))
}

/// One server-sent event.
fn event(json: &impl serde::Serialize) -> Bytes {
    let body = serde_json::to_string(json).unwrap_or_else(|_| "{}".into());
    Bytes::from(format!("data: {body}\n\n"))
}

/// The streamed answer: a first chunk with the role, one chunk per piece
/// of text, a last chunk with the finish reason (and, when asked, one
/// with the usage), then `data: [DONE]`. Dropping it (the client went
/// away) drops the receiver, which the scheduler sees before its next step.
fn sse(
    heard: mpsc::UnboundedReceiver<ChatEvent>,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
) -> Response {
    let chunk =
        move |delta: Delta, finish: Option<&'static str>, usage: Option<Usage>, last: bool| {
            let choices = if last && usage.is_some() {
                Vec::new()
            } else {
                vec![ChunkChoice {
                    index: 0,
                    delta,
                    finish_reason: finish,
                    logprobs: None,
                }]
            };
            ChatChunk {
                id: id.clone(),
                object: "chat.completion.chunk",
                created,
                model: model.clone(),
                choices,
                usage: include_usage.then_some(usage),
            }
        };
    enum Phase {
        Start,
        Body,
        End,
    }
    let body = stream::unfold(
        (heard, Phase::Start, chunk),
        move |(mut heard, phase, chunk)| async move {
            match phase {
                Phase::Start => {
                    let first = chunk(
                        Delta {
                            role: Some("assistant"),
                            content: Some(String::new()),
                        },
                        None,
                        None,
                        false,
                    );
                    Some((
                        Ok::<_, Infallible>(event(&first)),
                        (heard, Phase::Body, chunk),
                    ))
                }
                Phase::Body => match heard.recv().await {
                    Some(ChatEvent::Text(t)) => {
                        let c = chunk(
                            Delta {
                                role: None,
                                content: Some(t),
                            },
                            None,
                            None,
                            false,
                        );
                        Some((Ok(event(&c)), (heard, Phase::Body, chunk)))
                    }
                    Some(ChatEvent::Done {
                        finish_reason,
                        prompt_tokens,
                        completion_tokens,
                    }) => {
                        let mut out =
                            event(&chunk(Delta::default(), Some(finish_reason), None, false))
                                .to_vec();
                        if include_usage {
                            let usage = Usage::new(prompt_tokens, completion_tokens);
                            out.extend_from_slice(&event(&chunk(
                                Delta::default(),
                                None,
                                Some(usage),
                                true,
                            )));
                        }
                        out.extend_from_slice(b"data: [DONE]\n\n");
                        Some((Ok(Bytes::from(out)), (heard, Phase::End, chunk)))
                    }
                    Some(ChatEvent::Failed(m)) => {
                        let e = ApiError::internal(m);
                        let out = format!("data: {}\n\ndata: [DONE]\n\n", e.body());
                        Some((Ok(Bytes::from(out)), (heard, Phase::End, chunk)))
                    }
                    None => None,
                },
                Phase::End => None,
            }
        },
    );
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|_| ApiError::internal("cannot build the stream").into_response())
}
