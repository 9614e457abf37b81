//! One-node ONNX models, imported and run, against the values ONNX's
//! reference implementation (`onnx.reference.ReferenceEvaluator`) or
//! onnxruntime gives for the same node and inputs: the opset-dependent
//! readings of an op (attributes that became inputs, changed defaults)
//! and the ops the importer maps onto retrograd's. The whole of ONNX's
//! own node cases runs through `tests/reference/onnx_conformance.py`.

#![cfg(feature = "onnx")]

#[path = "support/onnx_node.rs"]
mod onnx_node;

use onnx_node::{model_reading, model_typed, A};
use retrograd::onnx::OnnxModel;
use retrograd::{DType, Error, Graph, Tensor};

/// A model of one `op` node at `opset` reading `n_in` inputs and naming
/// `n_out` outputs, imported.
fn model(
    op: &str,
    opset: i64,
    n_in: usize,
    n_out: usize,
    attrs: &[(&str, A)],
) -> retrograd::Result<OnnxModel> {
    let ins: Vec<String> = (0..n_in).map(|i| format!("x{i}")).collect();
    let ins: Vec<&str> = ins.iter().map(String::as_str).collect();
    model_reading(op, opset, &ins, n_out, attrs)
}

/// Runs the one-node model on `inputs`.
fn run(
    op: &str,
    opset: i64,
    inputs: &[Tensor],
    n_out: usize,
    attrs: &[(&str, A)],
) -> retrograd::Result<Vec<Tensor>> {
    model(op, opset, inputs.len(), n_out, attrs)?.infer(inputs)
}

fn f32s(v: &[f32], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape).unwrap()
}

fn i64s(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// `[[-2, -1.5, -1, -0.5], [0, .., 1.5], [2, .., 3.5]]`.
fn x34() -> Tensor {
    let v: Vec<f32> = (0..12).map(|i| i as f32 * 0.5 - 2.0).collect();
    f32s(&v, &[3, 4])
}

#[track_caller]
fn assert_close(got: &Tensor, shape: &[usize], want: &[f64]) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec();
    for (i, (a, b)) in g.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= 1e-5 + 1e-4 * b.abs(),
            "element {i}: {a} against {b} (all: {g:?})"
        );
    }
}

#[test]
fn slice_before_opset_10_reads_attributes_and_later_steps_go_backwards() {
    let y = run(
        "Slice",
        9,
        &[x34()],
        1,
        &[
            ("starts", A::Is(&[1, -1])),
            ("ends", A::Is(&[3, 100])),
            ("axes", A::Is(&[0, -1])),
        ],
    )
    .unwrap();
    assert_close(&y[0], &[2, 1], &[1.5, 3.5]);
    // Default axes: the first ones.
    let y = run(
        "Slice",
        9,
        &[x34()],
        1,
        &[("starts", A::Is(&[1])), ("ends", A::Is(&[1000]))],
    )
    .unwrap();
    assert_close(&y[0], &[2, 4], &[0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
    // Opset 13, negative steps on both axes.
    let y = run(
        "Slice",
        13,
        &[
            x34(),
            i64s(&[2, 3]),
            i64s(&[-4, -10]),
            i64s(&[0, 1]),
            i64s(&[-1, -2]),
        ],
        1,
        &[],
    )
    .unwrap();
    assert_close(&y[0], &[3, 2], &[3.5, 2.5, 1.5, 0.5, -0.5, -1.5]);
    // An opset-9 Slice without its attributes names what is missing.
    let e = run("Slice", 9, &[x34()], 1, &[]).unwrap_err();
    assert!(e.to_string().contains("starts"), "{e}");
}

#[test]
fn clip_before_opset_11_reads_min_and_max_attributes() {
    let y = run(
        "Clip",
        7,
        &[x34()],
        1,
        &[("min", A::F(-1.0)), ("max", A::F(1.5))],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[3, 4],
        &[
            -1.0, -1.0, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 1.5, 1.5, 1.5, 1.5,
        ],
    );
}

/// onnxruntime's values: before opset 13 the input is one row per leading
/// index, so axis 1 of `[3, 2, 2]` normalises over 4 elements.
#[test]
fn softmax_before_opset_13_normalises_the_flattened_trailing_axes() {
    let x = x34().reshape(&[3, 2, 2]).unwrap();
    let y = run("Softmax", 11, &[x.clone()], 1, &[("axis", A::I(1))]).unwrap();
    let row = [0.101536, 0.167405, 0.276004, 0.455054];
    let want: Vec<f64> = row.iter().cycle().take(12).copied().collect();
    assert_close(&y[0], &[3, 2, 2], &want);
    // Opset 13: along axis 1 only.
    let y = run("Softmax", 13, &[x], 1, &[("axis", A::I(1))]).unwrap();
    let pair = [0.268941, 0.268941, 0.731059, 0.731059];
    let want: Vec<f64> = pair.iter().cycle().take(12).copied().collect();
    assert_close(&y[0], &[3, 2, 2], &want);
}

#[test]
fn arg_extrema_select_the_last_index_when_asked() {
    let x = f32s(&[1.0, 3.0, 3.0, 2.0, 2.0, 1.0], &[2, 3]);
    let y = run(
        "ArgMax",
        12,
        &[x],
        1,
        &[("axis", A::I(1)), ("select_last_index", A::I(1))],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[2, 1]);
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![2, 1]);
    let x = f32s(&[1.0, 3.0, 1.0, 2.0, 2.0, 1.0], &[2, 3]);
    let y = run(
        "ArgMin",
        12,
        &[x],
        1,
        &[
            ("axis", A::I(1)),
            ("select_last_index", A::I(1)),
            ("keepdims", A::I(0)),
        ],
    )
    .unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![2, 2]);
}

