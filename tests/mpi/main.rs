//! Data-parallel training over MPI, run by `.ci/mpi-tests` under
//! `mpirun -n 2` (each case one mpirun, bounded by a timeout there):
//!
//! - `gradients`: the averaged shard gradients equal the single-process
//!   full-batch gradient (f64, relative error <= 1e-12);
//! - `train`: after 20 Adam steps the replicas' parameters are bitwise
//!   identical and within 1e-10 of single-process full-batch training;
//!   batch-norm buffers follow rank 0;
//! - `checkpoint DIR`: a run resumed from rank 0's checkpoint has the
//!   uninterrupted run's next-step loss, bit for bit;
//! - `mismatch`: ranks with different models all get `ReplicaMismatch`;
//! - `split`: `MpiCommunicator::split` groups, and training over a group;
//! - `dies`: rank 1 exits early (the script checks the job ends non-zero
//!   within 30 s); `fails`: rank 1 returns an error mid-training (the same,
//!   and `run`'s message names it).
//!
//! - `overlap`: a compiled step's buckets start while its backward runs
//!   (the order of events), and it trains to the eager DDP step's bits
//!   (`overlap.rs`);
//! - `resume`, `differ`, `kill-in-allreduce`, `kill-while-saving`,
//!   `states-load`, `same-content`: training states (`resume.rs`).
//!
//! Without an argument (as `cargo test --features mpi` runs it, one
//! process) it runs `gradients`, `train`, `checkpoint`, `resume`, `split`
//! and `overlap` on one rank.

/// The `Communicator` methods a test's wrapper passes to its `inner`
/// communicator unchanged: the wrappers differ only in
/// `all_reduce_overlapped`.
macro_rules! pass_through_to_inner {
    () => {
        fn rank(&self) -> usize {
            self.inner.rank()
        }
        fn size(&self) -> usize {
            self.inner.size()
        }
        fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
            self.inner.all_gather_bytes(mine)
        }
        fn broadcast_bytes(&self, root: usize, data: &mut Vec<u8>) -> Result<()> {
            self.inner.broadcast_bytes(root, data)
        }
    };
}

mod overlap;
mod resume;

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::distributed::{
    run, Communicator, DataParallel, DistributedSampler, MpiCommunicator,
};
use retrograd::nn::{Activation, BatchNorm1d, Forward, Linear, Module, Sequential};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{DType, Error, Graph, Result, Tensor};

const FEATURES: usize = 6;
const CLASSES: usize = 3;

fn mlp(seed: u64, hidden: usize) -> Result<Sequential> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok(Sequential::new()
        .with(
            Linear::builder(FEATURES, hidden)
                .dtype(DType::F64)
                .build_with(&mut rng)?,
        )
        .with(Activation::Tanh)
        .with(
            Linear::builder(hidden, hidden)
                .dtype(DType::F64)
                .build_with(&mut rng)?,
        )
        .with(Activation::Tanh)
        .with(
            Linear::builder(hidden, CLASSES)
                .dtype(DType::F64)
                .build_with(&mut rng)?,
        ))
}

/// `n` fixed examples (the same on every rank): features and labels.
fn data(n: usize) -> Result<(Tensor, Vec<usize>)> {
    let x = Tensor::randn(&[n, FEATURES], DType::F64, 11)?;
    let y = (0..n).map(|i| (i * 7 + i / 3) % CLASSES).collect();
    Ok((x, y))
}

/// The rows `rows` of `x` and `y`.
fn rows(x: &Tensor, y: &[usize], rows: &[usize]) -> Result<(Tensor, Vec<usize>)> {
    let v = x.as_slice::<f64>()?;
    let mut out = Vec::with_capacity(rows.len() * FEATURES);
    for &r in rows {
        out.extend_from_slice(&v[r * FEATURES..(r + 1) * FEATURES]);
    }
    Ok((
        Tensor::from_vec(out, &[rows.len(), FEATURES])?,
        rows.iter().map(|&r| y[r]).collect(),
    ))
}

/// Mean cross-entropy of `model` on `(x, y)`, recorded into `g`.
fn loss<'g>(
    model: &impl Forward,
    g: &'g Graph,
    x: &Tensor,
    y: &[usize],
) -> Result<retrograd::Var<'g>> {
    model.forward(&g.constant(x.clone()))?.try_cross_entropy(y)
}

/// max |a - b| / max |b| over every element of every parameter.
fn rel_err(a: &[Tensor], b: &[Tensor]) -> f64 {
    let (mut diff, mut scale) = (0f64, 0f64);
    for (a, b) in a.iter().zip(b) {
        for (u, v) in a.to_f64_vec().iter().zip(b.to_f64_vec()) {
            diff = diff.max((u - v).abs());
            scale = scale.max(v.abs());
        }
    }
    diff / scale.max(f64::MIN_POSITIVE)
}

