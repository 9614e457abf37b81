//! Times tract-onnx on a model of `bench/onnx_models.py`
//! (`target/bench-onnx/NAME.onnx` and `NAME.inputs.safetensors`): the
//! model loaded, its inputs fixed to the file's shapes, optimised
//! (`into_optimized`), then the median of `--repeats` runs after 3
//! warm-up runs. Prints one JSON line like `bench onnx_<name>` and
//! `bench/onnx_reference.py`.

use std::path::PathBuf;
use std::time::Instant;

use tract_onnx::prelude::*;

fn main() -> TractResult<()> {
    let mut args = std::env::args().skip(1);
    let name = args.next().expect("usage: tract-bench NAME [--repeats N]");
    let mut repeats = 20usize;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--repeats" => repeats = args.next().expect("--repeats N").parse()?,
            other => panic!("unknown argument {other}"),
        }
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-onnx");
    let bytes = std::fs::read(root.join(format!("{name}.inputs.safetensors")))?;
    let file = safetensors::SafeTensors::deserialize(&bytes)?;

    let start = Instant::now();
    let mut model = tract_onnx::onnx().model_for_path(root.join(format!("{name}.onnx")))?;
    let mut inputs: TVec<TValue> = tvec!();
    for i in 0..model.input_outlets()?.len() {
        let input_name = model.node(model.input_outlets()?[i].node).name.clone();
        let view = file.tensor(&input_name)?;
        let shape = view.shape().to_vec();
        let tensor = match view.dtype() {
            safetensors::Dtype::F32 => {
                let v: Vec<f32> = view
                    .data()
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                Tensor::from_shape(&shape, &v)?
            }
            safetensors::Dtype::I64 => {
                let v: Vec<i64> = view
                    .data()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                    .collect();
                Tensor::from_shape(&shape, &v)?
            }
            other => panic!("input {input_name}: dtype {other:?}"),
        };
        model.set_input_fact(i, InferenceFact::dt_shape(tensor.datum_type(), &shape))?;
        inputs.push(tensor.into());
    }
    let plan = model.into_optimized()?.into_runnable()?;
    let load_ms = start.elapsed().as_secs_f64() * 1e3;

    for _ in 0..3 {
        plan.run(inputs.clone())?;
    }
    let mut times = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let start = Instant::now();
        plan.run(inputs.clone())?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let batch = inputs[0].shape()[0];
    println!(
        "{}",
        serde_json::json!({
            "impl": "tract-onnx",
            "workload": format!("onnx_{name}"),
            "batch": batch,
            "median_ms": median,
            "min_ms": times[0],
            "max_ms": times[times.len() - 1],
            "load_ms": load_ms,
        })
    );
    Ok(())
}