#[test]
fn same_upper_pooling_pads_at_the_end() {
    let v: Vec<f32> = (0..25).map(|i| i as f32).collect();
    let y = run(
        "MaxPool",
        12,
        &[f32s(&v, &[1, 1, 5, 5])],
        1,
        &[
            ("kernel_shape", A::Is(&[2, 2])),
            ("strides", A::Is(&[2, 2])),
            ("auto_pad", A::S("SAME_UPPER")),
        ],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[1, 1, 3, 3],
        &[6.0, 8.0, 9.0, 16.0, 18.0, 19.0, 21.0, 23.0, 24.0],
    );
}

#[test]
fn layer_norm_gives_its_mean_and_inverse_deviation_outputs() {
    let scale = f32s(&[1.0, 2.0, 1.0, 2.0], &[4]);
    let y = run(
        "LayerNormalization",
        17,
        &[x34(), scale],
        3,
        &[("axis", A::I(1))],
    )
    .unwrap();
    let row = [-1.341619, -0.894413, 0.447206, 2.683238];
    let want: Vec<f64> = row.iter().cycle().take(12).copied().collect();
    assert_close(&y[0], &[3, 4], &want);
    assert_close(&y[1], &[3, 1], &[-1.25, 0.75, 2.75]);
    assert_close(&y[2], &[3, 1], &[1.788826; 3]);
}

#[test]
fn a_shape_given_as_an_input_is_not_dry_run_on_zeros() {
    // Reshape's target shape is a graph input of rank 1: the load must not
    // try it at zeros (a [0, 0] shape cannot hold 12 elements).
    let m = model("Reshape", 14, 2, 1, &[]).unwrap();
    let y = m.infer(&[x34(), i64s(&[2, -1])]).unwrap();
    assert_eq!(y[0].shape(), &[2, 6]);
    let e = m.infer(&[x34(), i64s(&[5, -1])]).unwrap_err();
    assert!(matches!(e, Error::OnnxInvalid { .. }), "{e}");
}

#[test]
fn opsets_outside_7_to_28_are_refused_by_number() {
    for opset in [6, 29] {
        let e = model("Relu", opset, 1, 1, &[]).unwrap_err();
        assert!(
            matches!(e, Error::OnnxUnsupported { .. }) && e.to_string().contains("7 to 28"),
            "{e}"
        );
    }
    let y = run("Relu", 7, &[x34()], 1, &[]).unwrap();
    assert_eq!(y[0].to_f64_vec()[0], 0.0);
}

/// An imported model still trains: the gradient flows through an op the
/// importer composes (here the opset-11 softmax's flatten and reshape).
#[test]
fn composed_ops_differentiate() {
    let m = model("Softmax", 11, 1, 1, &[("axis", A::I(1))]).unwrap();
    let g = Graph::new();
    let x = g.variable(x34().reshape(&[3, 2, 2]).unwrap());
    let y = m.forward(&g, &[&x]).unwrap();
    let w = g.constant(Tensor::from_f64_slice(&[1.0, 0.0, 0.0, 0.0], &[2, 2], DType::F32).unwrap());
    let loss = y[0].try_mul(&w).unwrap().sum();
    let grads = loss.backward().unwrap();
    let gx = grads.try_wrt(&x).unwrap().to_f64_vec();
    // d softmax_0 / d x_j over the flattened row: p0 (δ0j - pj).
    let p = [0.101536, 0.167405, 0.276004, 0.455054];
    for j in 0..4 {
        let want = p[0] * (f64::from(u8::from(j == 0)) - p[j]);
        assert!((gx[j] - want).abs() < 1e-5, "{j}: {} against {want}", gx[j]);
    }
}

#[test]
fn mod_takes_the_divisor_sign_or_with_fmod_the_dividend_sign() {
    let y = run(
        "Mod",
        13,
        &[i64s(&[-7, 7, -7, 7, 5]), i64s(&[3, -3, -3, 3, 5])],
        1,
        &[],
    )
    .unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![2, -2, -1, 1, 0]);
    let a = f32s(&[-7.5, 7.5, 5.25], &[3]);
    let b = f32s(&[2.0, -2.0, 1.5], &[3]);
    let m = model("Mod", 13, 2, 1, &[("fmod", A::I(1))]).unwrap();
    let y = m.infer(&[a.clone(), b.clone()]).unwrap();
    assert_close(&y[0], &[3], &[-1.5, 1.5, 0.75]);
    // d/da = 1, d/db = -trunc(a / b).
    let g = Graph::new();
    let (va, vb) = (g.variable(a), g.variable(b));
    let y = m.forward(&g, &[&va, &vb]).unwrap();
    let grads = y[0].sum().backward().unwrap();
    assert_eq!(grads.try_wrt(&va).unwrap().to_f64_vec(), vec![1.0; 3]);
    assert_eq!(
        grads.try_wrt(&vb).unwrap().to_f64_vec(),
        vec![3.0, 3.0, -3.0]
    );
    // A remainder by zero is an error naming the node, not a panic.
    let e = run("Mod", 13, &[i64s(&[1]), i64s(&[0])], 1, &[]).unwrap_err();
    assert!(e.to_string().contains("Mod"), "{e}");
}

