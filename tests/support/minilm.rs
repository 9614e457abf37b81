//! Where the tests find all-MiniLM-L6-v2, and the skip line when it is absent.

use std::path::PathBuf;

/// The model folder: `$RETROGRAD_MINILM`, else `.cache/models/all-MiniLM-L6-v2`
/// in the repository (where `scripts/fetch_minilm.sh` puts it). `None`
/// (after printing one skip line for `test`) when it is not there.
pub fn model_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("RETROGRAD_MINILM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".cache/models/all-MiniLM-L6-v2")
        });
    if dir.join("model.safetensors").is_file() {
        Some(dir)
    } else {
        println!(
            "skipped: {test}: all-MiniLM-L6-v2 is not in {} (run scripts/fetch_minilm.sh to fetch it)",
            dir.display()
        );
        None
    }
}
