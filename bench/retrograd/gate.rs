//! The instruction-count gate's workloads (BENCHMARKS.md, "The
//! instruction-count gate").
//!
//! ```text
//! bench gate <workload>     # one workload: a warm-up iteration, then one counted
//! bench gate --list         # the workloads, one name a line
//! ```
//!
//! Each workload is the benchmark's own code (`w1.rs` to `w4.rs`) at a small
//! size. Its setup (parameters, inputs) runs first, then one iteration to
//! warm up (the per-thread tensor pool and graph arena, lazily detected CPU
//! features), then one more inside [`retrograd_gate_measured`]: the only
//! function whose instructions `bench/callgrind/gate` counts, through
//! callgrind's `--toggle-collect`.
//!
//! Everything runs on the calling thread: the rayon pool is built with one
//! thread, the caller itself (`use_current_thread`), so parallel loops run
//! inline and no worker thread spins or sleeps while the count runs (the
//! count would otherwise depend on how long each waited, and work done on a
//! worker thread would be outside the toggled function and not counted).
//! Inputs come from fixed seeds, so a run's instructions are the same every
//! time.

use std::hint::black_box;
use std::process::ExitCode;

use retrograd::nn::Module;
use retrograd::optim::{Adam, AdamConfig};
use retrograd::DType;

use crate::{llm_decode, long_sum, w1, w2, w3, w4};

/// Builds a workload's inputs and returns its iteration, which then runs
/// twice: once to warm up and once counted. The iteration's value (a loss,
/// a checksum) is printed after the count, as a sanity check.
type Setup = fn() -> Box<dyn FnMut() -> f64>;

/// The gate's workloads: name (the key in `bench/callgrind/baselines.json`),
/// setup, and what it runs.
pub const GATE: &[(&str, Setup, &str)] = &[
    (
        "w1",
        w1_chain,
        "W1 scalar chain, f32, C = 100 (30,099 nodes)",
    ),
    (
        "w1c",
        w1c_chain,
        "W1 compiled (captured in the warm-up run, replayed), f32, C = 100",
    ),
    (
        "w1_capture",
        w1_capture,
        "the capture of compiled W1 at C = 1,000 (300,999 nodes): capture, lowering and the first run",
    ),
    (
        "sum_capture_8k",
        sum_capture_8k,
        "the capture of a compiled long sum of 8,000 terms (bench long_sum)",
    ),
    (
        "sum_capture_16k",
        sum_capture_16k,
        "the same long sum at 16,000 terms: at most 2.2x sum_capture_8k's count (linear capture)",
    ),
    ("w1v", w1v_chain, "W1v, f32, width 64, C = 20 (6,020 nodes)"),
    ("w2", w2_step, "one W2 MLP training step (SGD), batch 16"),
    (
        "w2c",
        w2c_step,
        "the W2 step compiled (captured in the warm-up run, replayed), batch 16",
    ),
    (
        "w2_128",
        w2_128_step,
        "one W2 MLP training step (SGD), batch 128",
    ),
    (
        "w2c_128",
        w2c_128_step,
        "the W2 step compiled (captured in the warm-up run, replayed), batch 128",
    ),
    (
        "w3",
        w3_step,
        "one W3 CNN training step (model C1, Adam), batch 4",
    ),
    (
        "w4_attn",
        w4_attn,
        "W4 attention forward + backward, causal, B = 12, H = 4, D = 32, T = 64",
    ),
    (
        "w4_step",
        w4_step,
        "one W4 GPT training iteration (nanoGPT's CPU model, AdamW), batch 2",
    ),
    (
        "w4c_step",
        w4c_step,
        "the W4 iteration compiled (captured in the warm-up run, replayed), batch 2",
    ),
    (
        "llm_decode",
        llm_decode,
        "one decode step of a 4-layer Llama of SmolLM2's shapes, Q4_1 (bench llm_decode.rs)",
    ),
];

/// The counted region: callgrind's `--toggle-collect` counts the
/// instructions run while this function is on the stack. Not mangled and
/// never inlined, so the gate finds it by this name.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn retrograd_gate_measured(iteration: &mut dyn FnMut() -> f64) -> f64 {
    black_box(iteration())
}

fn w1_chain() -> Box<dyn FnMut() -> f64> {
    Box::new(|| {
        let (loss, grad_sum) = w1::run_once(100, 1, DType::F32);
        loss + grad_sum
    })
}

fn w1c_chain() -> Box<dyn FnMut() -> f64> {
    let mut step = w1::compiled_chain(100, 1, DType::F32);
    Box::new(move || {
        let (loss, grad_sum) = step();
        loss + grad_sum
    })
}

