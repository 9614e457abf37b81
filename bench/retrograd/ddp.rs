//! DDP: the W2 MLP step (784-512-512-10, f32, softmax cross-entropy, SGD lr
//! 0.01) data-parallel over the ranks of `mpirun` (feature `mpi`), each rank
//! one thread (`RAYON_NUM_THREADS=1`, set by bench/compare.sh). Rows:
//! global batch 1024 split over the ranks, and a per-rank batch of 512
//! (global 512 x ranks) for the scaling at a fixed per-rank batch. Each row
//! also gives the bytes all-reduced per step and the ring all-reduce time
//! 2(N-1)/N x bytes / bandwidth at 10 and 100 Gbit/s for N = 2, 8 and 64.
//! Each row also has the ranks' mean CPU time per step: on a machine with
//! other load the wall time of 2 ranks says little, their CPU time does.
//! Then the W4 GPT training iteration (nanoGPT's CPU model, AdamW groups,
//! clipping): global batch 24 split over the ranks, and 12 sequences per
//! rank for the scaling at a fixed per-rank batch.
//!
//! With several ranks, a last row per model measures that scaling within
//! the one job (`ddp_w2_scaling_interleaved`, `ddp_w4_...`): rank 0 alone,
//! then every rank, in alternating rounds, so both sides see the same
//! machine (separate `mpirun -n 1` and `-n 2` jobs a minute apart see a
//! shared machine's load change in between). `DDP_ONLY=w2` (or `w4`) runs
//! one model's rows.
//!
//! Compiled (`retrograd::compile`, `DataParallel::run_compiled`: each
//! bucket's all-reduce started while the replay's backward runs): rows
//! `ddp_w2c_rN` and `ddp_w4c_rN` at the global batches, and
//! `ddp_{w2,w4}_compiled_interleaved`: the eager and the compiled step of
//! one model alternated in rounds within the job, the median over rounds
//! of compiled / eager (each the slowest rank's median ms of the round).

use mpi::traits::CommunicatorCollectives as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::distributed::{run, Communicator, DataParallel, MpiCommunicator};

use retrograd::nn::{join_name, Forward, Gpt, GptConfig, Module, Parameter};
use retrograd::optim::{clip_grad_norm, decay_groups, Adam, AdamConfig, Optimizer};
use retrograd::{compile, CompileOptions, Compiled, Graph, Result, Tensor, Var};

use crate::report::{emit, Value};
use crate::w2::{mlp_data, mlp_params};
use crate::w4::VOCAB;
use crate::Options;

/// W2's MLP as a `Module` (weights stored `[in, out]`, as in `w2.rs`);
/// clones share the parameters.
#[derive(Clone)]
struct W2 {
    params: Vec<Parameter>,
}

impl Forward for W2 {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let mut h = x.clone();
        for layer in 0..3 {
            let w = graph.param(&self.params[2 * layer]);
            let b = graph.param(&self.params[2 * layer + 1]);
            h = h.try_matmul(&w)?.try_add(&b)?;
            if layer < 2 {
                h = h.relu();
            }
        }
        Ok(h)
    }
}

impl Module for W2 {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        for (i, p) in self.params.iter().enumerate() {
            let name = format!("{}.{}", i / 2, if i % 2 == 0 { "weight" } else { "bias" });
            f(&join_name(prefix, &name), p);
        }
    }
}

/// This process's CPU time (user + system, every thread) in ms, from
/// /proc/self/stat (clock ticks of 10 ms; fine over many steps).
fn cpu_ms() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the parenthesised command name: state is field 3, utime 14, stime 15.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |k: usize| f.get(k).and_then(|v| v.parse::<f64>().ok());
    match (tick(11), tick(12)) {
        (Some(u), Some(s)) => (u + s) * 10.0,
        _ => f64::NAN,
    }
}

