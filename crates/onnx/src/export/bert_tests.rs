//! A BERT sentence encoder (embeddings cut to the sequence length, a
//! padding mask, mean pooling, normalisation) exported with free batch
//! and sequence axes runs at other batch sizes and lengths to retrograd's
//! values.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::{Exporter, OnnxModel};
use retrograd_engine::nn::Module;
use retrograd_engine::{DType, Error, Graph, Result, Tensor, Var};
use retrograd_hub::models::{l2_normalize, mean_pool, BertConfig, BertModel};

fn tiny() -> BertModel {
    let config = BertConfig {
        vocab_size: 40,
        hidden_size: 16,
        num_hidden_layers: 2,
        num_attention_heads: 4,
        intermediate_size: 32,
        max_position_embeddings: 24,
        hidden_dropout_prob: 0.0,
        attention_probs_dropout_prob: 0.0,
        dtype: DType::F32,
        ..BertConfig::base()
    };
    let mut bert = BertModel::with_rng(config, false, &mut ChaCha8Rng::seed_from_u64(3)).unwrap();
    bert.set_training(false);
    bert
}

/// Token ids, a mask padding row `i` by `i` tokens (at least one real
/// token each) and token types, `[b, t]`.
fn batch(b: usize, t: usize, seed: u64) -> [Tensor; 3] {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let ids: Vec<i64> = (0..b * t).map(|_| rng.random_range(1..40)).collect();
    let mask: Vec<i64> = (0..b * t)
        .map(|k| i64::from(k % t < (t - (k / t) % t).max(1)))
        .collect();
    let types: Vec<i64> = (0..b * t).map(|_| rng.random_range(0..2)).collect();
    [ids, mask, types].map(|v| Tensor::from_vec(v, &[b, t]).unwrap())
}

/// The sentence embedding and the last hidden state.
fn encode<'g>(bert: &BertModel, x: &[Var<'g>; 3]) -> Result<(Var<'g>, Var<'g>)> {
    let hidden = bert.forward(&x[0], Some(&x[1]), Some(&x[2]))?;
    Ok((l2_normalize(&mean_pool(&hidden, &x[1])?)?, hidden))
}

fn export(bert: &BertModel, b: usize, t: usize) -> Result<Vec<u8>> {
    let graph = Graph::new();
    graph.set_tracing(true);
    let x = batch(b, t, 0).map(|v| graph.constant(v));
    let (embedding, hidden) = encode(bert, &x)?;
    let mut e = Exporter::new(&graph)
        .input("input_ids", &x[0])
        .input("attention_mask", &x[1])
        .input("token_type_ids", &x[2])
        .output("sentence_embedding", &embedding)
        .output("last_hidden_state", &hidden)
        .parameters_of(bert)
        .dynamic_batch("batch");
    for name in [
        "input_ids",
        "attention_mask",
        "token_type_ids",
        "last_hidden_state",
    ] {
        e = e.dynamic_axis(name, 1, "sequence");
    }
    e.to_bytes()
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.shape(), b.shape());
    let (a, b) = (a.to_f64_vec(), b.to_f64_vec());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f64::max)
}

#[test]
fn bert_exports_with_free_batch_and_sequence_axes() {
    let bert = tiny();
    let model = OnnxModel::from_bytes(&export(&bert, 3, 7).unwrap()).unwrap();
    for spec in model.inputs() {
        assert_eq!(spec.dims, Some(vec![None, None]), "{}", spec.name);
    }
    let names: Vec<String> = model.parameters().into_iter().map(|(n, _)| n).collect();
    assert!(names
        .iter()
        .any(|n| n == "embeddings.position_embeddings.weight"));
    for (b, t, seed) in [(3, 7, 0), (5, 11, 1), (1, 2, 2), (2, 24, 3)] {
        let x = batch(b, t, seed);
        let got = model.infer(&x).unwrap();
        let (embedding, hidden) = encode(&bert, &x.clone().map(Var::from)).unwrap();
        assert_eq!(got[0].shape(), &[b, 16]);
        assert_eq!(got[1].shape(), &[b, t, 16]);
        let d = max_diff(&got[0], embedding.value()).max(max_diff(&got[1], hidden.value()));
        assert!(d <= 1e-5, "batch {b}, length {t}: imported differs by {d}");
    }
}

#[test]
fn free_axes_recorded_at_one_size_are_refused_when_a_slice_must_choose() {
    // Batch 4 and length 4: the position table's cut could follow either.
    let err = export(&tiny(), 4, 4).unwrap_err();
    assert!(
        matches!(&err, Error::OnnxExport { reason, .. } if reason.contains("distinct sizes")),
        "{err}"
    );
}
