//! Ops that hold data besides their inputs (indices, targets, weights, a
//! closure) never replay stale: a captured step either reads each run's
//! data or refuses to capture with a typed error naming the op.

use super::*;
use crate::nn::Parameter;
use crate::ops::nn::{CrossEntropyOptions, NllLossOptions};
use crate::{Differentiable, GradInputs, Holds, OpRegistry};

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

fn ids(v: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// A `[5, 3]` table whose rows differ.
fn table() -> Parameter {
    let v: Vec<f64> = (0..15).map(|i| ((i * 7 % 11) as f64 - 5.0) * 0.1).collect();
    Parameter::new(Tensor::from_vec(v, &[5, 3]).unwrap())
}

/// embedding -> log_softmax -> nll_loss, ids and targets from the inputs.
fn lookup_loss<'g>(g: &'g Graph, w: &Parameter, ids: &Tensor, targets: &Tensor) -> Result<Var<'g>> {
    g.param(w)
        .try_embedding(ids, ids.shape())?
        .try_log_softmax(1)?
        .try_nll_loss(targets)
}

#[test]
fn every_registered_op_declares_what_it_holds() {
    let reg = OpRegistry::with_builtins();
    let undeclared: Vec<&str> = reg
        .names()
        .into_iter()
        .filter(|n| reg.get(n).unwrap().holds() == Holds::Undeclared)
        .collect();
    assert!(
        undeclared.is_empty(),
        "ops that do not declare: {undeclared:?}"
    );
    // Each registered form takes its data as inputs: nothing held.
    for name in reg.names() {
        let op = reg.get(name).unwrap();
        assert_eq!(op.holds(), Holds::Settings, "{name}");
        if let Some(example) = op.facts().example {
            assert_ne!(example.holds(), Holds::Undeclared, "{name}'s example");
        }
    }
}

#[test]
fn embedding_and_nll_given_tensors_replay_each_runs_ids() {
    let w = table();
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| lookup_loss(g, &w, x[0].value(), x[1].value()),
        CompileOptions::new().params([&w]),
    );
    let runs = [
        (ids(&[0, 1, 2, 3]), ids(&[2, 0, 1, 1])),
        (ids(&[4, 4, 1, 0]), ids(&[1, 2, 2, 0])),
        (ids(&[3, 2, 2, 4]), ids(&[0, 0, 2, 1])),
    ];
    let mut losses = Vec::new();
    for (k, (i, t)) in runs.iter().enumerate() {
        let g = Graph::new();
        let loss = lookup_loss(&g, &w, i, t).unwrap();
        let grad = loss.backward().unwrap().of(&w);
        let out = step.run(&[i.clone(), t.clone()]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(loss.value()), "run {k}");
        assert_eq!(bits(&out.grads().of(&w)), bits(&grad), "run {k}");
        losses.push(out.loss());
    }
    assert_eq!(step.capture_count(), 1);
    // The runs really differ: a stale replay would repeat the first loss.
    assert!(
        losses[0] != losses[1] && losses[1] != losses[2],
        "{losses:?}"
    );
    // The graph shows the ids as the node's input, not stored in the op.
    let c = step.capture().unwrap();
    assert!(c.explain().contains("embedding"), "{}", c.explain());
}

#[test]
fn cross_entropy_given_a_tensor_replays_each_runs_targets() {
    let w = table();
    fn f<'g>(g: &'g Graph, w: &Parameter, x: &Tensor, y: &Tensor) -> Result<Var<'g>> {
        g.param(w).try_embedding(x, x.shape())?.try_cross_entropy(y)
    }
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| f(g, &w, x[0].value(), x[1].value()),
        CompileOptions::new().params([&w]),
    );
    for (i, t) in [(ids(&[0, 1]), ids(&[2, 0])), (ids(&[0, 1]), ids(&[1, 1]))] {
        let g = Graph::new();
        let loss = f(&g, &w, &i, &t).unwrap();
        let out = step.run(&[i, t]).unwrap();
        assert_eq!(bits(out.loss_value()), bits(loss.value()));
    }
}

