//! W4 attention, f32: `scaled_dot_product_attention` alone, forward and
//! backward (the gradients of the output's sum with respect to q, k and
//! v), causal, at B = 12, H = 4, head dim 32 and T = 64, 256, 1024.
//!
//! - `w4_attn`: median ms per forward + backward, one row per T (`"n": T`).
//! - `mem_w4_attn`: the peak RSS growth of one forward + backward at
//!   T = 1024 (and 2048, to show the growth is linear in T), in a fresh
//!   process; `score_matrix_mib` is what one `T × T` f32 score matrix per
//!   head would take.

use retrograd::{DType, Graph, SdpaOptions, Tensor};

use crate::memory::{delegated, peak_growth};
use crate::report::{emit, time, Value};
use crate::Options;

const BATCH: usize = 12;
const HEADS: usize = 4;
const HEAD_DIM: usize = 32;

/// Fixed-seed standard-normal q, k, v of `[12, 4, t, 32]`.
pub fn inputs(t: usize) -> [Tensor; 3] {
    let shape = [BATCH, HEADS, t, HEAD_DIM];
    [1, 2, 3].map(|seed| Tensor::randn(&shape, DType::F32, seed).expect("valid shape"))
}

/// One forward + backward of causal attention on `x` = [q, k, v].
pub fn pass(x: &[Tensor; 3]) {
    let g = Graph::new();
    let [q, k, v] = x.clone().map(|t| g.variable(t));
    let y = q.scaled_dot_product_attention(&k, &v, &SdpaOptions::new().is_causal(true));
    let grads = y.sum().backward().expect("backward");
    std::hint::black_box((grads.wrt(&q), grads.wrt(&k), grads.wrt(&v)));
}

pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick { &[64] } else { &[64, 256, 1024] };
    for &t in sizes {
        let x = inputs(t);
        let repeats = if t >= 1024 {
            opts.repeats.clamp(3, 7)
        } else {
            opts.repeats.max(3)
        };
        let stats = time(repeats, || pass(&x));
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "w4_attn".into()),
                ("dtype", "f32".into()),
                ("n", t.into()),
                ("unit", "ms_fwd_bwd".into()),
            ],
            Some(stats),
        );
    }
}

pub fn run_memory(opts: &Options) {
    if delegated("mem_w4_attn", opts) {
        return;
    }
    let sizes: &[usize] = if opts.quick { &[256] } else { &[1024, 2048] };
    for &t in sizes {
        let x = inputs(t);
        match peak_growth(|| pass(&x)) {
            Some(bytes) => emit(
                vec![
                    ("framework", "retrograd".into()),
                    ("workload", "mem_w4_attn".into()),
                    ("dtype", "f32".into()),
                    ("n", t.into()),
                    ("unit", "MiB_peak_rss_growth".into()),
                    ("median", Value::Num(bytes as f64 / (1 << 20) as f64)),
                    (
                        "score_matrix_mib",
                        Value::Num((BATCH * HEADS * t * t * 4) as f64 / (1 << 20) as f64),
                    ),
                ],
                None,
            ),
            None => eprintln!("mem_w4_attn: /proc/self/status or clear_refs is not available here"),
        }
    }
}
