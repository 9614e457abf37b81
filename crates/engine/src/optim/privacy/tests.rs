//! The accountant against Opacus 1.6 (`tests/reference/rdp_accountant.py`
//! wrote the fixture), and the typed errors of the public functions.
//!
//! Tolerances: ε within 1e-6 relative to Opacus's, the noise multiplier
//! within 1e-6 absolute, and the best order the same (orders are 0.1
//! apart; 1e-9 only absorbs the JSON reading of the decimal).

use serde_json::Value;

use super::*;
use crate::{Error, Result};

const FIXTURE: &str = include_str!("../../../../../tests/reference/privacy/rdp_accountant.json");

fn fixture() -> Value {
    serde_json::from_str(FIXTURE).expect("the fixture is JSON")
}

fn cases(name: &str) -> Vec<Value> {
    fixture()[name].as_array().expect("a list of cases").clone()
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

fn u(v: &Value) -> u64 {
    v.as_u64().expect("a count")
}

/// `|got - want| / |want|`, asserted at most 1e-6; returned for the report.
fn check_relative(what: &str, got: f64, want: f64) -> f64 {
    let dev = (got - want).abs() / want.abs();
    assert!(
        dev <= 1e-6,
        "{what}: {got} vs Opacus {want} (relative {dev:e})"
    );
    dev
}

#[test]
fn epsilon_and_order_equal_opacus() {
    let mut worst = 0.0_f64;
    let all = cases("epsilon_cases");
    assert!(all.len() >= 12);
    for case in &all {
        let name = case["name"].as_str().unwrap();
        let mut acc = RdpAccountant::new();
        for phase in case["phases"].as_array().unwrap() {
            for _ in 0..u(&phase[2]) {
                acc.step(f(&phase[0]), f(&phase[1]));
            }
        }
        let history: Vec<HistoryEntry> = case["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| HistoryEntry {
                noise_multiplier: f(&h[0]),
                sample_rate: f(&h[1]),
                steps: u(&h[2]),
            })
            .collect();
        assert_eq!(acc.history(), history.as_slice(), "{name}: merged history");
        let (eps, order) = acc.epsilon_and_order(f(&case["delta"]));
        worst = worst.max(check_relative(name, eps, f(&case["epsilon"])));
        let want = f(&case["order"]);
        assert!(
            (order - want).abs() < 1e-9,
            "{name}: order {order} vs Opacus {want}"
        );
        assert_eq!(acc.epsilon(f(&case["delta"])), eps);
    }
    eprintln!("epsilon: largest relative deviation from Opacus {worst:e}");
}

#[test]
fn noise_multiplier_equals_opacus() {
    let (mut worst_sigma, mut worst_eps) = (0.0_f64, 0.0_f64);
    for case in cases("noise_cases") {
        let (target, delta) = (f(&case["target_epsilon"]), f(&case["delta"]));
        let (q, steps) = (f(&case["sample_rate"]), u(&case["steps"]));
        if let Some(epochs) = case["epochs"].as_u64() {
            assert_eq!(
                (epochs as f64 / q) as u64,
                steps,
                "Opacus's int(epochs / q)"
            );
        }
        let sigma = noise_multiplier_for_epsilon(target, delta, q, steps);
        let want = f(&case["noise_multiplier"]);
        let dev = (sigma - want).abs();
        assert!(
            dev <= 1e-6,
            "target {target}, {steps} steps: {sigma} vs Opacus {want}"
        );
        worst_sigma = worst_sigma.max(dev);
        let mut acc = RdpAccountant::new();
        for _ in 0..steps {
            acc.step(sigma, q);
        }
        let eps = acc.epsilon(delta);
        assert!(
            eps <= target && target - eps <= 0.01,
            "{eps} for target {target}"
        );
        let what = format!("epsilon at sigma {sigma}");
        worst_eps = worst_eps.max(check_relative(&what, eps, f(&case["epsilon"])));
    }
    eprintln!(
        "noise multiplier: largest absolute deviation {worst_sigma:e}, its epsilon {worst_eps:e}"
    );
}

#[test]
fn unreachable_targets_are_typed_errors() {
    for case in cases("unreachable_cases") {
        let (target, delta) = (f(&case["target_epsilon"]), f(&case["delta"]));
        let (q, steps) = (f(&case["sample_rate"]), u(&case["steps"]));
        let err = try_noise_multiplier_for_epsilon(target, delta, q, steps).unwrap_err();
        assert!(matches!(
            err,
            Error::InvalidArgument {
                op: "noise_multiplier_for_epsilon",
                ..
            }
        ));
        let msg = err.to_string();
        assert!(
            msg.starts_with(&format!(
                "noise_multiplier_for_epsilon: the privacy budget is too low: epsilon {target} at delta {delta}"
            )),
            "{msg}"
        );
        assert_eq!(case["error"], "The privacy budget is too low.");
    }
}