fn x234() -> Tensor {
    let v: Vec<f32> = (0..24).map(|i| (i as f32 * 0.37) % 1.9 - 0.8).collect();
    f32s(&v, &[2, 3, 4])
}

#[test]
fn rms_normalization_and_the_new_reductions_match_onnx() {
    let scale = f32s(&[1.0, 0.5, 2.0, -1.0], &[4]);
    let y = run(
        "RMSNormalization",
        23,
        &[x234(), scale],
        1,
        &[("epsilon", A::F(1e-5))],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[2, 3, 4],
        &[
            -1.663925, -0.44718, -0.249589, -0.644771, 1.011596, 0.781011, -1.428135, 0.16364,
            0.393596, 0.476857, 3.027663, 0.80233, -0.27973, 0.183573, 2.028047, -1.6609, -1.39948,
            -0.253354, 0.772127, -1.278836, 1.58688, -0.555408, -0.916862, -0.193952,
        ],
    );
    let y = run(
        "ReduceProd",
        18,
        &[x234(), i64s(&[0, 2])],
        1,
        &[("keepdims", A::I(0))],
    )
    .unwrap();
    assert_eq!(y[0].shape(), &[3]);
    let want = [0.000118, 0.000389, -0.001408];
    for (g, w) in y[0].to_f64_vec().iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} against {w}");
    }
    let y = run(
        "HardSwish",
        14,
        &[f32s(&[-4.0, -1.0, 0.5, 2.0, 4.0], &[5])],
        1,
        &[],
    )
    .unwrap();
    assert_close(&y[0], &[5], &[0.0, -0.333333, 0.291667, 1.666667, 4.0]);
}

/// Four query heads on two key/value heads, a three-step cache, the
/// causal limit after it and a softcap; then a boolean mask with a fully
/// masked row (0, not NaN) and the softmax scores as the fourth output.
#[test]
fn attention_with_grouped_heads_a_cache_and_masks_matches_onnx() {
    let q = f32s(
        &[
            0.1257, -0.1321, 0.6404, 0.1049, -0.5357, 0.3616, 1.304, 0.9471, -0.7037, -1.2654,
            -0.6233, 0.0413, -2.325, -0.2188, -1.2459, -0.7323, -0.5443, -0.3163, 0.4116, 1.0425,
            -0.1285, 1.3665, -0.6652, 0.3515,
        ],
        &[1, 4, 2, 3],
    );
    let k = f32s(
        &[
            0.9035, 0.094, -0.7435, -0.9217, -0.4577, 0.2202, -1.0096, -0.2092, -0.1592, 0.5408,
            0.2147, 0.3554,
        ],
        &[1, 2, 2, 3],
    );
    let v = f32s(
        &[
            -0.6538, -0.1296, 0.784, 1.4934, -1.2591, 1.5139, 1.3459, 0.7813, 0.2645, -0.3139,
            1.458, 1.9603,
        ],
        &[1, 2, 2, 3],
    );
    let pk = f32s(
        &[
            1.8016, 1.3151, 0.3574, -1.2083, -0.0045, 0.6565, -1.2884, 0.3951, 0.4299, 0.696,
            -1.1841, -0.6617, -0.4364, -1.1698, 1.7394, -0.4959, 0.329, -0.2586,
        ],
        &[1, 2, 3, 3],
    );
    let pv = f32s(
        &[
            1.5835, 1.3204, 0.6334, -2.2035, 0.052, 0.6837, 1.004, -0.6179, 1.822, -1.3204,
            -0.6615, 0.935, 0.0491, 2.0024, 0.1885, -0.6332, -0.3776, -1.0911,
        ],
        &[1, 2, 3, 3],
    );
    // Inputs 0, 1, 2, 4, 5 (no mask): a model reading an empty name for input 3.
    let node = |attrs: &[(&str, A)], inputs: &[&str], n_out: usize| {
        model_reading("Attention", 23, inputs, n_out, attrs).unwrap()
    };
    let m = node(
        &[("is_causal", A::I(1)), ("softcap", A::F(2.0))],
        &["q", "k", "v", "", "pk", "pv"],
        3,
    );
    let y = m
        .infer(&[q.clone(), k.clone(), v.clone(), pk.clone(), pv.clone()])
        .unwrap();
    assert_close(
        &y[0],
        &[1, 4, 2, 3],
        &[
            -0.047207, 0.207635, 0.970595, 0.197371, -0.207058, 1.104798, 0.642449, 0.679079,
            0.749536, 0.054268, -0.503853, 1.265774, 0.3511, 0.380474, -0.086702, -0.043834,
            0.599361, 0.319023, -0.190541, 0.198262, -0.128923, -0.483171, 0.625013, 0.760773,
        ],
    );
    assert_eq!(y[1].shape(), &[1, 2, 5, 3]);
    assert_eq!(y[2].to_f64_vec()[9] as f32, -0.6538);
    let mask = Tensor::from_vec(
        vec![
            true, false, true, true, true, false, false, false, false, false,
        ],
        &[2, 5],
    )
    .unwrap();
    let m = node(
        &[("qk_matmul_output_mode", A::I(3))],
        &["q", "k", "v", "mask", "pk", "pv"],
        4,
    );
    let y = m.infer(&[q, k, v, mask, pk, pv]).unwrap();
    assert_close(
        &y[0],
        &[1, 4, 2, 3],
        &[
            0.969818, -0.126302, 1.193243, 0.0, 0.0, 0.0, 0.956826, 0.7694, 0.748788, 0.0, 0.0,
            0.0, 0.448183, 0.343731, 0.01657, 0.0, 0.0, 0.0, -0.259271, 0.426462, 0.549579, 0.0,
            0.0, 0.0,
        ],
    );
    let p = y[3].to_f64_vec();
    assert_eq!(y[3].shape(), &[1, 4, 2, 5]);
    assert_close(
        &y[3],
        &[1, 4, 2, 5],
        &[
            0.289186, 0.0, 0.254625, 0.197943, 0.258246, 0.0, 0.0, 0.0, 0.0, 0.0, 0.659234, 0.0,
            0.037796, 0.268943, 0.034027, 0.0, 0.0, 0.0, 0.0, 0.0, 0.09401, 0.0, 0.287792,
            0.571513, 0.046685, 0.0, 0.0, 0.0, 0.0, 0.0, 0.165371, 0.0, 0.300595, 0.19102,
            0.343015, 0.0, 0.0, 0.0, 0.0, 0.0,
        ],
    );
    assert!(p.iter().all(|x| x.is_finite()));
}

