//! Loading the models, starting their worker threads, and running the
//! HTTP server until a shutdown signal: then it stops accepting
//! connections, lets the requests in flight finish (streams included),
//! lets each worker drain its queue, and returns. `main.rs` runs it on
//! the command line's settings; the tests run it in-process on a loopback
//! port.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;

use retrograd::hub::{SentenceTransformer, WeightPrecision};
use retrograd::llm::ChatModel;
use tokio::net::TcpListener;

use super::chat::{Chat, ChatConfig};
use super::embeddings::{EmbedConfig, Embedder};
use super::metrics::Metrics;
use super::routes::{router, AppState, Limits};

/// What to serve and how.
#[derive(Clone, Debug, Default)]
pub struct ServeConfig {
    /// A sentence-transformers folder.
    pub embed: Option<PathBuf>,
    /// A GGUF chat model.
    pub chat: Option<PathBuf>,
    pub embed_config: EmbedConfig,
    pub chat_config: ChatConfig,
    pub limits: Limits,
}

/// The models loaded and their workers started.
pub struct Server {
    pub state: Arc<AppState>,
    workers: Vec<JoinHandle<()>>,
}

/// The name a model is served under: its folder's or file's name.
fn model_id(path: &std::path::Path, strip_extension: bool) -> String {
    let name = if strip_extension {
        path.file_stem()
    } else {
        path.file_name()
    };
    name.map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

impl Server {
    /// Loads the models (each optional) and starts their workers.
    pub fn start(config: &ServeConfig) -> Result<Server, String> {
        let metrics = Arc::new(Metrics::new());
        let mut workers = Vec::new();
        let embed = match &config.embed {
            Some(dir) => {
                let model = SentenceTransformer::from_pretrained(dir).map_err(|e| e.to_string())?;
                let (e, worker) = Embedder::start(
                    model,
                    model_id(dir, false),
                    config.embed_config.clone(),
                    metrics.clone(),
                )?;
                workers.push(worker);
                Some(e)
            }
            None => None,
        };
        let chat = match &config.chat {
            Some(file) => {
                let model = Arc::new(
                    ChatModel::from_gguf(file, WeightPrecision::Quantized)
                        .map_err(|e| e.to_string())?,
                );
                let (c, worker) = Chat::start(
                    model,
                    model_id(file, true),
                    config.chat_config.clone(),
                    metrics.clone(),
                )?;
                workers.push(worker);
                Some(c)
            }
            None => None,
        };
        let state = Arc::new(AppState::new(embed, chat, metrics, config.limits.clone()));
        Ok(Server { state, workers })
    }

    /// Serves on `listener` until `shutdown` completes, then drains (see
    /// the module docs).
    pub async fn run(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let served = axum::serve(listener, router(self.state.clone()))
            .with_graceful_shutdown(shutdown)
            .await;
        if let Some(e) = &self.state.embed {
            e.close();
        }
        if let Some(c) = &self.state.chat {
            c.close();
        }
        let workers = self.workers;
        tokio::task::spawn_blocking(move || {
            for w in workers {
                let _ = w.join();
            }
        })
        .await
        .map_err(std::io::Error::other)?;
        served
    }
}
