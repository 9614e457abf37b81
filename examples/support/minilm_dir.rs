//! Where the examples look for all-MiniLM-L6-v2, and what they say when it
//! is not there.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

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

/// The `main` of an example that needs the model: its arguments parsed
/// (`--help` prints `usage`; a bad one exits 2), a missing model named with
/// the command that fetches it (exit 2), then `run` (exit 1 on an error).
pub fn main<A>(
    usage: &str,
    parse: impl FnOnce() -> Result<Option<A>, String>,
    model: impl FnOnce(&A) -> &Path,
    run: impl FnOnce(&A) -> retrograd::Result<()>,
) -> ExitCode {
    let args = match parse() {
        Ok(Some(args)) => args,
        Ok(None) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{usage}");
            return ExitCode::from(2);
        }
    };
    if let Some(message) = missing_message(model(&args)) {
        eprintln!("{message}");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