/// The slowest rank's median ms per step of `steps` runs of `step` after
/// `warmup`, and the ranks' mean CPU ms per step.
fn measure(
    comm: &MpiCommunicator,
    steps: usize,
    warmup: usize,
    mut step: impl FnMut() -> Result<()>,
) -> Result<(f64, f64)> {
    let mut times = Vec::with_capacity(steps);
    let mut cpu_start = 0.0;
    for i in 0..warmup + steps {
        if i == warmup {
            cpu_start = cpu_ms();
        }
        let t = std::time::Instant::now();
        step()?;
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let cpu = (cpu_ms() - cpu_start) / steps as f64;
    // The slowest rank sets the pace: take every rank's median, report the max.
    let all = gather(comm, &[median(times), cpu])?;
    let slowest = all.iter().map(|v| v[0]).fold(0.0, f64::max);
    let cpu = all.iter().map(|v| v[1]).sum::<f64>() / all.len() as f64;
    Ok((slowest, cpu))
}

/// Every rank's `mine`, by rank.
fn gather(comm: &MpiCommunicator, mine: &[f64]) -> Result<Vec<Vec<f64>>> {
    let bytes: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(comm
        .all_gather_bytes(&bytes)?
        .iter()
        .map(|b| {
            b.chunks_exact(8)
                .map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes")))
                .collect()
        })
        .collect())
}

/// One rank's training step under `DataParallel`.
trait Step {
    fn step(&mut self) -> Result<()>;
    fn bytes_per_step(&self) -> usize;
}

/// W2's step (SGD) on this rank's shard of `per_rank` examples.
struct W2Step<'c> {
    ddp: DataParallel<W2, &'c MpiCommunicator>,
    x: Tensor,
    y: Vec<usize>,
}

impl<'c> W2Step<'c> {
    fn new(comm: &'c MpiCommunicator, per_rank: usize, shard: u64) -> Result<Self> {
        let params = mlp_params(0);
        let ddp = DataParallel::new(W2 { params }, comm)?;
        // Each rank its own shard: a different seed per rank.
        let (x, y) = mlp_data(per_rank, 1 + shard);
        Ok(W2Step { ddp, x, y })
    }
}

impl Step for W2Step<'_> {
    fn step(&mut self) -> Result<()> {
        let ddp = &mut self.ddp;
        let grads = {
            let graph = Graph::new();
            let loss = ddp
                .forward(&graph.constant(self.x.clone()))?
                .try_cross_entropy(&self.y)?;
            ddp.backward(&loss)?
        };
        crate::w2::sgd(&ddp.module().params, |p| grads.of(p))
    }

    fn bytes_per_step(&self) -> usize {
        self.ddp.bytes_per_step()
    }
}

/// The function a compiled step replays.
type StepFn = Box<dyn for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>>;

/// W2's step compiled: the same model, data and SGD update, the forward
/// and backward replayed (labels an input, as `i64`).
struct W2Compiled<'c> {
    ddp: DataParallel<W2, &'c MpiCommunicator>,
    step: Compiled<StepFn>,
    inputs: [Tensor; 2],
}

impl<'c> W2Compiled<'c> {
    fn new(comm: &'c MpiCommunicator, per_rank: usize, shard: u64) -> Result<Self> {
        let eager = W2Step::new(comm, per_rank, shard)?;
        let replica = eager.ddp.module().clone();
        let ce = retrograd::ops::nn::CrossEntropyOptions::default();
        let f: StepFn = Box::new(move |_: &Graph, x: &[Var<'_>]| {
            replica.forward(&x[0])?.try_cross_entropy_input(&x[1], &ce)
        });
        let labels: Vec<i64> = eager.y.iter().map(|&l| l as i64).collect();
        let labels = Tensor::from_vec(labels, &[eager.y.len()])?;
        let params = eager.ddp.module().parameters();
        Ok(W2Compiled {
            step: compile(f, CompileOptions::new().params(params)),
            inputs: [eager.x, labels],
            ddp: eager.ddp,
        })
    }
}

impl Step for W2Compiled<'_> {
    fn step(&mut self) -> Result<()> {
        let out = self.ddp.run_compiled(&mut self.step, &self.inputs)?;
        crate::w2::sgd(&self.ddp.module().params, |p| out.grads().of(p))
    }

    fn bytes_per_step(&self) -> usize {
        self.ddp.bytes_per_step()
    }
}

/// The W4 GPT iteration (AdamW groups, clipping) on this rank's
/// `per_rank` sequences.
struct GptStep<'c> {
    ddp: DataParallel<Gpt, &'c MpiCommunicator>,
    optimizer: Adam,
    tokens: Tensor,
    targets: Tensor,
}

