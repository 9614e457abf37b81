//! `jit`: the question of issue 35, "a chunked interpreter or a JIT?",
//! measured. The chain is W4's MLP activation with a bias, forward and
//! backward, at W4's size (batch 12: 768 rows of 512):
//! `loss = sum(gelu(x + b) * w)`, gradients for `x` and `b`.
//!
//! - `interpreter`: the chain compiled (`retrograd::compile`) and replayed:
//!   one fused pass `x + b -> gelu -> * w` (writing `h = x + b` for the
//!   backward and the product for the sum), the sum, one fused pass
//!   `g * w -> gelu_backward(., h)` for `dx`, and the bias's reduction.
//! - `hand`: the same passes written as plain loops over the rules'
//!   own element functions, outputs allocated once: the code a JIT would
//!   generate for the same fused groups at best (each value in a vector
//!   register, no per-chunk call), with the sum and the bias reduction by
//!   the same library kernels the replay runs.
//!
//! Both give the same bits (checked). `bench jit` times them alternately;
//! under callgrind, `--toggle-collect=*jit_interpreter_iteration*` and
//! `*jit_hand_iteration*` count one iteration each (`--quick`: 128 rows,
//! W4's gate batch of 2).

use retrograd::kernels::{self, simd::wide};
use retrograd::ops::gelu::Gelu;
use retrograd::ops::rule::{Lane, UnaryRule};
use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};

use crate::report::{emit, time_pair, Value};
use crate::Options;

const WIDTH: usize = 512;

/// The inputs `x`, `b`, `w` at `rows` rows.
fn inputs(rows: usize) -> [Tensor; 3] {
    let x = Tensor::randn(&[rows, WIDTH], DType::F32, 1).expect("valid shape");
    let b = Tensor::randn(&[WIDTH], DType::F32, 2).expect("valid shape");
    let w = Tensor::randn(&[rows, WIDTH], DType::F32, 3).expect("valid shape");
    [x, b, w]
}

/// The hand-written passes' buffers, allocated once.
struct Hand {
    h: Vec<f32>,
    p: Vec<f32>,
    dx: Tensor,
}

#[inline(never)]
fn jit_hand_iteration(hand: &mut Hand, x: &[f32], b: &[f32], w: &[f32]) -> (f64, Tensor) {
    let rows = x.len() / WIDTH;
    // Pass 1: h = x + b, p = gelu(h) * w.
    wide(
        #[inline(always)]
        || {
            for r in 0..rows {
                let at = r * WIDTH;
                let (x, w) = (&x[at..at + WIDTH], &w[at..at + WIDTH]);
                let (h, p) = (&mut hand.h[at..at + WIDTH], &mut hand.p[at..at + WIDTH]);
                for j in 0..WIDTH {
                    let v = x[j] + b[j];
                    h[j] = v;
                    p[j] = Gelu.value(v) * w[j];
                }
            }
        },
    );
    // The sum as the `sum` op computes it.
    let loss = kernels::reduce::sum_slice(&hand.p);
    // Pass 2: dx = gelu'(h) (seed * w), the seed 1 as the sum's backward
    // gives it.
    let seed = std::hint::black_box(1.0f32);
    let dx = hand.dx.make_mut::<f32>().expect("f32, not shared");
    wide(
        #[inline(always)]
        || {
            for ((d, &h), &w) in dx.iter_mut().zip(&hand.h).zip(w) {
                *d = Gelu.grad(&Lane(seed * w), &Lane(h)).0;
            }
        },
    );
    let db =
        kernels::reduce::sum_to_shape("sum_to_size", &hand.dx, &[WIDTH]).expect("bias gradient");
    (loss as f64, db)
}

#[inline(never)]
fn jit_interpreter_iteration(step: &mut Step, x: &[Tensor]) -> f64 {
    step.run(x).expect("a valid compiled chain").loss()
}

type Step = retrograd::Compiled<for<'g> fn(&'g Graph, &[Var<'g>]) -> retrograd::Result<Var<'g>>>;

fn chain<'g>(_: &'g Graph, v: &[Var<'g>]) -> retrograd::Result<Var<'g>> {
    Ok(((&v[0] + &v[1]).gelu() * &v[2]).sum())
}

fn compiled() -> Step {
    compile(
        chain as for<'g> fn(&'g Graph, &[Var<'g>]) -> retrograd::Result<Var<'g>>,
        CompileOptions::new()
            .params(Vec::<retrograd::nn::Parameter>::new())
            .grad_inputs(&[0, 1]),
    )
}

pub fn run(opts: &Options) {
    let rows = if opts.quick { 128 } else { 768 };
    let x = inputs(rows);
    let mut step = compiled();
    let mut hand = Hand {
        h: vec![0.0; rows * WIDTH],
        p: vec![0.0; rows * WIDTH],
        dx: Tensor::zeros(&[rows, WIDTH], DType::F32).expect("valid shape"),
    };
    let slices = [&x[0], &x[1], &x[2]].map(|t| t.as_slice::<f32>().expect("f32").to_vec());
    let (interp, written) = time_pair(
        opts.repeats.max(20),
        || {
            std::hint::black_box(jit_interpreter_iteration(&mut step, &x));
        },
        || {
            std::hint::black_box(jit_hand_iteration(
                &mut hand, &slices[0], &slices[1], &slices[2],
            ));
        },
    );
    let (loss, db) = jit_hand_iteration(&mut hand, &slices[0], &slices[1], &slices[2]);
    let out = step.run(&x).expect("a valid compiled chain");
    let bits = |t: &Tensor| t.to_vec::<f32>().expect("f32");
    let same = out.loss().to_bits() == loss.to_bits()
        && bits(out.input_grad(0).expect("asked for")) == bits(&hand.dx)
        && bits(out.input_grad(1).expect("asked for")) == bits(&db);
    for (name, s) in [("interpreter", interp), ("hand", written)] {
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", format!("jit_{name}").into()),
                ("rows", rows.into()),
                ("unit", "ms_fwd_bwd".into()),
                ("same_bits", if same { "yes" } else { "no" }.into()),
                (
                    "interpreter_over_hand",
                    Value::Num(interp.median / written.median),
                ),
            ],
            Some(s),
        );
    }
}
