//! Gradient checkpointing: peak memory of forward + backward through a
//! 20-layer MLP (width 1024, batch 2048, f32), with every value kept, and with
//! the layers grouped into checkpointed regions of 4 whose intermediates are
//! recomputed during backward.

use retrograd::nn::Parameter;
use retrograd::{DType, Graph, Result, Tensor, Var};

use crate::memory::peak_growth;
use crate::report::{emit, Value};
use crate::Options;

const LAYERS: usize = 20;
const SEGMENT: usize = 4;

fn layer<'g>(h: &Var<'g>, w: &Var<'g>, b: &Var<'g>) -> Result<Var<'g>> {
    Ok(h.try_matmul(w)?.try_add(b)?.relu())
}

fn run_once(params: &[Parameter], x: &Tensor, checkpointed: bool) -> Result<f64> {
    let graph = Graph::new();
    let vars: Vec<Var<'_>> = params.iter().map(|p| graph.param(p)).collect();
    let mut h = graph.constant(x.clone());
    if checkpointed {
        for seg in vars.chunks(2 * SEGMENT) {
            let mut inputs: Vec<&Var<'_>> = vec![&h];
            inputs.extend(seg.iter());
            h = graph.checkpoint(&inputs, |v| {
                let mut h = v[0].clone();
                for wb in v[1..].chunks(2) {
                    h = layer(&h, &wb[0], &wb[1])?;
                }
                Ok(h)
            })?;
        }
    } else {
        for wb in vars.chunks(2) {
            h = layer(&h, &wb[0], &wb[1])?;
        }
    }
    let loss = h.mean();
    let grads = loss.backward()?;
    Ok(grads
        .of(&params[0])
        .to_f64_vec()
        .iter()
        .map(|v| v.abs())
        .sum())
}

pub fn run(opts: &Options) {
    let (width, batch) = if opts.quick { (128, 32) } else { (1024, 2048) };
    let params: Vec<Parameter> = (0..LAYERS)
        .flat_map(|l| {
            let scale = (2.0 / width as f64).sqrt();
            let w = Tensor::randn(&[width, width], DType::F32, 10 + l as u64)
                .expect("valid shape")
                .map_f64(|v| v * scale);
            let b = Tensor::zeros(&[width], DType::F32).expect("valid shape");
            [Parameter::new(w), Parameter::new(b)]
        })
        .collect();
    let x = Tensor::randn(&[batch, width], DType::F32, 1).expect("valid shape");
    for (label, checkpointed) in [("plain", false), ("checkpointed", true)] {
        if crate::memory::delegated(&format!("checkpoint:{label}"), opts) {
            continue;
        }
        let start = std::time::Instant::now();
        let mut check = 0.0;
        let Some(bytes) = peak_growth(|| {
            check = run_once(&params, &x, checkpointed).expect("valid graph");
        }) else {
            eprintln!("checkpoint: /proc/self/status or clear_refs is not available here");
            return;
        };
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "checkpoint".into()),
                ("case", label.into()),
                ("layers", LAYERS.into()),
                ("width", width.into()),
                ("batch", batch.into()),
                ("unit", "MiB_peak_rss_growth".into()),
                ("median", Value::Num(bytes as f64 / (1024.0 * 1024.0))),
                ("seconds", Value::Num(start.elapsed().as_secs_f64())),
                ("grad_check", Value::Exact(check)),
            ],
            None,
        );
    }
}