#[test]
fn bit_shifts_and_bitwise_ops_run_on_integers() {
    let y = run(
        "BitShift",
        11,
        &[i64s(&[16, 4, 1]), i64s(&[1, 2, 3])],
        1,
        &[("direction", A::S("LEFT"))],
    )
    .unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![32, 16, 8]);
    let y = run(
        "BitShift",
        11,
        &[i64s(&[16, -8, 1]), i64s(&[1, 1, 3])],
        1,
        &[("direction", A::S("RIGHT"))],
    )
    .unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![8, -4, 0]);
    let y = run("BitwiseXor", 18, &[i64s(&[12, 5]), i64s(&[10, 5])], 1, &[]).unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![6, 0]);
    let e = run(
        "BitShift",
        11,
        &[i64s(&[1]), i64s(&[1])],
        1,
        &[("direction", A::S("UP"))],
    )
    .unwrap_err();
    assert!(e.to_string().contains("UP"), "{e}");
}

/// 16-bit floats compute in f32 and come back in their type.
#[test]
fn sixteen_bit_inputs_compute_in_f32_and_keep_their_type() {
    let a = f32s(&[3.0, 2.0, 1.0], &[3]).to_dtype(DType::F16);
    let b = f32s(&[1.0, 4.0, 0.5], &[3]).to_dtype(DType::F16);
    let y = run("Max", 13, &[a.clone(), b], 1, &[]).unwrap();
    assert_eq!(y[0].dtype(), DType::F16);
    assert_eq!(y[0].to_f64_vec(), vec![3.0, 4.0, 1.0]);
    // A cast reads its 16-bit input as it is.
    let y = run("Cast", 13, &[a], 1, &[("to", A::I(1))]).unwrap();
    assert_eq!(y[0].dtype(), DType::F32);
}

#[test]
fn rounding_is_half_to_even_and_sign_of_zero_is_zero() {
    let x = f32s(&[0.5, 1.5, 2.5, -2.5, -0.4, 2.6], &[6]);
    let y = run("Round", 11, &[x.clone()], 1, &[]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![0.0, 2.0, 2.0, -2.0, 0.0, 3.0]);
    let y = run("Sign", 13, &[f32s(&[-2.0, 0.0, 3.0], &[3])], 1, &[]).unwrap();
    assert_eq!(y[0].to_f64_vec(), vec![-1.0, 0.0, 1.0]);
    let y = run("Sign", 13, &[i64s(&[-2, 0, 3])], 1, &[]).unwrap();
    assert_eq!(y[0].to_vec::<i64>().unwrap(), vec![-1, 0, 1]);
    let y = run("Atan", 7, &[f32s(&[1.0], &[1])], 1, &[]).unwrap();
    assert!((y[0].to_f64_vec()[0] - std::f64::consts::FRAC_PI_4).abs() < 1e-6);
}

