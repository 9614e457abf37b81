//! Timing of the fused neural-net ops (run with `cargo run --release --example nn_bench`).
//!
//! Measures one forward + backward of `cross_entropy` on the logits shapes
//! the MLP benchmark uses ([N, 10], f32), the same loss composed from
//! `log_softmax` and `nll_loss`, and `softmax` and `layer_norm`, reporting
//! the median of repeated runs in microseconds. Numbers depend on the
//! machine and its load; this is a measuring tool, not a test.

use std::time::Instant;

use retrograd::{DType, Graph, Result, Tensor};

fn median_us(reps: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        times.push(t.elapsed().as_secs_f64() * 1e6);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[reps / 2])
}

fn main() -> Result<()> {
    println!("{:<44} {:>10}", "workload", "median us");
    for n in [128usize, 1024, 4096] {
        let logits = Tensor::randn(&[n, 10], DType::F32, 1)?;
        let targets: Vec<usize> = (0..n).map(|i| (i * 7) % 10).collect();
        let fused = median_us(200, || {
            let g = Graph::new();
            let x = g.variable(logits.clone());
            let grads = x.try_cross_entropy(&targets)?.backward()?;
            std::hint::black_box(grads.wrt(&x));
            Ok(())
        })?;
        let composed = median_us(200, || {
            let g = Graph::new();
            let x = g.variable(logits.clone());
            let grads = x.try_log_softmax(1)?.try_nll_loss(&targets)?.backward()?;
            std::hint::black_box(grads.wrt(&x));
            Ok(())
        })?;
        let forward = median_us(200, || {
            let g = Graph::new();
            let x = g.constant(logits.clone());
            std::hint::black_box(x.try_cross_entropy(&targets)?.value().try_item()?);
            Ok(())
        })?;
        println!(
            "{:<44} {:>10.1}",
            format!("cross_entropy fwd+bwd [{n}, 10] f32"),
            fused
        );
        println!(
            "{:<44} {:>10.1}",
            format!("log_softmax+nll_loss fwd+bwd [{n}, 10] f32"),
            composed
        );
        println!(
            "{:<44} {:>10.1}",
            format!("cross_entropy forward only [{n}, 10] f32"),
            forward
        );
    }
    for (n, c) in [(4096usize, 10usize), (256, 1000)] {
        let x = Tensor::randn(&[n, c], DType::F32, 2)?;
        let t = median_us(100, || {
            let g = Graph::new();
            std::hint::black_box(g.constant(x.clone()).try_softmax(-1)?);
            Ok(())
        })?;
        println!(
            "{:<44} {:>10.1}",
            format!("softmax forward [{n}, {c}] f32"),
            t
        );
    }
    let x = Tensor::randn(&[4096, 256], DType::F32, 3)?;
    let w = Tensor::ones(&[256], DType::F32)?;
    let b = Tensor::zeros(&[256], DType::F32)?;
    let t = median_us(30, || {
        let g = Graph::new();
        let (xv, wv, bv) = (
            g.variable(x.clone()),
            g.variable(w.clone()),
            g.variable(b.clone()),
        );
        let y = xv.try_layer_norm(&[256], Some(&wv), Some(&bv), 1e-5)?;
        let grads = y.backward_with(&x)?;
        std::hint::black_box(grads.wrt(&wv));
        Ok(())
    })?;
    println!(
        "{:<44} {:>10.1}",
        "layer_norm fwd+bwd [4096, 256] f32 (w, b)", t
    );
    Ok(())
}
