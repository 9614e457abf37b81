//! Where the examples look for all-MiniLM-L6-v2, and what they say when it
//! is not there.

use std::path::{Path, PathBuf};

/// `.cache/models/all-MiniLM-L6-v2` in this repository, where
/// `scripts/fetch_minilm.sh` puts the model.
pub fn default_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/models/all-MiniLM-L6-v2")
}

/// `None` when `dir` holds a model; else the message that says how to get it.
pub fn missing_message(dir: &Path) -> Option<String> {
    if dir.join("model.safetensors").is_file() && dir.join("config.json").is_file() {
        return None;
    }
    let command = if dir == default_dir() {
        "scripts/fetch_minilm.sh".to_string()
    } else {
        format!("scripts/fetch_minilm.sh {}", dir.display())
    };
    Some(format!(
        "error: no model in {} (all-MiniLM-L6-v2 is fetched, 90 MB, with one command:\n\n    {command}\n\nthen run this again)",
        dir.display()
    ))
}
