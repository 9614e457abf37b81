//! Body of the `onnx` fuzz target: arbitrary bytes as an `.onnx` file,
//! read by `OnnxModel::from_bytes` (decode, opset and op checks, structure
//! checks, constant folding, a dry run); a model that loads is run on a
//! recording graph with small inputs of its declared shapes and
//! differentiated.
//!
//! Checked: nothing panics; a failure to load is `OnnxInvalid` or
//! `OnnxUnsupported`; a run returns one value per declared output.

use retrograd::onnx::{export_input, OnnxModel};
use retrograd::{DType, Error, Graph, Tensor, Var};

pub fn run(data: &[u8]) {
    let model = match OnnxModel::from_bytes(data) {
        Ok(m) => m,
        Err(e) => {
            assert!(
                matches!(e, Error::OnnxInvalid { .. } | Error::OnnxUnsupported { .. }),
                "loading failed with another error: {e:?}"
            );
            return;
        }
    };
    let mut inputs = Vec::new();
    for spec in model.inputs() {
        let (Some(dtype), Some(dims)) = (spec.dtype, &spec.dims) else {
            return;
        };
        let shape: Vec<usize> = dims.iter().map(|d| d.unwrap_or(2)).collect();
        if shape.iter().product::<usize>() > 4096
            || !matches!(dtype, DType::F32 | DType::F64 | DType::I64 | DType::Bool)
        {
            return;
        }
        let numel: usize = shape.iter().product();
        let values: Vec<f64> = (0..numel).map(|i| (i % 5) as f64 * 0.5 - 1.0).collect();
        let t = match dtype {
            DType::I64 => {
                Tensor::from_vec((0..numel as i64).map(|i| i % 3).collect::<Vec<_>>(), &shape)
            }
            DType::Bool => {
                Tensor::from_vec((0..numel).map(|i| i % 2 == 0).collect::<Vec<_>>(), &shape)
            }
            d => Tensor::from_f64_slice(&values, &shape, d),
        }
        .expect("a tensor of the declared shape");
        inputs.push(t);
    }
    let graph = Graph::new();
    let vars: Vec<Var<'_>> = inputs
        .iter()
        .map(|t| export_input(&graph, t).expect("a fresh graph takes any input"))
        .collect();
    let refs: Vec<&Var<'_>> = vars.iter().collect();
    if let Ok(outputs) = model.forward(&graph, &refs) {
        assert_eq!(outputs.len(), model.output_names().len());
        for out in outputs.iter().filter(|o| o.requires_grad()) {
            let _ = out.sum().backward();
        }
    }
}
