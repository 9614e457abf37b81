//! `long_sum`: the capture of a compiled function whose gradient is a long
//! sum (one input added `n` times), against the eager forward + backward
//! of the same function in the same run.
//!
//! `y = x; repeat n times: y = y + x; loss = sum(y)` with `x` of shape
//! `[4]`. Its forward is a chain of `n` adds and its backward sums `n + 1`
//! gradient contributions for `x`: the shape that once made capture
//! quadratic and recursive. Rows carry the capture's time (the first run,
//! which captures, lowers and runs once), the eager time (median of the
//! repeats) and their ratio.

use std::time::Instant;

use retrograd::{compile, CompileOptions, Graph, Tensor, Var};

use crate::report::{emit, time, Value};
use crate::Options;

/// The sum of `x` added to itself `n` times, recorded on `x`'s graph.
pub fn long_sum<'g>(x: &Var<'g>, n: usize) -> retrograd::Result<Var<'g>> {
    let mut y = x.clone();
    for _ in 0..n {
        y = y.try_add(x)?;
    }
    y.try_sum()
}

/// A compiled step of [`long_sum`] with the gradient of its input.
pub fn compiled(
    n: usize,
) -> retrograd::Compiled<impl for<'g> Fn(&'g Graph, &[Var<'g>]) -> retrograd::Result<Var<'g>>> {
    compile(
        move |_: &Graph, x: &[Var<'_>]| long_sum(&x[0], n),
        CompileOptions::new().grad_inputs(&[0]),
    )
}

/// One eager forward + backward: the loss and the input's gradient.
pub fn eager(n: usize, x: &Tensor) -> (f64, Vec<f32>) {
    let graph = Graph::new();
    let xv = graph.variable(x.clone());
    let loss = long_sum(&xv, n).expect("valid shapes");
    let grads = loss.backward().expect("scalar root");
    (
        loss.value().item(),
        grads.wrt(&xv).to_vec::<f32>().expect("f32 gradient"),
    )
}

pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick {
        &[1_000, 4_000]
    } else {
        &[1_000, 16_000, 100_000, 1_000_000]
    };
    let x = Tensor::from_vec(vec![1.0f32, 0.5, -2.0, 0.25], &[4]).expect("valid shape");
    for &n in sizes {
        let mut check = (0.0, Vec::new());
        let eager_time = time(opts.repeats.min(5), || check = eager(n, &x));
        let mut step = compiled(n);
        let t = Instant::now();
        let out = step
            .run(std::slice::from_ref(&x))
            .expect("the long sum compiles");
        let capture = t.elapsed().as_secs_f64();
        let grad = out
            .input_grad(0)
            .expect("the input's gradient")
            .to_vec::<f32>()
            .expect("f32 gradient");
        assert_eq!(
            (out.loss().to_bits(), grad),
            (check.0.to_bits(), check.1),
            "compiled and eager long sums differ"
        );
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "long_sum_capture".into()),
                ("terms", n.into()),
                ("unit", "s".into()),
                ("capture", Value::Num(capture)),
                ("eager_median", Value::Num(eager_time.median)),
                ("eager_min", Value::Num(eager_time.min)),
                ("eager_max", Value::Num(eager_time.max)),
                (
                    "capture_over_eager",
                    Value::Num(capture / eager_time.median),
                ),
            ],
            None,
        );
    }
}