impl<'c> GptStep<'c> {
    fn new(comm: &'c MpiCommunicator, per_rank: usize, shard: u64) -> Result<Self> {
        let config = GptConfig::shakespeare_char(VOCAB);
        let model = Gpt::with_rng(config, &mut ChaCha8Rng::seed_from_u64(0))?;
        let ddp = DataParallel::new(model, comm)?;
        let adamw = AdamConfig::adamw().lr(1e-3).betas(0.9, 0.99);
        let optimizer = Adam::with_groups(decay_groups(ddp.module().parameters(), 0.1), adamw)?;
        let mut rng = ChaCha8Rng::seed_from_u64(1 + shard);
        let t = config.block_size;
        let ids: Vec<i64> = (0..per_rank * (t + 1))
            .map(|_| rng.random_range(0..VOCAB as i64))
            .collect();
        let window = |offset: usize| -> Result<Tensor> {
            let rows: Vec<i64> = ids
                .chunks(t + 1)
                .flat_map(|row| row[offset..offset + t].to_vec())
                .collect();
            Tensor::from_vec(rows, &[per_rank, t])
        };
        Ok(GptStep {
            ddp,
            optimizer,
            tokens: window(0)?,
            targets: window(1)?,
        })
    }
}

impl Step for GptStep<'_> {
    fn step(&mut self) -> Result<()> {
        let mut grads = {
            let graph = Graph::new();
            let loss = self
                .ddp
                .module()
                .loss(&graph.constant(self.tokens.clone()), &self.targets)?;
            self.ddp.backward(&loss)?
        };
        clip_grad_norm(&mut grads, 1.0, 2.0)?;
        self.optimizer.step(&grads)
    }

    fn bytes_per_step(&self) -> usize {
        self.ddp.bytes_per_step()
    }
}

/// The W4 iteration compiled: the same model, batch, AdamW and clipping,
/// the forward and backward replayed.
struct GptCompiled<'c> {
    eager: GptStep<'c>,
    step: Compiled<StepFn>,
}

impl<'c> GptCompiled<'c> {
    fn new(comm: &'c MpiCommunicator, per_rank: usize, shard: u64) -> Result<Self> {
        let eager = GptStep::new(comm, per_rank, shard)?;
        let replica = eager.ddp.module().clone();
        let f: StepFn = Box::new(move |_: &Graph, x: &[Var<'_>]| replica.loss(&x[0], x[1].value()));
        let params = eager.ddp.module().parameters();
        Ok(GptCompiled {
            step: compile(f, CompileOptions::new().params(params)),
            eager,
        })
    }
}

impl Step for GptCompiled<'_> {
    fn step(&mut self) -> Result<()> {
        let e = &mut self.eager;
        let inputs = [e.tokens.clone(), e.targets.clone()];
        let out = e.ddp.run_compiled(&mut self.step, &inputs)?;
        clip_grad_norm(out.grads_mut(), 1.0, 2.0)?;
        e.optimizer.step(out.grads())
    }

    fn bytes_per_step(&self) -> usize {
        self.eager.ddp.bytes_per_step()
    }
}

/// `model`'s step on `comm` for shard `shard`.
fn make_step<'c>(
    model: &str,
    comm: &'c MpiCommunicator,
    per_rank: usize,
    shard: u64,
) -> Result<Box<dyn Step + 'c>> {
    Ok(match model {
        "w2" => Box::new(W2Step::new(comm, per_rank, shard)?),
        "w2c" => Box::new(W2Compiled::new(comm, per_rank, shard)?),
        "w4c" => Box::new(GptCompiled::new(comm, per_rank, shard)?),
        _ => Box::new(GptStep::new(comm, per_rank, shard)?),
    })
}

/// `model`'s steps at `per_rank` examples per rank: (ms, CPU ms, bytes
/// per step).
fn time_model(
    model: &str,
    comm: &MpiCommunicator,
    per_rank: usize,
    steps: usize,
    warmup: usize,
) -> Result<(f64, f64, usize)> {
    let mut step = make_step(model, comm, per_rank, comm.rank() as u64)?;
    let (ms, cpu) = measure(comm, steps, warmup, || step.step())?;
    Ok((ms, cpu, step.bytes_per_step()))
}

fn median(mut t: Vec<f64>) -> f64 {
    t.sort_by(f64::total_cmp);
    t[t.len() / 2]
}

