//! all-MiniLM-L6-v2 against the Python libraries (tests/reference/minilm_reference.py):
//! token ids equal to `tokenizers`' for 103 fixed texts, and sentence
//! embeddings within 1e-5 of sentence-transformers' (cosine at least
//! 0.99999), one text at a time and batched with padding.
//!
//! Needs the model (`scripts/fetch_minilm.sh`; `.ci/run` fetches it); each
//! test prints one skip line and passes without it. In a debug build the
//! embedding tests take a few texts (a debug
//! build's matrix products are slow): 8 short texts and one of 256 tokens
//! one at a time, 16 short ones batched; `.ci/run` runs this file again in
//! release, where all 103 are checked both ways.

#![cfg(feature = "tokenizers")]

#[path = "support/minilm.rs"]
mod minilm;

use std::path::Path;

use minilm::model_dir;
use retrograd::hub::{SentenceTransformer, Tokenizer, Weights};
use retrograd::{DType, Tensor};

struct Reference {
    texts: Vec<String>,
    ids: Vec<Vec<u32>>,
    max_seq_length: usize,
}

fn reference() -> Reference {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/minilm_tokens.json");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    Reference {
        texts: serde_json::from_value(json["texts"].clone()).unwrap(),
        ids: serde_json::from_value(json["ids"].clone()).unwrap(),
        max_seq_length: json["max_seq_length"].as_u64().unwrap() as usize,
    }
}

