//! ONNX inference: a model written by torch.onnx.export
//! (`bench/onnx_models.py` puts it in `target/bench-onnx/`), imported by
//! `OnnxModel::load` and run on its recorded inputs on the inference
//! graph; `bench/onnx_compare.sh` runs onnxruntime on the same file in
//! the same session. Workloads `onnx_mnist_cnn` (the CNN of
//! train_mnist_cnn, batch 64), `onnx_minilm` (all-MiniLM-L6-v2,
//! batch 32), `onnx_resnet18` (batch 8 at 224x224), `onnx_mobilenet_v3`
//! (mobilenet_v3_small, batch 32 at 224x224) and `onnx_bert_base` (a
//! seeded BERT-base-sized encoder, batch 8 x 128). Each line also gives
//! the time to import the file (`load_ms`), from the file to the first
//! output (`first_output_ms`: the import and one run), and to export the imported model again at batch 1
//! (`export_record_ms`: one traced forward; `export_write_ms`: the ONNX
//! bytes), and how far the re-exported model, imported once more, is from
//! the first (`reexport_max_diff`).

use std::path::PathBuf;
use std::time::Instant;

use retrograd::io::load_tensors;
use retrograd::onnx::{export_input, Exporter, OnnxModel};
use retrograd::{Graph, Result, Tensor, Var};

use crate::report::{emit, time, Value};
use crate::Options;

fn run(name: &str, opts: &Options) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench-onnx");
    let path = dir.join(format!("{name}.onnx"));
    if !path.exists() {
        eprintln!(
            "skipped onnx_{name}: no {} (run python3 bench/onnx_models.py)",
            path.display()
        );
        return;
    }
    let given = load_tensors(dir.join(format!("{name}.inputs.safetensors")))
        .expect("its inputs")
        .tensors;
    // File to first output: the import, then one run.
    let start = Instant::now();
    let model = OnnxModel::load(&path).expect("a model bench/onnx_models.py wrote");
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs: Vec<Tensor> = model
        .input_names()
        .iter()
        .map(|n| given[*n].clone())
        .collect();
    std::hint::black_box(model.infer(&inputs).expect("a run"));
    let first_output_ms = start.elapsed().as_secs_f64() * 1e3;
    let stats = time(opts.repeats, || {
        std::hint::black_box(model.infer(&inputs).expect("a run"));
    });
    // Export: one traced forward at batch 1 (the recording), then the
    // ONNX bytes (the writing), each timed.
    let one: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.narrow(0, 0, 1).expect("a batch").contiguous())
        .collect();
    let (bytes, record_ms, write_ms) = export(&model, &one).expect("the imported model exports");
    let again = OnnxModel::from_bytes(&bytes).expect("the export imports");
    let (a, b) = (
        model.infer(&one).expect("a run"),
        again.infer(&one).expect("a run"),
    );
    let diff = a[0]
        .to_f64_vec()
        .iter()
        .zip(b[0].to_f64_vec())
        .fold(0.0f64, |m, (x, y)| m.max((x - y).abs()));
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", format!("onnx_{name}").as_str().into()),
            ("batch", inputs[0].shape()[0].into()),
            ("threads", rayon::current_num_threads().into()),
            ("load_ms", Value::Num(load_ms)),
            ("first_output_ms", Value::Num(first_output_ms)),
            ("export_record_ms", Value::Num(record_ms)),
            ("export_write_ms", Value::Num(write_ms)),
            ("export_bytes", bytes.len().into()),
            ("reexport_max_diff", Value::Num(diff)),
        ],
        Some(stats),
    );
}

/// The imported model recorded once on a traced graph and written as
/// ONNX at the inputs' sizes: the bytes and the two times in ms.
fn export(model: &OnnxModel, inputs: &[Tensor]) -> Result<(Vec<u8>, f64, f64)> {
    let start = Instant::now();
    let graph = Graph::new();
    graph.set_tracing(true);
    let vars = inputs
        .iter()
        .map(|t| export_input(&graph, t))
        .collect::<Result<Vec<Var<'_>>>>()?;
    let refs: Vec<&Var<'_>> = vars.iter().collect();
    let outputs = model.forward(&graph, &refs)?;
    let record_ms = start.elapsed().as_secs_f64() * 1e3;
    let start = Instant::now();
    // Fixed sizes: shape arithmetic that PyTorch's exporter wrote
    // (Shape, Range) ran at import as constants of these sizes.
    let mut e = Exporter::new(&graph).parameters_of(model);
    for (name, v) in model.input_names().into_iter().zip(&vars) {
        e = e.input(name, v);
    }
    for (name, v) in model.output_names().into_iter().zip(&outputs) {
        e = e.output(name, v);
    }
    let bytes = e.to_bytes()?;
    Ok((bytes, record_ms, start.elapsed().as_secs_f64() * 1e3))
}

pub fn run_mnist_cnn(opts: &Options) {
    run("mnist_cnn", opts);
}

pub fn run_minilm(opts: &Options) {
    run("minilm", opts);
}

pub fn run_resnet18(opts: &Options) {
    run("resnet18", opts);
}

pub fn run_mobilenet_v3(opts: &Options) {
    run("mobilenet_v3", opts);
}

pub fn run_bert_base(opts: &Options) {
    run("bert_base", opts);
}
