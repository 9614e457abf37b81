//! One-node ONNX models of the signal, recurrent, detection and image ops
//! (`DFT`, `STFT`, `RNN`/`GRU`/`LSTM`, `Einsum`, `NonMaxSuppression`,
//! `Col2Im`, `ConvTranspose`, `RoiAlign`, ...), imported and run against
//! values computed by hand, by a naive loop here, or by onnxruntime for
//! the same node and inputs (inputs are `sin(0.7 i + seed)`, so the
//! numbers can be made again). The differentiable ones are checked to
//! pass gradients back, as an imported model must to train.

#![cfg(feature = "onnx")]

#[path = "support/onnx_node.rs"]
mod onnx_node;

use onnx_node::{attr, model_typed, value_info, A};
use prost::Message;
use retrograd::onnx::proto::{GraphProto, ModelProto, NodeProto, OperatorSetIdProto};
use retrograd::onnx::OnnxModel;
use retrograd::{Graph, Tensor};

/// `op` reading graph inputs `x0, x1, ...` (`None`: omitted).
fn model(op: &str, opset: i64, n_in: &[bool], n_out: usize, attrs: &[(&str, A)]) -> OnnxModel {
    let names: Vec<String> = n_in
        .iter()
        .enumerate()
        .map(|(i, &given)| {
            if given {
                format!("x{i}")
            } else {
                String::new()
            }
        })
        .collect();
    let ins: Vec<(&str, Option<i32>)> = names.iter().map(|n| (n.as_str(), None)).collect();
    model_typed(op, opset, &ins, n_out, attrs).unwrap()
}

/// Runs `op` on `inputs` (all given).
fn run(op: &str, opset: i64, inputs: &[Tensor], n_out: usize, attrs: &[(&str, A)]) -> Vec<Tensor> {
    model(op, opset, &vec![true; inputs.len()], n_out, attrs)
        .infer(inputs)
        .unwrap()
}

/// `sin(0.7 i + seed)` times `scale`, as f32 of `shape`.
fn wave(shape: &[usize], seed: f64, scale: f32) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| (0.7 * i as f64 + seed).sin() as f32 * scale)
        .collect();
    Tensor::from_vec(v, shape).unwrap()
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn i64s(v: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

#[track_caller]
fn assert_close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    assert_eq!(g.len(), want.len(), "length");
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
            "element {i}: {a} against {b} (all: {g:?})"
        );
    }
}

#[test]
fn dft_matches_a_naive_sum_and_the_inverse_one_sided_undoes_it() {
    let x = wave(&[1, 6, 1], 0.0, 1.0);
    let v = x.to_f64_vec();
    let y = run("DFT", 20, &[x.clone()], 1, &[]);
    let mut want = Vec::new();
    for k in 0..6 {
        let (mut re, mut im) = (0.0, 0.0);
        for (n, &xn) in v.iter().enumerate() {
            let t = -2.0 * std::f64::consts::PI * (k * n) as f64 / 6.0;
            re += xn * t.cos();
            im += xn * t.sin();
        }
        want.extend([re, im]);
    }
    assert_close(&y[0], &[1, 6, 2], &want);
    // One-sided forward, then the inverse one-sided: the signal again.
    let m = model("DFT", 20, &[true], 1, &[("onesided", A::I(1))]);
    let half = m.infer(&[x.clone()]).unwrap().remove(0);
    assert_eq!(half.shape(), &[1, 4, 2]);
    let back = run(
        "DFT",
        20,
        &[half],
        1,
        &[("onesided", A::I(1)), ("inverse", A::I(1))],
    );
    assert_close(&back[0], &[1, 6, 1], &v);
    // The product differentiates: d Σ Re(y_0) / d x_n = 1.
    let g = Graph::new();
    let vx = g.variable(x);
    let out = model("DFT", 20, &[true], 1, &[])
        .forward(&g, &[&vx])
        .unwrap();
    let re0 = out[0]
        .try_narrow(1, 0, 1)
        .unwrap()
        .try_narrow(2, 0, 1)
        .unwrap();
    let grad = re0.sum().backward().unwrap().try_wrt(&vx).unwrap();
    assert_close(&grad, &[1, 6, 1], &[1.0; 6]);
    // The last axis holds real and imaginary parts; it is no signal axis.
    let e = model("DFT", 17, &[true], 1, &[("axis", A::I(-1))])
        .infer(&[wave(&[1, 6, 1], 0.0, 1.0)])
        .unwrap_err();
    assert!(e.to_string().contains("DFT"), "{e}");
}

