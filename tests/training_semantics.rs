//! Training-loop semantics: updating parameters never disturbs a live graph,
//! and gradient accumulation over micro-batches equals one full batch.

use retrograd::nn::Parameter;
use retrograd::optim::{Adam, AdamConfig, Optimizer, Sgd, SgdConfig};
use retrograd::{DType, Gradients, Graph, Tensor};

/// Per-example data: rows of x (3 features) and targets y (3 values).
fn data(rows: std::ops::Range<usize>) -> (Tensor, Tensor) {
    let n = rows.len();
    let x: Vec<f64> = rows
        .clone()
        .flat_map(|i| (0..3).map(move |j| ((i * 3 + j) as f64 * 0.37).sin()))
        .collect();
    let y: Vec<f64> = rows
        .flat_map(|i| (0..3).map(move |j| ((i + j) as f64 * 0.11).cos()))
        .collect();
    (
        Tensor::from_vec(x, &[n, 3]).unwrap(),
        Tensor::from_vec(y, &[n, 3]).unwrap(),
    )
}

/// Gradients of mean over the rows of sum((tanh(x * w) + b - y)^2) / 3.
fn grads(w: &Parameter, b: &Parameter, rows: std::ops::Range<usize>) -> Gradients {
    let (x, y) = data(rows);
    let g = Graph::new();
    let (wv, bv) = (g.param(w), g.param(b));
    let diff = (g.constant(x) * &wv).tanh() + &bv - g.constant(y);
    (&diff * &diff).mean().backward().unwrap()
}

fn params() -> (Parameter, Parameter) {
    (
        Parameter::new(Tensor::from_vec(vec![0.5, -0.3, 0.8], &[3]).unwrap()),
        Parameter::new(Tensor::from_vec(vec![0.1, 0.0, -0.2], &[3]).unwrap()),
    )
}

#[test]
fn updating_parameters_leaves_a_live_graph_and_its_gradients_unchanged() {
    let (w, b) = params();
    let (x, y) = data(0..8);
    // A graph recorded with the current weights, still alive...
    let g = Graph::new();
    let (wv, bv) = (g.param(&w), g.param(&b));
    let diff = (g.constant(x) * &wv).tanh() + &bv - g.constant(y);
    let loss = (&diff * &diff).mean();
    let loss_before = loss.value().item();
    // ...while an optimizer takes several steps on the same parameters.
    let mut opt = Adam::new([&w, &b], AdamConfig::default().lr(0.1)).unwrap();
    for _ in 0..3 {
        opt.step(&grads(&w, &b, 0..8)).unwrap();
    }
    assert_ne!(
        w.value().to_f64_vec(),
        vec![0.5, -0.3, 0.8],
        "weights moved"
    );
    // The old graph still sees the old weights and gives the old gradients.
    assert_eq!(wv.value().to_f64_vec(), vec![0.5, -0.3, 0.8]);
    assert_eq!(loss.value().item(), loss_before);
    let old = loss.backward().unwrap();
    let (w0, b0) = params();
    let reference = grads(&w0, &b0, 0..8);
    assert_eq!(old.of(&w), reference.of(&w0));
    assert_eq!(old.of(&b), reference.of(&b0));
}

#[test]
fn accumulated_micro_batches_equal_the_full_batch() {
    let (w, b) = params();
    let full = grads(&w, &b, 0..12);
    // Four micro-batches of 3: each a mean over its rows; sum, then divide by 4.
    let mut acc = grads(&w, &b, 0..3);
    for k in 1..4 {
        acc.accumulate(&grads(&w, &b, 3 * k..3 * k + 3)).unwrap();
    }
    acc.scale(0.25);
    for p in [&w, &b] {
        assert!(
            acc.of(p).allclose(&full.of(p), 1e-13, 1e-15),
            "{:?} vs {:?}",
            acc.of(p),
            full.of(p)
        );
    }
    // An optimizer step from either gives the same weights.
    let (w2, b2) = (Parameter::new(w.value()), Parameter::new(b.value()));
    let mut a = Sgd::new([&w, &b], SgdConfig::new(0.5).momentum(0.9)).unwrap();
    let mut c = Sgd::new([&w2, &b2], SgdConfig::new(0.5).momentum(0.9)).unwrap();
    a.step(&acc).unwrap();
    c.step(&grads(&w2, &b2, 0..12)).unwrap();
    assert!(w.value().allclose(&w2.value(), 1e-13, 1e-15));
    assert!(b.value().allclose(&b2.value(), 1e-13, 1e-15));
}

#[test]
fn accumulation_works_in_f32_and_with_parameters_missing_from_a_micro_batch() {
    let w = Parameter::new(Tensor::ones(&[2], DType::F32).unwrap());
    let unused_then_used = Parameter::new(Tensor::ones(&[2], DType::F32).unwrap());
    let g1 = {
        let g = Graph::new();
        (g.param(&w) * 2.0).sum().backward().unwrap()
    };
    let g2 = {
        let g = Graph::new();
        ((g.param(&w) + g.param(&unused_then_used)) * 3.0)
            .sum()
            .backward()
            .unwrap()
    };
    let mut acc = g1.clone();
    acc.accumulate(&g2).unwrap();
    assert_eq!(acc.of(&w).to_vec::<f32>().unwrap(), vec![5.0, 5.0]);
    assert_eq!(
        acc.of(&unused_then_used).to_vec::<f32>().unwrap(),
        vec![3.0, 3.0]
    );
    // The micro-batch gradients themselves are untouched.
    assert_eq!(g1.of(&w).to_vec::<f32>().unwrap(), vec![2.0, 2.0]);
}
