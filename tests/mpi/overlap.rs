//! `overlap`: a compiled step under `DataParallel::run_compiled` starts its
//! buckets' all-reduces while its backward still runs, and trains to the
//! eager DDP step's bits (and to today's end-of-step `reduce_gradients`).

use std::cell::RefCell;
use std::sync::Arc;
use std::time::Instant;

use retrograd::compile::GradTarget;
use retrograd::distributed::{BucketSink, Communicator, DataParallel, FlatBuf, MpiCommunicator};
use retrograd::nn::{Forward, Module, Parameter, Sequential};
use retrograd::optim::Optimizer;
use retrograd::{compile, CompileOptions, Graph, Result, Tensor, Var};

use super::{adam, bitwise_equal_everywhere, data, fail, loss, mlp, rows, step_rows, values};

/// What the communicator saw, in order, with the time since the step began.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    /// The step reported a gradient final (a `progress` call follows each).
    Told,
    /// A bucket's all-reduce started (non-blocking but for the last).
    Started(usize),
}

/// The MPI communicator, logging every bucket start and gradient report.
struct Recording<'c> {
    inner: &'c MpiCommunicator,
    log: RefCell<Vec<(Event, f64)>>,
}

impl Communicator for Recording<'_> {
    pass_through_to_inner!();
    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        struct Logged<'a> {
            inner: &'a mut dyn BucketSink,
            log: &'a RefCell<Vec<(Event, f64)>>,
            t0: Instant,
        }
        impl Logged<'_> {
            fn note(&self, e: Event) {
                let ms = self.t0.elapsed().as_secs_f64() * 1e3;
                self.log.borrow_mut().push((e, ms));
            }
        }
        impl BucketSink for Logged<'_> {
            fn start(
                &mut self,
                index: usize,
                fill: &mut dyn FnMut(&mut FlatBuf) -> Result<()>,
            ) -> Result<()> {
                self.note(Event::Started(index));
                self.inner.start(index, fill)
            }
            fn progress(&mut self) {
                self.note(Event::Told);
                self.inner.progress();
            }
        }
        self.log.borrow_mut().clear();
        let t0 = Instant::now();
        self.inner.all_reduce_overlapped(send, recv, &mut |sink| {
            produce(&mut Logged {
                inner: sink,
                log: &self.log,
                t0,
            })
        })
    }
}

/// A model behind an `Arc`: the compiled function holds one clone,
/// `DataParallel` another, both the same model.
#[derive(Clone)]
struct Shared(Arc<Sequential>);

impl Module for Shared {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        self.0.visit_parameters(prefix, f)
    }
}

impl Forward for Shared {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.0.forward(x)
    }
}

/// The step `run_compiled` replays: the model's mean cross-entropy, the
/// labels an input (as `i64`).
type StepFn = Box<dyn for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>>;

fn compiled(model: &Shared) -> retrograd::Compiled<StepFn> {
    let replica = model.clone();
    let f: StepFn = Box::new(move |_: &Graph, x: &[Var<'_>]| {
        replica
            .forward(&x[0])?
            .try_cross_entropy_input(&x[1], &Default::default())
    });
    compile(f, CompileOptions::new().params(model.parameters()))
}

fn labels(y: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(y.iter().map(|&l| l as i64).collect(), &[y.len()])
}

