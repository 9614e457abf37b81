//! `DataParallel` on one process: buckets, `no_sync`, unused parameters,
//! checkpoints, and a compiled step's buckets launched while its backward runs.

use super::*;
use crate::distributed::SingleProcess;
use retrograd_engine::nn::{BatchNorm1d, Linear, Sequential};
use retrograd_engine::{DType, Graph};

fn mlp() -> Sequential {
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(1);
    Sequential::new()
        .with(
            Linear::builder(3, 4)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
        .with(retrograd_engine::nn::Activation::Tanh)
        .with(
            Linear::builder(4, 2)
                .dtype(DType::F64)
                .build_with(&mut rng)
                .unwrap(),
        )
}

fn loss<'g>(m: &impl Forward, g: &'g Graph, seed: u64) -> Var<'g> {
    let x = g.constant(Tensor::randn(&[5, 3], DType::F64, seed).unwrap());
    m.forward(&x).unwrap().tanh().sum()
}

#[test]
fn one_rank_gives_the_plain_gradients_through_small_buckets() {
    let m = mlp();
    let plain = {
        let g = Graph::new();
        loss(&m, &g, 9).backward().unwrap()
    };
    let params = m.parameters();
    // 40-byte buckets: one per parameter and then some.
    let mut ddp = DataParallel::with_bucket_bytes(m, SingleProcess, 40).unwrap();
    assert_eq!(ddp.bucket_count(), 4);
    assert_eq!(ddp.bytes_per_step(), 8 * (12 + 4 + 8 + 2));
    let g = Graph::new();
    let grads = ddp.backward(&loss(ddp.module(), &g, 9)).unwrap();
    for (_, p) in &params {
        assert_eq!(grads.of(p), plain.of(p));
    }
}

#[test]
fn no_sync_accumulates_into_the_next_synchronised_backward() {
    let m = mlp();
    let params = m.parameters();
    let mut sum = {
        let g = Graph::new();
        loss(&m, &g, 1).backward().unwrap()
    };
    {
        let g = Graph::new();
        sum.accumulate(&loss(&m, &g, 2).backward().unwrap())
            .unwrap();
    }
    let mut ddp = DataParallel::new(m, SingleProcess).unwrap();
    ddp.no_sync(|ddp| {
        let g = Graph::new();
        ddp.backward(&loss(ddp.module(), &g, 1)).unwrap();
    });
    let g = Graph::new();
    let grads = ddp.backward(&loss(ddp.module(), &g, 2)).unwrap();
    for (_, p) in &params {
        assert_eq!(grads.of(p), sum.of(p));
    }
    // The sum was used up: the next step is its own.
    let g = Graph::new();
    let next = ddp.backward(&loss(ddp.module(), &g, 2)).unwrap();
    let g2 = Graph::new();
    let alone = loss(ddp.module(), &g2, 2).backward().unwrap();
    for (_, p) in &params {
        assert_eq!(next.of(p), alone.of(p));
    }
}

#[test]
fn unused_parameters_get_a_zero_gradient() {
    let m = mlp();
    let mut rng = <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(3);
    let extra = Linear::builder(2, 2)
        .dtype(DType::F64)
        .build_with(&mut rng)
        .unwrap();
    let model = Sequential::new().with(m).with(extra);
    let params = model.parameters();
    let mut ddp = DataParallel::new(model, SingleProcess).unwrap();
    let g = Graph::new();
    let x = g.constant(Tensor::randn(&[2, 3], DType::F64, 4).unwrap());
    // Only the first Linear is used.
    let first = &params[0].1;
    let y = x.matmul(&g.param(first).t()).sum();
    let grads = ddp.backward(&y).unwrap();
    let last = &params[params.len() - 1].1;
    assert_eq!(grads.get_param(last).unwrap().to_f64_vec(), vec![0.0; 2]);
    assert!(grads.get_param(first).is_some());
}

#[test]
fn checkpoints_round_trip_through_the_wrapper() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ddp.safetensors");
    let bn = BatchNorm1d::new(3, DType::F64).unwrap();
    let ddp = DataParallel::new(bn, SingleProcess).unwrap();
    let meta = BTreeMap::from([("step".to_string(), "7".to_string())]);
    ddp.save_checkpoint(&path, None, &meta).unwrap();
    assert_eq!(ddp.load_checkpoint(&path, None).unwrap(), meta);
    assert!(ddp
        .load_checkpoint(dir.path().join("missing"), None)
        .is_err());
}

#[test]
fn replica_descriptions_name_the_first_difference() {
    let a = describe(&mlp().parameters(), &[]);
    assert_eq!(a[0], "parameter `0.weight` of shape [4, 3] (f64)");
}

/// What a communicator saw during one `all_reduce_overlapped`.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Event {
    /// A gradient was reported final (`BucketSink::progress` follows each).
    Told,
    /// A bucket's all-reduce started.
    Started(usize),
}

/// One rank that logs the order of gradients reported and buckets started.
#[derive(Default)]
struct Recording {
    log: std::cell::RefCell<Vec<Event>>,
}