#[test]
fn stft_frames_windows_and_transforms_as_onnxruntime() {
    let hann: Vec<f32> = (0..4)
        .map(|i| (0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / 3.0).cos()) as f32)
        .collect();
    let y = run(
        "STFT",
        17,
        &[
            wave(&[1, 8, 1], 0.0, 1.0),
            i64s(&[3], &[]),
            f32s(&hann, &[4]),
        ],
        1,
        &[],
    );
    assert_close(
        &y[0],
        &[1, 2, 3, 2],
        &[
            1.22225, 0.0, -0.739087, -0.483163, 0.255924, 0.0, -0.0118463, 0.0, 0.263087,
            -0.251241, -0.514329, 0.0,
        ],
    );
}

#[test]
fn non_max_suppression_keeps_the_best_of_overlapping_boxes() {
    // Boxes 0 and 1 overlap (IoU 0.81); box 2 stands apart.
    let boxes = f32s(
        &[0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, 10.0, 1.0, 11.0],
        &[1, 3, 4],
    );
    let scores = f32s(&[0.9, 0.95, 0.3], &[1, 1, 3]);
    let y = run(
        "NonMaxSuppression",
        11,
        &[
            boxes,
            scores,
            i64s(&[3], &[1]),
            f32s(&[0.5], &[1]),
            f32s(&[0.0], &[1]),
        ],
        1,
        &[],
    );
    assert_eq!(y[0].shape(), &[2, 3]);
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![0, 0, 1, 0, 0, 2]);
}

#[test]
fn recurrent_layers_match_onnxruntime_and_train() {
    let x = wave(&[2, 1, 3], 0.0, 1.0);
    let (w, r) = (wave(&[1, 8, 3], 1.0, 0.5), wave(&[1, 8, 2], 2.0, 0.5));
    let b = wave(&[1, 16], 3.0, 0.1);
    let m = model("LSTM", 14, &[true; 4], 3, &[("hidden_size", A::I(2))]);
    let y = m
        .infer(&[x.clone(), w.clone(), r.clone(), b.clone()])
        .unwrap();
    assert_close(
        &y[0],
        &[2, 1, 1, 2],
        &[0.18938, -0.0935402, 0.15311, 0.0196275],
    );
    assert_close(&y[1], &[1, 1, 2], &[0.15311, 0.0196275]);
    assert_close(&y[2], &[1, 1, 2], &[0.502864, 0.0358202]);
    // The weights receive gradients through every step.
    let g = Graph::new();
    let (vx, vw, vr, vb) = (
        g.constant(x.clone()),
        g.variable(w),
        g.variable(r),
        g.variable(b),
    );
    let out = m.forward(&g, &[&vx, &vw, &vr, &vb]).unwrap();
    let grads = out[1].sum().backward().unwrap();
    for v in [&vw, &vr, &vb] {
        let gv = grads.try_wrt(v).unwrap().to_f64_vec();
        assert!(gv.iter().all(|g| g.is_finite()) && gv.iter().any(|&g| g != 0.0));
    }

    let (w, r) = (wave(&[2, 6, 3], 1.0, 0.5), wave(&[2, 6, 2], 2.0, 0.5));
    let b = wave(&[2, 12], 3.0, 0.1);
    let y = run(
        "GRU",
        14,
        &[x.clone(), w, r, b],
        2,
        &[
            ("hidden_size", A::I(2)),
            ("direction", A::S("bidirectional")),
            ("linear_before_reset", A::I(1)),
        ],
    );
    assert_close(
        &y[0],
        &[2, 2, 1, 2],
        &[
            -0.205983, 0.00422916, -0.143541, 0.0657186, -0.13536, -0.229918, 0.0595563, -0.193448,
        ],
    );
    assert_close(
        &y[1],
        &[2, 1, 2],
        &[-0.13536, -0.229918, -0.143541, 0.0657186],
    );

    let y = run(
        "RNN",
        14,
        &[x, wave(&[1, 2, 3], 1.0, 0.5), wave(&[1, 2, 2], 2.0, 0.5)],
        2,
        &[
            ("hidden_size", A::I(2)),
            ("direction", A::S("reverse")),
            ("activations", A::Ss(&["Relu"])),
        ],
    );
    assert_close(&y[0], &[2, 1, 1, 2], &[0.857589, 0.0, 0.41081, 0.0869144]);
    // An activation the importer does not know is an error naming it.
    let e = model(
        "RNN",
        14,
        &[true; 3],
        2,
        &[
            ("hidden_size", A::I(2)),
            ("activations", A::Ss(&["Gompertz"])),
        ],
    )
    .infer(&[
        wave(&[2, 1, 3], 0.0, 1.0),
        wave(&[1, 2, 3], 1.0, 0.5),
        wave(&[1, 2, 2], 2.0, 0.5),
    ])
    .unwrap_err();
    assert!(e.to_string().contains("Gompertz"), "{e}");
}