fn fail(what: String) -> Error {
    Error::Communication {
        op: "mpi test",
        detail: what,
    }
}

fn values(m: &impl Module) -> Vec<Tensor> {
    m.parameters().iter().map(|(_, p)| p.value()).collect()
}

/// A model with rank 0's current weights (copied through a state dict).
fn copy_of(m: &impl Module, hidden: usize) -> Result<Sequential> {
    let c = mlp(999, hidden)?;
    c.load_state_dict(&m.state_dict())?;
    Ok(c)
}

fn gradients(comm: &MpiCommunicator) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let n = 8 * size;
    let (x, y) = data(n)?;
    // Each rank starts from its own weights: the wrapper must make them rank 0's.
    let mut ddp = DataParallel::with_bucket_bytes(mlp(100 + rank as u64, 16)?, comm, 512)?;
    if ddp.bucket_count() < 3 {
        return Err(fail(format!(
            "expected several buckets, got {}",
            ddp.bucket_count()
        )));
    }
    let reference = copy_of(ddp.module(), 16)?;
    let shard: Vec<usize> = (rank * 8..(rank + 1) * 8).collect();
    let (xs, ys) = rows(&x, &y, &shard)?;
    let g = Graph::new();
    let grads = ddp.backward(&loss(ddp.module(), &g, &xs, &ys)?)?;
    let full = {
        let g = Graph::new();
        loss(&reference, &g, &x, &y)?.backward()?
    };
    let got: Vec<Tensor> = ddp
        .module()
        .parameters()
        .iter()
        .map(|(_, p)| grads.of(p))
        .collect();
    let want: Vec<Tensor> = reference
        .parameters()
        .iter()
        .map(|(_, p)| full.of(p))
        .collect();
    let err = rel_err(&got, &want);
    println!(
        "gradients: rank {rank} of {size}: relative error {err:.3e} ({} buckets)",
        ddp.bucket_count()
    );
    // NaN fails too.
    if err.is_nan() || err > 1e-12 {
        return Err(fail(format!(
            "averaged gradients differ from the full batch's by {err:e}"
        )));
    }
    Ok(())
}

/// `MpiCommunicator::split`: groups by parity, rank 0 alone, and a
/// `DataParallel` over a group of one, whose gradients are the rank's own.
fn split(comm: &MpiCommunicator) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let parity = comm
        .split(Some((rank % 2) as u16))
        .ok_or_else(|| fail("a rank with a group got no communicator".into()))?;
    let want = (size - rank % 2).div_ceil(2);
    if parity.size() != want || parity.rank() != rank / 2 {
        return Err(fail(format!(
            "rank {rank}: parity group has rank {} of {}, expected {} of {want}",
            parity.rank(),
            parity.size(),
            rank / 2
        )));
    }
    let alone = comm.split((rank == 0).then_some(7));
    if alone.is_some() != (rank == 0) || alone.as_ref().is_some_and(|c| c.size() != 1) {
        return Err(fail(format!("rank {rank}: wrong group for `rank 0 alone`")));
    }
    let own = comm
        .split(Some(rank as u16))
        .ok_or_else(|| fail("no group of one".into()))?;
    let (x, y) = data(8)?;
    let mut ddp = DataParallel::with_bucket_bytes(mlp(100 + rank as u64, 16)?, &own, 512)?;
    let g = Graph::new();
    let grads = ddp.backward(&loss(ddp.module(), &g, &x, &y)?)?;
    let local = {
        let g = Graph::new();
        loss(ddp.module(), &g, &x, &y)?.backward()?
    };
    for (name, p) in ddp.module().parameters() {
        if grads.of(&p).to_f64_vec() != local.of(&p).to_f64_vec() {
            return Err(fail(format!(
                "rank {rank}: `{name}`'s gradient over a group of one is not its own"
            )));
        }
    }
    println!("split: rank {rank} of {size}: groups as expected");
    Ok(())
}

/// Per-rank batch of the train and checkpoint cases.
const PER_RANK: usize = 4;
const EXAMPLES: usize = 32;

/// The examples of step `step` (0-based) for `rank`: the sampler's shard of
/// the step's epoch, cut into per-rank batches.
fn step_rows(step: usize, rank: usize, size: usize) -> Result<Vec<usize>> {
    let per_epoch = EXAMPLES / size / PER_RANK;
    let mut s = DistributedSampler::new(EXAMPLES, size, rank)?
        .seed(5)
        .drop_last(true);
    s.set_epoch((step / per_epoch) as u64);
    let k = step % per_epoch;
    Ok(s.indices()[k * PER_RANK..(k + 1) * PER_RANK].to_vec())
}

