//! The OpenAI-compatible server of `examples/serve/` (its modules compiled
//! in here), run in-process on a loopback port and spoken to over raw
//! HTTP/1.1: OpenAI-shaped 4xx errors for every bad request, 1,000
//! malformed requests (a seeded corpus of bodies, paths, methods and
//! headers) answered with 4xx and the server still healthy, embeddings
//! equal to sentence-transformers' (the committed fixture), 429 with
//! `Retry-After` from a full queue and nothing else failing, and a
//! graceful stop that finishes what is in flight.
//!
//! Chat generation needs optimised matrix products (a debug build's
//! forward of SmolLM2 takes seconds per token), so the chat cases (greedy
//! answers batched equal to alone, 16 concurrent streams, a queue of 4
//! with 20 clients, clients killed mid-stream leaving no slot taken) print
//! a skip line in a debug build; `.ci/run` runs them in release
//! (tests/release_checks.rs). Without the models every case prints a
//! skip line (scripts/fetch_minilm.sh, scripts/fetch_smollm2.sh).

#![cfg(feature = "chat")]

#[path = "../examples/serve/chat.rs"]
#[allow(dead_code)]
mod chat;
#[path = "../examples/serve/embeddings.rs"]
#[allow(dead_code)]
mod embeddings;
#[path = "../examples/serve/errors.rs"]
#[allow(dead_code)]
mod errors;
#[path = "../examples/serve/metrics.rs"]
#[allow(dead_code)]
mod metrics;
#[path = "../examples/serve/openai.rs"]
#[allow(dead_code)]
mod openai;
#[path = "../examples/serve/queue.rs"]
#[allow(dead_code)]
mod queue;
#[path = "../examples/serve/routes.rs"]
#[allow(dead_code)]
mod routes;
#[path = "../examples/serve/server.rs"]
#[allow(dead_code)]
mod server;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::hub::{WeightPrecision, Weights};
use retrograd::llm::{ChatModel, GenerateOptions, Message, Role, Sampling};
use retrograd::DType;
use serde_json::{json, Value};

use chat::ChatConfig;
use embeddings::EmbedConfig;
use routes::Limits;
use server::{ServeConfig, Server};

const EMBED_ID: &str = "all-MiniLM-L6-v2";
const CHAT_ID: &str = "SmolLM2-135M-Instruct.Q4_1";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The two model paths, or `None` after one skip line naming what is
/// missing.
fn models(test: &str) -> Option<(PathBuf, PathBuf)> {
    let embed = root().join(".cache/models/all-MiniLM-L6-v2");
    let chat = root().join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !embed.join("model.safetensors").is_file() {
        println!(
            "skip: {test}: {} is missing; run scripts/fetch_minilm.sh",
            embed.display()
        );
        return None;
    }
    if !chat.is_file() {
        println!(
            "skip: {test}: {} is missing; run scripts/fetch_smollm2.sh",
            chat.display()
        );
        return None;
    }
    Some((embed, chat))
}

/// The models, in a release build only (see the module docs).
fn models_in_release(test: &str) -> Option<(PathBuf, PathBuf)> {
    if cfg!(debug_assertions) {
        println!("skip: {test}: chat generation runs in a release build (cargo test --release --test serve)");
        return None;
    }
    models(test)
}

/// A server running in-process on a loopback port.
struct Running {
    addr: SocketAddr,
    runtime: tokio::runtime::Runtime,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    served: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
}

fn start(config: ServeConfig) -> Running {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let server = Server::start(&config).unwrap();
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = {
        let _inside = runtime.enter();
        let listener = tokio::net::TcpListener::from_std(listener).unwrap();
        runtime.spawn(server.run(listener, async {
            let _ = stopped.await;
        }))
    };
    Running {
        addr,
        runtime,
        stop: Some(stop),
        served: Some(served),
    }
}