#[test]
fn einsum_contracts_like_loops_and_differentiates() {
    let (a, b) = (wave(&[2, 2, 3], 0.0, 1.0), wave(&[2, 3, 2], 1.0, 1.0));
    let m = model(
        "Einsum",
        12,
        &[true, true],
        1,
        &[("equation", A::S("bij, bjk -> bki"))],
    );
    let y = m.infer(&[a.clone(), b.clone()]).unwrap();
    let (av, bv) = (a.to_f64_vec(), b.to_f64_vec());
    let mut want = vec![0.0; 8];
    for bb in 0..2 {
        for k in 0..2 {
            for i in 0..2 {
                want[(bb * 2 + k) * 2 + i] = (0..3)
                    .map(|j| av[(bb * 2 + i) * 3 + j] * bv[(bb * 3 + j) * 2 + k])
                    .sum();
            }
        }
    }
    assert_close(&y[0], &[2, 2, 2], &want);
    // d Σ / d a[b, i, j] = Σ_k b[b, j, k].
    let g = Graph::new();
    let (va, vb) = (g.variable(a), g.constant(b));
    let out = m.forward(&g, &[&va, &vb]).unwrap();
    let grad = out[0].sum().backward().unwrap().try_wrt(&va).unwrap();
    let want: Vec<f64> = (0..12)
        .map(|f| {
            let (bb, j) = (f / 6, f % 3);
            bv[(bb * 3 + j) * 2] + bv[(bb * 3 + j) * 2 + 1]
        })
        .collect();
    assert_close(&grad, &[2, 2, 3], &want);
    // A trace and an implicit output.
    let y = run(
        "Einsum",
        12,
        &[wave(&[3, 3], 0.0, 1.0)],
        1,
        &[("equation", A::S("ii"))],
    );
    let v = wave(&[3, 3], 0.0, 1.0).to_f64_vec();
    assert_close(&y[0], &[], &[v[0] + v[4] + v[8]]);
}

#[test]
fn pad_borders_repeat_mirror_and_wrap() {
    let x = f32s(&[1.0, 2.0, 3.0], &[1, 3]);
    let pads = i64s(&[0, 2, 0, 1], &[4]);
    let go = |mode: &'static str| {
        run(
            "Pad",
            18,
            &[x.clone(), pads.clone()],
            1,
            &[("mode", A::S(mode))],
        )
    };
    assert_close(&go("edge")[0], &[1, 6], &[1.0, 1.0, 1.0, 2.0, 3.0, 3.0]);
    assert_close(&go("reflect")[0], &[1, 6], &[3.0, 2.0, 1.0, 2.0, 3.0, 2.0]);
    assert_close(&go("wrap")[0], &[1, 6], &[2.0, 3.0, 1.0, 2.0, 3.0, 1.0]);
}

#[test]
fn group_lrn_and_mean_variance_normalizations_match_onnxruntime() {
    let y = run(
        "GroupNormalization",
        21,
        &[
            wave(&[1, 4, 3], 0.0, 1.0),
            wave(&[4], 1.0, 1.0),
            wave(&[4], 2.0, 1.0),
        ],
        1,
        &[("num_groups", A::I(2))],
    );
    assert_close(
        &y[0],
        &[1, 4, 3],
        &[
            0.175264, 1.32067, 1.92737, 1.37104, 0.26424, -1.17268, -0.912661, -1.01188, -0.697626,
            -0.809792, -0.774529, -0.756286,
        ],
    );
    let y = run(
        "LRN",
        13,
        &[wave(&[1, 4, 2, 1], 0.0, 1.0)],
        1,
        &[("size", A::I(3)), ("alpha", A::F(0.1))],
    );
    assert_close(
        &y[0],
        &[1, 4, 2, 1],
        &[
            0.0, 0.626144, 0.959577, 0.836515, 0.320339, -0.335519, -0.853049, -0.956545,
        ],
    );
    let y = run(
        "MeanVarianceNormalization",
        13,
        &[wave(&[2, 3, 2], 0.0, 1.0)],
        1,
        &[("axes", A::Is(&[0, 2]))],
    );
    assert_close(
        &y[0],
        &[2, 3, 2],
        &[
            0.454167, 1.42153, 1.02802, 0.842374, -0.146197, -1.5319, -0.854602, -1.0211, -1.42733,
            -0.44307, 0.504447, 1.17365,
        ],
    );
}