impl Communicator for Recording {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather_bytes(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
        SingleProcess.all_gather_bytes(mine)
    }
    fn broadcast_bytes(&self, root: usize, data: &mut Vec<u8>) -> Result<()> {
        SingleProcess.broadcast_bytes(root, data)
    }
    fn all_reduce_overlapped(
        &self,
        send: &mut [FlatBuf],
        recv: &mut [FlatBuf],
        produce: &mut dyn FnMut(&mut dyn BucketSink) -> Result<()>,
    ) -> Result<()> {
        struct Logged<'a> {
            inner: &'a mut dyn BucketSink,
            log: &'a std::cell::RefCell<Vec<Event>>,
        }
        impl BucketSink for Logged<'_> {
            fn start(
                &mut self,
                index: usize,
                fill: &mut dyn FnMut(&mut FlatBuf) -> Result<()>,
            ) -> Result<()> {
                self.log.borrow_mut().push(Event::Started(index));
                self.inner.start(index, fill)
            }
            fn progress(&mut self) {
                self.log.borrow_mut().push(Event::Told);
                self.inner.progress();
            }
        }
        self.log.borrow_mut().clear();
        SingleProcess.all_reduce_overlapped(send, recv, &mut |sink| {
            produce(&mut Logged {
                inner: sink,
                log: &self.log,
            })
        })
    }
}

/// A model behind an `Arc`: clones are the same model, so the compiled
/// function holds one while `DataParallel` holds another.
#[derive(Clone)]
struct Shared(std::sync::Arc<Sequential>);

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

/// A three-layer MLP's compiled step under `DataParallel` with a bucket
/// per layer or so: the schedule says each bucket launches after the node
/// that makes its last gradient final, the run launches them there (the
/// last layer's bucket while the backward of the layers below still
/// runs), and the gradients are the eager step's, bit for bit.
#[test]
fn a_compiled_steps_buckets_launch_while_its_backward_runs() {
    let model = Sequential::new().with(mlp()).with(
        Linear::builder(2, 3)
            .dtype(DType::F64)
            .build_with(&mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(2))
            .unwrap(),
    );
    let params = model.parameters();
    let eager = {
        let g = Graph::new();
        loss(&model, &g, 9).backward().unwrap()
    };
    // 80-byte buckets: the last layer's weight and bias, the middle
    // layer's, then the first layer's bias and weight each alone.
    let model = Shared(std::sync::Arc::new(model));
    let mut ddp = DataParallel::with_bucket_bytes(model, Recording::default(), 80).unwrap();
    let members: Vec<Vec<usize>> = ddp.plan.buckets.iter().map(|b| b.members.clone()).collect();
    assert_eq!(members, vec![vec![5, 4], vec![3, 2], vec![1], vec![0]]);
    let replica = ddp.module().clone();
    let mut step = retrograd_engine::compile(
        move |_: &Graph, x: &[Var<'_>]| Ok(replica.forward(&x[0])?.tanh().sum()),
        retrograd_engine::CompileOptions::new(),
    );
    let x = Tensor::randn(&[5, 3], DType::F64, 9).unwrap();
    for _ in 0..2 {
        let out = ddp.run_compiled(&mut step, &[x.clone()]).unwrap();
        for (_, p) in &params {
            assert_eq!(out.grads().of(p), eager.of(p), "the eager gradient");
        }
    }
    let capture = step.capture().unwrap();
    let schedule = capture.gradient_schedule();
    let ids: Vec<u64> = params.iter().map(|(_, p)| p.id()).collect();
    let mut told: Vec<usize> = schedule
        .iter()
        .map(|(t, _)| match t {
            GradTarget::Param(id) => ids.iter().position(|i| i == id).unwrap(),
            GradTarget::Input(k) => panic!("input {k} was not asked for"),
        })
        .collect();
    // The last layer's gradients are final first, the first layer's last.
    for layer in told.chunks_mut(2) {
        layer.sort_unstable();
    }
    assert_eq!(told, [4, 5, 2, 3, 0, 1]);
    let nodes: Vec<u32> = schedule.iter().map(|&(_, n)| n.unwrap()).collect();
    assert!(nodes.windows(2).all(|w| w[0] <= w[1]), "{nodes:?}");
    let last = *nodes.last().unwrap();
    // Predicted: bucket 0 launches after the node that makes the last
    // layer's second gradient final, before the backward's last node.
    let launches = ddp.bucket_launches(capture);
    assert_eq!(launches.len(), 4);
    assert_eq!(launches[0], Some(nodes[1]));
    assert!(nodes[1] < last, "{nodes:?}");
    assert_eq!(launches[3], Some(last));
    // Seen: a bucket starts right after the gradient that completes it is
    // told (before that gradient's progress call), so the gradients told
    // before it say after which node it started.
    let log = ddp.comm().log.borrow().clone();
    let mut seen = Vec::new();
    let mut told_so_far = 0;
    for e in &log {
        match e {
            Event::Told => told_so_far += 1,
            Event::Started(b) => {
                assert_eq!(*b, seen.len(), "buckets start in order");
                seen.push(Some(nodes[told_so_far]));
            }
        }
    }
    assert_eq!(seen, launches, "{log:?}");
    assert_eq!(told_so_far, 6);
    // Bucket 0 started with four gradients (the layers below) still to come.
    assert_eq!(log[..3], [Event::Told, Event::Started(0), Event::Told]);
}
