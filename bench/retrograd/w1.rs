//! W1 (scalar chain) and W1v (vector chain): the per-node overhead of
//! recording and differentiating a graph of many small ops.
//!
//! K = 256 parameters p[k] = ((k mod 17) - 8) * 0.01. For c in 0..C:
//! v = 0.5 + 0.001 c (a constant); for j in 0..100: i = 100 c + j;
//! v = tanh(v * p[i mod K] + p[(7 i + 3) mod K]). total = the sum of the C
//! chain results. Backward from total; read every p gradient.
//! W1v: the same with every p[k] and v a length-64 f32 vector
//! (p[k][e] = ((64 k + e) mod 17 - 8) * 0.01), loss = sum(total).
//! `w1c` / `w1vc`: the same loss compiled (`retrograd::compile`), the p
//! parameters, replayed and timed alternately with the eager pass.

use retrograd::nn::Parameter;
use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};

use crate::report::{emit, time, time_pair, Stats, Value};
use crate::Options;

const K: usize = 256;
const L: usize = 100;

/// Nodes recorded: 3 per chain step, C - 1 chain additions, and the final
/// sum for vectors.
pub fn nodes(chains: usize, width: usize) -> usize {
    3 * chains * L + (chains - 1) + usize::from(width > 1)
}

fn param(k: usize, width: usize, dtype: DType) -> Tensor {
    if width == 1 {
        Tensor::scalar_of((((k % 17) as f64) - 8.0) * 0.01, dtype)
    } else {
        let v: Vec<f64> = (0..width)
            .map(|e| ((((k * width + e) % 17) as f64) - 8.0) * 0.01)
            .collect();
        Tensor::from_f64_slice(&v, &[width], dtype).expect("valid shape")
    }
}

/// One forward + backward; returns (loss, sum of all parameter gradients).
pub fn run_once(chains: usize, width: usize, dtype: DType) -> (f64, f64) {
    let graph = Graph::new();
    let p: Vec<Var<'_>> = (0..K)
        .map(|k| graph.variable(param(k, width, dtype)))
        .collect();
    let loss = chain_loss(&graph, &p, chains, width, dtype);
    let grads = loss.backward().expect("scalar root");
    let grad_sum: f64 = p
        .iter()
        .map(|x| grads.wrt(x).to_f64_vec().iter().sum::<f64>())
        .sum();
    (loss.value().item(), grad_sum)
}

/// The W1 (W1v) loss on the K parameters `p`: the chains and their sum.
fn chain_loss<'g>(
    graph: &'g Graph,
    p: &[Var<'g>],
    chains: usize,
    width: usize,
    dtype: DType,
) -> Var<'g> {
    let mut total: Option<Var<'_>> = None;
    for c in 0..chains {
        let init = 0.5 + 0.001 * c as f64;
        let start = if width == 1 {
            Tensor::scalar_of(init, dtype)
        } else {
            Tensor::full(&[width], init, dtype).expect("valid shape")
        };
        let mut v = graph.constant(start);
        for j in 0..L {
            let i = c * L + j;
            v = (&v * &p[i % K] + &p[(7 * i + 3) % K]).tanh();
        }
        total = Some(match total {
            None => v,
            Some(t) => &t + &v,
        });
    }
    let total = total.expect("at least one chain");
    if width == 1 {
        total
    } else {
        total.sum()
    }
}

/// W1 (W1v) compiled: the K values are parameters, the chain is captured
/// at the first call (forward and backward) and replayed after; each call
/// returns (loss, sum of all parameter gradients) as `run_once` does.
pub fn compiled_chain(
    chains: usize,
    width: usize,
    dtype: DType,
) -> impl FnMut() -> (f64, f64) + use<> {
    let params: Vec<Parameter> = (0..K)
        .map(|k| Parameter::new(param(k, width, dtype)))
        .collect();
    let in_graph = params.clone();
    let mut step = compile(
        move |g: &Graph, _: &[Var<'_>]| {
            let p: Vec<Var<'_>> = in_graph.iter().map(|q| g.param(q)).collect();
            Ok(chain_loss(g, &p, chains, width, dtype))
        },
        CompileOptions::new().params(&params),
    );
    move || {
        let out = step.run(&[]).expect("a valid compiled W1 step");
        let grad_sum: f64 = params
            .iter()
            .map(|p| out.grads().of(p).to_f64_vec().iter().sum::<f64>())
            .sum();
        (out.loss(), grad_sum)
    }
}

