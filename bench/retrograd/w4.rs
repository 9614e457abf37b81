//! W4, f32.
//!
//! - `w4`: one training iteration of nanoGPT's shakespeare_char CPU model
//!   (block 64, batch 12, 4 layers, 4 heads, width 128, vocabulary 65, no
//!   biases, tied embeddings): forward, cross-entropy, backward, gradient
//!   clipping to norm 1 and an AdamW step with nanoGPT's parameter groups,
//!   on a fixed batch of seeded random tokens; median ms per iteration.
//!
//! - `w4c`: the same iteration compiled (`retrograd::compile`: forward,
//!   loss and backward captured once, replayed; clipping and AdamW after),
//!   timed alternately with the eager iteration of the same run.
//!
//! W4 attention: `scaled_dot_product_attention` alone, forward and
//! backward (the gradients of the output's sum with respect to q, k and
//! v), causal, at B = 12, H = 4, head dim 32 and T = 64, 256, 1024.
//!
//! - `w4_attn`: median ms per forward + backward, one row per T (`"n": T`).
//! - `mem_w4_attn`: the peak RSS growth of one forward + backward at
//!   T = 1024 (and 2048, to show the growth is linear in T), in a fresh
//!   process; `score_matrix_mib` is what one `T × T` f32 score matrix per
//!   head would take.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use retrograd::nn::{Gpt, GptConfig, Module};
use retrograd::optim::{clip_grad_norm, decay_groups, Adam, AdamConfig, Optimizer};
use retrograd::{compile, CompileOptions, Compiled, DType, Graph, SdpaOptions, Tensor, Var};

use crate::memory::{delegated, peak_growth, reset_peak, rss_and_peak};
use crate::report::{alternate, emit, emit_times, time, time_pair, Value};
use crate::Options;

const BATCH: usize = 12;
const HEADS: usize = 4;
const HEAD_DIM: usize = 32;

/// Fixed-seed standard-normal q, k, v of `[12, 4, t, 32]`.
pub fn inputs(t: usize) -> [Tensor; 3] {
    let shape = [BATCH, HEADS, t, HEAD_DIM];
    [1, 2, 3].map(|seed| Tensor::randn(&shape, DType::F32, seed).expect("valid shape"))
}

/// One forward + backward of causal attention on `x` = [q, k, v].
pub fn pass(x: &[Tensor; 3]) {
    let g = Graph::new();
    let [q, k, v] = x.clone().map(|t| g.variable(t));
    let y = q.scaled_dot_product_attention(&k, &v, &SdpaOptions::new().is_causal(true));
    let grads = y.sum().backward().expect("backward");
    std::hint::black_box((grads.wrt(&q), grads.wrt(&k), grads.wrt(&v)));
}

/// The W4 iteration's model and batch size.
pub const STEP_BATCH: usize = 12;
/// nanoGPT's character vocabulary of tiny Shakespeare.
pub const VOCAB: usize = 65;

/// nanoGPT's model, its AdamW and a fixed batch: what one `w4` iteration runs.
pub struct GptStep {
    model: Gpt,
    optimizer: Adam,
    tokens: Tensor,
    targets: Tensor,
}

impl GptStep {
    pub fn new(batch: usize) -> Self {
        let config = GptConfig::shakespeare_char(VOCAB);
        let model = Gpt::with_rng(config, &mut ChaCha8Rng::seed_from_u64(0)).expect("valid config");
        let adamw = AdamConfig::adamw().lr(1e-3).betas(0.9, 0.99);
        let optimizer =
            Adam::with_groups(decay_groups(model.parameters(), 0.1), adamw).expect("valid groups");
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let t = config.block_size;
        let ids: Vec<i64> = (0..batch * (t + 1))
            .map(|_| rng.random_range(0..VOCAB as i64))
            .collect();
        let window = |offset: usize| -> Tensor {
            let rows: Vec<i64> = ids
                .chunks(t + 1)
                .flat_map(|row| row[offset..offset + t].to_vec())
                .collect();
            Tensor::from_vec(rows, &[batch, t]).expect("valid shape")
        };
        GptStep {
            model,
            optimizer,
            tokens: window(0),
            targets: window(1),
        }
    }

    /// One iteration; returns the loss.
    pub fn step(&mut self) -> f64 {
        let g = Graph::new();
        let loss = self
            .model
            .loss(&g.constant(self.tokens.clone()), &self.targets)
            .expect("loss");
        let mut grads = loss.backward().expect("backward");
        clip_grad_norm(&mut grads, 1.0, 2.0).expect("clip");
        self.optimizer.step(&grads).expect("step");
        loss.value().item()
    }
}

/// The W4 iteration compiled: the model's forward and loss captured once
/// (with its backward) and replayed; clipping and AdamW after it, as in
/// [`GptStep`].
pub struct CompiledGptStep {
    step: Box<dyn FnMut() -> f64>,
    /// The memory plan's totals from `explain`, once captured.
    plan: std::rc::Rc<std::cell::RefCell<String>>,
}