fn adam(m: &impl Module) -> Result<Adam> {
    Adam::new(m.parameters(), AdamConfig::default().lr(0.01))
}

/// One synchronised step of `ddp`; returns this rank's loss.
fn ddp_step(
    ddp: &mut DataParallel<Sequential, &MpiCommunicator>,
    opt: &mut Adam,
    step: usize,
    x: &Tensor,
    y: &[usize],
) -> Result<f64> {
    let (xs, ys) = rows(x, y, &step_rows(step, ddp.rank(), ddp.size())?)?;
    let grads = {
        let g = Graph::new();
        let l = loss(ddp.module(), &g, &xs, &ys)?;
        let value = l.value().try_item()?;
        (ddp.backward(&l)?, value)
    };
    opt.step(&grads.0)?;
    Ok(grads.1)
}

/// Every rank's bytes of `m`'s parameters equal rank 0's.
fn bitwise_equal_everywhere(comm: &MpiCommunicator, ts: &[Tensor]) -> Result<bool> {
    let mine: Vec<u8> = ts
        .iter()
        .flat_map(|t| t.to_f64_vec().into_iter().flat_map(f64::to_le_bytes))
        .collect();
    let all = comm.all_gather_bytes(&mine)?;
    Ok(all.iter().all(|b| *b == all[0]))
}

fn train(comm: &MpiCommunicator) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let (x, y) = data(EXAMPLES)?;
    let mut ddp = DataParallel::with_bucket_bytes(mlp(200 + rank as u64, 12)?, comm, 600)?;
    let reference = copy_of(ddp.module(), 12)?;
    let mut opt = adam(ddp.module())?;
    let mut ref_opt = adam(&reference)?;
    for step in 0..20 {
        ddp_step(&mut ddp, &mut opt, step, &x, &y)?;
        let all: Vec<usize> = (0..size)
            .map(|r| step_rows(step, r, size))
            .collect::<Result<Vec<_>>>()?
            .concat();
        let (xa, ya) = rows(&x, &y, &all)?;
        let grads = {
            let g = Graph::new();
            loss(&reference, &g, &xa, &ya)?.backward()?
        };
        ref_opt.step(&grads)?;
    }
    let mine = values(ddp.module());
    if !bitwise_equal_everywhere(comm, &mine)? {
        return Err(fail("replicas differ after 20 steps".to_string()));
    }
    let err = rel_err(&mine, &values(&reference));
    println!("train: rank {rank} of {size}: replicas bitwise identical; vs full batch {err:.3e}");
    if err.is_nan() || err > 1e-10 {
        return Err(fail(format!(
            "20 steps differ from full-batch training by {err:e}"
        )));
    }
    // Batch norm: each rank's batch statistics differ, its buffers follow rank 0.
    let model = Sequential::new()
        .with(
            Linear::builder(FEATURES, 4)
                .dtype(DType::F64)
                .build_with(&mut ChaCha8Rng::seed_from_u64(3))?,
        )
        .with(BatchNorm1d::new(4, DType::F64)?);
    let mut ddp = DataParallel::new(model, comm)?;
    let (xs, _) = rows(&x, &y, &step_rows(0, rank, size)?)?;
    let g = Graph::new();
    let out = ddp.forward(&g.constant(xs))?;
    let before: Vec<Tensor> = ddp
        .module()
        .buffers()
        .iter()
        .map(|(_, b)| b.value())
        .collect();
    ddp.backward(&out.tanh().sum())?;
    let after: Vec<Tensor> = ddp
        .module()
        .buffers()
        .iter()
        .map(|(_, b)| b.value())
        .collect();
    if !bitwise_equal_everywhere(comm, &after)? {
        return Err(fail("batch-norm buffers differ across ranks".to_string()));
    }
    if size > 1 && bitwise_equal_everywhere(comm, &before)? {
        return Err(fail(
            "the shards gave every rank the same statistics: no test".to_string(),
        ));
    }
    println!("train: rank {rank}: batch-norm buffers follow rank 0");
    Ok(())
}