fn report(workload: &str, chains: usize, width: usize, dtype: DType, repeats: usize) {
    let mut check = (0.0, 0.0);
    let stats = time(repeats, || check = run_once(chains, width, dtype)).per(nodes(chains, width));
    emit_chain_line("retrograd", workload, dtype, chains, width, stats, check);
}

/// One JSON line of a chain workload: ns per node and the cross-check values.
pub fn emit_chain_line(
    framework: &str,
    workload: &str,
    dtype: DType,
    chains: usize,
    width: usize,
    stats: Stats,
    (loss, grad_sum): (f64, f64),
) {
    emit(
        vec![
            ("framework", framework.into()),
            ("workload", workload.into()),
            ("dtype", dtype.to_string().into()),
            ("chains", chains.into()),
            ("nodes", nodes(chains, width).into()),
            ("unit", "ns_per_node".into()),
            ("median", Value::Num(stats.median * 1e9)),
            ("min", Value::Num(stats.min * 1e9)),
            ("max", Value::Num(stats.max * 1e9)),
            ("loss", Value::Exact(loss)),
            ("grad_sum", Value::Exact(grad_sum)),
        ],
        None,
    );
}

/// W1 at C = 1000 and 10000 in f32 and f64, after the C = 10 cross-check.
pub fn run_w1(opts: &Options) {
    report("w1", 10, 1, DType::F64, 1);
    let sizes: &[usize] = if opts.quick { &[100] } else { &[1000, 10000] };
    for dtype in [DType::F32, DType::F64] {
        for &c in sizes {
            let repeats = if c >= 10000 {
                opts.repeats.min(5)
            } else {
                opts.repeats
            };
            report("w1", c, 1, dtype, repeats);
        }
    }
}

/// `w1c`: W1 compiled at C = 1000 and 10000 (f32), timed alternately
/// with the eager W1 of the same run; `w1vc`: W1v the same way. Rows
/// `w1_compiled` (`w1v_compiled`) carry ns per node of the replay, the
/// eager figure of the same run (`eager_median`) and the capture's
/// one-time cost (`capture_ms`: the first call, which captures and runs).
pub fn run_compiled(opts: &Options) {
    let sizes: &[usize] = if opts.quick { &[100] } else { &[1000, 10000] };
    for &c in sizes {
        let repeats = if c >= 10000 {
            opts.repeats.min(5)
        } else {
            opts.repeats
        };
        report_compiled("w1", c, 1, DType::F32, repeats);
    }
}

/// `w1vc`: see [`run_compiled`].
pub fn run_compiled_w1v(opts: &Options) {
    let c = if opts.quick { 50 } else { 1000 };
    report_compiled("w1v", c, 64, DType::F32, opts.repeats.min(7));
}

fn report_compiled(workload: &str, chains: usize, width: usize, dtype: DType, repeats: usize) {
    let mut step = compiled_chain(chains, width, dtype);
    let t = std::time::Instant::now();
    let first = step();
    let capture_ms = t.elapsed().as_secs_f64() * 1e3;
    let (mut eager_check, mut check) = ((0.0, 0.0), (0.0, 0.0));
    let (eager, compiled) = time_pair(
        repeats,
        || eager_check = run_once(chains, width, dtype),
        || check = step(),
    );
    assert_eq!(first, check, "a replay gives the capture's values");
    assert_eq!(
        (eager_check.0.to_bits(), eager_check.1.to_bits()),
        (check.0.to_bits(), check.1.to_bits()),
        "compiled and eager W1 differ"
    );
    let n = nodes(chains, width);
    let (eager, compiled) = (eager.per(n), compiled.per(n));
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", format!("{workload}_compiled").into()),
            ("dtype", dtype.to_string().into()),
            ("chains", chains.into()),
            ("nodes", n.into()),
            ("unit", "ns_per_node".into()),
            ("median", Value::Num(compiled.median * 1e9)),
            ("min", Value::Num(compiled.min * 1e9)),
            ("max", Value::Num(compiled.max * 1e9)),
            ("eager_median", Value::Num(eager.median * 1e9)),
            (
                "compiled_over_eager",
                Value::Num(compiled.median / eager.median),
            ),
            ("capture_ms", Value::Num(capture_ms)),
            ("loss", Value::Exact(check.0)),
            ("grad_sum", Value::Exact(check.1)),
        ],
        None,
    );
}

/// W1v at C = 1000, f32, width 64.
pub fn run_w1v(opts: &Options) {
    let c = if opts.quick { 50 } else { 1000 };
    report("w1v", c, 64, DType::F32, opts.repeats.min(7));
}
