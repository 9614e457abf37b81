//! No growth over a long training run: 10,000 steps of a small MLP with
//! Adam on synthetic data, a new `Graph` each step as users write it; then
//! 10,000 steps of the same training compiled (`retrograd::compile`: one
//! capture, then replays into the planned buffers).
//!
//! Two measurements, in one test so nothing else runs in this binary
//! meanwhile:
//! - live heap bytes, counted by a global allocator for the test's own
//!   thread (so the harness's other threads cannot disturb the count): after
//!   warm-up, every step ends at exactly the level the previous one ended at
//!   (graphs, gradients and temporaries are freed; the optimizer's state does
//!   not grow);
//! - the resident set (`VmRSS` from `/proc/self/status`, Linux only): from
//!   step 1,000 to step 10,000 it grows by less than `RSS_GROWTH_BOUND`.
//!
//! And the compiled step's promise (issue 35): after its first runs, a
//! replay makes no allocation of its own: every tensor, view header and
//! scratch buffer comes from the memory plan made at capture (or the
//! kernels' kept scratch). The one exception is the `gemm` crate, which
//! allocates its packing scratch inside each product and frees it before
//! returning (it takes no workspace from its caller): the test takes a
//! backtrace of every allocation of one replay and fails on any that is
//! not inside `gemm`, and checks that every later replay makes exactly as
//! many. `NO_GROWTH_TRACE=1 cargo test --test no_growth -- --nocapture`
//! prints those backtraces.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use retrograd::nn::{Forward, Mlp, Module};
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};

/// The system allocator, keeping count, per thread, of the bytes allocated
/// and not yet freed by that thread.
struct Counting;

thread_local! {
    // `const` and without a destructor: safe to touch from inside the allocator.
    static LIVE_BYTES: Cell<isize> = const { Cell::new(0) };
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
    /// Keep a backtrace of every allocation, and whether one is being
    /// taken (taking it allocates too).
    static TRACING: Cell<bool> = const { Cell::new(false) };
    static IN_TRACE: Cell<bool> = const { Cell::new(false) };
    static TRACED: Cell<usize> = const { Cell::new(0) };
    static OUTSIDE_GEMM: Cell<usize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // What the tracing itself allocates is not the program's.
    if IN_TRACE.try_with(Cell::get).unwrap_or(true) {
        return;
    }
    // `try_with`: a thread being torn down may still free memory.
    let _ = LIVE_BYTES.try_with(|live| live.set(live.get() + delta));
    if delta > 0 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        if TRACING.try_with(Cell::get).unwrap_or(false) {
            IN_TRACE.with(|t| t.set(true));
            let trace = format!(
                "allocation of {delta} bytes at\n{}",
                std::backtrace::Backtrace::force_capture()
            );
            let in_gemm = ["gemm_common", "gemm_f32", "gemm_f64"]
                .iter()
                .any(|g| trace.contains(g));
            if !in_gemm || std::env::var_os("NO_GROWTH_TRACE").is_some() {
                eprintln!("{trace}");
            }
            TRACED.with(|n| n.set(n.get() + 1));
            if !in_gemm {
                OUTSIDE_GEMM.with(|n| n.set(n.get() + 1));
            }
            drop(trace);
            IN_TRACE.with(|t| t.set(false));
        }
    }
}

fn allocations() -> usize {
    ALLOCATIONS.with(Cell::get)
}

fn live_bytes() -> isize {
    LIVE_BYTES.with(Cell::get)
}

