//! Compiled steps against eager ones: same values and gradients, bit for
//! bit (fusion reorders no floating-point work); recapture per signature;
//! the typed errors.

use super::*;
use crate::nn::Parameter;
use crate::tensor::test_util::tensor as t;

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

/// W1's chain: v = tanh(v * p[i] + p[j]), summed over chains.
fn chain<'g>(g: &'g Graph, p: &[Parameter], chains: usize, dtype: DType) -> Result<Var<'g>> {
    let ps: Vec<Var<'g>> = p.iter().map(|p| g.param(p)).collect();
    let k = ps.len();
    let mut total: Option<Var<'g>> = None;
    for c in 0..chains {
        let mut v = g.constant(Tensor::scalar_of(0.5 + 0.001 * c as f64, dtype));
        for j in 0..20 {
            let i = c * 20 + j;
            v = (&v * &ps[i % k] + &ps[(7 * i + 3) % k]).tanh();
        }
        total = Some(match total {
            None => v,
            Some(t) => &t + &v,
        });
    }
    Ok(total.expect("one chain"))
}

fn chain_params(dtype: DType, shift: f64) -> Vec<Parameter> {
    (0..16)
        .map(|k| {
            Parameter::new(Tensor::scalar_of(
                ((k % 17) as f64 - 8.0) * 0.01 + shift,
                dtype,
            ))
        })
        .collect()
}

