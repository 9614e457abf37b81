//! `attention_minilm`: the attention of one layer of the imported MiniLM
//! (`onnx_minilm`: batch 32 x 128 tokens, 12 heads of dim 32, an additive
//! `[32, 1, 128, 128]` padding mask, a quarter of the samples padded), the
//! heads read in place from `[32, 128, 384]` projections: the flash forward
//! (`kernels::nn::attention`, which also writes the logsumexp a backward
//! needs) against the inference forward on register tiles
//! (`kernels::nn::attention_tiled`), alternated. Milliseconds per layer;
//! the model runs six.

use std::mem::MaybeUninit;

use retrograd::kernels::nn::attention::{self, Geometry, MaskView, Rows};
use retrograd::kernels::nn::attention_tiled;

use crate::report::{emit, time_pair};
use crate::Options;

const BATCH: usize = 32;
const TOKENS: usize = 128;
const HEADS: usize = 12;
const DIM: usize = 32;

/// Deterministic values in `[-1, 1]`.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

pub fn run(opts: &Options) {
    let width = HEADS * DIM;
    let (q, k, v) = (
        values(BATCH * TOKENS * width, 1),
        values(BATCH * TOKENS * width, 2),
        values(BATCH * TOKENS * width, 3),
    );
    let heads: Vec<usize> = (0..BATCH * HEADS)
        .map(|bh| (bh / HEADS) * TOKENS * width + (bh % HEADS) * DIM)
        .collect();
    let rows = |data| Rows {
        data,
        heads: heads.clone(),
        row_stride: width,
    };
    let (q, k, v) = (rows(&q[..]), rows(&k[..]), rows(&v[..]));
    // Every fourth sample padded after 96 tokens, as the exporter's mask
    // writes it (the float minimum, not -inf).
    let mut m = vec![0.0f32; BATCH * TOKENS * TOKENS];
    for b in (3..BATCH).step_by(4) {
        for i in 0..TOKENS {
            m[(b * TOKENS + i) * TOKENS + 96..][..TOKENS - 96].fill(f32::MIN);
        }
    }
    let mask = MaskView {
        data: &m,
        offsets: (0..BATCH * HEADS)
            .map(|bh| (bh / HEADS) * TOKENS * TOKENS)
            .collect(),
        row_stride: TOKENS,
        col_stride: 1,
    };
    let g = Geometry {
        batch: BATCH * HEADS,
        l: TOKENS,
        s: TOKENS,
        e: DIM,
        ev: DIM,
        scale: 1.0 / (DIM as f64).sqrt(),
        causal: false,
        dropout: None,
    };
    let n = BATCH * HEADS * TOKENS * DIM;
    let mut out_flash = vec![MaybeUninit::new(0.0f32); n];
    let mut lse = vec![MaybeUninit::new(0.0f32); BATCH * HEADS * TOKENS];
    let mut out_tiled = vec![MaybeUninit::new(0.0f32); n];
    let tiled = attention_tiled::applies::<f32>(&g);
    let repeats = if opts.quick { 3 } else { opts.repeats.max(10) };
    let (flash, tiles) = time_pair(
        repeats,
        || {
            let _ = attention::forward(&g, &q, &k, &v, Some(&mask), &mut out_flash, &mut lse);
        },
        || {
            if tiled {
                let _ = attention_tiled::forward(&g, &q, &k, &v, Some(&mask), &mut out_tiled);
            }
        },
    );
    // SAFETY: both forwards wrote every element (and the buffers started
    // initialised).
    let max_diff = out_flash
        .iter()
        .zip(&out_tiled)
        .map(|(a, b)| unsafe { (a.assume_init() - b.assume_init()).abs() })
        .fold(0.0f32, f32::max);
    emit(
        vec![
            ("workload", "attention_minilm".into()),
            ("kernel", "flash".into()),
        ],
        Some(flash),
    );
    if tiled {
        emit(
            vec![
                ("workload", "attention_minilm".into()),
                ("kernel", "tiled".into()),
                ("max_diff_to_flash", (max_diff as f64).into()),
            ],
            Some(tiles),
        );
    } else {
        emit(
            vec![
                ("workload", "attention_minilm".into()),
                ("kernel", "tiled: no AVX-512F".into()),
            ],
            None,
        );
    }
}
