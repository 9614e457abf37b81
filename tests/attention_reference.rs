//! scaled_dot_product_attention, rms_norm and layer_norm without a bias
//! against PyTorch float64 (table: `tests/reference/attention_cases.rs`,
//! written by `tests/reference/attention_reference.py`): outputs and the
//! gradients of `sum(out * w)` with respect to every input, within 1e-12
//! relative. Causal (also `L != S`), an additive mask (also broadcast over
//! batch and heads), a bool mask (also broadcast, and with a row hidden
//! from every key: PyTorch's 0), a custom scale, batch and head dims.

#[path = "reference/attention_cases.rs"]
#[allow(dead_code)]
mod cases;

use cases::*;
use retrograd::{Graph, SdpaOptions, Tensor, Var};

fn formula(shape: &[usize], c: f64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v = (0..n)
        .map(|i| scale * (0.37 * i as f64 + 0.1 + c).sin())
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn weights(shape: &[usize]) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|i| (0.23 * i as f64).cos()).collect(), shape).unwrap()
}

fn close(name: &str, got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-12 * (1.0 + w.abs()),
            "{name}[{i}]: ours {g}, PyTorch {w}"
        );
    }
}

/// Output and gradients of `sum(out * w)`, with both backward sweeps.
fn check(
    name: &str,
    inputs: &[Tensor],
    f: impl for<'g> Fn(&[Var<'g>]) -> Var<'g>,
    want: &[&[f64]],
) {
    for fast in [true, false] {
        let g = Graph::new();
        let vars: Vec<Var<'_>> = inputs.iter().map(|t| g.variable(t.clone())).collect();
        let out = f(&vars);
        close(&format!("{name} out"), &out.value().to_f64_vec(), want[0]);
        let s = out
            .try_mul(&g.constant(weights(out.shape())))
            .unwrap()
            .sum();
        let grads = s
            .backward_with_options(&retrograd::BackwardOptions::new().fast_path(fast))
            .unwrap();
        for (i, v) in vars.iter().enumerate() {
            close(
                &format!("{name} grad {i} (fast {fast})"),
                &grads.wrt(v).to_f64_vec(),
                want[i + 1],
            );
        }
    }
}

fn sdpa(
    name: &str,
    shapes: [&[usize]; 3],
    mask: Option<&[usize]>,
    causal: bool,
    scale: Option<f64>,
    want: &[&[f64]],
) {
    let mut inputs = vec![
        formula(shapes[0], 0.0, 1.0),
        formula(shapes[1], 1.0, 1.0),
        formula(shapes[2], 2.0, 1.0),
    ];
    if let Some(m) = mask {
        inputs.push(formula(m, 3.0, 0.5));
    }
    check(
        name,
        &inputs,
        |v| {
            let mut o = SdpaOptions::new().is_causal(causal).scale(scale);
            if v.len() == 4 {
                o = o.attn_mask(&v[3]);
            }
            v[0].scaled_dot_product_attention(&v[1], &v[2], &o)
        },
        want,
    );
}

#[test]
fn attention_matches_pytorch() {
    sdpa(
        "basic",
        [&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]],
        None,
        false,
        None,
        &[BASIC_OUT, BASIC_DQ, BASIC_DK, BASIC_DV],
    );
    sdpa(
        "causal, batch and heads",
        [&[2, 2, 6, 4], &[2, 2, 6, 4], &[2, 2, 6, 3]],
        None,
        true,
        None,
        &[
            CAUSAL_BATCH_OUT,
            CAUSAL_BATCH_DQ,
            CAUSAL_BATCH_DK,
            CAUSAL_BATCH_DV,
        ],
    );
    sdpa(
        "causal, L > S, scale 0.5",
        [&[1, 2, 6, 4], &[1, 2, 4, 4], &[1, 2, 4, 3]],
        None,
        true,
        Some(0.5),
        &[
            CAUSAL_L_GT_S_OUT,
            CAUSAL_L_GT_S_DQ,
            CAUSAL_L_GT_S_DK,
            CAUSAL_L_GT_S_DV,
        ],
    );
    sdpa(
        "causal, L < S",
        [&[2, 3, 4], &[2, 7, 4], &[2, 7, 2]],
        None,
        true,
        None,
        &[
            CAUSAL_L_LT_S_OUT,
            CAUSAL_L_LT_S_DQ,
            CAUSAL_L_LT_S_DK,
            CAUSAL_L_LT_S_DV,
        ],
    );
    sdpa(
        "additive mask, scale 0.3",
        [&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]],
        Some(&[3, 5]),
        false,
        Some(0.3),
        &[
            MASK_SCALE_OUT,
            MASK_SCALE_DQ,
            MASK_SCALE_DK,
            MASK_SCALE_DV,
            MASK_SCALE_DMASK,
        ],
    );
    sdpa(
        "mask broadcast over heads and queries",
        [&[2, 2, 3, 4], &[2, 2, 5, 4], &[2, 2, 5, 4]],
        Some(&[2, 1, 1, 5]),
        false,
        None,
        &[
            MASK_BROADCAST_OUT,
            MASK_BROADCAST_DQ,
            MASK_BROADCAST_DK,
            MASK_BROADCAST_DV,
            MASK_BROADCAST_DMASK,
        ],
    );
}

