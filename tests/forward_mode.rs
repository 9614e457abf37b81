//! Forward mode against reverse mode: for every op with a tangent rule,
//! `jvp(f, x, t)` equals the reverse-mode Jacobian times `t` (built row by
//! row with `grad`), and both agree with central finite differences
//! (`jvpcheck`).

#[path = "support/registry_ops.rs"]
mod registry_ops;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::ops::nn::{CrossEntropyOptions, Reduction};
use retrograd::{grad, jvp, jvpcheck, GradOptions, Graph, Result, Tensor, Var};

type OpFn = for<'g> fn(&[Var<'g>]) -> Result<Var<'g>>;
type Case = (&'static str, OpFn, Vec<Vec<usize>>);

fn positive<'g>(v: &Var<'g>) -> Var<'g> {
    // Keeps log/sqrt/pow inputs in their domain: softplus-like, > 0.
    (&(v * v) + 0.5).sqrt()
}

fn cases() -> Vec<Case> {
    vec![
        ("powf", |v| Ok(positive(&v[0]).powf(1.7)), vec![vec![4]]),
        (
            "where",
            |v| {
                let cond = Tensor::from_vec(vec![1.0, 0.0, 1.0], &[3])?;
                v[0].try_where(&cond, &v[1])
            },
            vec![vec![2, 3], vec![2, 3]],
        ),
        ("sum", |v| Ok(v[0].sum()), vec![vec![2, 3]]),
        ("mean", |v| Ok(v[0].mean()), vec![vec![2, 3]]),
        (
            "sum_dim",
            |v| v[0].try_sum_axes(&[1], true),
            vec![vec![2, 3, 2]],
        ),
        (
            "mean_dim",
            |v| v[0].try_mean_axes(&[0, 2], false),
            vec![vec![2, 3, 2]],
        ),
        ("var", |v| v[0].try_var(&[1], 1.0, false), vec![vec![2, 4]]),
        (
            "logsumexp",
            |v| v[0].try_logsumexp(&[-1], false),
            vec![vec![2, 4]],
        ),
        ("amax", |v| v[0].try_max_axes(&[1], false), vec![vec![3, 4]]),
        ("amin", |v| v[0].try_min_axes(&[0], true), vec![vec![3, 4]]),
        ("max", |v| Ok(v[0].max()), vec![vec![5]]),
        ("min", |v| Ok(v[0].min()), vec![vec![5]]),
        ("expand", |v| v[0].try_expand(&[2, 3, 2]), vec![vec![3, 1]]),
        (
            "sum_to_size",
            |v| v[0].sum_to_size(&[1, 2]),
            vec![vec![3, 2]],
        ),
        (
            "matmul",
            |v| v[0].try_matmul(&v[1]),
            vec![vec![2, 3], vec![3, 4]],
        ),
        (
            "matmul_batched",
            |v| v[0].try_matmul(&v[1]),
            vec![vec![2, 2, 3], vec![3, 2]],
        ),
        (
            "matmul_vec",
            |v| v[0].try_matmul(&v[1]),
            vec![vec![3], vec![3, 2]],
        ),
        (
            "matmul_nt",
            |v| v[0].try_matmul_transposed(&v[1], false, true),
            vec![vec![2, 3], vec![4, 3]],
        ),
        ("transpose", |v| v[0].try_transpose(0, 1), vec![vec![2, 3]]),
        (
            "permute",
            |v| v[0].try_permute(&[2, 0, 1]),
            vec![vec![2, 3, 2]],
        ),
        ("t", |v| v[0].try_t(), vec![vec![2, 3]]),
        ("reshape", |v| v[0].try_reshape(&[3, -1]), vec![vec![2, 3]]),
        ("flatten", |v| v[0].try_flatten(0, -1), vec![vec![2, 3]]),
        ("squeeze", |v| v[0].try_squeeze_dim(1), vec![vec![2, 1, 3]]),
        ("unsqueeze", |v| v[0].try_unsqueeze(0), vec![vec![2, 3]]),
        ("select", |v| v[0].try_select(1, 2), vec![vec![2, 3]]),
        ("slice", |v| v[0].try_slice(1, 1, 3, 1), vec![vec![2, 4]]),
        ("pad", |v| v[0].try_pad(&[1, 2], 0.5), vec![vec![2, 3]]),
        (
            "cat",
            |v| Var::try_cat(&[&v[0], &v[1]], 0),
            vec![vec![2, 3], vec![1, 3]],
        ),
        (
            "stack",
            |v| Var::try_stack(&[&v[0], &v[1]], 1),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "index_select",
            |v| {
                let idx = Tensor::from_indices(&[2, 0, 2], &[3])?;
                v[0].try_index_select(0, &idx)
            },
            vec![vec![3, 2]],
        ),
        (
            "gather",
            |v| {
                let idx = Tensor::from_indices(&[0, 2, 1, 1], &[2, 2])?;
                v[0].try_gather(1, &idx)
            },
            vec![vec![2, 3]],
        ),
        ("softmax", |v| Ok(v[0].softmax(-1)), vec![vec![2, 4]]),
        ("log_softmax", |v| Ok(v[0].log_softmax(0)), vec![vec![3, 2]]),
        (
            "cross_entropy",
            |v| v[0].try_cross_entropy(&[2usize, 0]),
            vec![vec![2, 3]],
        ),
        (
            "cross_entropy_smoothed",
            |v| {
                let opts = CrossEntropyOptions {
                    label_smoothing: 0.1,
                    ..Default::default()
                };
                v[0].try_cross_entropy_with(&[1usize, 2], &opts)
            },
            vec![vec![2, 3]],
        ),
        (
            "nll_loss",
            |v| v[0].log_softmax(-1).try_nll_loss(&[1usize, 0]),
            vec![vec![2, 3]],
        ),
        (
            "mse_loss",
            |v| v[0].try_mse_loss(&v[1]),
            vec![vec![2, 3], vec![2, 3]],
        ),
        (
            "bce_with_logits",
            |v| {
                let t = v[0]
                    .graph()
                    .constant(Tensor::from_vec(vec![0.0, 1.0, 1.0, 0.0], &[4])?);
                v[0].try_binary_cross_entropy_with_logits(&t)
            },
            vec![vec![4]],
        ),
        (
            "mse_loss_sum",
            |v| v[0].try_mse_loss_with(&v[1], Reduction::Sum),
            vec![vec![3], vec![3]],
        ),
        (
            "layer_norm",
            |v| v[0].try_layer_norm(&[3], Some(&v[1]), Some(&v[2]), 1e-5),
            vec![vec![2, 3], vec![3], vec![3]],
        ),
        (
            "embedding",
            |v| v[0].try_embedding(&[1usize, 0, 1], &[3]),
            vec![vec![2, 3]],
        ),
        ("dropout", |v| v[0].try_dropout(0.3, true, 7), vec![vec![8]]),
    ]
}