#[test]
fn batch_norm_training_mode_uses_the_batch_and_updates_the_running_statistics() {
    // One channel holding 1, 2, 3, 6: mean 3, variance 3.5.
    let y = run(
        "BatchNormalization",
        15,
        &[
            f32s(&[1.0, 2.0, 3.0, 6.0], &[2, 1, 2]),
            f32s(&[2.0], &[1]),
            f32s(&[1.0], &[1]),
            f32s(&[0.0], &[1]),
            f32s(&[1.0], &[1]),
        ],
        3,
        &[("training_mode", A::I(1)), ("epsilon", A::F(0.0))],
    );
    let s = 3.5f64.sqrt();
    let want: Vec<f64> = [1.0, 2.0, 3.0, 6.0]
        .iter()
        .map(|v| 2.0 * (v - 3.0) / s + 1.0)
        .collect();
    assert_close(&y[0], &[2, 1, 2], &want);
    assert_close(&y[1], &[1], &[0.3]);
    assert_close(&y[2], &[1], &[0.9 + 0.35]);
}

#[test]
fn col2im_sums_blocks_and_max_unpool_puts_values_back() {
    // Two 1x2 blocks at stride 1 over a 1x3 image: the middle pixel twice.
    let y = run(
        "Col2Im",
        18,
        &[
            f32s(&[1.0, 2.0, 10.0, 20.0], &[1, 2, 2]),
            i64s(&[1, 3], &[2]),
            i64s(&[1, 2], &[2]),
        ],
        1,
        &[],
    );
    assert_close(&y[0], &[1, 1, 1, 3], &[1.0, 12.0, 20.0]);
    let y = run(
        "MaxUnpool",
        11,
        &[
            f32s(&[5.0, 7.0], &[1, 1, 1, 2]),
            i64s(&[1, 6], &[1, 1, 1, 2]),
        ],
        1,
        &[
            ("kernel_shape", A::Is(&[2, 2])),
            ("strides", A::Is(&[2, 2])),
        ],
    );
    assert_close(
        &y[0],
        &[1, 1, 2, 4],
        &[0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 7.0, 0.0],
    );
}

#[test]
fn conv_transpose_3d_with_uneven_pads_matches_onnxruntime() {
    let y = run(
        "ConvTranspose",
        11,
        &[
            wave(&[1, 2, 2, 2, 2], 0.0, 1.0),
            wave(&[2, 1, 2, 2, 2], 1.0, 1.0),
        ],
        1,
        &[
            ("strides", A::Is(&[2, 1, 1])),
            ("pads", A::Is(&[1, 0, 0, 0, 1, 0])),
        ],
    );
    assert_close(
        &y[0],
        &[1, 1, 3, 2, 3],
        &[
            -0.0156399,
            0.000833154,
            -0.640252,
            0.0325543,
            -1.91064,
            -1.71707,
            0.548126,
            0.863217,
            -0.0764865,
            0.224198,
            -1.61748,
            -1.52542,
            -0.183792,
            -0.63911,
            0.143442,
            -0.610053,
            0.783875,
            1.36204,
        ],
    );
}

#[test]
fn max_pool_pools_integers_and_counts_indices_column_major() {
    let x = i64s(&[1, 9, 3, 4], &[1, 1, 2, 2]);
    let y = run("MaxPool", 12, &[x], 1, &[("kernel_shape", A::Is(&[2, 1]))]);
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![3, 9]);
    let x = f32s(&[1.0, 9.0, 3.0, 4.0], &[1, 1, 2, 2]);
    let y = run(
        "MaxPool",
        12,
        &[x],
        2,
        &[("kernel_shape", A::Is(&[2, 1])), ("storage_order", A::I(1))],
    );
    // Row-major positions 2 and 1 are (1, 0) and (0, 1): column-major 1 and 2.
    assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![1, 2]);
}