/// The script's bool mask: `sin(0.37 i + 0.1 + 3) > -0.3`, with the
/// `hidden` query rows (second-to-last dim) false throughout.
fn keep_mask(shape: &[usize], hidden: &[usize]) -> Tensor {
    let r = shape.len();
    let (rows, cols) = (shape[r - 2], shape[r - 1]);
    let n: usize = shape.iter().product();
    let keep = (0..n)
        .map(|i| {
            (0.37 * i as f64 + 0.1 + 3.0).sin() > -0.3 && !hidden.contains(&((i / cols) % rows))
        })
        .collect();
    Tensor::from_vec(keep, shape).unwrap()
}

/// Name, shapes of q, k, v, the mask's shape, the hidden query rows, and
/// PyTorch's output and gradients.
type BoolCase = (
    &'static str,
    [&'static [usize]; 3],
    &'static [usize],
    &'static [usize],
    [&'static [f64]; 4],
);

#[test]
fn bool_masks_match_pytorch_with_a_fully_masked_row() {
    let cases: [BoolCase; 2] = [
        (
            "bool mask, row 1 hidden from every key",
            [&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]],
            &[3, 5],
            &[1],
            [BOOL_MASK_OUT, BOOL_MASK_DQ, BOOL_MASK_DK, BOOL_MASK_DV],
        ),
        (
            "bool mask broadcast over heads and queries",
            [&[2, 2, 3, 4], &[2, 2, 5, 4], &[2, 2, 5, 4]],
            &[2, 1, 1, 5],
            &[],
            [
                BOOL_MASK_BROADCAST_OUT,
                BOOL_MASK_BROADCAST_DQ,
                BOOL_MASK_BROADCAST_DK,
                BOOL_MASK_BROADCAST_DV,
            ],
        ),
    ];
    for (name, shapes, mask_shape, hidden, want) in cases {
        let inputs = [
            formula(shapes[0], 0.0, 1.0),
            formula(shapes[1], 1.0, 1.0),
            formula(shapes[2], 2.0, 1.0),
        ];
        let keep = keep_mask(mask_shape, hidden);
        // The fused op, and the unfused composition (the reference of the
        // second derivatives and tangents), both against PyTorch.
        check(
            name,
            &inputs,
            |v| {
                let o = SdpaOptions::new().attn_mask(&keep);
                v[0].scaled_dot_product_attention(&v[1], &v[2], &o)
            },
            &want,
        );
        check(
            &format!("{name} (unfused)"),
            &inputs,
            |v| {
                let o = SdpaOptions::new().attn_mask(&keep);
                retrograd::ops::nn::scaled_dot_product_attention_unfused(&v[0], &v[1], &v[2], &o)
                    .unwrap()
            },
            &want,
        );
    }
}

#[test]
fn rms_norm_and_layer_norm_without_bias_match_pytorch() {
    let (x, w) = (formula(&[2, 3, 4], 0.0, 1.0), formula(&[4], 1.0, 1.0));
    check(
        "rms_norm with weight, default eps",
        &[x.clone(), w.clone()],
        |v| v[0].rms_norm(&[4], Some(&v[1]), None),
        &[RMS_W_OUT, RMS_W_DX, RMS_W_DW],
    );
    check(
        "rms_norm over [3, 4], eps 1e-3",
        &[x.clone()],
        |v| v[0].rms_norm(&[3, 4], None, Some(1e-3)),
        &[RMS_PLAIN_OUT, RMS_PLAIN_DX],
    );
    check(
        "layer_norm, weight, no bias",
        &[x, w],
        |v| v[0].layer_norm(&[4], Some(&v[1]), None, 1e-5),
        &[LN_NOBIAS_OUT, LN_NOBIAS_DX, LN_NOBIAS_DW],
    );
}