fn random_inputs(shapes: &[Vec<usize>], rng: &mut ChaCha8Rng) -> Vec<Tensor> {
    shapes
        .iter()
        .map(|s| {
            let n: usize = s.iter().product();
            // Away from 0 so abs/relu/clamp kinks are not straddled by the step.
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    let x: f64 = rng.random_range(0.15..1.2);
                    if rng.random::<bool>() {
                        x
                    } else {
                        -x
                    }
                })
                .collect();
            Tensor::from_vec(v, s).unwrap()
        })
        .collect()
}

/// `J t` from reverse mode: one `grad` per output element.
fn reverse_jvp<F>(f: F, xs: &[Tensor], ts: &[Tensor]) -> Vec<f64>
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>,
{
    let g = Graph::new();
    let vars: Vec<Var<'_>> = xs.iter().map(|x| g.variable(x.clone())).collect();
    let y = f(&vars).unwrap();
    let refs: Vec<&Var<'_>> = vars.iter().collect();
    let n = y.value().numel();
    (0..n)
        .map(|o| {
            let mut e = vec![0.0; n];
            e[o] = 1.0;
            let seed = Tensor::from_vec(e, y.shape()).unwrap();
            let opts = GradOptions::new()
                .grad_outputs(vec![seed])
                .allow_unused(true);
            let rows = grad(&[&y], &refs, &opts).unwrap();
            rows.iter()
                .zip(ts)
                .map(|(r, t)| {
                    r.value()
                        .to_f64_vec()
                        .iter()
                        .zip(t.to_f64_vec())
                        .map(|(a, b)| a * b)
                        .sum::<f64>()
                })
                .sum()
        })
        .collect()
}

/// `jvp` against the reverse-mode Jacobian and against finite differences.
fn check_op<F>(name: &str, f: F, xs: &[Tensor], ts: &[Tensor])
where
    F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>> + Copy,
{
    let (_, forward) = jvp(f, xs, ts).unwrap_or_else(|e| panic!("{name}: jvp failed: {e}"));
    let reverse = reverse_jvp(f, xs, ts);
    let forward = forward.to_f64_vec();
    assert_eq!(forward.len(), reverse.len(), "{name}");
    for (i, (a, b)) in forward.iter().zip(&reverse).enumerate() {
        assert!(
            (a - b).abs() <= 1e-10 * (1.0 + b.abs()),
            "{name}[{i}]: jvp {a} vs reverse {b}"
        );
    }
    jvpcheck(f, xs).unwrap_or_else(|e| panic!("{name}: jvp vs finite differences: {e}"));
}

#[test]
fn jvp_equals_the_reverse_mode_jacobian_times_the_tangent() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let mut checked = 0;
    for (name, f, shapes) in cases() {
        let xs = random_inputs(&shapes, &mut rng);
        let ts = random_inputs(&shapes, &mut rng);
        check_op(name, f, &xs, &ts);
        checked += 1;
    }
    println!("forward mode agrees with reverse mode and finite differences on {checked} ops");
}

#[test]
fn every_elementwise_op_of_the_registry_has_a_correct_tangent_rule() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let ops = registry_ops::elementwise();
    for op in ops {
        assert!(
            op.facts.tangent,
            "{}: elementwise ops derive a tangent rule",
            op.label
        );
        let xs = registry_ops::sample_inputs(op, 5, &mut rng);
        let ts = random_inputs(&vec![vec![5]; op.arity()], &mut rng);
        check_op(
            &op.label,
            |v: &[Var<'_>]| op.apply(&v.iter().collect::<Vec<_>>()),
            &xs,
            &ts,
        );
    }
    println!("{} elementwise instances checked", ops.len());
}

#[test]
fn ops_without_a_tangent_rule_report_themselves_by_name() {
    // A user op that implements only backward: forward mode names it.
    use retrograd::{smallvec::smallvec, Differentiable, GradInputs};
    struct NoTangent;
    impl Differentiable for NoTangent {
        fn name(&self) -> &str {
            "no_tangent"
        }
        fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
            Ok(inputs[0].clone())
        }
        fn backward<'g>(&self, g: &Var<'g>, _: &[Var<'g>], _: &Var<'g>) -> Result<GradInputs<'g>> {
            Ok(smallvec![Some(g.clone())])
        }
    }
    let err = jvp(
        |v| v[0].graph().record(NoTangent, &[&v[0]]),
        &[Tensor::scalar(1.0)],
        &[Tensor::scalar(1.0)],
    )
    .unwrap_err();
    assert!(err.to_string().contains("no_tangent"), "{err}");
}