/// The median ms of `n` steps.
fn timed(step: &mut dyn Step, n: usize) -> Result<f64> {
    let mut t = Vec::with_capacity(n);
    for _ in 0..n {
        let start = std::time::Instant::now();
        step.step()?;
        t.push(start.elapsed().as_secs_f64() * 1e3);
    }
    Ok(median(t))
}

/// Waits for every rank asleep: a blocking barrier would poll its core
/// while rank 0 runs alone.
fn sleeping_barrier(comm: &MpiCommunicator) {
    let mut pending = Some(comm.world().immediate_barrier());
    while let Some(request) = pending.take() {
        if let Err(request) = request.test() {
            pending = Some(request);
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
    }
}

/// The scaling at `per_rank` examples per rank measured within one job,
/// so that both sides see the same machine: `steps` steps by rank 0 alone
/// (on a communicator of its own, the other ranks asleep), then `steps` by
/// every rank, alternating for `rounds` rounds after one to warm up.
/// On rank 0: the median over rounds of `ranks x alone / together` (each
/// the round's median ms; together: the slowest rank's), and the medians
/// of the alone and together times.
fn interleaved_scaling(
    model: &str,
    comm: &MpiCommunicator,
    per_rank: usize,
    rounds: usize,
    steps: usize,
) -> Result<Option<(f64, f64, f64)>> {
    let rank = comm.rank();
    let own = comm.split((rank == 0).then_some(0));
    let mut alone = own
        .as_ref()
        .map(|c| make_step(model, c, per_rank, 0))
        .transpose()?;
    let mut together = make_step(model, comm, per_rank, rank as u64)?;
    let (mut ratios, mut alones, mut togethers) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=rounds {
        let solo = alone
            .as_mut()
            .map(|s| timed(s.as_mut(), steps))
            .transpose()?;
        sleeping_barrier(comm);
        let mine = timed(together.as_mut(), steps)?;
        let slowest = gather(comm, &[mine])?
            .iter()
            .map(|v| v[0])
            .fold(0.0, f64::max);
        if let (Some(solo), true) = (solo, round > 0) {
            ratios.push(comm.size() as f64 * solo / slowest);
            alones.push(solo);
            togethers.push(slowest);
        }
    }
    Ok((rank == 0).then(|| (median(ratios), median(alones), median(togethers))))
}

/// The compiled step against the eager one at `per_rank` examples per
/// rank, within one job: `steps` eager steps then `steps` compiled ones,
/// alternating for `rounds` rounds after one to warm up (every rank runs
/// both). On rank 0: the median over rounds of compiled / eager (each the
/// slowest rank's median ms of the round), and the medians of both times.
fn interleaved_compiled(
    model: &str,
    comm: &MpiCommunicator,
    per_rank: usize,
    rounds: usize,
    steps: usize,
) -> Result<Option<(f64, f64, f64)>> {
    let rank = comm.rank();
    let mut eager = make_step(model, comm, per_rank, rank as u64)?;
    let mut compiled = make_step(&format!("{model}c"), comm, per_rank, rank as u64)?;
    let (mut ratios, mut eagers, mut compileds) = (Vec::new(), Vec::new(), Vec::new());
    let slowest = |ms: f64| -> Result<f64> {
        Ok(gather(comm, &[ms])?
            .iter()
            .map(|v| v[0])
            .fold(0.0, f64::max))
    };
    for round in 0..=rounds {
        let e = slowest(timed(eager.as_mut(), steps)?)?;
        let c = slowest(timed(compiled.as_mut(), steps)?)?;
        if round > 0 {
            ratios.push(c / e);
            eagers.push(e);
            compileds.push(c);
        }
    }
    Ok((rank == 0).then(|| (median(ratios), median(eagers), median(compileds))))
}

/// A row measured in alternating rounds within one job: the median ratio
/// over rounds and the medians of both sides.
struct Interleaved {
    rounds: usize,
    steps: usize,
    ratio: f64,
    sides: [(&'static str, f64); 2],
}

impl Interleaved {
    fn emit(&self, workload: String, batch: (&str, usize), ranks: usize) {
        let mut row = vec![
            ("framework", "retrograd".into()),
            ("workload", Value::Str(workload)),
            (batch.0, batch.1.into()),
            ("ranks", ranks.into()),
            ("rounds", self.rounds.into()),
            ("steps_per_round", self.steps.into()),
            ("unit", "x".into()),
            ("median", Value::Num(self.ratio)),
        ];
        row.extend(self.sides.iter().map(|&(k, v)| (k, Value::Num(v))));
        emit(row, None);
    }
}

pub fn run_w2(opts: &Options) {
    let (steps, warmup) = if opts.quick { (5, 1) } else { (30, 5) };
    let outcome = run(|comm| {
        let n = comm.size();
        // (model, global batch): the fixed global batch split over the
        // ranks, then a fixed batch per rank.
        let mut cases = vec![
            ("w2", 1024),
            ("w2c", 1024),
            ("w2", 512 * n),
            ("w4", 24),
            ("w4c", 24),
            ("w4", 12 * n),
        ];
        cases.dedup();
        // DDP_ONLY=w2 (or w4): one model's rows only (eager and compiled).
        let only = std::env::var("DDP_ONLY").ok();
        if let Some(only) = &only {
            cases.retain(|(m, _)| m.trim_end_matches('c') == only);
        }
        for (model, global) in cases {
            if global % n != 0 {
                continue;
            }
            let per_rank = global / n;
            let (ms, cpu, bytes) = time_model(model, comm, per_rank, steps, warmup)?;
            if comm.rank() != 0 {
                continue;
            }
            let mut row: Vec<(String, Value)> = vec![
                ("framework".into(), "retrograd".into()),
                ("workload".into(), Value::Str(format!("ddp_{model}_r{n}"))),
                ("batch".into(), global.into()),
                ("per_rank_batch".into(), per_rank.into()),
                ("ranks".into(), n.into()),
                ("unit".into(), "ms_per_step".into()),
                ("median".into(), Value::Num(ms)),
                (
                    "examples_per_s".into(),
                    Value::Num(global as f64 / (ms * 1e-3)),
                ),
                // CPU time per step and rank: what a step costs whatever
                // else the machine runs (on a shared machine wall time is not).
                ("cpu_ms_per_rank".into(), Value::Num(cpu)),
                ("allreduce_bytes".into(), bytes.into()),
            ];
            for machines in [2usize, 8, 64] {
                for gbit in [10u64, 100] {
                    let secs = 2.0 * (machines - 1) as f64 / machines as f64 * bytes as f64
                        / (gbit as f64 * 1e9 / 8.0);
                    row.push((
                        format!("ring_ms_{gbit}gbit_n{machines}"),
                        Value::Num(secs * 1e3),
                    ));
                }
            }
            let (keys, values): (Vec<String>, Vec<Value>) = row.into_iter().unzip();
            emit(keys.iter().map(String::as_str).zip(values).collect(), None);
        }
        let (rounds, w2_steps, w4_steps) = if opts.quick { (2, 3, 2) } else { (7, 10, 6) };
        for (model, global, steps) in [("w2", 1024, w2_steps), ("w4", 24, w4_steps)] {
            if only.as_deref().is_some_and(|m| m != model) || global % n != 0 {
                continue;
            }
            let Some((ratio, eager, compiled)) =
                interleaved_compiled(model, comm, global / n, rounds, steps)?
            else {
                continue;
            };
            let sides = [("eager_ms", eager), ("compiled_ms", compiled)];
            let row = Interleaved {
                rounds,
                steps,
                ratio,
                sides,
            };
            row.emit(
                format!("ddp_{model}_compiled_interleaved"),
                ("batch", global),
                n,
            );
        }
        if n == 1 {
            return Ok(());
        }
        for (model, per_rank, steps) in [("w2", 512, w2_steps), ("w4", 12, w4_steps)] {
            if only.as_deref().is_some_and(|m| m != model) {
                continue;
            }
            let Some((scaling, alone, together)) =
                interleaved_scaling(model, comm, per_rank, rounds, steps)?
            else {
                continue;
            };
            let sides = [("alone_ms", alone), ("together_ms", together)];
            let row = Interleaved {
                rounds,
                steps,
                ratio: scaling,
                sides,
            };
            row.emit(
                format!("ddp_{model}_scaling_interleaved"),
                ("per_rank_batch", per_rank),
                n,
            );
        }
        Ok(())
    });
    if let Err(e) = outcome {
        eprintln!("ddp: {e}");
        std::process::exit(1);
    }
}