fn checkpoint(comm: &MpiCommunicator, dir: &str) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let (x, y) = data(EXAMPLES)?;
    let path = std::path::Path::new(dir).join("ddp.safetensors");
    // The uninterrupted run, saving after step 5.
    let mut ddp = DataParallel::new(mlp(300 + rank as u64, 10)?, comm)?;
    let mut opt = adam(ddp.module())?;
    let mut losses = Vec::new();
    for step in 0..8 {
        losses.push(ddp_step(&mut ddp, &mut opt, step, &x, &y)?);
        if step == 5 {
            let meta = BTreeMap::from([("next_step".to_string(), "6".to_string())]);
            ddp.save_checkpoint(&path, Some(&opt), &meta)?;
        }
    }
    // A fresh run (other weights, fresh optimizer) resumed from the file.
    let mut resumed = DataParallel::new(mlp(400, 10)?, comm)?;
    let mut opt = adam(resumed.module())?;
    let meta = resumed.load_checkpoint(&path, Some(&mut opt))?;
    let next: usize = meta["next_step"]
        .parse()
        .map_err(|_| fail("bad metadata".to_string()))?;
    for (step, &want) in losses.iter().enumerate().skip(next) {
        let l = ddp_step(&mut resumed, &mut opt, step, &x, &y)?;
        if l.to_bits() != want.to_bits() {
            return Err(fail(format!(
                "step {step}: resumed loss {l:e}, uninterrupted {want:e}"
            )));
        }
    }
    println!("checkpoint: rank {rank} of {size}: resumed losses equal the uninterrupted run's");
    // A file only some ranks can read is an error on every rank.
    let odd = std::path::Path::new(dir).join(format!("rank{rank}.safetensors"));
    if rank == 0 {
        std::fs::copy(&path, &odd).map_err(|e| fail(e.to_string()))?;
    }
    match resumed.load_checkpoint(&odd, None) {
        Err(e) if size > 1 => println!("checkpoint: rank {rank}: partial load refused: {e}"),
        Ok(_) if size == 1 => {}
        other => return Err(fail(format!("partial load gave {:?}", other.err()))),
    }
    Ok(())
}

fn mismatch(comm: &MpiCommunicator) -> Result<()> {
    let rank = comm.rank();
    // Rank 1 has a wider hidden layer: the second entry differs.
    let hidden = if rank == 1 { 9 } else { 8 };
    match DataParallel::new(mlp(1, hidden)?, comm) {
        Err(Error::ReplicaMismatch {
            rank: 1, detail, ..
        }) if detail.contains("0.weight") => {
            println!("mismatch: rank {rank}: got the typed error: {detail}");
            Ok(())
        }
        Err(e) => Err(fail(format!("wrong error: {e}"))),
        Ok(_) => Err(fail("different models were accepted".to_string())),
    }
}

fn dies(comm: &MpiCommunicator, by_error: bool) -> Result<()> {
    let (x, y) = data(EXAMPLES)?;
    let mut ddp = DataParallel::new(mlp(7, 8)?, comm)?;
    let mut opt = adam(ddp.module())?;
    for step in 0..1000 {
        if comm.rank() == 1 && step == 2 {
            if by_error {
                return Err(fail("rank 1 stops with an error on purpose".to_string()));
            }
            eprintln!("dies: rank 1 exits on purpose");
            std::process::exit(3);
        }
        ddp_step(&mut ddp, &mut opt, step % 8, &x, &y)?;
    }
    Err(fail(
        "rank 0 finished although rank 1 had stopped".to_string(),
    ))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = run(|comm| match args.first().map(String::as_str) {
        Some("gradients") => gradients(comm),
        Some("train") => train(comm),
        Some("checkpoint") => checkpoint(comm, args.get(1).map(String::as_str).unwrap_or(".")),
        Some("mismatch") => mismatch(comm),
        Some("split") => split(comm),
        Some("overlap") => overlap::overlap(comm),
        Some("dies") => dies(comm, false),
        Some("fails") => dies(comm, true),
        Some("resume") => resume::resume(comm, args.get(1).map(String::as_str).unwrap_or(".")),
        Some("differ") => resume::differ(comm, args.get(1).map(String::as_str).unwrap_or(".")),
        Some("kill-in-allreduce") => resume::kill_in_allreduce(comm),
        Some("kill-while-saving") => {
            resume::kill_while_saving(comm, args.get(1).map(String::as_str).unwrap_or("."))
        }
        Some("states-load") => resume::states_load(args.get(1).map(String::as_str).unwrap_or(".")),
        Some("same-content") => resume::same_content(
            args.get(1).map(String::as_str).unwrap_or(""),
            args.get(2).map(String::as_str).unwrap_or(""),
        ),
        Some(other) => Err(fail(format!("unknown case {other}"))),
        None => {
            let dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
            gradients(comm)?;
            train(comm)?;
            checkpoint(comm, &dir.path().display().to_string())?;
            resume::resume(comm, &dir.path().display().to_string())?;
            split(comm)?;
            overlap::overlap(comm)
        }
    });
    if let Err(e) = outcome {
        eprintln!("{e}");
        std::process::exit(2);
    }
}