/// The model's forward and loss captured by `compile` (with its backward),
/// the batch it runs on, and the AdamW that [`GptStep`] would use.
struct CompiledGpt<F> {
    compiled: Compiled<F>,
    inputs: [Tensor; 2],
    optimizer: Adam,
}

fn compiled_gpt(
    batch: usize,
) -> CompiledGpt<impl for<'g> Fn(&'g Graph, &[Var<'g>]) -> retrograd::Result<Var<'g>>> {
    let GptStep {
        model,
        optimizer,
        tokens,
        targets,
    } = GptStep::new(batch);
    let in_graph = model.clone();
    let compiled = compile(
        move |_: &Graph, v: &[Var<'_>]| in_graph.loss(&v[0], v[1].value()),
        CompileOptions::new().params(model.parameters()),
    );
    CompiledGpt {
        compiled,
        inputs: [tokens, targets],
        optimizer,
    }
}

impl CompiledGptStep {
    pub fn new(batch: usize) -> Self {
        let CompiledGpt {
            mut compiled,
            inputs,
            mut optimizer,
        } = compiled_gpt(batch);
        let plan = std::rc::Rc::new(std::cell::RefCell::new(String::new()));
        let plan_of_step = plan.clone();
        let step = move || {
            let out = compiled.run(&inputs).expect("a valid compiled step");
            clip_grad_norm(out.grads_mut(), 1.0, 2.0).expect("clip");
            optimizer.step(out.grads()).expect("step");
            let loss = out.loss();
            if plan_of_step.borrow().is_empty() {
                let explained = compiled.capture().map(|c| c.explain()).unwrap_or_default();
                *plan_of_step.borrow_mut() = explained
                    .lines()
                    .filter(|l| l.contains(" in all;") || l.contains("peak of live values"))
                    .map(str::trim)
                    .collect::<Vec<_>>()
                    .join("; ");
            }
            loss
        };
        CompiledGptStep {
            step: Box::new(step),
            plan,
        }
    }

    /// The memory plan's buffer total and planned peak (from `explain`).
    pub fn plan_summary(&self) -> String {
        self.plan.borrow().clone()
    }

    /// One iteration; returns the loss.
    pub fn step(&mut self) -> f64 {
        (self.step)()
    }
}

/// `w4_capture`: the first run of a fresh compiled W4 iteration (capture,
/// lowering, memory plan and the first replay), alternated with one eager
/// iteration of the same run (row `w4_capture`: both medians and their
/// ratio).
pub fn run_capture(opts: &Options) {
    let repeats = if opts.quick {
        1
    } else {
        opts.repeats.clamp(3, 7)
    };
    let mut eager = GptStep::new(STEP_BATCH);
    let (eager_ms, capture_ms) = time_pair(
        repeats,
        || {
            eager.step();
        },
        || {
            CompiledGptStep::new(STEP_BATCH).step();
        },
    );
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", "w4_capture".into()),
            ("batch", STEP_BATCH.into()),
            ("unit", "ms".into()),
            ("median", Value::Num(capture_ms.median * 1e3)),
            ("min", Value::Num(capture_ms.min * 1e3)),
            ("max", Value::Num(capture_ms.max * 1e3)),
            ("eager_median", Value::Num(eager_ms.median * 1e3)),
            (
                "capture_over_eager",
                Value::Num(capture_ms.median / eager_ms.median),
            ),
        ],
        None,
    );
}

/// `w4c`: the W4 iteration eager and compiled, alternately (rows `w4` and
/// `w4_compiled`).
pub fn run_step_compiled(opts: &Options) {
    let (blocks, warmup) = if opts.quick { (1, 1) } else { (3, 3) };
    let mut eager = GptStep::new(STEP_BATCH);
    let mut compiled = CompiledGptStep::new(STEP_BATCH);
    let run = alternate(blocks, warmup, || eager.step(), || compiled.step());
    let same = run.eager_loss.to_bits() == run.compiled_loss.to_bits();
    let dtype = || ("dtype", Value::from("f32"));
    emit_times(
        "w4",
        STEP_BATCH,
        "ms_per_iter",
        run.eager_ms,
        run.eager_loss,
        vec![dtype()],
    );
    emit_times(
        "w4_compiled",
        STEP_BATCH,
        "ms_per_iter",
        run.compiled_ms,
        run.compiled_loss,
        vec![
            dtype(),
            ("same_bits_as_eager", if same { "yes" } else { "no" }.into()),
        ],
    );
}