fn w1_capture() -> Box<dyn FnMut() -> f64> {
    Box::new(|| {
        let (loss, grad_sum) = w1::compiled_chain(1000, 1, DType::F32)();
        loss + grad_sum
    })
}

/// A fresh compiled long sum of `terms` terms at every iteration: each
/// iteration captures.
fn sum_capture(terms: usize) -> Box<dyn FnMut() -> f64> {
    let x = retrograd::Tensor::from_vec(vec![1.0f32, 0.5, -2.0, 0.25], &[4]).expect("valid shape");
    Box::new(move || {
        let mut step = long_sum::compiled(terms);
        let out = step
            .run(std::slice::from_ref(&x))
            .expect("the long sum compiles");
        out.loss()
    })
}

fn sum_capture_8k() -> Box<dyn FnMut() -> f64> {
    sum_capture(8_000)
}

fn sum_capture_16k() -> Box<dyn FnMut() -> f64> {
    sum_capture(16_000)
}

fn w1v_chain() -> Box<dyn FnMut() -> f64> {
    Box::new(|| {
        let (loss, grad_sum) = w1::run_once(20, 64, DType::F32);
        loss + grad_sum
    })
}

fn w2_step() -> Box<dyn FnMut() -> f64> {
    let params = w2::mlp_params(0);
    let (x, y) = w2::mlp_data(16, 1);
    Box::new(move || w2::step(&params, &x, &y).expect("a valid W2 step"))
}

fn w2c_step() -> Box<dyn FnMut() -> f64> {
    let (x, y) = w2::mlp_data(16, 1);
    Box::new(w2::compiled_stepper(w2::mlp_params(0), x, &y))
}

fn w2_128_step() -> Box<dyn FnMut() -> f64> {
    let params = w2::mlp_params(0);
    let (x, y) = w2::mlp_data(128, 1);
    Box::new(move || w2::step(&params, &x, &y).expect("a valid W2 step"))
}

fn w2c_128_step() -> Box<dyn FnMut() -> f64> {
    let (x, y) = w2::mlp_data(128, 1);
    Box::new(w2::compiled_stepper(w2::mlp_params(0), x, &y))
}

fn w3_step() -> Box<dyn FnMut() -> f64> {
    let model = w3::c1(0).expect("model C1");
    let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(1e-3)).expect("Adam");
    let (x, y) = w3::data(4, 1);
    Box::new(move || w3::step(&model, &mut opt, &x, &y).expect("a valid W3 step"))
}

fn w4_step() -> Box<dyn FnMut() -> f64> {
    let mut step = w4::GptStep::new(2);
    Box::new(move || step.step())
}

fn w4c_step() -> Box<dyn FnMut() -> f64> {
    let mut step = w4::CompiledGptStep::new(2);
    Box::new(move || step.step())
}

fn w4_attn() -> Box<dyn FnMut() -> f64> {
    let x = w4::inputs(64);
    Box::new(move || {
        w4::pass(&x);
        0.0
    })
}

fn llm_decode() -> Box<dyn FnMut() -> f64> {
    let mut step = llm_decode::DecodeStep::new();
    Box::new(move || step.step())
}

/// `bench gate ...`: see the module docs.
pub fn main(args: &[String]) -> ExitCode {
    let setup = match args {
        [flag] if flag == "--list" => {
            GATE.iter().for_each(|(name, _, _)| println!("{name}"));
            return ExitCode::SUCCESS;
        }
        [name] => match GATE.iter().find(|(n, _, _)| n == name) {
            Some((_, setup, _)) => setup,
            None => {
                eprintln!("unknown gate workload `{name}`\n\n{}", usage());
                return ExitCode::FAILURE;
            }
        },
        _ => {
            eprint!("{}", usage());
            return ExitCode::FAILURE;
        }
    };
    // One thread, this one: parallel loops then run inline on it.
    if let Err(e) = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build_global()
    {
        eprintln!("bench gate: cannot make the single-thread rayon pool: {e}");
        return ExitCode::FAILURE;
    }
    assert_eq!(rayon::current_thread_index(), Some(0));
    assert_eq!(rayon::current_num_threads(), 1);
    let mut iteration = setup();
    iteration();
    let value = retrograd_gate_measured(&mut *iteration);
    println!("{}: {value}", args[0]);
    ExitCode::SUCCESS
}

/// The gate's part of `bench --help`.
pub fn usage() -> String {
    let mut s = String::from(
        "usage: bench gate <workload> | bench gate --list\n\
         (run under callgrind by bench/callgrind/gate)\n\ngate workloads:\n",
    );
    for (name, _, what) in GATE {
        s.push_str(&format!("  {name:<12} {what}\n"));
    }
    s
}