impl Running {
    /// Stops as SIGTERM does and waits for the drain; the server's result.
    fn shutdown(&mut self) -> std::io::Result<()> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.served.take() {
            Some(h) => self.runtime.block_on(h).unwrap(),
            None => Ok(()),
        }
    }

    /// A gauge or counter from `/metrics` (0 when absent).
    fn metric(&self, line_start: &str) -> f64 {
        let text = String::from_utf8(get(self.addr, "/metrics").body).unwrap();
        text.lines()
            .find_map(|l| {
                l.strip_prefix(line_start)
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0.0)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

fn config(embed: &Path, chat: &Path) -> ServeConfig {
    ServeConfig {
        embed: Some(embed.to_path_buf()),
        chat: Some(chat.to_path_buf()),
        embed_config: EmbedConfig::default(),
        chat_config: ChatConfig::default(),
        limits: Limits::default(),
    }
}

/// An HTTP answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// Reads a status line and headers.
fn read_head(reader: &mut impl BufRead) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    Ok((status, headers))
}

/// One chunk of a chunked body; `None` at its end.
fn read_chunk(reader: &mut impl BufRead) -> std::io::Result<Option<Vec<u8>>> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let size = usize::from_str_radix(line.trim(), 16)
        .map_err(|_| std::io::Error::other(format!("bad chunk size {line:?}")))?;
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data)?;
    data.truncate(size);
    Ok((size > 0).then_some(data))
}

/// Sends raw bytes (a whole request that asks to close) and reads the answer.
fn send_raw(addr: SocketAddr, request: &[u8]) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(600)))?;
    stream.write_all(request)?;
    let mut reader = BufReader::new(stream);
    let (status, headers) = read_head(&mut reader)?;
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    let mut body = Vec::new();
    if chunked {
        while let Some(c) = read_chunk(&mut reader)? {
            body.extend(c);
        }
    } else {
        reader.read_to_end(&mut body)?;
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Reply {
    let mut r = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    send_raw(addr, &r).unwrap()
}

fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path, b"")
}

fn post(addr: SocketAddr, path: &str, body: &Value) -> Reply {
    request(addr, "POST", path, body.to_string().as_bytes())
}

