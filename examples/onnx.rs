//! ONNX from the command line: export a README model's checkpoint, inspect
//! an `.onnx` file (its graph as retrograd records it, in the trace format,
//! and as SVG), run one on given inputs, profile its nodes.
//!
//! ```sh
//! cargo run --release --example train_digits                       # writes target/train_digits.safetensors
//! cargo run --release --example onnx -- export digits target/train_digits.safetensors target/digits.onnx
//! cargo run --release --example onnx -- inspect target/digits.onnx --svg target/digits.svg
//! cargo run --release --example onnx -- run target/digits.onnx --batch 4
//! cargo run --release --example onnx -- profile target/digits.onnx --batch 64 --runs 50
//! cargo run --release --example onnx -- export mnist_cnn --random target/cnn.onnx   # fresh weights, no training
//! scripts/fetch_minilm.sh                                            # all-MiniLM-L6-v2 into .cache/models
//! cargo run --release --example onnx -- export minilm .cache/models/all-MiniLM-L6-v2 target/minilm.onnx
//! ```

#[path = "support/mnist_cnn.rs"]
mod mnist_cnn;
#[path = "support/onnx_conformance.rs"]
mod onnx_conformance;
#[path = "support/onnx_minilm.rs"]
mod onnx_minilm;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use retrograd::data::{digits, mnist};
use retrograd::io::{checkpoint_metadata, load_checkpoint, load_tensors, save_tensors};
use retrograd::nn::{Activation, Forward, Gpt, GptConfig, Mlp, Module};
use retrograd::onnx::{export_input, Exporter, OnnxModel};
use retrograd::viz::GraphPictures;
use retrograd::viz::VizOptions;
use retrograd::{DType, Graph, Result, Tensor, Var};

const USAGE: &str = "\
usage:
  onnx export MODEL (CHECKPOINT | --random) OUT.onnx [options]
      MODEL: digits (train_digits), mnist_cnn (train_mnist_cnn) or shakespeare (train_shakespeare)
  onnx export minilm MODEL_DIR OUT.onnx [--io FILE] [--static]
      a sentence-transformers folder (all-MiniLM-L6-v2, scripts/fetch_minilm.sh): inputs input_ids,
      attention_mask, token_type_ids [batch, sequence] (i64), outputs sentence_embedding
      [batch, dim] and last_hidden_state [batch, sequence, hidden], recorded on 3 padded texts;
      --io writes those and 5 other texts with retrograd's outputs
      --random            fresh seeded weights instead of a checkpoint (train_digits' default sizes,
                          train_mnist_cnn's, a small GPT)
      --activation NAME   the MLP's activation, as trained (default relu)
      --batch N           batch size of the recorded example (default 8)
      --static            fixed sizes (default: a free `batch` axis; minilm's `sequence` too)
      --io FILE           also write example inputs and retrograd's outputs (safetensors:
                          case0.input, case0.output at --batch; case1.* at --batch + 3)
  onnx inspect FILE.onnx [--svg FILE] [--batch N] [--max-nodes N]
      prints the model's inputs, outputs and parameters, then the graph it runs as
      retrograd records it (the trace format); --svg draws that graph
  onnx run FILE.onnx [--inputs FILE.safetensors] [--batch N] [--seed S] [--out FILE.safetensors]
      runs the model on the named tensors of --inputs (default: seeded random inputs, free sizes
      set to --batch), prints each output, and writes them to --out
  onnx profile FILE.onnx [--inputs FILE.safetensors] [--batch N] [--runs N] [--top N]
      runs the model --runs times (default 20) on the inputs `run` takes and prints where the
      time goes: per ONNX op type, then the --top slowest nodes (default 20)
  onnx ops
      prints the ONNX op types the importer runs, one a line
  onnx conformance LIST [--from N]
      runs ONNX's node conformance cases, one case folder a line of LIST (written by
      tests/reference/onnx_conformance.py), from the N-th (default 0), and prints a JSON
      line per case: its status (pass, fail, unsupported, error, panic) and why
options for all: --seed S (default 0), -h/--help";

#[derive(Default)]
struct Args {
    command: String,
    positional: Vec<String>,
    random: bool,
    activation: Option<String>,
    batch: usize,
    dynamic: bool,
    io: Option<PathBuf>,
    svg: Option<PathBuf>,
    max_nodes: Option<usize>,
    inputs: Option<PathBuf>,
    out: Option<PathBuf>,
    seed: u64,
    runs: u32,
    top: usize,
    from: usize,
}

