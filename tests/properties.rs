//! Properties of backward on random DAGs of registered ops (see
//! `support/random_dag.rs`): reverse-mode gradients equal central finite
//! differences; every valid backward order gives the same gradients; the
//! tensor-level fast path equals the `Var` formulas; f32 agrees with f64; and
//! forward mode (`jvp`) equals reverse mode along random tangents; a
//! compiled step (`retrograd::compile`) gives the eager values and
//! gradients, at the captured inputs and at new ones. All but finite
//! differences also run on large tensors, where kernels go parallel.
//!
//! Every property runs a fixed number of cases from a fixed seed (ChaCha,
//! derived from the property's name; no failure files), so CI runs the same
//! graphs every time; a failure is shrunk to a small DAG and printed with its
//! plan. Each property prints its case count, the op nodes it checked, the
//! largest fraction of its tolerance used and how many cases were bitwise equal.

#[path = "support/random_dag.rs"]
mod random_dag;
#[path = "support/registry_ops.rs"]
mod registry_ops;

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::{RngAlgorithm, TestCaseError, TestRng, TestRunner};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use random_dag::{Dag, Size};
use retrograd::kernels::parallel::PARALLEL_THRESHOLD;
use retrograd::{
    compile, jvp, BackwardOptions, BackwardOrder, CompileOptions, DType, Gradients, Graph, Tensor,
    Var,
};

/// Cases per property: about 20 s for the whole file in a debug build on a
/// 2-core machine.
const CASES: u32 = 512;
/// The fewest choice words per DAG (the most is `Size::max_ops`; a word
/// whose candidates all fail adds no op).
const MIN_OPS: usize = 3;
/// Cases per property on large tensors.
const LARGE_CASES: u32 = 16;

/// A property of one DAG (with a spare random `u64`): `Ok` with the largest
/// fraction of its tolerance used (0 when bitwise equal), or what failed.
type Property = fn(&Dag, u64) -> Result<f64, String>;

/// Runs `property` on `cases` random DAGs (each with a spare random `u64`)
/// from a fixed seed and reports how many cases ran.
fn check_property(name: &str, cases: u32, size: Size, property: Property) {
    let config = ProptestConfig {
        cases,
        failure_persistence: None,
        rng_algorithm: RngAlgorithm::ChaCha,
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    };
    let mut seed = [0u8; 32];
    seed[..name.len().min(32)].copy_from_slice(&name.as_bytes()[..name.len().min(32)]);
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &seed));
    let strategy = (
        vec(any::<u32>(), MIN_OPS..=size.max_ops),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(move |(words, values_seed, spare)| {
            (Dag::plan_sized(&words, values_seed, size), spare)
        });
    let ran = Cell::new(0usize);
    let ops = Cell::new(0usize);
    let worst = Cell::new(0.0f64);
    let exact = Cell::new(0usize);
    let result = runner.run(&strategy, |(dag, spare)| {
        ran.set(ran.get() + 1);
        ops.set(ops.get() + dag.op_count());
        let used = property(&dag, spare).map_err(TestCaseError::fail)?;
        worst.set(worst.get().max(used));
        exact.set(exact.get() + usize::from(used == 0.0));
        Ok(())
    });
    eprintln!(
        "property `{name}`: {} cases run ({cases} planned, {} op nodes in all); \
         worst error {:.3} of the tolerance; {} cases bitwise equal",
        ran.get(),
        ops.get(),
        worst.get(),
        exact.get()
    );
    if let Err(e) = result {
        panic!("property `{name}` failed: {e}");
    }
}

/// The gradient of the DAG's root with respect to each input, from a backward
/// pass with `opts`, plus the root's value.
fn reverse_mode(
    dag: &Dag,
    dtype: DType,
    opts: &BackwardOptions,
) -> Result<(f64, Vec<Tensor>), String> {
    let graph = Graph::new();
    let inputs: Vec<Var<'_>> = dag
        .inputs_as(dtype)
        .into_iter()
        .map(|t| graph.variable(t))
        .collect();
    let root = dag.build(&inputs).map_err(|e| format!("build: {e}"))?;
    let grads = root
        .backward_with_options(opts)
        .map_err(|e| format!("backward: {e}"))?;
    let value = root.value().try_item().map_err(|e| e.to_string())?;
    Ok((value, input_grads(&grads, &inputs)))
}

