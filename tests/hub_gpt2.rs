//! GPT-2 checkpoints in and out of `Gpt`, against `transformers`
//! (tests/reference/gpt2_reference.py): a random `GPT2LMHeadModel` saved by
//! `save_pretrained` loads and gives its logits within 1e-5; saved back,
//! the folder holds exactly the tensors `transformers` wrote (names,
//! `Conv1D` layouts, values), which `gpt2_reference.py --check` loads in
//! `transformers` with the same logits. And a byte-level BPE
//! `tokenizer.json` gives the Python `tokenizers`' ids.

use std::path::{Path, PathBuf};

use retrograd::hub::{ModelConfig, Weights};
use retrograd::nn::{Activation, Forward, Gpt};
use retrograd::{DType, Var};

fn reference(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(path)
}

fn logits_of(gpt: &Gpt) -> (Vec<f32>, Vec<f32>) {
    let r = Weights::open(reference("gpt2_tiny_logits.safetensors")).unwrap();
    let tokens = r.tensor("tokens", DType::F32).unwrap();
    let want = r
        .tensor("logits", DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let got = gpt.forward(&Var::from(tokens)).unwrap();
    assert_eq!(got.shape(), &[2, 12, 96]);
    (got.value().to_vec::<f32>().unwrap(), want)
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn a_transformers_gpt2_loads_with_its_logits() {
    let gpt = Gpt::from_pretrained(reference("gpt2_tiny")).unwrap();
    let c = gpt.config();
    assert_eq!(
        (c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_embd),
        (96, 32, 2, 4, 32)
    );
    assert_eq!(c.activation, Activation::GeluTanh, "gelu_new");
    let (got, want) = logits_of(&gpt);
    let w = worst(&got, &want);
    println!("GPT-2 logits after loading: worst |difference| {w:.3e}");
    assert!(w <= 1e-5, "{w}");
}

#[test]
fn a_saved_gpt_is_the_folder_transformers_wrote() {
    let gpt = Gpt::from_pretrained(reference("gpt2_tiny")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    gpt.save_pretrained(dir.path()).unwrap();
    let ours = Weights::open(dir.path()).unwrap();
    let theirs = Weights::open(reference("gpt2_tiny")).unwrap();
    assert_eq!(ours.names(), theirs.names());
    for name in theirs.names() {
        assert_eq!(ours.shape(name), theirs.shape(name), "{name}");
        assert_eq!(
            ours.tensor(name, DType::F32).unwrap(),
            theirs.tensor(name, DType::F32).unwrap(),
            "{name}"
        );
    }
    let config = ModelConfig::read(dir.path()).unwrap();
    assert_eq!(config.gpt2().unwrap(), *gpt.config());
    assert_eq!(config.json()["architectures"][0], "GPT2LMHeadModel");
    // And back: the same logits.
    let again = Gpt::from_pretrained(dir.path()).unwrap();
    let (a, _) = logits_of(&gpt);
    let (b, _) = logits_of(&again);
    assert_eq!(a, b);
    if let Some(out) = std::env::var_os("RETROGRAD_SAVE_GPT2") {
        // For `python3 tests/reference/gpt2_reference.py --check $RETROGRAD_SAVE_GPT2`.
        gpt.save_pretrained(out).unwrap();
    }
}

#[test]
fn a_gpt_without_biases_saves_zero_biases_and_bad_folders_are_named() {
    let mut config = *Gpt::from_pretrained(reference("gpt2_tiny"))
        .unwrap()
        .config();
    config.bias = false;
    let gpt = Gpt::new(config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    gpt.save_pretrained(dir.path()).unwrap();
    let back = Gpt::from_pretrained(dir.path()).unwrap();
    let (a, _) = logits_of(&gpt);
    let (b, _) = logits_of(&back);
    assert!(worst(&a, &b) <= 1e-6);

    // An untied head is refused, naming the file and the tensor.
    let mut tensors = Weights::open(dir.path())
        .unwrap()
        .load_all(DType::F32)
        .unwrap();
    let wte = tensors["transformer.wte.weight"].clone();
    tensors.insert("lm_head.weight".into(), wte.map_f64(|v| v + 1.0));
    retrograd::io::save_tensors(
        dir.path().join("model.safetensors"),
        &tensors,
        &Default::default(),
    )
    .unwrap();
    let err = Gpt::from_pretrained(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("lm_head.weight") && err.contains("model.safetensors"),
        "{err}"
    );
    // A BERT folder is not a GPT-2 one.
    std::fs::write(dir.path().join("config.json"), r#"{"model_type": "bert"}"#).unwrap();
    let err = Gpt::from_pretrained(dir.path()).unwrap_err().to_string();
    assert!(err.contains("config.json") && err.contains("bert"), "{err}");
}

#[cfg(feature = "tokenizers")]
#[test]
fn byte_level_bpe_ids_equal_the_python_tokenizers() {
    use retrograd::hub::Tokenizer;
    let tokenizer = Tokenizer::from_file(reference("bpe_tokenizer.json")).unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(reference("bpe_tokens.json")).unwrap())
            .unwrap();
    let texts: Vec<String> = serde_json::from_value(json["texts"].clone()).unwrap();
    let ids: Vec<Vec<u32>> = serde_json::from_value(json["ids"].clone()).unwrap();
    let decoded: Vec<String> = serde_json::from_value(json["decoded"].clone()).unwrap();
    for ((text, want), round) in texts.iter().zip(&ids).zip(&decoded) {
        assert_eq!(&tokenizer.encode(text).unwrap(), want, "{text:?}");
        // Python's `decode` skips special tokens by default.
        assert_eq!(&tokenizer.decode(want, true).unwrap(), round, "{text:?}");
    }
}
