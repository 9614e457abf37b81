//! DDP: the W2 MLP step (784-512-512-10, f32, softmax cross-entropy, SGD lr
//! 0.01) data-parallel over the ranks of `mpirun` (feature `mpi`), each rank
//! one thread (`RAYON_NUM_THREADS=1`, set by bench/compare.sh). Rows:
//! global batch 1024 split over the ranks, and a per-rank batch of 512
//! (global 512 x ranks) for the scaling at a fixed per-rank batch. Each row
//! also gives the bytes all-reduced per step and the ring all-reduce time
//! 2(N-1)/N x bytes / bandwidth at 10 and 100 Gbit/s for N = 2, 8 and 64.
//! Each row also has the ranks' mean CPU time per step: on a machine with
//! other load the wall time of 2 ranks says little, their CPU time does.
//! (The GPT training iteration goes here as a second model.)

use retrograd::distributed::{run, Communicator, DataParallel, MpiCommunicator};
use retrograd::nn::{join_name, Forward, Module, Parameter};
use retrograd::{Graph, Result, Var};

use crate::report::{emit, Value};
use crate::w2::{mlp_data, mlp_params};
use crate::Options;

const LR: f32 = 0.01;

/// W2's MLP as a `Module` (weights stored `[in, out]`, as in `w2.rs`).
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

/// The slowest rank's median ms per step of `steps` steps at `per_rank`
/// examples per rank, the ranks' mean CPU ms per step, and the bytes
/// all-reduced per step.
fn time_steps(
    comm: &MpiCommunicator,
    per_rank: usize,
    steps: usize,
    warmup: usize,
) -> Result<(f64, f64, usize)> {
    let mut ddp = DataParallel::new(
        W2 {
            params: mlp_params(0),
        },
        comm,
    )?;
    // Each rank its own shard: a different seed per rank.
    let (x, y) = mlp_data(per_rank, 1 + comm.rank() as u64);
    let mut times = Vec::with_capacity(steps);
    let mut cpu_start = 0.0;
    for i in 0..warmup + steps {
        if i == warmup {
            cpu_start = cpu_ms();
        }
        let t = std::time::Instant::now();
        let grads = {
            let graph = Graph::new();
            let loss = ddp
                .forward(&graph.constant(x.clone()))?
                .try_cross_entropy(&y)?;
            ddp.backward(&loss)?
        };
        for (_, p) in ddp.module().parameters() {
            let g = grads.of(&p);
            let g = g.as_slice::<f32>()?;
            p.update(|t| -> Result<()> {
                for (w, &d) in t.make_mut::<f32>()?.iter_mut().zip(g) {
                    *w -= LR * d;
                }
                Ok(())
            })?;
        }
        if i >= warmup {
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let cpu = (cpu_ms() - cpu_start) / steps as f64;
    // The slowest rank sets the pace: take every rank's median, report the max.
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let mine: Vec<u8> = [median, cpu].iter().flat_map(|v| v.to_le_bytes()).collect();
    let all = comm.all_gather_bytes(&mine)?;
    let read =
        |b: &[u8], k: usize| f64::from_le_bytes(b[8 * k..8 * k + 8].try_into().expect("8 bytes"));
    let slowest = all.iter().map(|b| read(b, 0)).fold(0.0, f64::max);
    let cpu = all.iter().map(|b| read(b, 1)).sum::<f64>() / all.len() as f64;
    Ok((slowest, cpu, ddp.bytes_per_step()))
}

pub fn run_w2(opts: &Options) {
    let (steps, warmup) = if opts.quick { (5, 1) } else { (30, 5) };
    let outcome = run(|comm| {
        let n = comm.size();
        let mut cases = vec![1024];
        if n > 1 || opts.quick {
            cases.push(512 * n);
        } else {
            cases.push(512);
        }
        cases.dedup();
        for global in cases {
            if global % n != 0 {
                continue;
            }
            let per_rank = global / n;
            let (ms, cpu, bytes) = time_steps(comm, per_rank, steps, warmup)?;
            if comm.rank() != 0 {
                continue;
            }
            let mut row: Vec<(String, Value)> = vec![
                ("framework".into(), "retrograd".into()),
                ("workload".into(), Value::Str(format!("ddp_w2_r{n}"))),
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
        Ok(())
    });
    if let Err(e) = outcome {
        eprintln!("ddp: {e}");
        std::process::exit(1);
    }
}