#[test]
fn bad_arguments_are_typed_errors() {
    let mut acc = RdpAccountant::new();
    let step = |acc: &mut RdpAccountant, n, q| acc.try_step(n, q).unwrap_err().to_string();
    assert_eq!(
        step(&mut acc, -0.5, 0.1),
        "RdpAccountant::step: noise_multiplier must be finite and >= 0, got -0.5"
    );
    assert_eq!(
        step(&mut acc, f64::INFINITY, 0.1),
        "RdpAccountant::step: noise_multiplier must be finite and >= 0, got inf"
    );
    for q in [0.0, 1.5, f64::NAN] {
        assert_eq!(
            step(&mut acc, 1.0, q),
            format!("RdpAccountant::step: sample_rate must be in (0, 1], got {q}")
        );
    }
    assert!(acc.history().is_empty(), "a refused step is not recorded");
    acc.step(1.0, 1.0);
    for delta in [0.0, 1.0, -1e-5, f64::NAN] {
        let e = acc.try_epsilon(delta).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("RdpAccountant::epsilon: delta must be in (0, 1), got {delta}")
        );
        assert!(acc.try_epsilon_and_order(delta).is_err());
    }

    let search = |t, d, q, s| {
        try_noise_multiplier_for_epsilon(t, d, q, s)
            .unwrap_err()
            .to_string()
    };
    let op = "noise_multiplier_for_epsilon";
    assert_eq!(
        search(0.0, 1e-5, 0.01, 10),
        format!("{op}: target_epsilon must be finite and > 0, got 0")
    );
    assert_eq!(
        search(f64::INFINITY, 1e-5, 0.01, 10),
        format!("{op}: target_epsilon must be finite and > 0, got inf")
    );
    assert_eq!(
        search(1.0, 2.0, 0.01, 10),
        format!("{op}: delta must be in (0, 1), got 2")
    );
    assert_eq!(
        search(1.0, 1e-5, 0.0, 10),
        format!("{op}: sample_rate must be in (0, 1], got 0")
    );
    assert_eq!(
        search(1.0, 1e-5, 0.01, 0),
        format!("{op}: steps must be at least 1, got 0")
    );
}

#[test]
fn no_noise_spends_everything_and_no_steps_nothing() {
    assert_eq!(RdpAccountant::new().epsilon_and_order(1e-5), (0.0, 0.0));
    let mut acc = RdpAccountant::new();
    acc.step(0.0, 0.01);
    assert_eq!(acc.epsilon(1e-5), f64::INFINITY);
}

#[test]
#[should_panic(expected = "RdpAccountant::step: sample_rate must be in (0, 1], got 2")]
fn plain_step_panics_with_the_message() {
    RdpAccountant::new().step(1.0, 2.0);
}

#[test]
#[should_panic(expected = "noise_multiplier_for_epsilon: the privacy budget is too low")]
fn plain_search_panics_with_the_message() {
    noise_multiplier_for_epsilon(0.01, 1e-5, 1.0, 10_000);
}

#[test]
fn rdp_special_cases_as_opacus() {
    assert_eq!(compute_rdp(0.0, 1.0, 5, &[2.0, 2.5]), vec![0.0, 0.0]);
    assert_eq!(compute_rdp(0.5, 0.0, 5, &[2.0]), vec![f64::INFINITY]);
    assert_eq!(
        get_privacy_spent(&[2.0], &[f64::INFINITY], 1e-5).0,
        f64::INFINITY
    );
    let (eps, order) = get_privacy_spent(&[2.0], &[f64::NAN], 1e-5);
    assert!(eps == f64::INFINITY && order.is_nan());
}