#[test]
fn bit_shift_and_not_wrap_to_the_declared_width() {
    const UINT8: Option<i32> = Some(2);
    const INT8: Option<i32> = Some(3);
    let shift = |t: Option<i32>, dir: &'static str, a: &[i64], b: &[i64]| {
        model_typed(
            "BitShift",
            11,
            &[("x0", t), ("x1", t)],
            1,
            &[("direction", A::S(dir))],
        )
        .unwrap()
        .infer(&[i64s(a, &[a.len()]), i64s(b, &[b.len()])])
        .unwrap()[0]
            .to_vec::<i64>()
            .unwrap()
    };
    assert_eq!(
        shift(INT8, "LEFT", &[64, 1, -8], &[1, 8, -1]),
        vec![-128, 0, 0]
    );
    assert_eq!(shift(UINT8, "LEFT", &[200, 3], &[1, 2]), vec![144, 12]);
    assert_eq!(shift(INT8, "RIGHT", &[-8, -8], &[1, 9]), vec![-4, -1]);
    let not = |t: Option<i32>, a: &[i64]| {
        model_typed("BitwiseNot", 18, &[("x0", t)], 1, &[])
            .unwrap()
            .infer(&[i64s(a, &[a.len()])])
            .unwrap()[0]
            .to_vec::<i64>()
            .unwrap()
    };
    assert_eq!(not(UINT8, &[0, 200]), vec![255, 55]);
    assert_eq!(not(INT8, &[0, -1, 5]), vec![-1, 0, -6]);
}

#[test]
fn mod_of_a_finite_value_by_an_infinite_divisor() {
    let y = run(
        "Mod",
        13,
        &[
            f32s(&[3.0, -3.0, 3.0, -3.0], &[4]),
            f32s(
                &[
                    f32::INFINITY,
                    f32::INFINITY,
                    f32::NEG_INFINITY,
                    f32::NEG_INFINITY,
                ],
                &[4],
            ),
        ],
        1,
        &[],
    );
    let v = y[0].to_f64_vec();
    assert_eq!(v, vec![3.0, f64::INFINITY, f64::NEG_INFINITY, -3.0]);
}

#[test]
fn tensor_scatter_writes_each_row_at_its_index() {
    let past = f32s(&[0.0; 8], &[2, 4, 1]);
    let update = f32s(&[1.0, 2.0, 3.0, 4.0], &[2, 2, 1]);
    let y = run(
        "TensorScatter",
        24,
        &[past, update, i64s(&[1, 3], &[2])],
        1,
        &[("mode", A::S("circular")), ("axis", A::I(1))],
    );
    assert_close(&y[0], &[2, 4, 1], &[0.0, 1.0, 2.0, 0.0, 4.0, 0.0, 0.0, 3.0]);
}

#[test]
fn upsample_nearest_repeats_each_value() {
    let y = run(
        "Upsample",
        9,
        &[f32s(&[1.0, 2.0], &[1, 2]), f32s(&[2.0, 1.5], &[2])],
        1,
        &[],
    );
    assert_close(&y[0], &[2, 3], &[1.0, 1.0, 2.0, 1.0, 1.0, 2.0]);
}

#[test]
fn roi_align_matches_onnxruntime() {
    let y = run(
        "RoiAlign",
        16,
        &[
            wave(&[1, 1, 4, 4], 0.0, 1.0),
            f32s(&[0.5, 0.5, 3.0, 2.5], &[1, 4]),
            i64s(&[0], &[1]),
        ],
        1,
        &[
            ("output_height", A::I(2)),
            ("output_width", A::I(2)),
            ("sampling_ratio", A::I(2)),
        ],
    );
    assert_close(
        &y[0],
        &[1, 1, 2, 2],
        &[0.154509, 0.0656491, -0.159918, -0.110025],
    );
}