#[test]
fn a_scalar_chain_replays_the_eager_bits() {
    for dtype in [DType::F32, DType::F64] {
        let params = chain_params(dtype, 0.0);
        let mut step = compile(
            |g: &Graph, _: &[Var<'_>]| chain(g, &params, 5, dtype),
            CompileOptions::new().params(&params),
        );
        for round in 0..3 {
            // New parameter values each round: nothing is baked in.
            for (k, p) in params.iter().enumerate() {
                p.set(Tensor::scalar_of(
                    ((k % 17) as f64 - 8.0) * 0.01 + 0.01 * round as f64,
                    dtype,
                ))
                .unwrap();
            }
            let eager = {
                let g = Graph::new();
                let loss = chain(&g, &params, 5, dtype).unwrap();
                let grads = loss.backward().unwrap();
                let gs: Vec<Tensor> = params.iter().map(|p| grads.of(p)).collect();
                (loss.value().clone(), gs)
            };
            let out = step.run(&[]).unwrap();
            assert_eq!(
                bits(out.loss_value()),
                bits(&eager.0),
                "{dtype} round {round}"
            );
            for (p, e) in params.iter().zip(&eager.1) {
                assert_eq!(bits(&out.grads().of(p)), bits(e), "{dtype} round {round}");
            }
        }
        assert_eq!(step.capture_count(), 1);
        let c = step.capture().unwrap();
        assert!(c.explain().contains("scalar"), "{}", c.explain());
    }
}

/// A small MLP: matmul, bias, relu, a squared error against a target input.
fn mlp<'g>(g: &'g Graph, x: &[Var<'g>], p: &[Parameter]) -> Result<Var<'g>> {
    let h = x[0]
        .try_matmul(&g.param(&p[0]))?
        .try_add(&g.param(&p[1]))?
        .relu();
    let y = h.try_matmul(&g.param(&p[2]))?.try_add(&g.param(&p[3]))?;
    let err = y.try_sub(&x[1])?;
    Ok((&err * &err).mean())
}

fn mlp_params() -> Vec<Parameter> {
    let w1 = Tensor::randn(&[5, 7], DType::F64, 1).unwrap();
    let b1 = Tensor::randn(&[7], DType::F64, 2).unwrap();
    let w2 = Tensor::randn(&[7, 3], DType::F64, 3).unwrap();
    let b2 = Tensor::randn(&[3], DType::F64, 4).unwrap();
    [w1, b1, w2, b2].into_iter().map(Parameter::new).collect()
}

/// A batch of 4 for [`mlp`]: inputs and targets.
fn mlp_batch() -> Vec<Tensor> {
    vec![
        Tensor::randn(&[4, 5], DType::F64, 1).unwrap(),
        Tensor::randn(&[4, 3], DType::F64, 2).unwrap(),
    ]
}

fn eager_mlp(x: &[Tensor], p: &[Parameter]) -> (Tensor, Vec<Tensor>, Tensor) {
    let g = Graph::new();
    let xs: Vec<Var<'_>> = vec![g.variable(x[0].clone()), g.constant(x[1].clone())];
    let loss = mlp(&g, &xs, p).unwrap();
    let grads = loss.backward().unwrap();
    let gx = grads.wrt(&xs[0]);
    (
        loss.value().clone(),
        p.iter().map(|q| grads.of(q)).collect(),
        gx,
    )
}

#[test]
fn an_mlp_replays_the_eager_bits_fused_or_not() {
    let p = mlp_params();
    for fuse in [true, false] {
        let mut step = compile(
            |g: &Graph, x: &[Var<'_>]| mlp(g, x, &p),
            CompileOptions::new()
                .params(&p)
                .grad_inputs(&[0])
                .fuse(fuse),
        );
        for seed in 0..3 {
            let x = vec![
                Tensor::randn(&[4, 5], DType::F64, 10 + seed).unwrap(),
                Tensor::randn(&[4, 3], DType::F64, 20 + seed).unwrap(),
            ];
            let (loss, grads, gx) = eager_mlp(&x, &p);
            let out = step.run(&x).unwrap();
            assert_eq!(bits(out.loss_value()), bits(&loss));
            for (q, e) in p.iter().zip(&grads) {
                assert_eq!(bits(&out.grads().of(q)), bits(e), "fuse {fuse}");
            }
            assert_eq!(bits(out.input_grad(0).unwrap()), bits(&gx));
        }
        let explain = step.capture().unwrap().explain();
        assert_eq!(explain.contains("  fused   "), fuse, "{explain}");
    }
}

#[test]
fn another_shape_captures_again_and_the_cache_is_bounded() {
    let p = mlp_params();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| mlp(g, x, &p),
        CompileOptions::new().params(&p).cache_size(2),
    );
    let data = |n: usize| {
        vec![
            Tensor::randn(&[n, 5], DType::F64, n as u64).unwrap(),
            Tensor::randn(&[n, 3], DType::F64, 100 + n as u64).unwrap(),
        ]
    };
    for n in [4, 2, 4, 2, 4] {
        let x = data(n);
        let (loss, ..) = eager_mlp(&x, &p);
        assert_eq!(bits(step.run(&x).unwrap().loss_value()), bits(&loss));
    }
    assert_eq!(step.capture_count(), 2);
    step.run(&data(3)).unwrap(); // evicts 2, the least recently used
    step.run(&data(4)).unwrap();
    assert_eq!(step.capture_count(), 3);
    step.run(&data(2)).unwrap(); // captured again
    assert_eq!(step.capture_count(), 4);
}

#[test]
fn backward_inside_the_function_and_create_graph_are_errors() {
    let w = Parameter::new(t(&[1.0, 2.0], &[2]));
    let mut inner = compile(
        |g: &Graph, _: &[Var<'_>]| {
            let x = g.param(&w);
            let s = (&x * &x).try_sum()?;
            let grads = s.backward()?;
            Ok(&s * grads.of(&w).to_f64_vec()[0])
        },
        CompileOptions::new(),
    );
    let e = inner.run(&[]).err().unwrap();
    assert!(matches!(e, Error::NotReplayable { .. }), "{e}");
    let mut second = compile(
        |g: &Graph, _: &[Var<'_>]| (&g.param(&w) * 2.0).try_sum(),
        CompileOptions::new().create_graph(true),
    );
    let e = second.run(&[]).err().unwrap();
    assert!(e.to_string().contains("create_graph"), "{e}");
}

/// Dropout draws a fresh mask at every run, the same one in its forward and
/// its backward: with `loss = sum(dropout(x))` at `x = 1`, the gradient is
/// the mask scaled, summing to the loss.
#[test]
fn dropout_draws_fresh_masks_every_run() {
    let mut step = compile(
        |_: &Graph, x: &[Var<'_>]| x[0].try_dropout(0.5, true, 7)?.try_sum(),
        CompileOptions::new().grad_inputs(&[0]).seed(11),
    );
    let x = [Tensor::ones(&[256], DType::F64).unwrap()];
    let mut masks = Vec::new();
    for _ in 0..3 {
        let out = step.run(&x).unwrap();
        let grad = out.input_grad(0).unwrap().to_f64_vec();
        assert!(grad.iter().all(|&v| v == 0.0 || v == 2.0));
        assert_eq!(grad.iter().sum::<f64>(), out.loss());
        masks.push(grad);
    }
    assert!(masks[0] != masks[1] && masks[1] != masks[2]);
}

/// Attention with dropout draws a fresh mask at every run, the same one in
/// its forward and in its backward (the recorded `SdpaBackward` node, run
/// with the run's seed): the gradient agrees with the loss's change at a
/// nearby input under the same run's mask.
#[test]
fn attention_with_dropout_draws_fresh_masks_every_run() {
    use crate::ops::nn::SdpaOptions;
    let w = Tensor::randn(&[2, 4, 3], DType::F64, 2).unwrap();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| {
            let opts = SdpaOptions::new().dropout_p(0.5, 3);
            x[0].try_scaled_dot_product_attention(&x[0], &x[0], &opts)?
                .try_mul(&g.constant(w.clone()))?
                .try_sum()
        },
        CompileOptions::new().grad_inputs(&[0]).seed(5),
    );
    let x = Tensor::randn(&[2, 4, 3], DType::F64, 1).unwrap();
    let d = Tensor::randn(&[2, 4, 3], DType::F64, 9).unwrap();
    let first = step.run(&[x.clone()]).unwrap().loss();
    let second = step.run(&[x.clone()]).unwrap().loss();
    assert_ne!(first, second, "a fresh mask each run");
    step.set_run_count(0);
    let (loss, grad) = {
        let out = step.run(&[x.clone()]).unwrap();
        (out.loss(), out.input_grad(0).unwrap().to_f64_vec())
    };
    assert_eq!(loss, first, "run 1 again: its mask again");
    let eps = 1e-6;
    let moved: Vec<f64> = x
        .to_f64_vec()
        .iter()
        .zip(d.to_f64_vec())
        .map(|(x, d)| x + eps * d)
        .collect();
    let moved = Tensor::from_vec(moved, &[2, 4, 3]).unwrap();
    step.set_run_count(0);
    let nearby = step.run(&[moved]).unwrap().loss();
    let slope: f64 = grad.iter().zip(d.to_f64_vec()).map(|(g, d)| g * d).sum();
    let change = (nearby - loss) / eps;
    assert!(
        (change - slope).abs() < 1e-4 * (1.0 + slope.abs()),
        "change {change} vs gradient {slope}"
    );
}

/// Batch norm in eval mode reads the running statistics again at every
/// run (training mode: `model_tests.rs`).
#[test]
fn batch_norm_eval_reads_its_running_statistics_each_run() {
    use crate::nn::{BatchNorm1d, Forward, Module};
    let mut bn = BatchNorm1d::new(3, DType::F64).unwrap();
    let x = Tensor::randn(&[4, 3], DType::F64, 5).unwrap();
    bn.set_training(false);
    let eager = |bn: &BatchNorm1d| {
        let g = Graph::new();
        bn.forward(&g.constant(x.clone()))
            .unwrap()
            .sum()
            .value()
            .clone()
    };
    let before = eager(&bn);
    let mut step = compile(
        |_: &Graph, v: &[Var<'_>]| bn.forward(&v[0])?.try_sum(),
        CompileOptions::new().grad_inputs(&[0]),
    );
    step.set_training(false);
    assert_eq!(
        bits(step.run(std::slice::from_ref(&x)).unwrap().loss_value()),
        bits(&before)
    );
    // Move the running mean (as a training step would).
    bn.visit_buffers("", &mut |name, b| {
        if name == "running_mean" {
            b.set(t(&[0.5, -1.0, 2.0], &[3])).unwrap();
        }
    });
    let after = eager(&bn);
    assert_ne!(bits(&after), bits(&before));
    assert_eq!(
        bits(step.run(std::slice::from_ref(&x)).unwrap().loss_value()),
        bits(&after)
    );
}

/// The capture prints in the trace format, one heading per step, and lists
/// its fused groups as clusters for pictures (drawn in
/// `tests/viz_pictures.rs`: `viz` is above this layer).
#[test]
fn a_capture_prints_and_lists_its_fused_groups() {
    let p = mlp_params();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| mlp(g, x, &p),
        CompileOptions::new().params(&p),
    );
    let x = mlp_batch();
    step.run(&x).unwrap();
    let c = step.capture().unwrap();
    let printed = c.optimized();
    assert!(
        printed.contains("# step 1: fused group, one pass over f64 [4, 7]:"),
        "{printed}"
    );
    assert!(
        printed.contains("  nodes[1] = add(nodes[0], v4)"),
        "{printed}"
    );
    let clusters = c.clusters();
    assert!(
        clusters
            .iter()
            .any(|(label, nodes)| label.contains("fused") && nodes == &[1, 2]),
        "{clusters:?}"
    );
    assert!(c.runs_node(1) && c.forward_len() == 8);
}

/// A unary op's backward is one `<rule>_backward` node of its fused
/// gradient (the eager sweep's own kernel), not its formula's nodes, and
/// gives the eager bits; GELU (derivative of the input) and tanh (of the
/// output), with a bias broadcast, in both float dtypes.
#[test]
fn a_unary_ops_backward_is_one_node_with_the_eager_bits() {
    fn f<'g>(_: &'g Graph, x: &[Var<'g>]) -> Result<Var<'g>> {
        let h = (&x[0] + &x[1]).gelu();
        Ok((h.tanh() * &x[2]).sum())
    }
    for dtype in [DType::F64, DType::F32] {
        let x = vec![
            Tensor::randn(&[6, 40], dtype, 1).unwrap(),
            Tensor::randn(&[40], dtype, 2).unwrap(),
            Tensor::randn(&[6, 40], dtype, 3).unwrap(),
        ];
        let eager = {
            let g = Graph::new();
            let v: Vec<Var<'_>> = x.iter().map(|t| g.variable(t.clone())).collect();
            let loss = f(&g, &v).unwrap();
            let grads = loss.backward().unwrap();
            (loss.value().clone(), grads.wrt(&v[0]), grads.wrt(&v[1]))
        };
        let mut step = compile(f, CompileOptions::new().grad_inputs(&[0, 1]));
        for _ in 0..2 {
            let out = step.run(&x).unwrap();
            assert_eq!(bits(out.loss_value()), bits(&eager.0), "{dtype}");
            assert_eq!(bits(out.input_grad(0).unwrap()), bits(&eager.1), "{dtype}");
            assert_eq!(bits(out.input_grad(1).unwrap()), bits(&eager.2), "{dtype}");
        }
        let printed = step.capture().unwrap().graph().to_string();
        assert_eq!(printed.matches("gelu_backward(").count(), 1, "{printed}");
        assert_eq!(printed.matches("tanh_backward(").count(), 1, "{printed}");
        assert!(!printed.contains("erfc("), "{printed}");
    }
}

/// A step with values large enough for the kernels to split them replays
/// on a worker of rayon's pool after its first run (`kernels/on_pool.rs`); the
/// threads split each kernel's work as eagerly, so every run keeps the
/// eager bits. A step of small values stays on the calling thread.
#[test]
fn a_replay_on_the_pool_keeps_the_eager_bits() {
    fn squares<'g>(g: &'g Graph, x: &[Var<'g>], w: &Parameter) -> Result<Var<'g>> {
        let h = x[0].try_matmul(&g.param(w))?.tanh();
        (&h * &h).try_sum()
    }
    let w = Parameter::new(Tensor::randn(&[256, 512], DType::F32, 5).unwrap());
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| squares(g, x, &w),
        CompileOptions::new().params([&w]),
    );
    for round in 0..4 {
        let x = Tensor::randn(&[512, 256], DType::F32, 100 + round).unwrap();
        let (loss, grad) = {
            let g = Graph::new();
            let loss = squares(&g, &[g.constant(x.clone())], &w).unwrap();
            let grads = loss.backward().unwrap();
            (loss.value().clone(), grads.of(&w))
        };
        let out = step.run(&[x]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(&loss), "round {round}");
        assert_eq!(bits(&out.grads().of(&w)), bits(&grad), "round {round}");
    }
    assert_eq!(step.capture_count(), 1);
    assert!(step.cache[0].program.parallel);

    let small = Parameter::new(Tensor::randn(&[8, 4], DType::F32, 6).unwrap());
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| x[0].try_matmul(&g.param(&small))?.try_sum(),
        CompileOptions::new().params([&small]),
    );
    step.run(&[Tensor::randn(&[2, 8], DType::F32, 7).unwrap()])
        .unwrap();
    assert!(!step.cache[0].program.parallel);
}

/// `profile` times every step of the program once per run, names each by
/// what it runs, and leaves the step's results the plain runs give.
#[test]
fn a_profile_names_every_step_and_keeps_the_results() {
    let p = mlp_params();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| mlp(g, x, &p),
        CompileOptions::new().params(&p),
    );
    let x = mlp_batch();
    assert!(matches!(
        step.profile(&x, 0),
        Err(Error::InvalidArgument { op: "profile", .. })
    ));
    // The first call captures (and replays once, untimed), then times 4 runs.
    let profile = step.profile(&x, 4).unwrap();
    assert_eq!(
        (profile.runs(), step.capture_count(), step.run_count()),
        (4, 1, 5)
    );
    let c = step.capture().unwrap();
    let explain = c.explain();
    let steps: usize = explain
        .lines()
        .find_map(|l| l.strip_prefix("steps: "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("explain counts the steps");
    assert_eq!(profile.parts().len(), steps, "{explain}");
    let kinds: Vec<&str> = profile.parts().iter().map(|q| q.kind.as_str()).collect();
    assert_eq!(kinds[0], "matmul", "{kinds:?}");
    assert_eq!(kinds[1], "fused add, relu", "{kinds:?}");
    assert!(
        profile.parts()[1].label.contains("over f64 [4, 7]"),
        "{:?}",
        profile.parts()[1]
    );
    for (i, part) in profile.parts().iter().enumerate() {
        assert_eq!(part.index, i);
    }
    let by_kind: usize = profile.by_kind().iter().map(|k| k.parts).sum();
    assert_eq!(by_kind, steps);
    assert!(profile.report(3).contains("fused add, relu"));
    // Profiled runs are plain runs: the next one gives the eager bits.
    let (loss, ..) = eager_mlp(&x, &p);
    assert_eq!(bits(step.run(&x).unwrap().loss_value()), bits(&loss));
    // A second profile times the cached capture without capturing again.
    assert_eq!(step.profile(&x, 2).unwrap().parts().len(), steps);
    assert_eq!(step.capture_count(), 1);
}

type Split = for<'a, 'g> fn(&'a Var<'g>) -> Result<Var<'g>>;

/// The gradients of disjoint slices of one value (q, k and v cut from one
/// projection) are summed as one slice-sum step, with the eager bits; a
/// partial cover, overlapping slices and a sum with a whole-value gradient
/// stay correct.
#[test]
fn slice_gradients_sum_in_one_step_with_the_eager_bits() {
    for dtype in [DType::F32, DType::F64] {
        let w = Parameter::new(Tensor::randn(&[4, 6], dtype, 5).unwrap());
        // (split and combine, slice sums expected)
        let cases: [(Split, usize); 4] = [
            // Three heads along dim 1 of [n, 3, 2]: one sum of three.
            (
                |y| {
                    let all = y.try_reshape(&[-1, 3, 2])?;
                    let pick = |i: isize| all.try_narrow(1, i, 1)?.try_squeeze_dim(1);
                    let (q, k, v) = (pick(0)?, pick(1)?, pick(2)?);
                    Ok((q.tanh() * k.exp() + v.sin()).sum())
                },
                1,
            ),
            // Two of three parts: the third's place stays zero.
            (
                |y| Ok((y.try_narrow(1, 0, 2)?.exp() + y.try_narrow(1, 4, 2)?.tanh()).sum()),
                1,
            ),
            // Overlapping slices are a sum, not a scatter.
            (
                |y| Ok((y.try_narrow(1, 0, 4)?.exp() * y.try_narrow(1, 2, 4)?).sum()),
                0,
            ),
            // A whole-value gradient summed in with the slices' is a sum.
            (
                |y| {
                    let a = y.try_narrow(1, 0, 3)?;
                    let b = y.try_narrow(1, 3, 3)?;
                    Ok((a.exp() + b.tanh()).sum() + y.exp().sum())
                },
                0,
            ),
        ];
        for (case, (f, sums)) in cases.into_iter().enumerate() {
            fn run<'g>(g: &'g Graph, x: &Var<'g>, w: &Parameter, f: Split) -> Result<Var<'g>> {
                f(&x.try_matmul(&g.param(w))?)
            }
            let mut step = compile(
                |g: &Graph, x: &[Var<'_>]| run(g, &x[0], &w, f),
                CompileOptions::new().params([&w]).grad_inputs(&[0]),
            );
            for seed in 0..2 {
                let x = Tensor::randn(&[3, 4], dtype, 40 + seed).unwrap();
                let g = Graph::new();
                let xv = g.variable(x.clone());
                let loss = run(&g, &xv, &w, f).unwrap();
                let grads = loss.backward().unwrap();
                let out = step.run(&[x]).unwrap();
                assert_eq!(bits(out.loss_value()), bits(loss.value()), "case {case}");
                assert_eq!(
                    bits(&out.grads().of(&w)),
                    bits(&grads.of(&w)),
                    "case {case} {dtype}"
                );
                assert_eq!(
                    bits(out.input_grad(0).unwrap()),
                    bits(&grads.wrt(&xv)),
                    "case {case}"
                );
            }
            let c = step.capture().unwrap();
            let explain = c.explain();
            assert!(
                explain.contains(&format!(", {sums} slice sums)")),
                "case {case}: {explain}"
            );
            if sums > 0 {
                assert!(explain.contains("  slices  "), "{explain}");
                assert!(c.optimized().contains("slice sum"), "{}", c.optimized());
                let profile = step
                    .profile(&[Tensor::randn(&[3, 4], dtype, 9).unwrap()], 1)
                    .unwrap();
                assert!(profile.parts().iter().any(|p| p.kind == "slice sum"));
            }
        }
    }
}