pub fn overlap(comm: &MpiCommunicator) -> Result<()> {
    let (rank, size) = (comm.rank(), comm.size());
    let (x, y) = data(super::EXAMPLES)?;
    // Three replicas of rank 0's weights: eager, compiled overlapped, and
    // compiled with the gradients reduced at the step's end.
    let recording = Recording {
        inner: comm,
        log: RefCell::new(Vec::new()),
    };
    let bucket_bytes = 512;
    let mut eager =
        DataParallel::with_bucket_bytes(mlp(100 + rank as u64, 16)?, comm, bucket_bytes)?;
    let shared = |m: Sequential| Shared(Arc::new(m));
    let mut over = DataParallel::with_bucket_bytes(
        shared(mlp(100 + rank as u64, 16)?),
        &recording,
        bucket_bytes,
    )?;
    let mut at_end =
        DataParallel::with_bucket_bytes(shared(mlp(100 + rank as u64, 16)?), comm, bucket_bytes)?;
    let buckets = over.bucket_count();
    if buckets < 3 {
        return Err(fail(format!("expected several buckets, got {buckets}")));
    }
    let (mut opt_e, mut opt_o, mut opt_a) = (
        adam(eager.module())?,
        adam(over.module())?,
        adam(at_end.module())?,
    );
    let mut step_o = compiled(over.module());
    let mut step_a = compiled(at_end.module());
    let mut overlapped = 0;
    for step in 0..6 {
        let (xs, ys) = rows(&x, &y, &step_rows(step, rank, size)?)?;
        let grads_e = {
            let g = Graph::new();
            eager.backward(&loss(eager.module(), &g, &xs, &ys)?)?
        };
        opt_e.step(&grads_e)?;
        let inputs = [xs.clone(), labels(&ys)?];
        let out = over.run_compiled(&mut step_o, &inputs)?;
        opt_o.step(out.grads())?;
        let out = step_a.run(&inputs)?;
        at_end.reduce_gradients(out.grads_mut())?;
        opt_a.step(out.grads())?;
        // The order of events: bucket 0 started with at least two
        // gradients still to come (a `Told` follows its own start), the
        // ones the backward of the layers below makes.
        let log = recording.log.borrow().clone();
        let started = log.iter().position(|(e, _)| *e == Event::Started(0));
        let told_after = started.map_or(0, |i| {
            log[i..].iter().filter(|(e, _)| *e == Event::Told).count()
        });
        let params = over.module().parameters().len();
        let schedule = step_o.capture().expect("ran").gradient_schedule();
        let launches = over.bucket_launches(step_o.capture().expect("ran"));
        let last_node = schedule.iter().filter_map(|&(_, n)| n).max();
        if step == 0 && rank == 0 {
            let shown: Vec<String> = log
                .iter()
                .map(|(e, ms)| match e {
                    Event::Told => format!("grad {ms:.3}ms"),
                    Event::Started(b) => format!("START bucket {b} {ms:.3}ms"),
                })
                .collect();
            println!(
                "overlap: rank {rank}: events of step 0: {}",
                shown.join(", ")
            );
            let order: Vec<String> = schedule
                .iter()
                .map(|(t, n)| match t {
                    GradTarget::Param(_) => format!("{n:?}"),
                    GradTarget::Input(k) => format!("input {k}"),
                })
                .collect();
            println!(
                "overlap: rank {rank}: gradients final after nodes {}; buckets launch after {launches:?}; the backward's last node {last_node:?}",
                order.join(", ")
            );
        }
        if told_after >= 3 && launches[0] < last_node {
            overlapped += 1;
        } else {
            return Err(fail(format!(
                "step {step}: bucket 0 started with {told_after} of {params} gradients to come \
                 (launch after {:?}, last node {last_node:?}): {log:?}",
                launches[0]
            )));
        }
        let count = log
            .iter()
            .filter(|(e, _)| matches!(e, Event::Started(_)))
            .count();
        if count != buckets {
            return Err(fail(format!("{count} of {buckets} buckets started")));
        }
    }
    let (e, o, a) = (
        values(eager.module()),
        values(over.module()),
        values(at_end.module()),
    );
    let same = |u: &[Tensor], v: &[Tensor]| {
        u.iter().zip(v).all(|(p, q)| {
            p.to_f64_vec()
                .iter()
                .zip(q.to_f64_vec())
                .all(|(s, t)| s.to_bits() == t.to_bits())
        })
    };
    if !same(&o, &e) || !same(&o, &a) {
        return Err(fail(format!(
            "rank {rank}: after 6 steps the overlapped compiled replica differs from the eager one ({}) or the end-of-step one ({})",
            same(&o, &e),
            same(&o, &a)
        )));
    }
    if !bitwise_equal_everywhere(comm, &o)? {
        return Err(fail("the overlapped replicas differ across ranks".into()));
    }
    println!(
        "overlap: rank {rank} of {size}: bucket 0 started before the backward's last node in {overlapped} of 6 steps; \
         parameters after 6 steps equal the eager DDP's and the end-of-step reduction's, bit for bit"
    );
    Ok(())
}