#[test]
fn top_k_orders_ties_by_index_and_its_values_differentiate() {
    let x = f32s(&[3.0, 1.0, 3.0, 2.0, 0.0, 5.0, 5.0, -1.0], &[2, 4]);
    let m = model("TopK", 11, 2, 2, &[("axis", A::I(1))]).unwrap();
    let y = m.infer(&[x.clone(), i64s(&[2])]).unwrap();
    assert_close(&y[0], &[2, 2], &[3.0, 3.0, 5.0, 5.0]);
    assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![0, 2, 1, 2]);
    let y = run(
        "TopK",
        11,
        &[x.clone(), i64s(&[3])],
        2,
        &[("axis", A::I(1)), ("largest", A::I(0))],
    )
    .unwrap();
    assert_close(&y[0], &[2, 3], &[1.0, 2.0, 3.0, -1.0, 0.0, 5.0]);
    assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![1, 3, 0, 3, 0, 1]);
    // The gradient reaches the picked elements.
    let g = Graph::new();
    let vx = g.variable(x);
    let k = g.constant(i64s(&[2]));
    let y = m.forward(&g, &[&vx, &k]).unwrap();
    let gx = y[0]
        .sum()
        .backward()
        .unwrap()
        .try_wrt(&vx)
        .unwrap()
        .to_f64_vec();
    assert_eq!(gx, vec![1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    let e = run("TopK", 11, &[f32s(&[1.0], &[1]), i64s(&[2])], 2, &[]).unwrap_err();
    assert!(e.to_string().contains("k = 2"), "{e}");
}

#[test]
fn scatters_and_gather_nd_match_onnx() {
    let data = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0], &[3, 3]);
    let idx = Tensor::from_vec(vec![1i64, 0, 2, 0, 2, 1], &[2, 3]).unwrap();
    let upd = f32s(&[-1.0, -2.0, -3.0, -4.0, -5.0, -6.0], &[2, 3]);
    let y = run(
        "ScatterElements",
        18,
        &[data.clone(), idx.clone(), upd.clone()],
        1,
        &[("axis", A::I(0))],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[3, 3],
        &[-4.0, -2.0, 2.0, -1.0, 4.0, -6.0, 6.0, -5.0, -3.0],
    );
    let y = run(
        "ScatterElements",
        18,
        &[data, idx, upd],
        1,
        &[("axis", A::I(1)), ("reduction", A::S("add"))],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[3, 3],
        &[-2.0, 0.0, -1.0, -1.0, -2.0, 0.0, 6.0, 7.0, 8.0],
    );
    let d: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let y = run(
        "GatherND",
        13,
        &[
            f32s(&d, &[2, 2, 2]),
            Tensor::from_vec(vec![0i64, 1, 1, 0], &[2, 1, 2]).unwrap(),
        ],
        1,
        &[("batch_dims", A::I(1))],
    )
    .unwrap();
    assert_close(&y[0], &[2, 1], &[1.0, 6.0]);
}

#[test]
fn running_sums_and_products_match_onnx() {
    let x = f32s(&[1.0, 2.0, 3.0, 4.0], &[4]);
    let axis = Tensor::scalar(0i64);
    let y = run(
        "CumSum",
        14,
        &[x.clone(), axis.clone()],
        1,
        &[("exclusive", A::I(1)), ("reverse", A::I(1))],
    )
    .unwrap();
    assert_close(&y[0], &[4], &[9.0, 7.0, 4.0, 0.0]);
    let y = run("CumProd", 26, &[x, axis], 1, &[("exclusive", A::I(1))]).unwrap();
    assert_close(&y[0], &[4], &[1.0, 1.0, 2.0, 6.0]);
}

#[test]
fn softmax_cross_entropy_weights_and_ignores_as_onnx_does() {
    let logits = f32s(&[1.0, 2.0, 0.5, 0.1, -1.0, 2.0, 0.3, 0.3, 0.3], &[3, 3]);
    let target = i64s(&[1, 2, 0]);
    let y = run(
        "SoftmaxCrossEntropyLoss",
        13,
        &[logits.clone(), target.clone()],
        1,
        &[("ignore_index", A::I(0))],
    )
    .unwrap();
    assert_close(&y[0], &[], &[0.323077]);
    let w = f32s(&[1.0, 2.0, 0.5], &[3]);
    let y = run(
        "SoftmaxCrossEntropyLoss",
        13,
        &[logits, target, w],
        1,
        &[("reduction", A::S("sum"))],
    )
    .unwrap();
    assert_close(&y[0], &[], &[2.118242]);
}

#[test]
fn ops_without_meaning_for_tensors_are_refused_with_the_reason() {
    let e = model("StringSplit", 20, 1, 1, &[]).unwrap_err();
    assert!(matches!(e, Error::OnnxUnsupported { .. }), "{e}");
    assert!(e.to_string().contains("strings"), "{e}");
    let e = model("SequenceAt", 20, 2, 1, &[]).unwrap_err();
    assert!(e.to_string().contains("sequence"), "{e}");
}