#[test]
fn bad_rdp_arguments_are_typed_errors() {
    let msg = |r: Result<Vec<f64>>| r.unwrap_err().to_string();
    assert_eq!(
        msg(try_compute_rdp(1.5, 1.0, 1, &[2.0])),
        "compute_rdp: sample rate q must be in [0, 1], got 1.5"
    );
    assert_eq!(
        msg(try_compute_rdp(0.1, -1.0, 1, &[2.0])),
        "compute_rdp: noise_multiplier must be finite and >= 0, got -1"
    );
    assert_eq!(
        msg(try_compute_rdp(0.1, 1.0, 0, &[2.0])),
        "compute_rdp: steps must be at least 1, got 0"
    );
    assert_eq!(
        msg(try_compute_rdp(0.1, 1.0, 1, &[2.0, 1.0])),
        "compute_rdp: orders must be finite and > 1, got 1"
    );
    let spent = |o: &[f64], r: &[f64], d| try_get_privacy_spent(o, r, d).unwrap_err();
    assert!(matches!(
        spent(&[2.0], &[1.0], 0.0),
        Error::InvalidArgument { .. }
    ));
    assert_eq!(
        spent(&[2.0], &[1.0], 1.0).to_string(),
        "get_privacy_spent: delta must be in (0, 1), got 1"
    );
    assert_eq!(
        spent(&[2.0, 3.0], &[1.0], 1e-5).to_string(),
        "get_privacy_spent: 2 orders but 1 RDP values"
    );
    assert_eq!(
        spent(&[], &[], 1e-5).to_string(),
        "get_privacy_spent: no orders to convert from"
    );
}

#[test]
#[should_panic(expected = "compute_rdp: sample rate q must be in [0, 1], got NaN")]
fn plain_compute_rdp_panics_with_the_message() {
    compute_rdp(f64::NAN, 1.0, 1, &[2.0]);
}

/// The clipped sum against each example clipped and summed one by one in
/// f64: two parameters (a matrix whose per-sample gradients come as a
/// transposed view, and a vector), examples above and below the norm, in
/// f32 and f64.
#[test]
fn clipped_sum_equals_the_examples_clipped_one_by_one() {
    use crate::core::sample_tensor;
    use crate::nn::Parameter;
    use crate::optim::{Sgd, SgdConfig};
    use crate::{DType, Tensor};
    let batch = 5;
    for dtype in [DType::F32, DType::F64] {
        let w = Parameter::new(Tensor::zeros(&[3, 4], dtype).unwrap());
        let b = Parameter::new(Tensor::zeros(&[4], dtype).unwrap());
        let sgd = Sgd::new([&w, &b], SgdConfig::new(1.0)).unwrap();
        let config = DpSgdConfig {
            max_grad_norm: 2.0,
            noise_multiplier: 0.0,
            sample_rate: 0.5,
            expected_batch_size: 4,
            seed: 0,
        };
        let params = vec![("w".to_string(), w.clone()), ("b".to_string(), b.clone())];
        let mut dp = DpOptimizer::try_new(Box::new(sgd), params, config).unwrap();
        // Scales from 0.1 to 1.7: some examples' norms are below 2, some above.
        let scale: Vec<f64> = (0..batch).map(|i| 0.1 + 0.4 * i as f64).collect();
        let gw = sample_tensor(&[batch, 4, 3], 3, 1.0).to_dtype(dtype);
        let gb = sample_tensor(&[batch, 4], 4, 1.0).to_dtype(dtype);
        let scaled = |t: &Tensor, width: usize| -> Vec<f64> {
            let v = t.contiguous().to_f64_vec();
            v.iter()
                .enumerate()
                .map(|(k, x)| x * scale[k / width])
                .collect()
        };
        let gw = Tensor::from_f64_slice(&scaled(&gw, 12), &[batch, 4, 3], dtype)
            .unwrap()
            .transpose(1, 2)
            .unwrap();
        let gb = Tensor::from_f64_slice(&scaled(&gb, 4), &[batch, 4], dtype).unwrap();
        let (vw, vb) = (gw.contiguous().to_f64_vec(), gb.to_f64_vec());
        let (mut want_w, mut want_b) = (vec![0.0f64; 12], vec![0.0f64; 4]);
        let mut clipped = 0;
        for i in 0..batch {
            let (ew, eb) = (&vw[i * 12..(i + 1) * 12], &vb[i * 4..(i + 1) * 4]);
            let norm = ew.iter().chain(eb).map(|x| x * x).sum::<f64>().sqrt();
            let f = (2.0 / (norm + 1e-6)).min(1.0);
            clipped += usize::from(f < 1.0);
            want_w
                .iter_mut()
                .zip(ew)
                .for_each(|(a, x)| *a -= f * x / 4.0);
            want_b
                .iter_mut()
                .zip(eb)
                .for_each(|(a, x)| *a -= f * x / 4.0);
        }
        assert!(
            clipped > 0 && clipped < batch,
            "{clipped} of {batch} clipped"
        );
        dp.try_step(&[gw, gb]).unwrap();
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        for (got, want) in [
            (w.value().to_f64_vec(), want_w),
            (b.value().to_f64_vec(), want_b),
        ] {
            for (g, e) in got.iter().zip(&want) {
                assert!((g - e).abs() <= tol, "{dtype:?}: {got:?} against {want:?}");
            }
        }
    }
}