/// An OpenAI error body with `status`; returns it.
fn assert_error(reply: &Reply, status: u16, param: Option<&str>, code: Option<&str>) -> Value {
    assert_eq!(
        reply.status,
        status,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let body = reply.json();
    let e = &body["error"];
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    assert!(e["type"].is_string(), "{body}");
    assert!(
        e.get("param").is_some() && e.get("code").is_some(),
        "{body}"
    );
    if let Some(p) = param {
        assert_eq!(e["param"], p, "{body}");
    }
    if let Some(c) = code {
        assert_eq!(e["code"], c, "{body}");
    }
    body
}

/// The fixture's texts and sentence-transformers' one-at-a-time
/// embeddings, for texts the model takes whole (under 256 tokens, not
/// empty).
fn fixture() -> Vec<(String, Vec<f32>)> {
    let tokens: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/reference/minilm_tokens.json")).unwrap(),
    )
    .unwrap();
    let texts: Vec<String> = serde_json::from_value(tokens["texts"].clone()).unwrap();
    let ids: Vec<Vec<u32>> = serde_json::from_value(tokens["ids"].clone()).unwrap();
    let rows = Weights::open(root().join("tests/reference/minilm_embeddings.safetensors"))
        .unwrap()
        .tensor("batch1", DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    texts
        .into_iter()
        .zip(ids)
        .zip(rows.chunks(384))
        .filter(|((t, ids), _)| !t.is_empty() && ids.len() < 256)
        .map(|((t, _), row)| (t, row.to_vec()))
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

#[test]
fn bad_requests_get_openai_errors() {
    let Some((embed, chat)) = models("bad_requests_get_openai_errors") else {
        return;
    };
    let mut c = config(&embed, &chat);
    c.limits = Limits {
        max_body_bytes: 64 << 10,
        max_inputs: 8,
        max_tokens: 64,
    };
    let s = start(c);
    let a = s.addr;
    assert_error(&get(a, "/nope"), 404, None, Some("unknown_url"));
    assert_error(&get(a, "/v1/embeddings"), 405, None, None);
    assert_error(
        &request(a, "POST", "/v1/embeddings", b"{bad"),
        400,
        None,
        Some("invalid_json"),
    );
    assert_error(
        &request(a, "POST", "/v1/chat/completions", b""),
        400,
        None,
        Some("invalid_json"),
    );
    let big = vec![b'x'; 70 << 10];
    assert_error(&request(a, "POST", "/v1/embeddings", &big), 413, None, None);
    let e = |body: Value| post(a, "/v1/embeddings", &body);
    let m = EMBED_ID;
    assert_error(
        &e(json!({"model": "gpt-4", "input": "a"})),
        404,
        Some("model"),
        Some("model_not_found"),
    );
    assert_error(
        &e(json!({"model": CHAT_ID, "input": "a"})),
        404,
        Some("model"),
        Some("model_not_found"),
    );
    assert_error(&e(json!({"input": "a"})), 400, None, None);
    assert_error(&e(json!({"model": m})), 400, None, None);
    assert_error(
        &e(json!({"model": m, "input": ""})),
        400,
        Some("input"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": []})),
        400,
        Some("input"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": ["a", ""]})),
        400,
        Some("input"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": [1, 2, 3]})),
        400,
        Some("input"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": 5})),
        400,
        Some("input"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": vec!["a"; 9]})),
        400,
        Some("input"),
        None,
    );
    let long = "word ".repeat(300);
    assert_error(
        &e(json!({"model": m, "input": long})),
        400,
        Some("input"),
        Some("context_length_exceeded"),
    );
    assert_error(
        &e(json!({"model": m, "input": "a", "encoding_format": "hex"})),
        400,
        Some("encoding_format"),
        None,
    );
    assert_error(
        &e(json!({"model": m, "input": "a", "dimensions": 10})),
        400,
        Some("dimensions"),
        None,
    );
    assert_error(
        &e(json!({"model": 7, "input": "a"})),
        400,
        Some("model"),
        None,
    );
    let c = |extra: Value| {
        let mut body = json!({"model": CHAT_ID, "messages": [{"role": "user", "content": "Hi"}]});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        post(a, "/v1/chat/completions", &body)
    };
    assert_error(
        &c(json!({"model": "gpt-4"})),
        404,
        Some("model"),
        Some("model_not_found"),
    );
    assert_error(&c(json!({"messages": []})), 400, Some("messages"), None);
    assert_error(&c(json!({"messages": "Hi"})), 400, Some("messages"), None);
    assert_error(
        &c(json!({"messages": [{"role": "tool", "content": "x"}]})),
        400,
        Some("messages[0].role"),
        None,
    );
    assert_error(
        &c(json!({"messages": [{"role": "user"}]})),
        400,
        Some("messages[0].content"),
        None,
    );
    assert_error(
        &c(json!({"messages": [{"role": "user", "content": 1}]})),
        400,
        Some("messages[0].content"),
        None,
    );
    assert_error(
        &c(json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})),
        400,
        Some("messages[0].content"),
        None,
    );
    assert_error(
        &c(json!({"temperature": 3})),
        400,
        Some("temperature"),
        None,
    );
    assert_error(
        &c(json!({"temperature": "hot"})),
        400,
        Some("temperature"),
        None,
    );
    assert_error(&c(json!({"top_p": 0})), 400, Some("top_p"), None);
    assert_error(&c(json!({"max_tokens": 0})), 400, Some("max_tokens"), None);
    assert_error(&c(json!({"max_tokens": 65})), 400, Some("max_tokens"), None);
    assert_error(&c(json!({"max_tokens": -1})), 400, Some("max_tokens"), None);
    assert_error(&c(json!({"n": 2})), 400, Some("n"), None);
    assert_error(
        &c(json!({"stop": ["a", "b", "c", "d", "e"]})),
        400,
        Some("stop"),
        None,
    );
    assert_error(&c(json!({"stop": [""]})), 400, Some("stop"), None);
    assert_error(&c(json!({"stream": "yes"})), 400, Some("stream"), None);
    assert_error(&c(json!({"logprobs": true})), 400, Some("logprobs"), None);
    assert_error(
        &c(json!({"tools": [{"type": "function"}]})),
        400,
        Some("tools"),
        None,
    );
    assert_error(
        &c(json!({"frequency_penalty": 1.0})),
        400,
        Some("frequency_penalty"),
        None,
    );
    let huge = "hi ".repeat(9000);
    assert_error(
        &c(json!({"messages": [{"role": "user", "content": huge}]})),
        400,
        Some("messages"),
        Some("context_length_exceeded"),
    );
    // Nothing above reached a model; the server is well.
    assert_eq!(get(a, "/health").status, 200);
    let models = get(a, "/v1/models").json();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [EMBED_ID, CHAT_ID]);
    let metrics = String::from_utf8(get(a, "/metrics").body).unwrap();
    assert!(metrics.contains("# TYPE retrograd_http_requests_total counter"));
    assert!(metrics.contains(
        "retrograd_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"}"
    ));
    assert!(
        metrics.contains("retrograd_http_requests_total{endpoint=\"unmatched\",status=\"404\"} 1")
    );
}

/// A seeded corpus of malformed requests: bodies (truncated, with junk
/// after them, wrong types, deep nesting, invalid UTF-8, random bytes),
/// paths, methods and header blocks. None of them is a request a model
/// would run.
fn corpus(n: usize) -> Vec<Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(54);
    let valid = [
        json!({"model": EMBED_ID, "input": ["To be, or not to be", "that is the question"]})
            .to_string(),
        json!({"model": CHAT_ID, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4})
            .to_string(),
    ];
    let wrong_types = [
        r#"{"model": 1, "input": "a"}"#,
        r#"{"model": "all-MiniLM-L6-v2", "input": {"a": 1}}"#,
        r#"{"model": "all-MiniLM-L6-v2", "input": [null]}"#,
        r#"{"model": "all-MiniLM-L6-v2", "input": true}"#,
        r#"{"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": 5, "content": "x"}]}"#,
        r#"{"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5}"#,
        r#"{"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": "x"}], "seed": "s"}"#,
        r#"{"model": "SmolLM2-135M-Instruct.Q4_1", "messages": [{"role": "user", "content": "x"}], "stop": 3}"#,
        r#"[]"#,
        r#"null"#,
        r#""just a string""#,
        r#"{"model": "all-MiniLM-L6-v2", "input": "a", "input": 3}"#,
    ];
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (method, mut path, mut body): (&str, String, Vec<u8>) = match i % 10 {
            // Truncated before the end: never whole JSON.
            0 | 1 => {
                let v = valid[i % 2].as_bytes();
                let cut = rng.random_range(0..v.len() - 1);
                ("POST", String::new(), v[..cut].to_vec())
            }
            // A whole body with junk after it.
            2 => {
                let mut v = valid[rng.random_range(0..2)].clone().into_bytes();
                let junk: Vec<u8> = (0..rng.random_range(1..20))
                    .map(|_| rng.random_range(b'!'..=b'~'))
                    .collect();
                v.extend(junk);
                ("POST", String::new(), v)
            }
            3 => {
                let w = wrong_types[rng.random_range(0..wrong_types.len())];
                ("POST", String::new(), w.as_bytes().to_vec())
            }
            // Random bytes.
            4 => {
                let len = rng.random_range(0..200);
                (
                    "POST",
                    String::new(),
                    (0..len).map(|_| rng.random()).collect(),
                )
            }
            // Nesting deeper than the parser takes.
            5 => {
                let depth = rng.random_range(129..2000);
                let mut v = b"{\"model\":".to_vec();
                v.extend(std::iter::repeat_n(b'[', depth));
                v.extend(std::iter::repeat_n(b']', depth));
                v.push(b'}');
                ("POST", String::new(), v)
            }
            // Invalid UTF-8 inside a string.
            6 => {
                let mut v = br#"{"model": "all-MiniLM-L6-v2", "input": "ab"#.to_vec();
                v.extend([0xff, 0xfe, rng.random_range(0x80..0xc0)]);
                v.extend(br#""}"#);
                ("POST", String::new(), v)
            }
            // Unknown paths and wrong methods.
            7 => {
                let junk: String = (0..rng.random_range(1..30))
                    .map(|_| rng.random_range(b'a'..=b'z') as char)
                    .collect();
                let paths = [
                    format!("/{junk}"),
                    format!("/v1/{junk}"),
                    format!("/v1/embeddings/{junk}"),
                ];
                let method = ["GET", "PUT", "DELETE", "POST", "PATCH"][rng.random_range(0..5)];
                (
                    method,
                    paths[rng.random_range(0..3)].clone(),
                    b"{}".to_vec(),
                )
            }
            8 => {
                let method = ["GET", "PUT", "DELETE", "PATCH"][rng.random_range(0..4)];
                let path = ["/v1/embeddings", "/v1/chat/completions"][rng.random_range(0..2)];
                (method, path.to_string(), valid[0].clone().into_bytes())
            }
            // Broken header blocks: a wrong Content-Length, a header line
            // without a colon, a name with a space, more headers than allowed,
            // two Content-Lengths.
            _ => {
                let body = valid[rng.random_range(0..2)].clone().into_bytes();
                let head = match rng.random_range(0..5) {
                    0 => "POST /v1/embeddings HTTP/1.1\r\nContent-Length: abc\r\n".to_string(),
                    1 => "POST /v1/embeddings HTTP/1.1\r\nThis line has no colon\r\n".to_string(),
                    2 => "POST /v1/embeddings HTTP/1.1\r\nBad Name: x\r\n".to_string(),
                    3 => {
                        let many: String = (0..150).map(|i| format!("X-{i}: v\r\n")).collect();
                        format!("POST /v1/embeddings HTTP/1.1\r\n{many}")
                    }
                    _ => {
                        "POST /v1/embeddings HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n"
                            .to_string()
                    }
                };
                let mut r = format!("{head}Host: x\r\nConnection: close\r\n\r\n").into_bytes();
                r.extend(body);
                out.push(r);
                continue;
            }
        };
        if path.is_empty() {
            path = if rng.random() {
                "/v1/embeddings"
            } else {
                "/v1/chat/completions"
            }
            .to_string();
        }
        let mut r = format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.append(&mut body);
        out.push(r);
    }
    out
}

#[test]
fn a_thousand_malformed_requests_get_4xx() {
    let Some((embed, chat)) = models("a_thousand_malformed_requests_get_4xx") else {
        return;
    };
    let s = start(config(&embed, &chat));
    let requests = corpus(1000);
    let mut statuses = std::collections::BTreeMap::new();
    for (i, r) in requests.iter().enumerate() {
        let reply = send_raw(s.addr, r).unwrap_or_else(|e| {
            panic!(
                "request {i} got no answer ({e}): {:?}",
                String::from_utf8_lossy(&r[..r.len().min(200)])
            )
        });
        assert!(
            (400..500).contains(&reply.status),
            "request {i} got {}: {:?}",
            reply.status,
            String::from_utf8_lossy(&r[..r.len().min(300)])
        );
        *statuses.entry(reply.status).or_insert(0) += 1;
    }
    println!("1000 malformed requests: {statuses:?}");
    assert_eq!(get(s.addr, "/health").status, 200);
    // Nothing reached a model.
    assert_eq!(s.metric("retrograd_embedding_tokens_total "), 0.0);
    assert_eq!(s.metric("retrograd_prompt_tokens_total "), 0.0);
    // And a good request is still answered.
    let ok = post(
        s.addr,
        "/v1/embeddings",
        &json!({"model": EMBED_ID, "input": "still here"}),
    );
    assert_eq!(ok.status, 200);
}

#[test]
fn concurrent_embeddings_equal_sentence_transformers() {
    let Some((embed, chat)) = models("concurrent_embeddings_equal_sentence_transformers") else {
        return;
    };
    let s = start(config(&embed, &chat));
    let mut items = fixture();
    // A debug build's products are slow: 8 short texts there, 64 in release.
    let n = if cfg!(debug_assertions) { 8 } else { 64 };
    items.sort_by_key(|(t, _)| t.len());
    let items: Vec<(String, Vec<f32>)> = if cfg!(debug_assertions) {
        items.into_iter().take(n).collect()
    } else {
        items.into_iter().cycle().take(n).collect()
    };
    let addr = s.addr;
    let threads: Vec<_> = items
        .iter()
        .map(|(text, _)| {
            let text = text.clone();
            std::thread::spawn(move || {
                post(
                    addr,
                    "/v1/embeddings",
                    &json!({"model": EMBED_ID, "input": text}),
                )
            })
        })
        .collect();
    let mut worst = 0f32;
    for (t, (_, want)) in threads.into_iter().zip(&items) {
        let reply = t.join().unwrap();
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        let body = reply.json();
        assert_eq!(body["object"], "list");
        assert_eq!(body["model"], EMBED_ID);
        assert!(body["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
        assert_eq!(body["data"][0]["index"], 0);
        worst = worst.max(max_diff(&floats(&body["data"][0]["embedding"]), want));
    }
    println!("{n} concurrent requests: max |ours - sentence-transformers| = {worst:e}");
    assert!(worst <= 1e-5, "{worst}");
    // Several texts in one request, as floats and as base64, in order.
    let texts: Vec<&str> = items.iter().take(3).map(|(t, _)| t.as_str()).collect();
    let floats_reply = post(
        addr,
        "/v1/embeddings",
        &json!({"model": EMBED_ID, "input": texts}),
    )
    .json();
    let b64 = post(
        addr,
        "/v1/embeddings",
        &json!({"model": EMBED_ID, "input": texts, "encoding_format": "base64"}),
    )
    .json();
    use base64::Engine;
    for (i, (_, want)) in items.iter().take(3).enumerate() {
        let f = floats(&floats_reply["data"][i]["embedding"]);
        assert!(max_diff(&f, want) <= 1e-5);
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64["data"][i]["embedding"].as_str().unwrap())
            .unwrap();
        let decoded: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(decoded, f, "base64 and float forms of text {i}");
    }
    assert!(s.metric("retrograd_embedding_batch_size_count ") >= 1.0);
}

#[test]
fn a_full_embedding_queue_answers_429_and_nothing_else_fails() {
    let Some((embed, chat)) = models("a_full_embedding_queue_answers_429_and_nothing_else_fails")
    else {
        return;
    };
    let mut c = config(&embed, &chat);
    // One text per batch and two waiting at most: twenty clients at once
    // overflow it.
    c.embed_config = EmbedConfig {
        batch_tokens: 1,
        queue: 2,
        batch_wait: Duration::ZERO,
    };
    let s = start(c);
    let addr = s.addr;
    let text =
        "Now is the winter of our discontent made glorious summer by this sun of York. ".repeat(3);
    let barrier = Arc::new(std::sync::Barrier::new(20));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let (text, barrier) = (text.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                post(
                    addr,
                    "/v1/embeddings",
                    &json!({"model": EMBED_ID, "input": text}),
                )
            })
        })
        .collect();
    let replies: Vec<Reply> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    println!(
        "20 clients, queue of 2: {} answered, {} got 429",
        ok.len(),
        limited.len()
    );
    assert_eq!(ok.len() + limited.len(), 20, "only 200 and 429");
    assert!(!limited.is_empty() && ok.len() >= 2);
    for r in &limited {
        assert_error(r, 429, None, Some("rate_limit_exceeded"));
        assert!(r
            .header("retry-after")
            .is_some_and(|v| v.parse::<u64>().is_ok()));
    }
    let first = floats(&ok[0].json()["data"][0]["embedding"]);
    for r in &ok {
        assert_eq!(floats(&r.json()["data"][0]["embedding"]), first);
    }
    assert_eq!(get(addr, "/health").status, 200);
}