#[test]
fn resize_interpolates_as_onnx_does_and_differentiates() {
    let x = f32s(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
    let m = model_reading(
        "Resize",
        19,
        &["x", "", "scales"],
        1,
        &[
            ("mode", A::S("linear")),
            ("coordinate_transformation_mode", A::S("align_corners")),
        ],
    )
    .unwrap();
    let scales = f32s(&[1.0, 1.0, 2.0, 1.5], &[4]);
    let y = m.infer(&[x.clone(), scales.clone()]).unwrap();
    assert_close(
        &y[0],
        &[1, 1, 4, 3],
        &[
            1.0, 1.5, 2.0, 1.666667, 2.166667, 2.666667, 2.333333, 2.833333, 3.333333, 3.0, 3.5,
            4.0,
        ],
    );
    // Every output is a convex combination: the gradient of the sum
    // spreads 12 over the 4 inputs.
    let g = Graph::new();
    let vx = g.variable(x.clone());
    let vs = g.constant(scales);
    let y = m.forward(&g, &[&vx, &vs]).unwrap();
    let gx = y[0]
        .sum()
        .backward()
        .unwrap()
        .try_wrt(&vx)
        .unwrap()
        .to_f64_vec();
    assert!((gx.iter().sum::<f64>() - 12.0).abs() < 1e-5, "{gx:?}");
    let y = model_reading(
        "Resize",
        19,
        &["x", "", "", "sizes"],
        1,
        &[("axes", A::Is(&[2, 3]))],
    )
    .unwrap()
    .infer(&[x, i64s(&[3, 1])])
    .unwrap();
    assert_close(&y[0], &[1, 1, 3, 1], &[1.0, 1.0, 3.0]);
    let v: Vec<f32> = (0..16).map(|i| i as f32).collect();
    let y = model_reading(
        "Resize",
        19,
        &["x", "", "scales"],
        1,
        &[("mode", A::S("cubic")), ("antialias", A::I(1))],
    )
    .unwrap()
    .infer(&[f32s(&v, &[1, 1, 4, 4]), f32s(&[1.0, 1.0, 0.5, 0.5], &[4])])
    .unwrap();
    assert_close(
        &y[0],
        &[1, 1, 2, 2],
        &[2.451172, 4.470703, 10.529297, 12.548828],
    );
}

#[test]
fn rotary_embedding_swiglu_and_center_crop_pad_match_onnx() {
    let v: Vec<f32> = (0..16).map(|i| i as f32 * 0.25 - 1.0).collect();
    let cos = f32s(&[1.0, 0.5, 0.0, -1.0, 0.8, 0.6], &[3, 2]);
    let sin = f32s(&[0.0, 0.5, 1.0, 0.2, 0.6, -0.8], &[3, 2]);
    let ids = Tensor::from_vec(vec![2i64, 0], &[1, 2]).unwrap();
    let y = run(
        "RotaryEmbedding",
        23,
        &[f32s(&v, &[1, 2, 2, 4]), cos, sin, ids],
        1,
        &[("interleaved", A::I(1))],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[1, 2, 2, 4],
        &[
            -0.35, -1.2, -0.5, 0.25, 0.0, 0.25, -0.125, 0.625, 0.05, 1.6, 2.3, -0.15, 2.0, 2.25,
            -0.125, 2.625,
        ],
    );
    let y = run(
        "SwiGLU",
        28,
        &[f32s(&[-1.0, 0.5, 2.0], &[3]), f32s(&[2.0, 3.0, -1.0], &[3])],
        1,
        &[],
    )
    .unwrap();
    assert_close(&y[0], &[3], &[-0.537883, 0.933689, -1.761594]);
    let v: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let y = run(
        "CenterCropPad",
        18,
        &[f32s(&v, &[3, 4]), i64s(&[2, 7])],
        1,
        &[],
    )
    .unwrap();
    assert_close(
        &y[0],
        &[2, 7],
        &[
            0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 4.0, 5.0, 6.0, 7.0, 0.0, 0.0,
        ],
    );
}

/// Windows of one and three spatial axes, their pads, and max pooling's
/// indices output, as gathered windows.
#[test]
fn pooling_over_one_or_three_axes_matches_onnx() {
    let x = f32s(&[3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0], &[1, 1, 8]);
    let attrs = [
        ("kernel_shape", A::Is(&[3])),
        ("strides", A::Is(&[2])),
        ("pads", A::Is(&[1, 1])),
    ];
    let m = model("MaxPool", 12, 1, 2, &attrs).unwrap();
    let y = m.infer(&[x.clone()]).unwrap();
    assert_close(&y[0], &[1, 1, 4], &[3.0, 4.0, 9.0, 9.0]);
    assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![0, 2, 5, 5]);
    // The gradient goes to each window's maximum (9 wins twice).
    let g = Graph::new();
    let vx = g.variable(x.clone());
    let y = m.forward(&g, &[&vx]).unwrap();
    let gx = y[0]
        .sum()
        .backward()
        .unwrap()
        .try_wrt(&vx)
        .unwrap()
        .to_f64_vec();
    assert_eq!(gx, vec![1.0, 0.0, 1.0, 0.0, 0.0, 2.0, 0.0, 0.0]);
    let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let y = run(
        "AveragePool",
        19,
        &[f32s(&v, &[1, 1, 2, 2, 2])],
        1,
        &[
            ("kernel_shape", A::Is(&[2, 2, 2])),
            ("pads", A::Is(&[1, 0, 0, 0, 0, 1])),
            ("strides", A::Is(&[1, 2, 2])),
        ],
    )
    .unwrap();
    assert_close(&y[0], &[1, 1, 2, 1, 1], &[1.5, 3.5]);
    let y = run(
        "LpPool",
        18,
        &[x],
        1,
        &[
            ("kernel_shape", A::Is(&[2])),
            ("strides", A::Is(&[3])),
            ("p", A::I(3)),
        ],
    )
    .unwrap();
    assert_close(&y[0], &[1, 1, 3], &[3.036589, 5.013298, 6.073178]);
}

