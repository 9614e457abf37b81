//! `w4_gemms`: every matrix product of one W4 GPT iteration outside
//! attention (whose 64 x 64 x 32 blocks run inside the fused kernel,
//! `w4_attn`), each shape timed alone through `kernels::matmul` with the
//! operand layouts and transpose flags the iteration gives it: a linear
//! layer's forward `x Wᵀ` (`nt`), its input gradient `g W` (`nn`) and its
//! weight gradient `gᵀ x` (`tn`), for the four linear layers of each of the
//! 4 blocks and the tied vocabulary head. One row per product: GFLOP/s and
//! the milliseconds it adds to an iteration (calls x median); a last row
//! sums them. `bench/w4_gemms.py` times the same products in PyTorch.

use retrograd::{kernels, DType, Tensor};

use crate::report::{emit, time, Stats};
use crate::Options;

/// Rows of the iteration's activations: batch 12 x block 64.
const ROWS: usize = 12 * 64;
const EMBD: usize = 128;
const LAYERS: usize = 4;

/// One linear layer of the iteration: `[ROWS, inp] -> [ROWS, out]`, `calls` times.
struct Layer {
    name: &'static str,
    inp: usize,
    out: usize,
    calls: usize,
}

const LAYERS_OF_W4: [Layer; 5] = [
    Layer {
        name: "attn_qkv",
        inp: EMBD,
        out: 3 * EMBD,
        calls: LAYERS,
    },
    Layer {
        name: "attn_proj",
        inp: EMBD,
        out: EMBD,
        calls: LAYERS,
    },
    Layer {
        name: "mlp_fc",
        inp: EMBD,
        out: 4 * EMBD,
        calls: LAYERS,
    },
    Layer {
        name: "mlp_proj",
        inp: 4 * EMBD,
        out: EMBD,
        calls: LAYERS,
    },
    Layer {
        name: "lm_head",
        inp: EMBD,
        out: super::w4::VOCAB,
        calls: 1,
    },
];

/// The three products of a layer: `(pass, a, b, trans_a, trans_b)`, stored
/// as the iteration stores them (the weight `[out, inp]`, activations and
/// gradients row-major).
fn products(layer: &Layer) -> [(&'static str, Tensor, Tensor, bool, bool); 3] {
    let t = |shape: &[usize], seed| Tensor::randn(shape, DType::F32, seed).expect("valid shape");
    let (x, w, g) = (
        t(&[ROWS, layer.inp], 1),
        t(&[layer.out, layer.inp], 2),
        t(&[ROWS, layer.out], 3),
    );
    [
        ("forward_nt", x.clone(), w.clone(), false, true),
        ("input_grad_nn", g.clone(), w, false, false),
        ("weight_grad_tn", g, x, true, false),
    ]
}

pub fn run(opts: &Options) {
    let repeats = if opts.quick { 3 } else { opts.repeats.max(30) };
    // Each timing is a batch of calls, so a sub-millisecond product is
    // well above the clock's resolution.
    let batch = if opts.quick { 1 } else { 10 };
    let (mut total_ms, mut total_flops) = (0.0, 0.0);
    for layer in &LAYERS_OF_W4 {
        for (pass, a, b, ta, tb) in products(layer) {
            let out = kernels::matmul("matmul", &a, &b, ta, tb).expect("valid product");
            let (m, n) = (out.shape()[0], out.shape()[1]);
            let k = if ta { a.shape()[0] } else { a.shape()[1] };
            let s: Stats = time(repeats, || {
                for _ in 0..batch {
                    std::hint::black_box(kernels::matmul("matmul", &a, &b, ta, tb).unwrap());
                }
            })
            .per(batch);
            let flops = 2.0 * (m * n * k) as f64;
            let ms = s.median * 1e3 * layer.calls as f64;
            total_ms += ms;
            total_flops += flops * layer.calls as f64;
            emit(
                vec![
                    ("framework", "retrograd".into()),
                    ("workload", "w4_gemms".into()),
                    ("layer", layer.name.into()),
                    ("case", pass.into()),
                    ("m", m.into()),
                    ("n", n.into()),
                    ("k", k.into()),
                    ("calls_per_iter", layer.calls.into()),
                    ("gflops", (flops / s.median / 1e9).into()),
                    ("ms_per_iter", ms.into()),
                ],
                Some(s),
            );
        }
    }
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", "w4_gemms".into()),
            ("case", "total".into()),
            ("gflop_per_iter", (total_flops / 1e9).into()),
            ("gflops", (total_flops / total_ms / 1e6).into()),
            ("ms_per_iter", total_ms.into()),
        ],
        None,
    );
}