/// Greedy answers as `ChatModel::chat` gives them (the chat example's
/// tokens) to each prompt.
fn reference_answers(chat: &Path, prompts: &[&str], max_tokens: usize) -> Vec<(String, usize)> {
    let model = ChatModel::from_gguf(chat, WeightPrecision::Quantized).unwrap();
    let options = GenerateOptions {
        max_tokens,
        sampling: Sampling::greedy(),
        stop: vec![],
    };
    prompts
        .iter()
        .map(|p| {
            let g = model
                .chat(&[Message::new(Role::User, p.to_string())], &options, |_| {
                    true
                })
                .unwrap();
            (g.text, g.ids.len())
        })
        .collect()
}

fn chat_body(prompt: &str, max_tokens: usize, stream: bool) -> Value {
    json!({
        "model": CHAT_ID,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
}

/// The events of a streamed answer, read as they come.
struct Stream {
    reader: BufReader<TcpStream>,
    pending: Vec<u8>,
}

impl Stream {
    fn open(addr: SocketAddr, body: &Value) -> Result<Stream, Reply> {
        let body = body.to_string();
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(600)))
            .unwrap();
        write!(
            stream,
            "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut reader = BufReader::new(stream);
        let (status, headers) = read_head(&mut reader).unwrap();
        if status != 200 {
            let mut body = Vec::new();
            if let Some(len) = headers
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                .and_then(|(_, v)| v.parse::<usize>().ok())
            {
                body.resize(len, 0);
                reader.read_exact(&mut body).unwrap();
            }
            return Err(Reply {
                status,
                headers,
                body,
            });
        }
        assert!(headers
            .iter()
            .any(|(k, v)| k.eq_ignore_ascii_case("content-type") && v == "text/event-stream"));
        Ok(Stream {
            reader,
            pending: Vec::new(),
        })
    }

    /// The next event's data (`[DONE]` included); `None` at the end.
    fn next(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.pending.windows(2).position(|w| w == b"\n\n") {
                let event: Vec<u8> = self.pending.drain(..at + 2).collect();
                let text = String::from_utf8(event).unwrap();
                let data = text
                    .trim_end()
                    .strip_prefix("data: ")
                    .expect("an SSE data line");
                return Some(data.to_string());
            }
            match read_chunk(&mut self.reader).ok()? {
                Some(c) => self.pending.extend(c),
                None => return None,
            }
        }
    }

    /// Every event to the end: the text, the finish reason, the usage.
    fn collect(mut self) -> (String, String, Value) {
        let (mut text, mut finish, mut usage) = (String::new(), String::new(), Value::Null);
        let mut done = false;
        while let Some(data) = self.next() {
            assert!(!done, "an event after [DONE]");
            if data == "[DONE]" {
                done = true;
                continue;
            }
            let chunk: Value = serde_json::from_str(&data).unwrap();
            assert_eq!(chunk["object"], "chat.completion.chunk");
            if let Some(choice) = chunk["choices"].as_array().and_then(|c| c.first()) {
                if let Some(t) = choice["delta"]["content"].as_str() {
                    text.push_str(t);
                }
                if let Some(f) = choice["finish_reason"].as_str() {
                    finish = f.to_string();
                }
            }
            if !chunk["usage"].is_null() {
                usage = chunk["usage"].clone();
            }
        }
        assert!(done, "the stream ends with data: [DONE]");
        (text, finish, usage)
    }
}