fn input_grads(grads: &Gradients, inputs: &[Var<'_>]) -> Vec<Tensor> {
    inputs.iter().map(|x| grads.wrt(x)).collect()
}

/// The root's value at `inputs` (f64), without recording anything.
fn evaluate(dag: &Dag, inputs: &[Tensor]) -> Result<f64, String> {
    let graph = Graph::new();
    let constants: Vec<Var<'_>> = inputs.iter().map(|t| graph.constant(t.clone())).collect();
    let root = dag.build(&constants).map_err(|e| format!("build: {e}"))?;
    root.value().try_item().map_err(|e| e.to_string())
}

/// Elementwise `|a - b| <= atol + rtol * |b|`, naming the first element that
/// is not; returns the largest `|a - b| / (atol + rtol * |b|)` (the fraction
/// of the tolerance used).
fn assert_close(
    what: &str,
    a: &[Tensor],
    b: &[Tensor],
    rtol: f64,
    atol: f64,
) -> Result<f64, String> {
    let mut worst = 0.0f64;
    for (input, (ta, tb)) in a.iter().zip(b).enumerate() {
        if ta.shape() != tb.shape() {
            return Err(format!(
                "{what}: input {input}: shapes {:?} and {:?}",
                ta.shape(),
                tb.shape()
            ));
        }
        for (k, (x, y)) in ta.to_f64_vec().into_iter().zip(tb.to_f64_vec()).enumerate() {
            let tolerance = atol + rtol * y.abs();
            // Written so that a NaN on either side fails.
            let within = (x - y).abs() <= tolerance;
            if !within {
                return Err(format!("{what}: input {input} element {k}: {x} vs {y}"));
            }
            worst = worst.max((x - y).abs() / tolerance);
        }
    }
    Ok(worst)
}

fn bitwise_equal(a: &[Tensor], b: &[Tensor]) -> bool {
    a.iter().zip(b).all(|(x, y)| {
        x.shape() == y.shape()
            && x.to_f64_vec()
                .iter()
                .zip(y.to_f64_vec())
                .all(|(p, q)| p.to_bits() == q.to_bits())
    })
}

fn max_abs(ts: &[Tensor]) -> f64 {
    ts.iter()
        .flat_map(|t| t.to_f64_vec())
        .fold(0.0, |m, x| m.max(x.abs()))
}

/// Central differences in f64 with step 1e-6: truncation error ~1e-12 for
/// these smooth, bounded graphs (kinks and domain edges at least 0.05 away),
/// rounding error ~1e-10 times the root's scale; the tolerance is 1e-6
/// relative plus 1e-7 of the largest gradient.
fn matches_central_differences(dag: &Dag, _: u64) -> Result<f64, String> {
    const STEP: f64 = 1e-6;
    {
        let (_, analytic) = reverse_mode(dag, DType::F64, &BackwardOptions::new())?;
        let mut numeric = Vec::with_capacity(dag.inputs.len());
        for (i, input) in dag.inputs.iter().enumerate() {
            let base = input.to_f64_vec();
            let mut slope = Vec::with_capacity(base.len());
            for k in 0..base.len() {
                let at = |delta: f64| {
                    let mut point = dag.inputs.clone();
                    let mut data = base.clone();
                    data[k] += delta;
                    point[i] = Tensor::from_f64_slice(&data, input.shape(), DType::F64)
                        .expect("same shape");
                    evaluate(dag, &point)
                };
                slope.push((at(STEP)? - at(-STEP)?) / (2.0 * STEP));
            }
            numeric.push(
                Tensor::from_f64_slice(&slope, input.shape(), DType::F64).expect("same shape"),
            );
        }
        let scale = 1.0 + max_abs(&numeric);
        assert_close(
            "reverse mode vs central differences",
            &analytic,
            &numeric,
            1e-6,
            1e-7 * scale,
        )
    }
}

/// A random valid reverse topological order of every node of `graph`: a node
/// is visited only after every node consuming its output.
fn random_reverse_topological_order(graph: &Graph, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let nodes = graph.nodes();
    let mut pending_consumers = vec![0usize; nodes.len()];
    let mut producers_of: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
    for node in &nodes {
        for input in node.inputs() {
            if let Some(p) = input.node_index() {
                pending_consumers[p] += 1;
                producers_of[node.index()].push(p);
            }
        }
    }
    let mut ready: Vec<usize> = (0..nodes.len())
        .filter(|&n| pending_consumers[n] == 0)
        .collect();
    let mut order = Vec::with_capacity(nodes.len());
    while !ready.is_empty() {
        let next = ready.swap_remove(rng.random_range(0..ready.len()));
        order.push(next);
        for &p in &producers_of[next] {
            pending_consumers[p] -= 1;
            if pending_consumers[p] == 0 {
                ready.push(p);
            }
        }
    }
    order
}

/// `Ancestors` (backward_order) and `Tape` (topological_backward_order) visit
/// the ancestors in the same relative order, so their gradients are
/// bitwise equal; a random valid order sums contributions in another order,
/// so it agrees to rounding (1e-12 relative).
fn orders_agree(dag: &Dag, spare: u64) -> Result<f64, String> {
    {
        let graph = Graph::new();
        let inputs: Vec<Var<'_>> = dag
            .inputs
            .iter()
            .map(|t| graph.variable(t.clone()))
            .collect();
        let root = dag.build(&inputs).map_err(|e| format!("build: {e}"))?;
        let ancestors = graph.backward_order(&root);
        let tape = graph.topological_backward_order();
        let in_tape_order: Vec<usize> = tape
            .iter()
            .copied()
            .filter(|n| ancestors.contains(n))
            .collect();
        if ancestors != in_tape_order {
            return Err(format!("backward_order {ancestors:?} is not the tape order restricted to ancestors {in_tape_order:?}"));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(spare);
        let custom = random_reverse_topological_order(&graph, &mut rng);
        let run = |order: BackwardOrder| -> Result<Vec<Tensor>, String> {
            let grads = root
                .backward_with_options(&BackwardOptions::new().order(order))
                .map_err(|e| format!("backward: {e}"))?;
            Ok(input_grads(&grads, &inputs))
        };
        let by_ancestors = run(BackwardOrder::Ancestors)?;
        let by_tape = run(BackwardOrder::Tape)?;
        if !bitwise_equal(&by_ancestors, &by_tape) {
            return Err(format!(
                "Ancestors {by_ancestors:?} and Tape {by_tape:?} differ"
            ));
        }
        let by_custom = run(BackwardOrder::Custom(custom.clone()))?;
        let scale = max_abs(&by_ancestors);
        assert_close(
            &format!("custom order {custom:?} vs ancestors"),
            &by_custom,
            &by_ancestors,
            1e-12,
            1e-13 * scale,
        )
    }
}

/// The tensor-level fast path and the `Var`-level formulas (what
/// `create_graph` differentiates) compute the same gradients.
fn fast_path_agrees(dag: &Dag, _: u64) -> Result<f64, String> {
    {
        let (_, fast) = reverse_mode(dag, DType::F64, &BackwardOptions::new().fast_path(true))?;
        let (_, formulas) =
            reverse_mode(dag, DType::F64, &BackwardOptions::new().fast_path(false))?;
        let scale = max_abs(&formulas);
        assert_close(
            "fast path vs Var formulas",
            &fast,
            &formulas,
            1e-12,
            1e-13 * scale,
        )
    }
}

/// The same DAG in f32 and f64: the f32 gradients agree within f32 accuracy
/// relative to the largest gradient (planned values keep away from the
/// cancellations that would amplify f32 rounding).
fn f32_agrees_with_f64(dag: &Dag, _: u64) -> Result<f64, String> {
    {
        let (root32, g32) = reverse_mode(dag, DType::F32, &BackwardOptions::new())?;
        let (root64, g64) = reverse_mode(dag, DType::F64, &BackwardOptions::new())?;
        if g32.iter().any(|t| t.dtype() != DType::F32) {
            return Err("an f32 graph returned a gradient that is not f32".into());
        }
        if (root32 - root64).abs() > 1e-4 * (1.0 + root64.abs()) {
            return Err(format!("root: f32 {root32} vs f64 {root64}"));
        }
        let scale = 1.0 + max_abs(&g64);
        assert_close("f32 vs f64 gradients", &g32, &g64, 2e-4, 2e-5 * scale)
    }
}

/// Forward mode along a random tangent equals the directional derivative
/// from reverse mode: `jvp(f, x, t) = sum_i <grad_i, t_i>`.
fn forward_mode_agrees(dag: &Dag, spare: u64) -> Result<f64, String> {
    {
        let (_, grads) = reverse_mode(dag, DType::F64, &BackwardOptions::new())?;
        let mut rng = ChaCha8Rng::seed_from_u64(spare);
        let tangents: Vec<Tensor> = dag
            .inputs
            .iter()
            .map(|x| {
                let data: Vec<f64> = (0..x.numel())
                    .map(|_| rng.random_range(-1.0..1.0))
                    .collect();
                Tensor::from_f64_slice(&data, x.shape(), DType::F64).expect("same shape")
            })
            .collect();
        let (_, forward) =
            jvp(|v| dag.build(v), &dag.inputs, &tangents).map_err(|e| format!("jvp: {e}"))?;
        let forward = forward.try_item().map_err(|e| e.to_string())?;
        let (mut reverse, mut magnitude) = (0.0, 0.0);
        for (g, t) in grads.iter().zip(&tangents) {
            for (a, b) in g.to_f64_vec().into_iter().zip(t.to_f64_vec()) {
                reverse += a * b;
                magnitude += (a * b).abs();
            }
        }
        let tolerance = 1e-10 * (1.0 + magnitude);
        if (forward - reverse).abs() > tolerance {
            return Err(format!("jvp {forward} vs <grad, tangent> {reverse}"));
        }
        Ok((forward - reverse).abs() / tolerance)
    }
}

/// The DAG compiled (captured once, fused) against eager, in f64: the
/// root and every input's gradient at the captured inputs, then at inputs
/// moved by a relative 1e-7 (small enough to stay clear of kinks and domain
/// edges, far above the tolerance, so a value baked into the capture
/// shows). Fusion reorders no floating-point work, but the compiled step
/// runs some backward nodes by their `Var` formula where eager takes the
/// op's fast rule, so the tolerance is the fast-path property's.
fn compiled_agrees(dag: &Dag, _: u64) -> Result<f64, String> {
    let n = dag.inputs_as(DType::F64).len();
    let all: Vec<usize> = (0..n).collect();
    let mut step = compile(
        |_: &Graph, x: &[Var<'_>]| dag.build(x),
        CompileOptions::new().grad_inputs(&all),
    );
    let mut worst = 0.0f64;
    for shift in [0.0, 1e-7] {
        let inputs: Vec<Tensor> = dag
            .inputs_as(DType::F64)
            .iter()
            .map(|t| t.map_f64(|v| v * (1.0 + shift)))
            .collect();
        let graph = Graph::new();
        let vars: Vec<Var<'_>> = inputs.iter().map(|t| graph.variable(t.clone())).collect();
        let root = dag.build(&vars).map_err(|e| format!("build: {e}"))?;
        let grads = root.backward().map_err(|e| format!("backward: {e}"))?;
        let eager = input_grads(&grads, &vars);
        let out = step
            .run(&inputs)
            .map_err(|e| format!("compiled run: {e}"))?;
        let value = root.value().try_item().map_err(|e| e.to_string())?;
        if (out.loss() - value).abs() > 1e-12 * (1.0 + value.abs()) {
            return Err(format!(
                "shift {shift}: compiled root {} vs eager {value}",
                out.loss()
            ));
        }
        let compiled: Vec<Tensor> = (0..n)
            .map(|k| out.input_grad(k).expect("asked for").clone())
            .collect();
        let scale = max_abs(&eager);
        worst = worst.max(assert_close(
            &format!("compiled vs eager (inputs moved by {shift})"),
            &compiled,
            &eager,
            1e-12,
            1e-13 * scale,
        )?);
    }
    Ok(worst)
}

#[test]
fn compiled_steps_match_eager() {
    check_property("compiled vs eager", CASES, Size::SMALL, compiled_agrees);
    check_property(
        "compiled scalar graphs",
        CASES,
        Size::SCALAR,
        compiled_agrees,
    );
}

#[test]
fn gradients_match_central_differences() {
    check_property(
        "finite differences",
        CASES,
        Size::SMALL,
        matches_central_differences,
    );
}

#[test]
fn every_backward_order_gives_the_same_gradients() {
    check_property("backward orders", CASES, Size::SMALL, orders_agree);
}

#[test]
fn fast_path_matches_var_formulas() {
    check_property(
        "fast path vs Var formulas",
        CASES,
        Size::SMALL,
        fast_path_agrees,
    );
}

/// Graphs of mostly 0-d values, whose nodes take the ops' scalar lanes:
/// bit for bit the gradients of the `Var` formulas, in both dtypes, and
/// every backward order agrees.
#[test]
fn scalar_lanes_match_var_formulas_bit_for_bit() {
    check_property("scalar lanes", 4 * CASES, Size::SCALAR, |dag, spare| {
        for dtype in [DType::F32, DType::F64] {
            let (_, lanes) = reverse_mode(dag, dtype, &BackwardOptions::new().fast_path(true))?;
            let (_, formulas) = reverse_mode(dag, dtype, &BackwardOptions::new().fast_path(false))?;
            if !bitwise_equal(&lanes, &formulas) {
                return Err(format!(
                    "{dtype}: scalar lanes {lanes:?} vs Var formulas {formulas:?}"
                ));
            }
        }
        orders_agree(dag, spare)
    });
}

#[test]
fn f32_gradients_agree_with_f64() {
    check_property("f32 vs f64", CASES, Size::SMALL, f32_agrees_with_f64);
}

#[test]
fn forward_mode_matches_reverse_mode() {
    check_property(
        "jvp vs reverse mode",
        CASES,
        Size::SMALL,
        forward_mode_agrees,
    );
}

/// Large tensors (up to 2^17 elements, kernels on their parallel paths):
/// every property but finite differences (one forward pass per element),
/// on the same DAGs.
#[test]
fn large_tensors_keep_the_properties() {
    check_property("large tensors", LARGE_CASES, Size::LARGE, |dag, spare| {
        if dag.largest_numel >= PARALLEL_THRESHOLD {
            PARALLEL_CASES.fetch_add(1, Ordering::Relaxed);
        }
        let fractions = [
            orders_agree(dag, spare)?,
            fast_path_agrees(dag, spare)?,
            f32_agrees_with_f64(dag, spare)?,
            forward_mode_agrees(dag, spare)?,
            compiled_agrees(dag, spare)?,
        ];
        Ok(fractions.into_iter().fold(0.0, f64::max))
    });
    let parallel = PARALLEL_CASES.load(Ordering::Relaxed);
    eprintln!(
        "large tensors: {parallel} cases with a value of at least {PARALLEL_THRESHOLD} elements"
    );
    assert!(parallel > 0, "no large case reached the parallel kernels");
}

/// Large cases with a value big enough for the parallel kernels (a static:
/// properties are plain `fn`s).
static PARALLEL_CASES: AtomicUsize = AtomicUsize::new(0);

/// The generator is not degenerate: over a few hundred plans every op it
/// knows is kept somewhere (a domain check that always fails would drop one).
#[test]
fn generated_dags_use_every_op() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    let mut dead = 0;
    for _ in 0..CASES {
        let words: Vec<u32> = (0..rng.random_range(MIN_OPS..=Size::SMALL.max_ops))
            .map(|_| rng.random())
            .collect();
        let dag = Dag::plan(&words, rng.random());
        for name in dag.op_names() {
            *counts.entry(name).or_default() += 1;
        }
        let graph = Graph::new();
        let inputs: Vec<Var<'_>> = dag
            .inputs
            .iter()
            .map(|t| graph.variable(t.clone()))
            .collect();
        let root = dag.build(&inputs).expect("a planned DAG builds");
        dead += usize::from(graph.backward_order(&root).len() < graph.len());
    }
    eprintln!("ops in {CASES} plans: {counts:?}; {dead} plans have dead nodes");
    // Every elementwise op of the registry, and the structural ops the
    // planner builds by hand.
    let mut expected: Vec<&str> = registry_ops::elementwise()
        .iter()
        .map(|op| op.name.as_str())
        .collect();
    expected.dedup();
    expected.extend([
        "matmul",
        "sum",
        "mean",
        "max",
        "min",
        "Powf",
        "AddScalar",
        "MulScalar",
        "RdivScalar",
        "SumAxes",
        "MeanAxes",
        "Variance",
        "LogSumExp",
        "MaxAxes",
        "MinAxes",
        "Softmax",
        "LogSoftmax",
        "Reshape",
        "Transpose",
        "Permute",
        "Unsqueeze",
        "SqueezeDim",
        "Squeeze",
        "Narrow",
        "Slice",
        "Select",
        "IndexSelect",
        "Expand",
        "Flatten",
        "Pad",
        "Cat",
        "Stack",
        "MatMulTransposed",
        "Where",
        "Gather",
        "IndexAdd",
        "MseLoss",
        "BinaryCrossEntropyWithLogits",
        "LayerNorm",
    ]);
    for &name in &expected {
        assert!(
            counts.contains_key(name),
            "no plan used `{name}`: {counts:?}"
        );
    }
    assert_eq!(
        counts.len(),
        expected.len(),
        "an op is missing from the expected list: {counts:?}"
    );
    assert!(dead > 0, "no plan left a dead node");
}

/// The order used above is also a check on `random_reverse_topological_order`
/// itself: shuffling a valid order is caught by `BackwardOrder::Custom`.
#[test]
fn an_invalid_custom_order_is_rejected() {
    let graph = Graph::new();
    let x = graph.variable(Tensor::scalar(2.0));
    let y = (&x * &x).exp();
    let mut order = graph.backward_order(&y);
    order.shuffle(&mut ChaCha8Rng::seed_from_u64(1));
    if order == graph.backward_order(&y) {
        order.reverse();
    }
    let result =
        y.backward_with_options(&BackwardOptions::new().order(BackwardOrder::Custom(order)));
    let error = result.err();
    assert!(
        matches!(error, Some(retrograd::Error::InvalidOrder { .. })),
        "{error:?}"
    );
}