#[test]
fn det_and_its_gradient_the_cofactors() {
    // Its first column's largest value is in the last row: a pivot swap.
    let a = f32s(&[1.0, 2.0, 0.0, 0.0, 1.0, 3.0, 4.0, 0.0, 1.0], &[3, 3]);
    let m = model("Det", 11, &[true], 1, &[]);
    let g = Graph::new();
    let va = g.variable(a);
    let d = m.forward(&g, &[&va]).unwrap();
    // 1·(1 - 0) - 2·(0 - 12) + 0 = 25.
    assert_close(d[0].value(), &[], &[25.0]);
    // d det / d a_ij is the cofactor C_ij.
    let grad = d[0].sum().backward().unwrap().try_wrt(&va).unwrap();
    assert_close(
        &grad,
        &[3, 3],
        &[1.0, 12.0, -4.0, -2.0, 1.0, 8.0, 6.0, -3.0, 1.0],
    );
    // A singular matrix: 0, not NaN.
    let y = run("Det", 11, &[f32s(&[1.0, 2.0, 2.0, 4.0], &[2, 2])], 1, &[]);
    assert_close(&y[0], &[], &[0.0]);
}

#[test]
fn an_opset_before_7_reads_only_ops_unchanged_since_opset_1() {
    let b = Tensor::from_vec(vec![true, false], &[2]).unwrap();
    let y = model("Not", 1, &[true], 1, &[]).infer(&[b]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![0.0, 1.0]);
    // `Add` broadcast differently before opset 7: refused, naming the opset.
    let e = model_typed("Add", 6, &[("x0", None), ("x1", None)], 1, &[]).unwrap_err();
    assert!(e.to_string().contains("opset 6"), "{e}");
}

#[test]
fn windows_mel_weights_and_one_hot() {
    // Periodic Hann of 4: sin²(πn / 4).
    let y = run("HannWindow", 17, &[i64s(&[4], &[])], 1, &[]);
    assert_close(&y[0], &[4], &[0.0, 0.5, 1.0, 0.5]);
    let y = run("HammingWindow", 17, &[i64s(&[4], &[])], 1, &[]);
    assert_close(&y[0], &[4], &[0.0869565, 0.543478, 1.0, 0.543478]);
    // Symmetric Blackman of 3: 0, 1, 0.
    let y = run(
        "BlackmanWindow",
        17,
        &[i64s(&[3], &[])],
        1,
        &[("periodic", A::I(0))],
    );
    assert_close(&y[0], &[3], &[0.0, 1.0, 0.0]);
    let y = run(
        "MelWeightMatrix",
        17,
        &[
            i64s(&[2], &[]),
            i64s(&[8], &[]),
            i64s(&[100], &[]),
            f32s(&[0.0], &[]),
            f32s(&[50.0], &[]),
        ],
        1,
        &[],
    );
    assert_close(
        &y[0],
        &[5, 2],
        &[0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0],
    );
    // Index -1 is the last class; 5 is out of range: all off.
    let y = run(
        "OneHot",
        11,
        &[
            i64s(&[0, -1, 5], &[3]),
            i64s(&[3], &[]),
            f32s(&[-1.0, 2.0], &[2]),
        ],
        1,
        &[("axis", A::I(0))],
    );
    assert_close(
        &y[0],
        &[3, 3],
        &[2.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 2.0, -1.0],
    );
}

#[test]
fn deform_conv_samples_between_pixels_and_its_offsets_get_gradients() {
    // A 1x1 kernel of weight 1 on a 1x3 row, each output's tap moved
    // right by 0.25: the row read a quarter of the way to its neighbour
    // (zero past the end).
    let x = f32s(&[1.0, 2.0, 4.0], &[1, 1, 1, 3]);
    let w = f32s(&[1.0], &[1, 1, 1, 1]);
    let mut off = vec![0.0f32; 6];
    off[3..].fill(0.25);
    let offset = f32s(&off, &[1, 2, 1, 3]);
    let m = model("DeformConv", 19, &[true, true, true], 1, &[]);
    let g = Graph::new();
    let (vx, vw, vo) = (g.variable(x), g.variable(w), g.variable(offset));
    let y = m.forward(&g, &[&vx, &vw, &vo]).unwrap();
    assert_close(y[0].value(), &[1, 1, 1, 3], &[1.25, 2.5, 3.0]);
    // d y / d (x offset) is the difference to the right neighbour; down
    // (y) the next row is outside, zero: minus the value read.
    let grads = y[0].sum().backward().unwrap();
    let go = grads.try_wrt(&vo).unwrap();
    assert_close(&go, &[1, 2, 1, 3], &[-1.25, -2.5, -3.0, 1.0, 2.0, -4.0]);
    assert_close(&grads.try_wrt(&vw).unwrap(), &[1, 1, 1, 1], &[6.75]);
}