/// `w4_profile`: where the compiled W4 step's replay spends its time
/// (`Compiled::profile` over 30 runs after a warm-up; clipping and AdamW
/// run outside the captured step and are not in it): one JSON line per
/// kind of step, and the profile's table on stderr.
pub fn run_profile(opts: &Options) {
    let CompiledGpt {
        mut compiled,
        inputs,
        ..
    } = compiled_gpt(STEP_BATCH);
    let runs = if opts.quick {
        3
    } else {
        opts.repeats.max(30) as u32
    };
    let profile = compiled
        .profile(&inputs, runs)
        .expect("a valid compiled step");
    eprint!("{}", profile.report(25));
    for kind in profile.by_kind() {
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "w4_profile".into()),
                ("batch", STEP_BATCH.into()),
                ("kind", kind.kind.as_str().into()),
                ("steps", kind.parts.into()),
                ("ms_per_run", (kind.per_run.as_secs_f64() * 1e3).into()),
            ],
            None,
        );
    }
}

pub fn run_step(opts: &Options) {
    let mut step = GptStep::new(STEP_BATCH);
    let mut loss = 0.0;
    let stats = time(if opts.quick { 3 } else { opts.repeats.max(20) }, || {
        loss = step.step()
    });
    emit(
        vec![
            ("framework", "retrograd".into()),
            ("workload", "w4".into()),
            ("dtype", "f32".into()),
            ("batch", STEP_BATCH.into()),
            ("unit", "ms_per_iter".into()),
            ("loss", loss.into()),
        ],
        Some(stats),
    );
}

pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick { &[64] } else { &[64, 256, 1024] };
    for &t in sizes {
        let x = inputs(t);
        let repeats = if t >= 1024 {
            opts.repeats.clamp(3, 7)
        } else {
            opts.repeats.max(3)
        };
        let stats = time(repeats, || pass(&x));
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "w4_attn".into()),
                ("dtype", "f32".into()),
                ("n", t.into()),
                ("unit", "ms_fwd_bwd".into()),
            ],
            Some(stats),
        );
    }
}

pub fn run_memory(opts: &Options) {
    if delegated("mem_w4_attn", opts) {
        return;
    }
    let sizes: &[usize] = if opts.quick { &[256] } else { &[1024, 2048] };
    for &t in sizes {
        let x = inputs(t);
        match peak_growth(|| pass(&x)) {
            Some(bytes) => emit(
                vec![
                    ("framework", "retrograd".into()),
                    ("workload", "mem_w4_attn".into()),
                    ("dtype", "f32".into()),
                    ("n", t.into()),
                    ("unit", "MiB_peak_rss_growth".into()),
                    ("median", Value::Num(bytes as f64 / (1 << 20) as f64)),
                    (
                        "score_matrix_mib",
                        Value::Num((BATCH * HEADS * t * t * 4) as f64 / (1 << 20) as f64),
                    ),
                ],
                None,
            ),
            None => eprintln!("mem_w4_attn: /proc/self/status or clear_refs is not available here"),
        }
    }
}

/// `mem_w4`: the W4 iteration's memory, eager and compiled, each in a
/// fresh process, counted from the RSS before the model is made: the peak
/// over making the model and the first two iterations (for the compiled
/// step, the capture and the first replay), and the peak over the
/// iterations after them (the steady state), with the compiled step's
/// memory plan (`explain`'s totals).
pub fn run_memory_step(opts: &Options) {
    let steps = if opts.quick { 2 } else { 5 };
    for variant in ["eager", "compiled"] {
        if delegated(&format!("mem_w4:{variant}"), opts) {
            continue;
        }
        let Some((base, _)) = reset_peak().and_then(|()| rss_and_peak()) else {
            eprintln!("mem_w4: /proc/self/status or clear_refs is not available here");
            continue;
        };
        let mut plan = None;
        let mut step: Box<dyn FnMut() -> f64> = if variant == "eager" {
            let mut s = GptStep::new(STEP_BATCH);
            Box::new(move || s.step())
        } else {
            let s = std::rc::Rc::new(std::cell::RefCell::new(CompiledGptStep::new(STEP_BATCH)));
            plan = Some(s.clone());
            Box::new(move || s.borrow_mut().step())
        };
        step();
        step();
        let plan = plan.map_or_else(String::new, |s| s.borrow().plan_summary());
        let first = rss_and_peak().map_or(0, |(_, peak)| peak.saturating_sub(base));
        reset_peak();
        for _ in 0..steps {
            step();
        }
        let steady = rss_and_peak().map_or(0, |(_, peak)| peak.saturating_sub(base));
        let mib = |bytes: u64| Value::Num(bytes as f64 / (1 << 20) as f64);
        emit(
            vec![
                ("framework", "retrograd".into()),
                ("workload", "mem_w4".into()),
                ("variant", variant.into()),
                ("dtype", "f32".into()),
                ("batch", STEP_BATCH.into()),
                ("steps", steps.into()),
                ("unit", "MiB_peak_rss_growth".into()),
                ("median", mib(steady)),
                ("first_two_iterations_mib", mib(first)),
                ("memory_plan", plan.into()),
            ],
            None,
        );
    }
}