// SAFETY: every call is forwarded to `System` unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this
        // allocator with `layout` (the caller's contract).
        unsafe { System.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged; `ptr` came from `System` through this
        // allocator with `layout` (the caller's contract).
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const STEPS: usize = 10_000;
/// Steps before the heap level is expected to be steady (the optimizer
/// creates its state on its first step).
const HEAP_WARM_UP: usize = 10;
/// The step from which the resident set is compared.
const RSS_WARM_UP: usize = 1_000;
/// Allowed resident-set growth from step 1,000 to step 10,000.
const RSS_GROWTH_BOUND: usize = 2 << 20;

/// The resident set size in bytes, from `/proc/self/status`.
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[test]
fn ten_thousand_training_steps_neither_leak_nor_grow() {
    // Synthetic data: 16 samples of 4 features, 3 classes.
    let x = Tensor::randn(&[16, 4], DType::F32, 7).unwrap();
    let labels: Vec<usize> = (0..16).map(|i| i % 3).collect();
    let model = Mlp::builder(&[4, 8, 3]).seed(1).build().unwrap();
    let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(0.01)).unwrap();
    let eager = run_steps("eager", || {
        let graph = Graph::new();
        let input = graph.constant(x.clone());
        let loss = model
            .forward(&input)
            .unwrap()
            .try_cross_entropy(&labels)
            .unwrap();
        let grads = loss.backward().unwrap();
        opt.step(&grads).unwrap();
        loss.value().item()
    });

    let model = Mlp::builder(&[4, 8, 3]).seed(1).build().unwrap();
    let mut opt = Adam::new(model.parameters(), AdamConfig::default().lr(0.01)).unwrap();
    let ce = CrossEntropyOptions::default();
    let mut step = compile(
        |_: &Graph, v: &[Var<'_>]| model.forward(&v[0])?.try_cross_entropy_input(&v[1], &ce),
        CompileOptions::new().params(model.parameters()),
    );
    let targets: Vec<i64> = labels.iter().map(|&l| l as i64).collect();
    let inputs = [x.clone(), Tensor::from_vec(targets, &[16]).unwrap()];
    let mut steps = 0;
    let mut per_replay = Vec::with_capacity(STEPS);
    let compiled = run_steps("compiled", || {
        steps += 1;
        let before = allocations();
        let out = step.run(&inputs).unwrap();
        if steps > HEAP_WARM_UP {
            per_replay.push(allocations() - before);
        }
        opt.step(out.grads()).unwrap();
        out.loss()
    });
    assert_eq!(step.capture_count(), 1);
    // One more replay, each allocation's backtrace taken (after the
    // counted steps: symbolizing keeps caches on the heap).
    TRACING.with(|t| t.set(true));
    let traced_replay = step.run(&inputs).map(|_| ());
    TRACING.with(|t| t.set(false));
    traced_replay.unwrap();
    let (traced, outside) = (TRACED.with(Cell::get), OUTSIDE_GEMM.with(Cell::get));
    eprintln!(
        "heap allocations per step after warm-up: eager {eager:.1}, compiled {compiled:.1} \
         (of which the replay's: {traced}, all inside gemm's products)"
    );
    assert_eq!(
        outside, 0,
        "a compiled replay allocated outside the GEMM crate (backtraces above)"
    );
    assert!(
        per_replay.iter().all(|&n| n == traced),
        "replays after warm-up made {}..={} allocations each, not always the {traced} of the traced one",
        per_replay.iter().min().unwrap(),
        per_replay.iter().max().unwrap(),
    );
}

/// Runs `STEPS` training steps, checking the heap and the resident set;
/// returns the heap allocations per step after warm-up.
fn run_steps(what: &str, mut step_once: impl FnMut() -> f64) -> f64 {
    let mut heap_after_warm_up = 0;
    let mut allocations_after_warm_up = 0;
    let mut rss_after_warm_up = None;
    let mut first_loss = f64::NAN;
    let mut last_loss = f64::NAN;
    for step in 1..=STEPS {
        last_loss = step_once();
        if step == 1 {
            first_loss = last_loss;
        }
        let live = live_bytes();
        if step == HEAP_WARM_UP {
            heap_after_warm_up = live;
            allocations_after_warm_up = allocations();
        } else if step > HEAP_WARM_UP {
            assert_eq!(
                live, heap_after_warm_up,
                "{what} step {step}: {live} live heap bytes after the step, {heap_after_warm_up} after step {HEAP_WARM_UP}"
            );
        }
        if step == RSS_WARM_UP {
            rss_after_warm_up = resident_bytes();
        }
    }
    // The run trained: the loss went down.
    assert!(
        last_loss < first_loss,
        "{what}: loss {first_loss} -> {last_loss}"
    );
    let per_step =
        (allocations() - allocations_after_warm_up) as f64 / (STEPS - HEAP_WARM_UP) as f64;

    let (Some(before), Some(after)) = (rss_after_warm_up, resident_bytes()) else {
        eprintln!("no /proc/self/status here: the resident-set check is skipped");
        return per_step;
    };
    let growth = after.saturating_sub(before);
    eprintln!(
        "{what}: VmRSS: {before} bytes at step {RSS_WARM_UP}, {after} bytes at step {STEPS} \
         (growth {growth} bytes, bound {RSS_GROWTH_BOUND}); live heap {heap_after_warm_up} bytes"
    );
    assert!(
        growth < RSS_GROWTH_BOUND,
        "{what}: resident set grew by {growth} bytes from step {RSS_WARM_UP} to {STEPS} ({before} -> {after})"
    );
    per_step
}
