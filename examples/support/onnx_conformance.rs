//! `onnx conformance LIST [--from N]`: runs ONNX's node conformance cases
//! (written out by `tests/reference/onnx_conformance.py`: one folder per
//! case holding `model.onnx` and `test_data_set_0/{input,output}_K.pb`)
//! through the importer and prints one JSON line per case as it finishes:
//! `{"index", "case", "status", "detail"}`. The status is `pass`, `fail`
//! (outputs differ from ONNX's), `unsupported` (the importer refuses the
//! model by name), `error` (any other error) or `panic`. One process runs
//! them all; the script restarts it after the last reported case if it
//! ever dies, so one case cannot take the others down.

use std::io::Write;
use std::path::{Path, PathBuf};

use retrograd::onnx::{decode_tensor, OnnxModel};
use retrograd::{DType, Error, Tensor};

/// ONNX's backend test runner's tolerances for node cases.
const RTOL: f64 = 1e-3;
const ATOL: f64 = 1e-7;

/// Runs the cases listed in `list` (one folder a line) from index `from`.
pub fn run(list: &Path, from: usize) -> std::result::Result<(), Box<dyn std::error::Error>> {
    let text = std::fs::read_to_string(list)
        .map_err(|e| format!("cannot read case list {}: {e}", list.display()))?;
    let cases: Vec<PathBuf> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(PathBuf::from)
        .collect();
    // Panics are reported per case; the default hook's message would
    // interleave with the JSON lines.
    std::panic::set_hook(Box::new(|_| {}));
    let stdout = std::io::stdout();
    for (index, dir) in cases.iter().enumerate().skip(from) {
        let outcome = std::panic::catch_unwind(|| run_case(dir));
        let (status, detail) = match outcome {
            Ok(Ok(())) => ("pass", String::new()),
            Ok(Err(Outcome::Fail(d))) => ("fail", d),
            Ok(Err(Outcome::Error(Error::OnnxUnsupported { items }))) => {
                ("unsupported", items.join("; "))
            }
            Ok(Err(Outcome::Error(e))) => ("error", e.to_string()),
            Err(payload) => {
                let msg = payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                ("panic", msg)
            }
        };
        let name = dir.file_name().map(|n| n.to_string_lossy().into_owned());
        let line = serde_json::json!({
            "index": index,
            "case": name.unwrap_or_default(),
            "status": status,
            "detail": detail,
        });
        let mut out = stdout.lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    Ok(())
}

enum Outcome {
    /// The model ran; an output differs from the expected one.
    Fail(String),
    /// The importer or the run returned an error.
    Error(Error),
}

impl From<Error> for Outcome {
    fn from(e: Error) -> Self {
        Outcome::Error(e)
    }
}

/// The `.pb` tensors `{prefix}_0.pb`, `{prefix}_1.pb`, ... in `dir`.
fn tensors(dir: &Path, prefix: &str) -> Result<Vec<Tensor>, Outcome> {
    let mut out = Vec::new();
    loop {
        let path = dir.join(format!("{prefix}_{}.pb", out.len()));
        let Ok(bytes) = std::fs::read(&path) else {
            return Ok(out);
        };
        out.push(
            decode_tensor(&bytes)
                .map_err(|e| Outcome::Fail(format!("{prefix} {} does not read: {e}", out.len())))?,
        );
    }
}

fn run_case(dir: &Path) -> Result<(), Outcome> {
    let model = OnnxModel::load(dir.join("model.onnx"))?;
    let data = dir.join("test_data_set_0");
    let inputs = tensors(&data, "input")?;
    let expected = tensors(&data, "output")?;
    let outputs = model.infer(&inputs)?;
    if outputs.len() < expected.len() {
        return Err(Outcome::Fail(format!(
            "{} outputs, {} expected",
            outputs.len(),
            expected.len()
        )));
    }
    for (k, (got, want)) in outputs.iter().zip(&expected).enumerate() {
        compare(got, want).map_err(|d| Outcome::Fail(format!("output {k}: {d}")))?;
    }
    Ok(())
}

/// Same dtype and shape; floats within `ATOL + RTOL·|expected|` (NaN where
/// NaN is expected, infinities equal), integers and bools exactly.
fn compare(got: &Tensor, want: &Tensor) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!("dtype {}, expected {}", got.dtype(), want.dtype()));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?}, expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    let exact = matches!(want.dtype(), DType::I64 | DType::Bool);
    let close = |a: f64, b: f64| {
        if exact {
            a == b
        } else if b.is_nan() {
            a.is_nan()
        } else if b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= ATOL + RTOL * b.abs()
        }
    };
    let (g, w) = (got.to_f64_vec(), want.to_f64_vec());
    let wrong: Vec<usize> = (0..g.len()).filter(|&i| !close(g[i], w[i])).collect();
    match wrong.first() {
        None => Ok(()),
        Some(&i) => Err(format!(
            "element {i} is {}, expected {} ({} of {} elements differ)",
            g[i],
            w[i],
            wrong.len(),
            g.len()
        )),
    }
}