fn parse_args() -> std::result::Result<Option<Args>, String> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_env();
    let mut a = Args {
        batch: 8,
        dynamic: true,
        runs: 20,
        top: 20,
        ..Args::default()
    };
    let err = |e: lexopt::Error| e.to_string();
    let text = |p: &mut lexopt::Parser| -> std::result::Result<String, String> {
        p.value().map_err(err)?.string().map_err(err)
    };
    while let Some(arg) = p.next().map_err(err)? {
        match arg {
            Short('h') | Long("help") => return Ok(None),
            Long("random") => a.random = true,
            Long("static") => a.dynamic = false,
            Long("activation") => a.activation = Some(text(&mut p)?),
            Long("batch") => {
                a.batch = text(&mut p)?.parse().map_err(|e| format!("--batch: {e}"))?
            }
            Long("seed") => a.seed = text(&mut p)?.parse().map_err(|e| format!("--seed: {e}"))?,
            Long("runs") => a.runs = text(&mut p)?.parse().map_err(|e| format!("--runs: {e}"))?,
            Long("from") => a.from = text(&mut p)?.parse().map_err(|e| format!("--from: {e}"))?,
            Long("top") => a.top = text(&mut p)?.parse().map_err(|e| format!("--top: {e}"))?,
            Long("max-nodes") => {
                a.max_nodes = Some(
                    text(&mut p)?
                        .parse()
                        .map_err(|e| format!("--max-nodes: {e}"))?,
                )
            }
            Long("io") => a.io = Some(text(&mut p)?.into()),
            Long("svg") => a.svg = Some(text(&mut p)?.into()),
            Long("inputs") => a.inputs = Some(text(&mut p)?.into()),
            Long("out") => a.out = Some(text(&mut p)?.into()),
            Value(v) if a.command.is_empty() => a.command = v.string().map_err(err)?,
            Value(v) => a.positional.push(v.string().map_err(err)?),
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if a.batch == 0 {
        return Err("--batch must be > 0".into());
    }
    if a.runs == 0 {
        return Err("--runs must be > 0".into());
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(Some(a)) if !a.command.is_empty() => a,
        Ok(_) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let outcome = match args.command.as_str() {
        "export" => export(&args),
        "inspect" => inspect(&args),
        "run" => run(&args),
        "profile" => profile(&args),
        "conformance" => conformance(&args),
        "ops" => {
            for op in retrograd::onnx::supported_import_ops() {
                println!("{op}");
            }
            Ok(())
        }
        other => Err(format!("unknown command `{other}`\n\n{USAGE}").into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

type Outcome = std::result::Result<(), Box<dyn std::error::Error>>;

/// Makes a model's example input at a batch size.
type MakeExample = dyn Fn(usize, &mut ChaCha8Rng) -> Result<Tensor>;

/// A README model, rebuilt to load its checkpoint (or with fresh weights).
struct Loaded {
    model: Box<dyn Forward>,
    /// An example input at a batch size.
    example: Box<MakeExample>,
}

fn export(a: &Args) -> Outcome {
    if let [kind, dir, out] = a.positional.as_slice()
        && kind == "minilm"
        && !a.random
    {
        let io = a.io.as_deref();
        return Ok(onnx_minilm::export(
            dir.as_ref(),
            out.as_ref(),
            io,
            a.dynamic,
        )?);
    }
    let (kind, checkpoint, out) = match a.positional.as_slice() {
        [kind, out] if a.random => (kind.as_str(), None, out),
        [kind, ckpt, out] if !a.random => (kind.as_str(), Some(PathBuf::from(ckpt)), out),
        _ => {
            return Err(
                format!("export takes MODEL (CHECKPOINT | --random) OUT.onnx\n\n{USAGE}").into(),
            )
        }
    };
    let mut model = load_model(kind, checkpoint.as_ref(), a)?;
    model.model.set_training(false);
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    let example = (model.example)(a.batch, &mut rng)?;
    let graph = Graph::new();
    graph.try_set_tracing(true)?;
    let x = export_input(&graph, &example)?;
    let y = model.model.forward(&x)?;
    let mut exporter = Exporter::new(&graph)
        .input("input", &x)
        .output("output", &y)
        .parameters_of(model.model.as_ref());
    if a.dynamic {
        exporter = exporter.dynamic_batch("batch");
    }
    let start = std::time::Instant::now();
    exporter.save(out)?;
    println!(
        "wrote {out}: {} nodes recorded, {} parameters, input {:?} {}, output {:?}{} ({:.1} ms)",
        graph.len(),
        model.model.num_parameters(),
        example.shape(),
        example.dtype(),
        y.shape(),
        if a.dynamic { ", batch axis free" } else { "" },
        start.elapsed().as_secs_f64() * 1e3
    );
    if let Some(io) = &a.io {
        let mut cases = BTreeMap::new();
        for (k, batch) in [a.batch, a.batch + 3].into_iter().enumerate() {
            let input = if k == 0 {
                example.clone()
            } else {
                (model.example)(batch, &mut rng)?
            };
            let output = model
                .model
                .forward(&Var::from(input.clone()))?
                .value()
                .clone();
            cases.insert(format!("case{k}.input"), input);
            cases.insert(format!("case{k}.output"), output);
        }
        save_tensors(io, &cases, &BTreeMap::new())?;
        println!(
            "wrote {}: example inputs and retrograd's outputs",
            io.display()
        );
    }
    Ok(())
}

fn load_model(kind: &str, checkpoint: Option<&PathBuf>, a: &Args) -> Result<Loaded> {
    let seed = a.seed;
    match kind {
        "digits" => {
            let activation: Activation = a.activation.as_deref().unwrap_or("relu").parse()?;
            let sizes = match checkpoint {
                Some(c) => matrix_sizes(c)?,
                None => vec![digits::NUM_PIXELS, 128, 64, digits::NUM_CLASSES],
            };
            let build = |dropout: f64| {
                Mlp::builder(&sizes)
                    .activation(activation)
                    .dropout(dropout)
                    .dtype(DType::F32)
                    .seed(seed)
                    .build()
            };
            let model = load_first(checkpoint, [build(0.0)?, build(0.1)?])?;
            let data = digits::load_bundled()?;
            Ok(Loaded {
                model: Box::new(model),
                example: Box::new(move |b, _| {
                    rows(data.features(), 0, b, &[b, digits::NUM_PIXELS])
                }),
            })
        }
        "mnist_cnn" => {
            let (channels, hidden, batch_norm) = match checkpoint {
                Some(c) => cnn_sizes(c)?,
                None => (vec![32, 64], 128, true),
            };
            let build = |dropout| mnist_cnn::build(&channels, hidden, batch_norm, dropout, seed);
            let model = load_first(checkpoint, [build(0.25)?, build(0.0)?])?;
            let data = mnist::load_bundled()?;
            Ok(Loaded {
                model: Box::new(model),
                example: Box::new(move |b, _| {
                    rows(data.features(), 0, b, &[b, 1, mnist::SIDE, mnist::SIDE])
                }),
            })
        }
        "shakespeare" => {
            let config = match checkpoint {
                Some(c) => {
                    let meta = checkpoint_metadata(c)?;
                    let text = meta.get(GptConfig::METADATA_KEY).ok_or_else(|| retrograd::Error::Format {
                        op: "onnx export",
                        path: c.display().to_string(),
                        reason: "not a train_shakespeare checkpoint (no model sizes in its metadata)".into(),
                    })?;
                    GptConfig::from_metadata(text)?
                }
                None => GptConfig {
                    vocab_size: 65,
                    block_size: 64,
                    n_layer: 2,
                    n_head: 4,
                    n_embd: 64,
                    dropout: 0.0,
                    bias: false,
                    activation: Activation::Gelu,
                    dtype: DType::F32,
                },
            };
            let model = Gpt::with_rng(config, &mut ChaCha8Rng::seed_from_u64(seed))?;
            if let Some(c) = checkpoint {
                load_checkpoint(c, &model, None)?;
            }
            Ok(Loaded {
                model: Box::new(model),
                example: Box::new(move |b, rng| {
                    let ids: Vec<i64> = (0..b * config.block_size)
                        .map(|_| rng.random_range(0..config.vocab_size as i64))
                        .collect();
                    Tensor::from_vec(ids, &[b, config.block_size])
                }),
            })
        }
        other => Err(retrograd::Error::InvalidArgument {
            op: "onnx export",
            reason: format!(
                "unknown model `{other}` (digits, mnist_cnn, shakespeare, or minilm with its \
                 model folder)"
            ),
        }),
    }
}

/// `b` rows of `width` from `data`, starting at row `start`, as f32 of `shape`.
fn rows(data: &[f64], start: usize, b: usize, shape: &[usize]) -> Result<Tensor> {
    let width: usize = shape[1..].iter().product();
    let rows = data.len() / width;
    let values: Vec<f64> = (0..b)
        .flat_map(|i| {
            data[((start + i) % rows) * width..][..width]
                .iter()
                .copied()
        })
        .collect();
    Tensor::from_f64_slice(&values, shape, DType::F32)
}

/// The first candidate architecture whose names and shapes the checkpoint
/// fits (dropout layers shift a `Sequential`'s names), loaded.
fn load_first<M: Module, const N: usize>(
    checkpoint: Option<&PathBuf>,
    candidates: [M; N],
) -> Result<M> {
    let Some(path) = checkpoint else {
        return Ok(candidates.into_iter().next().expect("one candidate"));
    };
    let mut last = None;
    for m in candidates {
        match load_checkpoint(path, &m, None) {
            Ok(()) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(last.expect("at least one candidate"))
}

/// Layer sizes of an MLP checkpoint: its 2-d weights' inputs, then the last output.
fn matrix_sizes(path: &PathBuf) -> Result<Vec<usize>> {
    let file = load_tensors(path)?;
    let mut weights: Vec<(usize, Vec<usize>)> = file
        .tensors
        .iter()
        .filter(|(n, t)| n.ends_with(".weight") && !n.starts_with("optimizer.") && t.rank() == 2)
        .map(|(n, t)| (layer_index(n), t.shape().to_vec()))
        .collect();
    weights.sort();
    let mut sizes: Vec<usize> = weights.iter().map(|(_, s)| s[1]).collect();
    sizes.extend(weights.last().map(|(_, s)| s[0]));
    Ok(sizes)
}

/// The CNN's channels, hidden width and batch norm, from its checkpoint.
fn cnn_sizes(path: &PathBuf) -> Result<(Vec<usize>, usize, bool)> {
    let file = load_tensors(path)?;
    let mut convs: Vec<(usize, usize)> = Vec::new();
    let mut linears: Vec<(usize, usize)> = Vec::new();
    for (name, t) in file
        .tensors
        .iter()
        .filter(|(n, _)| n.ends_with(".weight") && !n.starts_with("optimizer."))
    {
        match t.rank() {
            4 => convs.push((layer_index(name), t.shape()[0])),
            2 => linears.push((layer_index(name), t.shape()[0])),
            _ => {}
        }
    }
    convs.sort();
    linears.sort();
    let batch_norm = file.tensors.keys().any(|n| n.ends_with("running_mean"));
    let hidden = linears.first().map_or(128, |l| l.1);
    Ok((convs.into_iter().map(|c| c.1).collect(), hidden, batch_norm))
}

/// The leading number of a `Sequential` parameter name (`"4.weight"` is 4).
fn layer_index(name: &str) -> usize {
    name.split('.').find_map(|p| p.parse().ok()).unwrap_or(0)
}

fn onnx_arg(a: &Args) -> std::result::Result<&str, String> {
    match a.positional.as_slice() {
        [file] => Ok(file),
        _ => Err(format!("`{}` takes one FILE.onnx\n\n{USAGE}", a.command)),
    }
}

/// Inputs for `model`: from `--inputs` by name, else seeded random values
/// of the declared shapes (free sizes set to `--batch`; integer inputs 0).
fn model_inputs(model: &OnnxModel, a: &Args) -> Result<Vec<Tensor>> {
    let given = a.inputs.as_ref().map(load_tensors).transpose()?;
    let mut rng = ChaCha8Rng::seed_from_u64(a.seed);
    model
        .inputs()
        .iter()
        .map(|spec| {
            if let Some(file) = &given {
                return file.tensors.get(&spec.name).cloned().ok_or_else(|| {
                    retrograd::Error::InvalidArgument {
                        op: "onnx run",
                        reason: format!("--inputs has no tensor named `{}`", spec.name),
                    }
                });
            }
            let shape: Vec<usize> = spec
                .dims
                .iter()
                .flatten()
                .map(|d| d.unwrap_or(a.batch))
                .collect();
            match spec.dtype.unwrap_or(DType::F32) {
                d @ (DType::F32 | DType::F64) => Tensor::randn_with(&shape, d, &mut rng),
                d => Tensor::zeros(&shape, d),
            }
        })
        .collect()
}

fn inspect(a: &Args) -> Outcome {
    let path = onnx_arg(a)?;
    let start = std::time::Instant::now();
    let model = OnnxModel::load(path)?;
    println!(
        "{path}: graph {:?}, opset {}, read in {:.1} ms",
        model.graph_name(),
        model.opset(),
        start.elapsed().as_secs_f64() * 1e3
    );
    for spec in model.inputs() {
        let dims: Vec<String> = spec
            .dims
            .iter()
            .flatten()
            .map(|d| d.map_or("?".into(), |d| d.to_string()))
            .collect();
        let dtype = spec.dtype.map_or("?".to_string(), |d| d.to_string());
        println!("  input  {}: {dtype} [{}]", spec.name, dims.join(", "));
    }
    println!("  output {}", model.output_names().join(", "));
    println!(
        "  {} parameters in {} tensors; {} buffers",
        model.num_parameters(),
        model.parameters().len(),
        model.buffers().len()
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for op in model.op_types() {
        *counts.entry(op).or_default() += 1;
    }
    let counts: Vec<String> = counts.iter().map(|(op, n)| format!("{op} x{n}")).collect();
    println!("  nodes: {}", counts.join(", "));
    let graph = Graph::new();
    let inputs: Vec<Var<'_>> = model_inputs(&model, a)?
        .into_iter()
        .map(|t| {
            if t.is_float() {
                graph.try_variable(t)
            } else {
                Ok(graph.constant(t))
            }
        })
        .collect::<Result<_>>()?;
    for (v, spec) in inputs.iter().zip(model.inputs()) {
        v.clone().named(&spec.name);
    }
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let outputs = model.forward(&graph, &refs)?;
    for (name, p) in model.parameters() {
        graph.param(&p).named(&name);
    }
    println!("\nthe graph retrograd records ({} nodes):", graph.len());
    print!("{graph}");
    if let Some(svg) = &a.svg {
        let mut options = VizOptions::new().root(&outputs[0]).title(path);
        if let Some(n) = a.max_nodes {
            options = options.max_nodes(n);
        }
        graph.write_svg(svg, &options)?;
        println!("wrote {}", svg.display());
    }
    Ok(())
}

fn profile(a: &Args) -> Outcome {
    let path = onnx_arg(a)?;
    let model = OnnxModel::load(path)?;
    let inputs = model_inputs(&model, a)?;
    let profile = model.profile(&inputs, a.runs)?;
    let threads = rayon::current_num_threads();
    println!("{path} on {threads} threads:");
    print!("{}", profile.report(a.top));
    Ok(())
}

fn run(a: &Args) -> Outcome {
    let path = onnx_arg(a)?;
    let start = std::time::Instant::now();
    let model = OnnxModel::load(path)?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;
    let inputs = model_inputs(&model, a)?;
    let start = std::time::Instant::now();
    let outputs = model.infer(&inputs)?;
    println!(
        "ran {path} in {:.2} ms (imported in {load_ms:.1} ms)",
        start.elapsed().as_secs_f64() * 1e3
    );
    let mut named = BTreeMap::new();
    for (name, t) in model.output_names().into_iter().zip(outputs) {
        let values = t.to_f64_vec();
        let head: Vec<String> = values.iter().take(6).map(|v| format!("{v:.5}")).collect();
        println!(
            "  {name}: {} {:?} [{}{}]",
            t.dtype(),
            t.shape(),
            head.join(", "),
            if values.len() > 6 { ", ..." } else { "" }
        );
        if t.rank() == 2 && t.is_float() {
            let classes = t.shape()[1];
            let argmax: Vec<usize> = values
                .chunks(classes.max(1))
                .map(|row| {
                    row.iter()
                        .enumerate()
                        .fold(0, |best, (i, v)| if *v > row[best] { i } else { best })
                })
                .collect();
            println!("    argmax per row: {argmax:?}");
        }
        named.insert(name.to_string(), t);
    }
    if let Some(out) = &a.out {
        save_tensors(out, &named, &BTreeMap::new())?;
        println!("wrote {}", out.display());
    }
    Ok(())
}

fn conformance(a: &Args) -> Outcome {
    let [list] = a.positional.as_slice() else {
        return Err(format!("conformance takes one case list\n\n{USAGE}").into());
    };
    onnx_conformance::run(std::path::Path::new(list), a.from)
}
