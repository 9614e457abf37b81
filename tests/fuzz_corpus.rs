//! Replays every committed fuzz input on stable Rust through the same
//! bodies the `cargo fuzz` targets run (`fuzz/bodies/`): the seed corpus in
//! `fuzz/corpus/<target>/` and the inputs of fixed crashes in
//! `fuzz/regressions/<target>/`. A panic in a body fails the test, naming
//! the file.

#[path = "../fuzz/bodies/checkpoint.rs"]
mod checkpoint;
#[path = "../fuzz/bodies/digits.rs"]
mod digits;
#[path = "../fuzz/bodies/expr.rs"]
mod expr;
#[path = "../fuzz/bodies/mnist.rs"]
mod mnist;
#[cfg(feature = "onnx")]
#[path = "../fuzz/bodies/onnx.rs"]
mod onnx;
#[path = "../fuzz/bodies/ops.rs"]
mod ops;

use std::path::{Path, PathBuf};

/// The committed inputs of `target`, sorted: the seeds (`seed-*`; a local
/// fuzzing run may have added its own files beside them) and every
/// regression input. At least one must exist.
fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let files_in = |dir: PathBuf, keep: fn(&str) -> bool| -> Vec<PathBuf> {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        entries
            .map(|e| e.expect("read a corpus directory entry").path())
            .filter(|p| p.is_file() && p.file_name().is_some_and(|n| keep(&n.to_string_lossy())))
            .collect()
    };
    let mut files = files_in(root.join("corpus").join(target), |name| {
        name.starts_with("seed-")
    });
    files.extend(files_in(root.join("regressions").join(target), |_| true));
    files.sort();
    assert!(
        !files.is_empty(),
        "no committed inputs for fuzz target `{target}`"
    );
    files
}

fn replay(target: &str, body: fn(&[u8])) {
    for path in inputs(target) {
        let data = std::fs::read(&path).expect("read a corpus file");
        let outcome = std::panic::catch_unwind(|| body(&data));
        assert!(
            outcome.is_ok(),
            "fuzz target `{target}` panicked on {}",
            path.display()
        );
    }
}

#[test]
fn checkpoint_corpus() {
    replay("checkpoint", checkpoint::run);
}

/// Every committed checkpoint seed, damaged: truncated at seeded random
/// offsets and with seeded random bytes flipped, through the same body
/// (so each damaged copy must load as a typed error, or as what it still
/// is, and never panic).
#[test]
fn checkpoint_corpus_damaged() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2026);
    let mut tried = 0;
    for path in inputs("checkpoint") {
        let data = std::fs::read(&path).expect("read a corpus file");
        if data.is_empty() {
            continue;
        }
        for i in 0..60 {
            let mut damaged = data.clone();
            let at = rng.random_range(0..data.len());
            if i % 3 == 0 {
                damaged.truncate(at);
            } else {
                damaged[at] ^= rng.random_range(1..=255u8);
            }
            let outcome = std::panic::catch_unwind(|| checkpoint::run(&damaged));
            assert!(
                outcome.is_ok(),
                "fuzz target `checkpoint` panicked on {} damaged at byte {at}",
                path.display()
            );
            tried += 1;
        }
    }
    println!("{tried} damaged copies of the checkpoint seeds");
}

#[test]
fn expr_corpus() {
    replay("expr", expr::run);
}

#[test]
fn digits_corpus() {
    replay("digits", digits::run);
}

#[test]
fn mnist_corpus() {
    replay("mnist", mnist::run);
}

#[test]
fn ops_corpus() {
    replay("ops", ops::run);
}

#[cfg(feature = "onnx")]
#[test]
fn onnx_corpus() {
    replay("onnx", onnx::run);
}
