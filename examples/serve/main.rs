//! An OpenAI-compatible server for a sentence encoder and a chat model:
//! `POST /v1/embeddings` (batched dynamically under a token budget),
//! `POST /v1/chat/completions` (continuous batching over per-request
//! key/value caches; `stream: true` as server-sent events), `GET
//! /v1/models`, `GET /health`, `GET /metrics` (Prometheus text). The
//! official `openai` clients talk to it with `base_url` pointed at `/v1`.
//!
//! ```sh
//! scripts/fetch_minilm.sh && scripts/fetch_smollm2.sh       # once: the models, into .cache/
//! cargo run --release --example serve -- --embed .cache/models/all-MiniLM-L6-v2 \
//!     --chat .cache/models/SmolLM2-135M-Instruct.Q4_1.gguf
//! ```
//!
//! One concept a file: `server.rs` (start, serve, drain), `routes.rs`
//! (endpoints and their checks), `openai.rs` (the JSON shapes),
//! `errors.rs` (OpenAI's error body), `queue.rs` (the bounded queues),
//! `embeddings.rs` (the embedding batcher), `chat.rs` (the chat
//! scheduler), `metrics.rs` (the Prometheus text).

mod chat;
mod embeddings;
mod errors;
mod metrics;
mod openai;
mod queue;
mod routes;
mod server;

use std::process::ExitCode;
use std::time::Duration;

use server::{ServeConfig, Server};

const USAGE: &str = "\
usage: serve [--embed MODEL_DIR] [--chat MODEL.gguf] [options]

Serves a sentence-transformers encoder and/or a GGUF chat model over
OpenAI's API (at least one of the two). SIGTERM or Ctrl-C stops accepting
connections, finishes the requests in flight and exits 0.

options:
  --embed DIR            a sentence-transformers folder (all-MiniLM-L6-v2)
  --chat FILE            a GGUF chat model (SmolLM2-135M-Instruct Q4_1)
  --host ADDR            address to bind (default 127.0.0.1: loopback only)
  --port N               port (default 8080; 0 picks a free one)
  --slots N              chat sequences decoded together at most (default 8)
  --chat-queue N         chat requests waiting at most, more get 429 (default 64)
  --embed-queue N        embedding requests waiting at most (default 1024)
  --batch-tokens N       tokens per embedding batch at most (default 8192)
  --batch-wait-ms N      how long a growing embedding batch waits for more (default 2)
  --max-tokens N         tokens one chat answer may ask for (default 4096)
  --max-inputs N         texts per embeddings request (default 2048)
  --max-body BYTES       request body size limit (default 2097152)
  --threads N            compute threads (default: one per core)
  -h, --help             this text";

struct Args {
    config: ServeConfig,
    host: String,
    port: u16,
    threads: Option<usize>,
}

fn parse_args() -> Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut args = Args {
        config: ServeConfig::default(),
        host: "127.0.0.1".into(),
        port: 8080,
        threads: None,
    };
    let mut parser = lexopt::Parser::from_env();
    fn number<T: std::str::FromStr>(parser: &mut lexopt::Parser, flag: &str) -> Result<T, String> {
        let v = parser.value().map_err(|e| e.to_string())?;
        v.to_string_lossy()
            .parse()
            .map_err(|_| format!("{flag} takes a number, got {v:?}"))
    }
    let c = &mut args.config;
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("embed") => c.embed = Some(parser.value().map_err(|e| e.to_string())?.into()),
            Long("chat") => c.chat = Some(parser.value().map_err(|e| e.to_string())?.into()),
            Long("host") => {
                args.host = parser
                    .value()
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .into_owned()
            }
            Long("port") => args.port = number(&mut parser, "--port")?,
            Long("slots") => c.chat_config.slots = number(&mut parser, "--slots")?,
            Long("chat-queue") => c.chat_config.queue = number(&mut parser, "--chat-queue")?,
            Long("embed-queue") => c.embed_config.queue = number(&mut parser, "--embed-queue")?,
            Long("batch-tokens") => {
                c.embed_config.batch_tokens = number(&mut parser, "--batch-tokens")?
            }
            Long("batch-wait-ms") => {
                c.embed_config.batch_wait =
                    Duration::from_millis(number(&mut parser, "--batch-wait-ms")?)
            }
            Long("max-tokens") => c.limits.max_tokens = number(&mut parser, "--max-tokens")?,
            Long("max-inputs") => c.limits.max_inputs = number(&mut parser, "--max-inputs")?,
            Long("max-body") => c.limits.max_body_bytes = number(&mut parser, "--max-body")?,
            Long("threads") => args.threads = Some(number(&mut parser, "--threads")?),
            other => return Err(other.unexpected().to_string()),
        }
    }
    if c.embed.is_none() && c.chat.is_none() {
        return Err("give --embed MODEL_DIR, --chat MODEL.gguf, or both".into());
    }
    if c.chat_config.slots == 0 || c.embed_config.batch_tokens == 0 || c.limits.max_tokens == 0 {
        return Err("--slots, --batch-tokens and --max-tokens must be positive".into());
    }
    Ok(Some(args))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("serve: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    for (path, fetch) in [
        (&args.config.embed, "scripts/fetch_minilm.sh"),
        (&args.config.chat, "scripts/fetch_smollm2.sh"),
    ] {
        if let Some(p) = path
            && !p.exists()
        {
            eprintln!("serve: no model at {} (fetch it with {fetch})", p.display());
            return ExitCode::from(2);
        }
    }
    if let Some(n) = args.threads
        && let Err(e) = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build_global()
    {
        eprintln!("serve: --threads: {e}");
        return ExitCode::from(2);
    }
    // The HTTP side only parses and forwards: two threads keep it off
    // the cores the models compute on.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("serve: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("serve: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), String> {
    let server = Server::start(&args.config)?;
    let listener = tokio::net::TcpListener::bind((args.host.as_str(), args.port))
        .await
        .map_err(|e| format!("cannot bind {}:{}: {e}", args.host, args.port))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?;
    let state = &server.state;
    println!(
        "serving on http://{address}/v1 (embeddings: {}; chat: {})",
        state.embed.as_ref().map_or("none", |e| e.id.as_str()),
        state.chat.as_ref().map_or("none", |c| c.id.as_str()),
    );
    if let Some(c) = &state.chat {
        println!(
            "chat: {} slots, context {} tokens; endpoints /v1/embeddings /v1/chat/completions /v1/models /health /metrics",
            c.slots, c.context
        );
    }
    use std::io::Write;
    let _ = std::io::stdout().flush();
    server
        .run(listener, shutdown_signal())
        .await
        .map_err(|e| e.to_string())?;
    println!("stopped: every request in flight finished");
    Ok(())
}

/// SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}
