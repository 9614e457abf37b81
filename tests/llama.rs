//! The Llama architecture against `transformers`
//! (tests/reference/llama_tiny_reference.py): a small random
//! `LlamaForCausalLM` (grouped-query attention, untied head) saved by
//! `save_pretrained` loads from its safetensors folder and gives
//! transformers' logits within 1e-5; generation through the key/value
//! cache gives the same logits as the whole sequence at once; and the
//! training forward has gradients.

use std::path::{Path, PathBuf};

use retrograd::hub::Weights;
use retrograd::nn::{Llama, LlamaCache, Module};
use retrograd::{DType, Graph};

fn reference(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(path)
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn ids_and_logits(i: usize) -> (Vec<usize>, Vec<f32>) {
    let r = Weights::open(reference("llama_tiny_logits.safetensors")).unwrap();
    let ids = r
        .tensor(&format!("ids_{i}"), DType::F64)
        .unwrap()
        .to_f64_vec();
    let logits = r
        .tensor(&format!("logits_{i}"), DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    (ids.into_iter().map(|v| v as usize).collect(), logits)
}

#[test]
fn a_transformers_folder_gives_transformers_logits() {
    let model = Llama::from_pretrained(reference("llama_tiny")).unwrap();
    let c = model.config();
    assert_eq!(
        (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
        (4, 2, 16)
    );
    assert!(!c.tie_word_embeddings);
    for i in 0..2 {
        let (ids, want) = ids_and_logits(i);
        let g = Graph::new();
        let got = model.forward(&g, &ids, 1).unwrap();
        assert_eq!(got.shape(), &[1, ids.len(), 96]);
        let err = worst(&got.value().to_vec::<f32>().unwrap(), &want);
        assert!(err < 1e-5, "sequence {i}: worst logit difference {err}");
    }
}

#[test]
fn the_cache_gives_the_whole_sequence_logits() {
    let model = Llama::from_pretrained(reference("llama_tiny")).unwrap();
    let (ids, want) = ids_and_logits(1);
    // A prompt of 5 at once, then one token at a time, then the rest at once.
    let mut cache = LlamaCache::exact();
    let mut got = Vec::new();
    for part in [&ids[..5], &ids[5..6], &ids[6..7], &ids[7..]] {
        let g = Graph::new();
        let logits = model.forward_cached(&g, part, &mut cache, false).unwrap();
        assert_eq!(logits.shape(), &[part.len(), 96]);
        got.extend(logits.value().to_vec::<f32>().unwrap());
    }
    assert_eq!(cache.len(), ids.len());
    let err = worst(&got, &want);
    assert!(err < 1e-5, "cached logits differ by {err}");
    // Only the last position, after a truncated cache.
    cache.truncate(5).unwrap();
    let g = Graph::new();
    let last = model
        .forward_cached(&g, &ids[5..], &mut cache, true)
        .unwrap();
    assert_eq!(last.shape(), &[1, 96]);
    let err = worst(
        &last.value().to_vec::<f32>().unwrap(),
        &want[(ids.len() - 1) * 96..],
    );
    assert!(err < 1e-5, "last-position logits differ by {err}");
}

#[test]
fn the_training_forward_has_gradients_and_bad_input_is_an_error() {
    let model = Llama::from_pretrained(reference("llama_tiny")).unwrap();
    let (ids, _) = ids_and_logits(0);
    let g = Graph::new();
    let logits = model.forward(&g, &ids[..6], 2).unwrap();
    assert_eq!(logits.shape(), &[2, 3, 96]);
    let grads = logits.sum().backward().unwrap();
    for (name, p) in model.parameters() {
        assert!(grads.get_param(&p).is_some(), "no gradient for {name}");
    }
    assert!(model.forward(&g, &[1, 2, 3], 2).is_err());
    assert!(model.forward(&g, &[1, 96], 1).is_err());
    assert!(model
        .forward_cached(&g, &[], &mut LlamaCache::new(), true)
        .is_err());
}

#[test]
fn the_gguf_of_the_same_model_gives_the_same_logits() {
    use retrograd::gguf::GgufFile;
    use retrograd::hub::WeightPrecision;
    // llama_tiny.gguf holds the folder's weights as llama.cpp's converter
    // writes them: f32, query and key rows permuted for interleaved pairs.
    let gguf = GgufFile::open(reference("llama_tiny.gguf"));
    let model = Llama::from_gguf(&gguf, WeightPrecision::Quantized).unwrap();
    let folder = Llama::from_pretrained(reference("llama_tiny")).unwrap();
    assert_eq!(model.config(), folder.config());
    for i in 0..2 {
        let (ids, want) = ids_and_logits(i);
        let g = Graph::new();
        let got = model.forward(&g, &ids, 1).unwrap();
        let err = worst(&got.value().to_vec::<f32>().unwrap(), &want);
        assert!(err < 1e-5, "sequence {i}: worst logit difference {err}");
    }
}

#[test]
fn a_model_saves_as_the_gguf_llama_cpp_reads() {
    use retrograd::gguf::GgufFile;
    use retrograd::hub::{GgufSaveOptions, WeightPrecision};
    use retrograd::quant::GgmlType;
    let folder = Llama::from_pretrained(reference("llama_tiny")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    folder.save_gguf(&path, GgufSaveOptions::default()).unwrap();
    // Every tensor holds the bytes llama.cpp's converter wrote for the same
    // weights (tests/reference/llama_tiny.gguf: names, shapes, the query
    // and key rows permuted).
    let (ours, theirs) = (
        GgufFile::open(&path),
        GgufFile::open(reference("llama_tiny.gguf")),
    );
    assert_eq!(ours.tensors().len(), theirs.tensors().len());
    for t in theirs.tensors() {
        let mine = ours.tensor_info(&t.name);
        assert_eq!((mine.shape(), mine.ty), (t.shape(), t.ty), "{}", t.name);
        assert!(
            ours.tensor_bytes(mine) == theirs.tensor_bytes(t),
            "{} differs",
            t.name
        );
    }
    // Quantized on the way out: the reloaded blocks save back unchanged.
    let q8 = dir.path().join("tiny_q8.gguf");
    let options = GgufSaveOptions {
        quantize: Some(GgmlType::Q8_0),
        ..Default::default()
    };
    folder.save_gguf(&q8, options).unwrap();
    let model = Llama::from_gguf(&GgufFile::open(&q8), WeightPrecision::Quantized).unwrap();
    let again = dir.path().join("again.gguf");
    model.save_gguf(&again, GgufSaveOptions::default()).unwrap();
    let (a, b) = (GgufFile::open(&q8), GgufFile::open(&again));
    for t in a.tensors() {
        assert!(
            a.tensor_bytes(t) == b.tensor_bytes(b.tensor_info(&t.name)),
            "{} changed",
            t.name
        );
    }
    let (ids, want) = ids_and_logits(0);
    let g = Graph::new();
    let got = model
        .forward(&g, &ids, 1)
        .unwrap()
        .value()
        .to_vec::<f32>()
        .unwrap();
    let err = worst(&got, &want);
    assert!(err < 0.05, "Q8_0 logits differ from f32 by {err}");
}