fn embeddings(name: &str) -> Vec<f32> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/minilm_embeddings.safetensors");
    Weights::open(path)
        .unwrap()
        .tensor(name, DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

/// The texts a test embeds: all in release; in a debug build the `short`
/// shortest, and the longest (cut at 256 tokens) when `long`.
fn chosen(reference: &Reference, short: usize, long: bool) -> Vec<usize> {
    if !cfg!(debug_assertions) {
        return (0..reference.texts.len()).collect();
    }
    let mut by_length: Vec<usize> = (0..reference.ids.len()).collect();
    by_length.sort_by_key(|&i| reference.ids[i].len());
    let mut picked = by_length[..short].to_vec();
    if long {
        picked.push(*by_length.last().unwrap());
    }
    picked
}

/// The worst absolute difference and the lowest cosine over rows of `dim`.
fn compare(ours: &[f32], theirs: &[f32], dim: usize) -> (f32, f64) {
    let mut worst = 0f32;
    let mut min_cos = 1f64;
    for (a, b) in ours.chunks(dim).zip(theirs.chunks(dim)) {
        worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(worst, f32::max);
        let dot: f64 = a
            .iter()
            .zip(b)
            .map(|(x, y)| f64::from(*x) * f64::from(*y))
            .sum();
        let norm = |v: &[f32]| v.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>().sqrt();
        min_cos = min_cos.min(dot / (norm(a) * norm(b)));
    }
    (worst, min_cos)
}

#[test]
fn token_ids_equal_the_python_tokenizers() {
    let Some(dir) = model_dir("token_ids_equal_the_python_tokenizers") else {
        return;
    };
    let r = reference();
    assert!(r.texts.len() >= 100);
    let tokenizer = Tokenizer::from_pretrained(&dir)
        .unwrap()
        .with_truncation(Some(r.max_seq_length))
        .unwrap()
        .with_padding(None);
    let mut truncated = 0;
    for (text, want) in r.texts.iter().zip(&r.ids) {
        let got = tokenizer.encode(text).unwrap();
        assert_eq!(&got, want, "text {text:?}");
        truncated += usize::from(got.len() == r.max_seq_length);
    }
    assert!(
        truncated >= 3,
        "the long texts are cut at the model's limit"
    );
    // The sentence pipeline's tokenizer truncates the same way.
    let model = SentenceTransformer::from_pretrained(&dir).unwrap();
    assert_eq!(model.max_seq_length(), r.max_seq_length);
    let last = r.texts.len() - 1;
    assert_eq!(
        model.tokenizer().encode(&r.texts[last]).unwrap(),
        r.ids[last]
    );
}

#[test]
fn embeddings_match_sentence_transformers_one_at_a_time() {
    let Some(dir) = model_dir("embeddings_match_sentence_transformers_one_at_a_time") else {
        return;
    };
    let r = reference();
    let model = SentenceTransformer::from_pretrained(&dir).unwrap();
    let dim = model.dim();
    assert_eq!(dim, 384);
    let want = embeddings("batch1");
    let picked = chosen(&r, 8, true);
    let mut ours = Vec::new();
    let mut theirs = Vec::new();
    for &i in &picked {
        let e = model.embed_batch(&[r.texts[i].as_str()]).unwrap();
        assert_eq!(e.shape(), &[1, dim]);
        ours.extend(e.to_vec::<f32>().unwrap());
        theirs.extend_from_slice(&want[i * dim..(i + 1) * dim]);
    }
    let (worst, min_cos) = compare(&ours, &theirs, dim);
    println!(
        "batch 1, {} texts: worst |difference| {worst:.3e}, lowest cosine {min_cos:.9}",
        picked.len()
    );
    assert!(worst <= 1e-5, "worst difference {worst}");
    assert!(min_cos >= 0.99999, "lowest cosine {min_cos}");
}

#[test]
fn embeddings_match_sentence_transformers_batched_with_padding() {
    let Some(dir) = model_dir("embeddings_match_sentence_transformers_batched_with_padding") else {
        return;
    };
    let r = reference();
    let want = embeddings("batched");
    let picked = chosen(&r, 16, false);
    let texts: Vec<&str> = picked.iter().map(|&i| r.texts[i].as_str()).collect();
    // Both ways of running a batch: its real tokens packed (the default)
    // and padded to its longest text, as sentence-transformers runs it.
    for packed in [true, false] {
        let model = SentenceTransformer::from_pretrained(&dir)
            .unwrap()
            .packed(packed);
        let dim = model.dim();
        let mut batches = 0;
        let e: Tensor = model.encode(&texts, 16, |_, _| batches += 1).unwrap();
        assert_eq!(batches, texts.len().div_ceil(16));
        let ours = e.to_vec::<f32>().unwrap();
        let theirs: Vec<f32> = picked
            .iter()
            .flat_map(|&i| want[i * dim..(i + 1) * dim].iter().copied())
            .collect();
        let (worst, min_cos) = compare(&ours, &theirs, dim);
        println!(
            "batch 16, {} texts, packed {packed}: worst |difference| {worst:.3e}, lowest cosine {min_cos:.9}",
            picked.len()
        );
        assert!(worst <= 1e-5, "packed {packed}: worst difference {worst}");
        assert!(
            min_cos >= 0.99999,
            "packed {packed}: lowest cosine {min_cos}"
        );
        // Normalised: unit rows.
        for row in ours.chunks(dim) {
            let n: f32 = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((n - 1.0).abs() < 1e-5);
        }
    }
}

#[test]
fn the_checkpoint_is_a_name_map_and_bad_folders_are_named() {
    let Some(dir) = model_dir("the_checkpoint_is_a_name_map_and_bad_folders_are_named") else {
        return;
    };
    let (model, report) = retrograd::nn::BertModel::from_pretrained_with_report(&dir).unwrap();
    assert_eq!(report.ignored, ["embeddings.position_ids"]);
    assert_eq!(report.loaded, 103, "every tensor but position_ids");
    assert!(model.pooler().is_some());
    assert_eq!(model.config().num_hidden_layers, 6);
    // A copy of the folder with one tensor renamed: a typed error naming
    // the file and both the missing and the unexpected name.
    let tmp = tempfile::tempdir().unwrap();
    for f in ["config.json", "tokenizer.json"] {
        std::fs::copy(dir.join(f), tmp.path().join(f)).unwrap();
    }
    let mut tensors = Weights::open(&dir).unwrap().load_all(DType::F32).unwrap();
    let t = tensors.remove("pooler.dense.bias").unwrap();
    tensors.insert("pooler.dense.bias_renamed".into(), t.to_dtype(DType::BF16));
    retrograd::io::save_tensors(
        tmp.path().join("model.safetensors"),
        &tensors,
        &Default::default(),
    )
    .unwrap();
    let err = retrograd::nn::BertModel::from_pretrained(tmp.path())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("pooler.dense.bias") && err.contains("model.safetensors"),
        "{err}"
    );
}