/// A model of one `op` node of `domain` (imported at `version`, without
/// the default domain) reading `inputs` and naming `outputs`.
fn side_model(
    domain: &str,
    version: i64,
    op: &str,
    inputs: &[&str],
    outputs: &[&str],
    attrs: &[(&str, A)],
) -> OnnxModel {
    let node = NodeProto {
        op_type: Some(op.into()),
        domain: Some(domain.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        attribute: attrs.iter().map(|(n, a)| attr(n, a)).collect(),
        ..Default::default()
    };
    let m = ModelProto {
        ir_version: Some(8),
        opset_import: vec![OperatorSetIdProto {
            domain: Some(domain.into()),
            version: Some(version),
        }],
        graph: Some(GraphProto {
            name: Some("g".into()),
            node: vec![node],
            input: inputs.iter().map(|n| value_info(n, None)).collect(),
            output: outputs.iter().map(|n| value_info(n, None)).collect(),
            ..Default::default()
        }),
        ..Default::default()
    };
    OnnxModel::from_bytes(&m.encode_to_vec()).unwrap()
}

#[test]
fn optimizer_steps_of_the_training_domain_run_without_the_default_domain() {
    // Momentum, standard, first step (β taken as 1): V = αV + G, X -= R V.
    let model = side_model(
        "ai.onnx.preview.training",
        1,
        "Momentum",
        &["r", "t", "x", "g", "v"],
        &["x_new", "v_new"],
        &[
            ("alpha", A::F(0.5)),
            ("beta", A::F(0.1)),
            ("mode", A::S("standard")),
            ("norm_coefficient", A::F(0.0)),
        ],
    );
    let y = model
        .infer(&[
            f32s(&[0.1], &[]),
            i64s(&[0], &[]),
            f32s(&[1.0, 2.0], &[2]),
            f32s(&[0.5, -1.0], &[2]),
            f32s(&[2.0, 2.0], &[2]),
        ])
        .unwrap();
    // V = 0.5 · 2 + 1 · G = [1.5, 0]; X = [1 - 0.15, 2 - 0].
    assert_close(&y[0], &[2], &[0.85, 2.0]);
    assert_close(&y[1], &[2], &[1.5, 0.0]);
}

#[test]
fn ml_binarizer_feature_extractor_and_a_tree() {
    let x = f32s(&[0.5, 2.0, -1.0, 3.0], &[2, 2]);
    let m = side_model(
        "ai.onnx.ml",
        1,
        "Binarizer",
        &["x"],
        &["y"],
        &[("threshold", A::F(1.0))],
    );
    assert_close(
        &m.infer(std::slice::from_ref(&x)).unwrap()[0],
        &[2, 2],
        &[0.0, 1.0, 0.0, 1.0],
    );
    let m = side_model(
        "ai.onnx.ml",
        1,
        "ArrayFeatureExtractor",
        &["x", "i"],
        &["y"],
        &[],
    );
    let y = m.infer(&[x.clone(), i64s(&[1, 1, 0], &[3])]).unwrap();
    assert_close(&y[0], &[2, 3], &[2.0, 2.0, 0.5, 3.0, 3.0, -1.0]);
    // One split: feature 0 <= 0 goes to leaf 0 (weight 10), else leaf 1 (20).
    let m = side_model(
        "ai.onnx.ml",
        5,
        "TreeEnsemble",
        &["x"],
        &["y"],
        &[
            ("nodes_splits", A::Tf(&[0.0])),
            ("nodes_modes", A::Tf(&[0.0])),
            ("nodes_featureids", A::Is(&[0])),
            ("nodes_truenodeids", A::Is(&[0])),
            ("nodes_falsenodeids", A::Is(&[1])),
            ("nodes_trueleafs", A::Is(&[1])),
            ("nodes_falseleafs", A::Is(&[1])),
            ("leaf_targetids", A::Is(&[0, 0])),
            ("leaf_weights", A::Tf(&[10.0, 20.0])),
            ("tree_roots", A::Is(&[0])),
            ("n_targets", A::I(1)),
        ],
    );
    assert_close(&m.infer(&[x]).unwrap()[0], &[2, 1], &[20.0, 10.0]);
}
