//! `onnx export minilm MODEL_DIR OUT.onnx`: a sentence-transformers folder
//! (all-MiniLM-L6-v2) as an ONNX model with inputs `input_ids`,
//! `attention_mask`, `token_type_ids` (`[batch, sequence]`, i64) and
//! outputs `sentence_embedding` (`[batch, dim]`: pooled and normalised as
//! the folder says) and `last_hidden_state` (`[batch, sequence, hidden]`),
//! both axes free unless `--static`.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use retrograd::hub::SentenceTransformer;
use retrograd::io::save_tensors;
use retrograd::nn::Module;
use retrograd::onnx::Exporter;
use retrograd::{Graph, Result, Tensor, Var};

/// The texts the graph is recorded on (case 0 of `--io`): real sentences
/// of different lengths, so the batch is padded. Batch 3 and a length
/// no fixed size of the model equals (the exporter tells a length read
/// off the input by its recorded size).
const RECORDED: [&str; 3] = [
    "A man is playing a guitar on a quiet street corner.",
    "The quick brown fox jumps over the lazy dog.",
    "Hello!",
];

/// Case 1 of `--io`: another batch size and padded length, through the
/// free axes.
const OTHER: [&str; 5] = [
    "Shall I compare thee to a summer's day?",
    "Thou art more lovely and more temperate: rough winds do shake the darling buds of May, \
     and summer's lease hath all too short a date.",
    "To be, or not to be: that is the question.",
    "A cat sleeps.",
    "Un chat dort.",
];

/// Exports the folder `dir` to `out`; with `io`, also writes both cases'
/// inputs and retrograd's outputs there.
pub fn export(dir: &Path, out: &Path, io: Option<&Path>, dynamic: bool) -> Result<()> {
    let start = Instant::now();
    let model = SentenceTransformer::from_pretrained(dir)?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let batch = model.tokenizer().encode_batch(&RECORDED)?;
    let graph = Graph::new();
    graph.try_set_tracing(true)?;
    let ids = graph.constant(batch.input_ids);
    let mask = graph.constant(batch.attention_mask);
    let types = graph.constant(batch.token_type_ids);
    let hidden = model.model().forward(&ids, Some(&mask), Some(&types))?;
    let embedding = model.pool(&hidden, &mask)?;
    let record_ms = start.elapsed().as_secs_f64() * 1e3;

    let start = Instant::now();
    let mut exporter = Exporter::new(&graph)
        .graph_name("sentence_transformer")
        .input("input_ids", &ids)
        .input("attention_mask", &mask)
        .input("token_type_ids", &types)
        .output("sentence_embedding", &embedding)
        .output("last_hidden_state", &hidden)
        .parameters_of(model.model());
    if dynamic {
        exporter = exporter.dynamic_batch("batch");
        for name in [
            "input_ids",
            "attention_mask",
            "token_type_ids",
            "last_hidden_state",
        ] {
            exporter = exporter.dynamic_axis(name, 1, "sequence");
        }
    }
    exporter.save(out)?;
    let write_ms = start.elapsed().as_secs_f64() * 1e3;
    println!(
        "wrote {}: {} nodes recorded, {} parameters, inputs [{}, {}] i64, outputs {:?} and {:?}{} \
         (export {:.1} ms: record {record_ms:.1} ms, write {write_ms:.1} ms; model folder read in {load_ms:.1} ms)",
        out.display(),
        graph.len(),
        model.model().num_parameters(),
        ids.shape()[0],
        ids.shape()[1],
        embedding.shape(),
        hidden.shape(),
        if dynamic { ", batch and sequence axes free" } else { "" },
        record_ms + write_ms,
    );

    if let Some(io) = io {
        let mut cases = BTreeMap::new();
        for (k, texts) in [&RECORDED[..], &OTHER[..]].into_iter().enumerate() {
            let batch = model.tokenizer().encode_batch(texts)?;
            let inputs = [
                ("input_ids", batch.input_ids),
                ("attention_mask", batch.attention_mask),
                ("token_type_ids", batch.token_type_ids),
            ];
            let [ids, mask, types] = inputs.each_ref().map(|(_, t)| Var::from(t.clone()));
            let hidden = model.model().forward(&ids, Some(&mask), Some(&types))?;
            let embedding = model.pool(&hidden, &mask)?;
            for (name, t) in inputs {
                cases.insert(format!("case{k}.{name}"), t);
            }
            let outputs: [(&str, Tensor); 2] = [
                ("sentence_embedding", embedding.value().clone()),
                ("last_hidden_state", hidden.value().clone()),
            ];
            for (name, t) in outputs {
                cases.insert(format!("case{k}.{name}"), t);
            }
        }
        save_tensors(io, &cases, &BTreeMap::new())?;
        println!(
            "wrote {}: {} and {} tokenized texts, retrograd's outputs",
            io.display(),
            RECORDED.len(),
            OTHER.len()
        );
    }
    Ok(())
}