/// An opset, the node's settings and ONNX's three outputs.
type GridCase = (i64, &'static [(&'static str, A)], [f64; 3]);

#[test]
fn grid_sample_reads_like_onnx_in_each_mode_and_padding() {
    let x = f32s(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[1, 1, 2, 3]);
    let grid = f32s(&[-1.0, -1.0, 0.5, 0.2, 1.2, 0.9], &[1, 1, 3, 2]);
    let cases: [GridCase; 3] = [
        (
            20,
            &[("mode", A::S("linear")), ("padding_mode", A::S("zeros"))],
            [0.0, 3.85, 0.599999],
        ),
        (
            20,
            &[
                ("mode", A::S("cubic")),
                ("padding_mode", A::S("reflection")),
                ("align_corners", A::I(1)),
            ],
            [0.0, 3.631499, 4.922248],
        ),
        (
            16,
            &[("mode", A::S("nearest")), ("padding_mode", A::S("border"))],
            [0.0, 5.0, 5.0],
        ),
    ];
    for (opset, attrs, want) in cases {
        let y = run("GridSample", opset, &[x.clone(), grid.clone()], 1, attrs).unwrap();
        assert_close(&y[0], &[1, 1, 1, 3], &want);
    }
    let e = run(
        "GridSample",
        20,
        &[x, f32s(&[0.0; 3], &[1, 1, 1, 3])],
        1,
        &[],
    )
    .unwrap_err();
    assert!(e.to_string().contains("grid"), "{e}");
}

#[test]
fn unique_reverse_sequence_affine_grid_and_extrema_match_onnx() {
    let y = run(
        "Unique",
        11,
        &[f32s(&[2.0, 1.0, 1.0, 3.0, 4.0, 3.0], &[6])],
        4,
        &[("sorted", A::I(0))],
    )
    .unwrap();
    assert_close(&y[0], &[4], &[2.0, 1.0, 3.0, 4.0]);
    assert_eq!(y[1].to_vec::<i64>().unwrap(), vec![0, 1, 3, 4]);
    assert_eq!(y[2].to_vec::<i64>().unwrap(), vec![0, 1, 1, 2, 3, 2]);
    assert_eq!(y[3].to_vec::<i64>().unwrap(), vec![1, 2, 2, 1]);
    let v: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let y = run(
        "ReverseSequence",
        10,
        &[f32s(&v, &[4, 2]), i64s(&[4, 2])],
        1,
        &[("time_axis", A::I(0)), ("batch_axis", A::I(1))],
    )
    .unwrap();
    assert_close(&y[0], &[4, 2], &[6.0, 3.0, 4.0, 1.0, 2.0, 5.0, 0.0, 7.0]);
    let theta = f32s(&[1.0, 0.5, 0.1, -0.2, 1.0, 0.3], &[1, 2, 3]);
    let y = run("AffineGrid", 20, &[theta, i64s(&[1, 1, 2, 3])], 1, &[]).unwrap();
    assert_close(
        &y[0],
        &[1, 2, 3, 2],
        &[
            -0.816667, -0.066667, -0.15, -0.2, 0.516667, -0.333333, -0.316667, 0.933333, 0.35, 0.8,
            1.016667, 0.666667,
        ],
    );
    let b = Tensor::from_vec(vec![true, false, false, false], &[2, 2]).unwrap();
    let y = run(
        "ReduceMax",
        20,
        &[b, i64s(&[1])],
        1,
        &[("keepdims", A::I(0))],
    )
    .unwrap();
    assert_eq!(y[0].to_vec::<bool>().unwrap(), vec![true, false]);
    // Over an empty axis: the identity, -inf.
    let e = Tensor::zeros(&[2, 0, 3], DType::F32).unwrap();
    let y = run("ReduceMax", 20, &[e, i64s(&[1])], 1, &[]).unwrap();
    assert_eq!(y[0].shape(), &[2, 1, 3]);
    assert!(y[0].to_f64_vec().iter().all(|&v| v == f64::NEG_INFINITY));
}