const PROMPTS: [&str; 4] = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "Name three primary colors.",
    "How many legs does a spider have?",
];

#[test]
fn chat_answers_batched_equal_alone_and_stream() {
    let Some((embed, chat)) = models_in_release("chat_answers_batched_equal_alone_and_stream")
    else {
        return;
    };
    let max_tokens = 24;
    let want = reference_answers(&chat, &PROMPTS, max_tokens);
    let s = start(config(&embed, &chat));
    let addr = s.addr;
    // One alone first, then 16 at once (each prompt 4 times, half streamed).
    let alone = post(
        addr,
        "/v1/chat/completions",
        &chat_body(PROMPTS[0], max_tokens, false),
    )
    .json();
    assert_eq!(
        alone["choices"][0]["message"]["content"],
        want[0].0.as_str()
    );
    assert_eq!(alone["object"], "chat.completion");
    assert_eq!(alone["usage"]["completion_tokens"], want[0].1);
    let threads: Vec<_> = (0..16)
        .map(|i| {
            let prompt = PROMPTS[i % 4];
            std::thread::spawn(move || {
                if i % 2 == 0 {
                    let r = post(
                        addr,
                        "/v1/chat/completions",
                        &chat_body(prompt, max_tokens, false),
                    );
                    assert_eq!(r.status, 200);
                    let v = r.json();
                    (
                        v["choices"][0]["message"]["content"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                        v["choices"][0]["finish_reason"]
                            .as_str()
                            .unwrap()
                            .to_string(),
                        v["usage"].clone(),
                    )
                } else {
                    Stream::open(addr, &chat_body(prompt, max_tokens, true))
                        .unwrap_or_else(|r| panic!("{}", String::from_utf8_lossy(&r.body)))
                        .collect()
                }
            })
        })
        .collect();
    for (i, t) in threads.into_iter().enumerate() {
        let (text, finish, usage) = t.join().unwrap();
        let (want_text, want_tokens) = &want[i % 4];
        assert_eq!(&text, want_text, "request {i} ({})", PROMPTS[i % 4]);
        assert_eq!(usage["completion_tokens"], *want_tokens, "request {i}");
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(usage["prompt_tokens"].as_u64().unwrap() + *want_tokens as u64)
        );
        let expected = if *want_tokens == max_tokens {
            "length"
        } else {
            "stop"
        };
        assert_eq!(finish, expected);
    }
    // The decode steps ran several sequences at once.
    let steps = s.metric("retrograd_chat_decode_batch_size_count ");
    let rows = s.metric("retrograd_chat_decode_batch_size_sum ");
    println!("decode steps: {steps}, mean batch {:.2}", rows / steps);
    assert!(rows / steps > 1.5, "mean decode batch {}", rows / steps);
    assert_eq!(s.metric("retrograd_chat_active_sequences "), 0.0);
}