/// A step function, boxed to list several.
type Boxed<'a> = Box<dyn for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>> + 'a>;

/// Ids read out of the input into a list: the op stores them, and the
/// capture refuses rather than replay the first run's.
#[test]
fn indices_given_as_lists_are_refused_by_name() {
    let w = table();
    let cases: [(&str, Boxed<'_>); 3] = [
        (
            "embedding",
            Box::new(|g: &Graph, x: &[Var<'_>]| {
                let list = x[0].value().to_vec::<i64>()?;
                g.param(&w).try_embedding(&list, &[list.len()])?.try_sum()
            }),
        ),
        (
            "nll_loss",
            Box::new(|g: &Graph, x: &[Var<'_>]| {
                let list = x[1].value().to_vec::<i64>()?;
                g.param(&w)
                    .try_embedding(x[0].value(), &[4])?
                    .try_nll_loss_with(&list, &NllLossOptions::default())
            }),
        ),
        (
            "cross_entropy",
            Box::new(|g: &Graph, x: &[Var<'_>]| {
                let list = x[1].value().to_vec::<i64>()?;
                g.param(&w)
                    .try_embedding(x[0].value(), &[4])?
                    .try_cross_entropy(&list)
            }),
        ),
    ];
    for (name, f) in cases {
        let mut step = compile(f, CompileOptions::new().params([&w]));
        match step.run(&[ids(&[0, 1, 2, 3]), ids(&[2, 0, 1, 1])]) {
            Err(Error::NotReplayable { op, reason, .. }) => {
                assert_eq!(op, name);
                assert!(reason.contains("stored in the op"), "{reason}");
            }
            Err(e) => panic!("{name}: {e}"),
            Ok(_) => panic!("{name} captured with its indices stored in the op"),
        }
    }
}

#[test]
fn class_weights_are_refused_not_baked_in() {
    let w = table();
    let opts =
        CrossEntropyOptions::default().weight(Tensor::from_vec(vec![1.0, 2.0, 0.5], &[3]).unwrap());
    let mut step = compile(
        |g: &Graph, x: &[Var<'_>]| {
            g.param(&w)
                .try_embedding(x[0].value(), &[2])?
                .try_cross_entropy_with(x[1].value(), &opts)
        },
        CompileOptions::new().params([&w]),
    );
    let err = step
        .run(&[ids(&[0, 1]), ids(&[2, 0])])
        .err()
        .expect("refused");
    assert!(
        matches!(&err, Error::NotReplayable { op, reason, .. }
            if op == "cross_entropy" && reason.contains("weight")),
        "{err}"
    );
}

/// A user op that says nothing about what it holds.
struct Twice;
impl Differentiable for Twice {
    fn name(&self) -> &str {
        "twice"
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Ok(inputs[0].map_f64(|v| 2.0 * v))
    }
    fn backward<'g>(&self, g: &Var<'g>, _: &[Var<'g>], _: &Var<'g>) -> Result<GradInputs<'g>> {
        Ok(smallvec::smallvec![Some(g * 2.0)])
    }
}

#[test]
fn an_op_that_does_not_declare_is_refused() {
    let p = Parameter::new(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
    let mut step = compile(
        |g: &Graph, _: &[Var<'_>]| Ok(g.record(Twice, &[&g.param(&p)])?.sum()),
        CompileOptions::new().params([&p]),
    );
    match step.run(&[]) {
        Err(Error::NotReplayable { op, reason, .. }) => {
            assert_eq!(op, "twice");
            assert!(reason.contains("does not declare"), "{reason}");
        }
        other => panic!(
            "{:?}\n{}",
            other.map(|o| o.loss()),
            step.capture().map(|c| c.explain()).unwrap_or_default()
        ),
    }
}