/// Casts to ONNX's narrow types keep the wide dtype and round to the
/// values the type holds: `FLOAT8E4M3FN` saturates at 448 by default and
/// gives NaN past it with `saturate = 0`; `INT4` truncates. `CastLike`
/// takes the narrow type its second input declares.
#[test]
fn casts_to_narrow_types_round_to_the_values_they_hold() {
    const FLOAT8E4M3FN: i64 = 17;
    const INT4: i64 = 22;
    let x = f32s(&[0.3, 460.0, 470.0, -1e6], &[4]);
    let y = &run("Cast", 21, &[x.clone()], 1, &[("to", A::I(FLOAT8E4M3FN))]).unwrap()[0];
    assert_eq!(y.dtype(), DType::F32);
    // 0.3 lies between 0.28125 and 0.3125 (steps of 2^-5 there).
    assert_eq!(y.to_f64_vec(), vec![0.3125, 448.0, 448.0, -448.0]);
    let y = &run(
        "Cast",
        21,
        &[x.clone()],
        1,
        &[("to", A::I(FLOAT8E4M3FN)), ("saturate", A::I(0))],
    )
    .unwrap()[0];
    let v = y.to_f64_vec();
    assert_eq!(v[..2], [0.3125, 448.0]);
    assert!(v[2].is_nan() && v[3].is_nan());
    let y = &run(
        "Cast",
        21,
        &[f32s(&[-7.9, 3.5], &[2])],
        1,
        &[("to", A::I(INT4))],
    )
    .unwrap()[0];
    assert_eq!((y.dtype(), y.to_f64_vec()), (DType::I64, vec![-7.0, 3.0]));

    // CastLike to a second input declared FLOAT8E4M3FN (read as f32).
    let m = model_typed(
        "CastLike",
        21,
        &[("x0", None), ("x1", Some(FLOAT8E4M3FN as i32))],
        1,
        &[],
    )
    .unwrap();
    let like = f32s(&[1.0], &[1]);
    let y = &m.infer(&[x, like]).unwrap()[0];
    assert_eq!(y.to_f64_vec(), vec![0.3125, 448.0, 448.0, -448.0]);
}

/// Per-axis quantization rounds half to even, adds the zero point and
/// saturates; dequantizing undoes it up to the rounding; a zero point
/// whose element type nothing declares is a typed error.
#[test]
fn linear_quantization_per_axis_round_trips() {
    const INT8: i64 = 3;
    let x = f32s(&[0.5, 1.5, -300.0, 2.0, 7.0, 9.0], &[2, 3]);
    let scale = f32s(&[1.0, 0.5], &[2]);
    let zero = i64s(&[0, 1]);
    let q = &run(
        "QuantizeLinear",
        21,
        &[x, scale.clone(), zero.clone()],
        1,
        &[("axis", A::I(0)), ("output_dtype", A::I(INT8))],
    )
    .unwrap()[0];
    assert_eq!(q.dtype(), DType::I64);
    // Row 0 at scale 1: 0.5 -> 0, 1.5 -> 2 (ties to even), -300 -> -128.
    // Row 1 at scale 0.5 and zero point 1: 4 + 1, 14 + 1, 18 + 1.
    assert_eq!(q.to_f64_vec(), vec![0.0, 2.0, -128.0, 5.0, 15.0, 19.0]);
    let y = &run(
        "DequantizeLinear",
        21,
        &[q.clone(), scale.clone(), zero.clone()],
        1,
        &[("axis", A::I(0))],
    )
    .unwrap()[0];
    assert_eq!(y.to_f64_vec(), vec![0.0, 2.0, -128.0, 2.0, 7.0, 9.0]);
    let e = run(
        "QuantizeLinear",
        21,
        &[f32s(&[1.0], &[1]), f32s(&[1.0], &[1]), i64s(&[0])],
        1,
        &[],
    )
    .unwrap_err();
    assert!(e.to_string().contains("zero point's element type"), "{e}");
}

/// `BitCast` reads the same bits as another type of the same width.
#[test]
fn bitcast_reinterprets_bits_of_the_same_width() {
    const INT32: i64 = 6;
    const INT64: i64 = 7;
    let y = &run(
        "BitCast",
        26,
        &[f32s(&[1.0, -2.0], &[2])],
        1,
        &[("to", A::I(INT32))],
    )
    .unwrap()[0];
    let want = [1.0f32, -2.0].map(|v| f64::from(v.to_bits() as i32));
    assert_eq!(y.to_f64_vec(), want.to_vec());
    let e = run(
        "BitCast",
        26,
        &[f32s(&[1.0], &[1])],
        1,
        &[("to", A::I(INT64))],
    )
    .unwrap_err();
    assert!(e.to_string().contains("differ in width"), "{e}");
}

/// `Clip` on integers clamps them and keeps them integers.
#[test]
fn clip_clamps_integers_on_the_host() {
    let y = &run(
        "Clip",
        13,
        &[
            i64s(&[-9, 0, 7, 300]),
            i64s(&[-5]).reshape(&[]).unwrap(),
            i64s(&[100]).reshape(&[]).unwrap(),
        ],
        1,
        &[],
    )
    .unwrap()[0];
    assert_eq!(
        (y.dtype(), y.to_f64_vec()),
        (DType::I64, vec![-5.0, 0.0, 7.0, 100.0])
    );
}