#[test]
fn a_chat_queue_of_4_with_20_clients() {
    let Some((embed, chat)) = models_in_release("a_chat_queue_of_4_with_20_clients") else {
        return;
    };
    let want = reference_answers(&chat, &PROMPTS[..1], 16);
    let mut c = config(&embed, &chat);
    c.chat_config = ChatConfig { slots: 2, queue: 4 };
    let s = start(c);
    let addr = s.addr;
    let barrier = Arc::new(std::sync::Barrier::new(20));
    let threads: Vec<_> = (0..20)
        .map(|_| {
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                post(
                    addr,
                    "/v1/chat/completions",
                    &chat_body(PROMPTS[0], 16, false),
                )
            })
        })
        .collect();
    let replies: Vec<Reply> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let ok: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let limited: Vec<&Reply> = replies.iter().filter(|r| r.status == 429).collect();
    println!(
        "20 chat clients, 2 slots and a queue of 4: {} answered, {} got 429",
        ok.len(),
        limited.len()
    );
    assert_eq!(ok.len() + limited.len(), 20, "only 200 and 429");
    assert!(ok.len() >= 4 && !limited.is_empty());
    for r in &ok {
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            want[0].0.as_str()
        );
    }
    for r in &limited {
        assert_error(r, 429, None, Some("rate_limit_exceeded"));
        assert!(r.header("retry-after").is_some());
    }
    assert_eq!(s.metric("retrograd_chat_active_sequences "), 0.0);
    assert_eq!(s.metric("retrograd_queue_depth{queue=\"chat\"} "), 0.0);
}

#[test]
fn clients_gone_mid_stream_free_their_slots() {
    let Some((embed, chat)) = models_in_release("clients_gone_mid_stream_free_their_slots") else {
        return;
    };
    let s = start(config(&embed, &chat));
    let addr = s.addr;
    // Four long answers; each client reads two events and hangs up.
    let long = [
        "Write a long story about a dragon who learns to bake bread.",
        "Explain in detail how a steam engine works.",
        "Tell me everything you know about the history of Rome.",
        "Describe the life of a bee in a hive, step by step.",
    ];
    let mut streams: Vec<Stream> = long
        .iter()
        .map(|prompt| {
            Stream::open(addr, &chat_body(prompt, 400, true))
                .ok()
                .unwrap()
        })
        .collect();
    for st in &mut streams {
        st.next().unwrap();
        st.next().unwrap();
    }
    assert!(s.metric("retrograd_chat_active_sequences ") >= 1.0);
    drop(streams);
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.metric("retrograd_chat_active_sequences ") > 0.0 {
        assert!(
            Instant::now() < deadline,
            "slots still taken 10 s after the clients left"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.metric("retrograd_chat_cancelled_total "), 4.0);
    let generated = s.metric("retrograd_completion_tokens_total ");
    assert!(
        generated < 4.0 * 400.0,
        "{generated} tokens: the answers ran on"
    );
    // The slots serve the next client.
    let r = post(
        addr,
        "/v1/chat/completions",
        &chat_body(PROMPTS[0], 4, false),
    );
    assert_eq!(r.status, 200);
}

#[test]
fn a_stop_finishes_what_is_in_flight() {
    let Some((embed, chat)) = models("a_stop_finishes_what_is_in_flight") else {
        return;
    };
    let mut s = start(config(&embed, &chat));
    let addr = s.addr;
    // In a debug build an embeddings request is what is in flight; in
    // release a chat stream too.
    let embedding = std::thread::spawn(move || {
        post(
            addr,
            "/v1/embeddings",
            &json!({"model": EMBED_ID, "input": vec!["in flight"; 4]}),
        )
    });
    let stream = (!cfg!(debug_assertions)).then(|| {
        let mut st = Stream::open(addr, &chat_body(PROMPTS[1], 24, true))
            .ok()
            .unwrap();
        st.next().unwrap();
        st
    });
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    if let Some(stop) = s.stop.take() {
        stop.send(()).unwrap();
    }
    if let Some(st) = stream {
        let (text, finish, _) = st.collect();
        assert!(!text.is_empty() && !finish.is_empty());
    }
    assert_eq!(embedding.join().unwrap().status, 200);
    s.shutdown().unwrap();
    println!(
        "stopped {:.2} s after the signal",
        started.elapsed().as_secs_f64()
    );
    assert!(
        TcpStream::connect(addr).is_err(),
        "still accepting after the stop"
    );
}
