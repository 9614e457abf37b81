//! Thread safety: which types cross threads (checked at compile time), and
//! what running on several threads must not change: independent training
//! jobs give bit-identical results on threads and one after another, and a
//! data-parallel step (shards on threads, gradients scaled and summed)
//! equals the full-batch step.
//!
//! A `Graph` is single-threaded by design (its state is one `RefCell`, and
//! hooks are plain `Fn` closures), so it is neither `Send` nor `Sync`, and a
//! `Var` borrows its graph. Everything that outlives a graph (tensors,
//! parameters, gradients, modules, optimizers, the op registry) is
//! `Send + Sync`: each thread builds its own graphs and shares the rest.

use std::sync::Arc;
use std::thread;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::data::{Batch, Dataset};
use retrograd::io::TensorFile;
use retrograd::kernels::parallel::PARALLEL_THRESHOLD;
use retrograd::nn::{
    Activation, Dropout, Embedding, Forward, LayerNorm, Linear, Mlp, Module, Parameter, Sequential,
    StateDict,
};
use retrograd::optim::{
    clip_grad_norm, Adam, AdamConfig, ConstantLr, CosineAnnealingLr, Optimizer, Sgd, SgdConfig,
    StepLr,
};
use retrograd::{
    BackwardOptions, DType, Error, GradOptions, Gradients, Graph, OpRegistry, Result, Tensor,
};

/// Compiles only if `T` is `Send + Sync`.
const fn assert_send_sync<T: Send + Sync + ?Sized>() {}

/// Compiles only if `T` is `Send`.
const fn assert_send<T: Send + ?Sized>() {}

const _: () = {
    assert_send_sync::<Tensor>();
    assert_send_sync::<DType>();
    assert_send_sync::<Error>();
    assert_send_sync::<Parameter>();
    assert_send_sync::<Gradients>();
    assert_send_sync::<BackwardOptions>();
    assert_send_sync::<GradOptions>();
    assert_send_sync::<OpRegistry>();
    assert_send_sync::<Arc<OpRegistry>>();
    assert_send_sync::<dyn retrograd::Differentiable>();
    // Modules: the trait requires it, so boxed layers are shareable too.
    assert_send_sync::<dyn Forward>();
    assert_send_sync::<Box<dyn Forward>>();
    assert_send_sync::<Linear>();
    assert_send_sync::<Mlp>();
    assert_send_sync::<Sequential>();
    assert_send_sync::<LayerNorm>();
    assert_send_sync::<Embedding>();
    assert_send_sync::<Dropout>();
    assert_send_sync::<Activation>();
    assert_send_sync::<StateDict>();
    // Optimizers and schedules.
    assert_send_sync::<Sgd>();
    assert_send_sync::<SgdConfig>();
    assert_send_sync::<Adam>();
    assert_send_sync::<AdamConfig>();
    assert_send_sync::<ConstantLr>();
    assert_send_sync::<StepLr>();
    assert_send_sync::<CosineAnnealingLr>();
    // `Optimizer` requires only `Send`: a boxed optimizer moves to a worker
    // thread but is not shared (stepping needs `&mut` anyway).
    assert_send::<dyn Optimizer>();
    assert_send::<Box<dyn Optimizer>>();
    // Data and checkpoints.
    assert_send_sync::<Dataset>();
    assert_send_sync::<Batch>();
    assert_send_sync::<TensorFile>();
};

/// Compiles only if `T` is *not* `Sync`: with `T: Sync` both impls apply and
/// the call is ambiguous (the trick of `static_assertions::assert_not_impl_any`).
trait AmbiguousIfSync<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSync<()> for T {}
impl<T: ?Sized + Sync> AmbiguousIfSync<u8> for T {}

/// Compiles only if `T` is *not* `Send`.
trait AmbiguousIfSend<A> {
    fn check() {}
}
impl<T: ?Sized> AmbiguousIfSend<()> for T {}
impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}

/// A graph stays on the thread that built it: sharing one would race on its
/// `RefCell`, and its hooks need not be `Send`.
#[test]
fn graphs_and_vars_stay_on_their_thread() {
    <Graph as AmbiguousIfSync<_>>::check();
    <Graph as AmbiguousIfSend<_>>::check();
    <retrograd::Var<'static> as AmbiguousIfSend<_>>::check();
    <retrograd::Var<'static> as AmbiguousIfSync<_>>::check();
}

/// Which optimizer a job trains with.
#[derive(Clone, Copy, Debug)]
enum Algorithm {
    SgdMomentum,
    Adam,
    AdamW,
}

/// One independent training job: its own model, data and optimizer, all
/// seeded, so its result is a pure function of the job.
#[derive(Clone, Debug)]
struct Job {
    seed: u64,
    sizes: Vec<usize>,
    activation: Activation,
    dropout: f64,
    dtype: DType,
    batch: usize,
    steps: usize,
    algorithm: Algorithm,
}

/// Features in [-1, 1) and labels from a fixed random linear teacher.
fn synthetic_data(
    seed: u64,
    rows: usize,
    features: usize,
    classes: usize,
) -> (Vec<f64>, Vec<usize>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
    let teacher: Vec<f64> = (0..features * classes)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let x: Vec<f64> = (0..rows * features)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let labels = (0..rows)
        .map(|r| {
            let score = |c: usize| -> f64 {
                (0..features)
                    .map(|f| x[r * features + f] * teacher[f * classes + c])
                    .sum()
            };
            (0..classes)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .expect("at least one class")
        })
        .collect();
    (x, labels)
}

/// What a job leaves behind, as bits: every step's loss and every final
/// parameter value.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    losses: Vec<u64>,
    parameters: Vec<(String, Vec<u64>)>,
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_f64_vec().iter().map(|v| v.to_bits()).collect()
}

fn train(job: &Job) -> Result<Outcome> {
    let model = Mlp::builder(&job.sizes)
        .activation(job.activation)
        .dropout(job.dropout)
        .dtype(job.dtype)
        .seed(job.seed)
        .build()?;
    let (features, classes) = (job.sizes[0], *job.sizes.last().expect("sizes"));
    let mut optimizer: Box<dyn Optimizer> = match job.algorithm {
        Algorithm::SgdMomentum => Box::new(Sgd::new(
            model.parameters(),
            SgdConfig::new(0.05).momentum(0.9).nesterov(true),
        )?),
        Algorithm::Adam => Box::new(Adam::new(
            model.parameters(),
            AdamConfig::default().lr(0.01),
        )?),
        Algorithm::AdamW => Box::new(Adam::new(
            model.parameters(),
            AdamConfig::adamw().lr(0.01).weight_decay(0.01),
        )?),
    };
    let mut losses = Vec::with_capacity(job.steps);
    for step in 0..job.steps {
        let (x, labels) =
            synthetic_data(job.seed * 1000 + step as u64, job.batch, features, classes);
        let graph = Graph::new();
        let x = graph.constant(Tensor::from_f64_slice(
            &x,
            &[job.batch, features],
            job.dtype,
        )?);
        let loss = model.forward(&x)?.try_cross_entropy(&labels)?;
        losses.push(loss.value().try_item()?.to_bits());
        let mut grads = loss.backward()?;
        clip_grad_norm(&mut grads, 5.0, 2.0)?;
        optimizer.step(&grads)?;
    }
    Ok(Outcome {
        losses,
        parameters: model
            .parameters()
            .into_iter()
            .map(|(name, p)| (name, bits(&p.value())))
            .collect(),
    })
}

fn jobs() -> Vec<Job> {
    let job = |seed, sizes: &[usize], activation, dtype, batch, algorithm| Job {
        seed,
        sizes: sizes.to_vec(),
        activation,
        dropout: 0.0,
        dtype,
        batch,
        steps: 8,
        algorithm,
    };
    vec![
        job(
            1,
            &[4, 16, 3],
            Activation::Relu,
            DType::F32,
            32,
            Algorithm::SgdMomentum,
        ),
        Job {
            dropout: 0.1,
            ..job(
                2,
                &[8, 32, 32, 4],
                Activation::Gelu,
                DType::F32,
                24,
                Algorithm::Adam,
            )
        },
        job(
            3,
            &[5, 12, 3],
            Activation::Tanh,
            DType::F64,
            16,
            Algorithm::AdamW,
        ),
        job(
            4,
            &[6, 10, 10, 5],
            Activation::Silu,
            DType::F64,
            20,
            Algorithm::SgdMomentum,
        ),
        // Large enough for the parallel kernels (rayon's pool is shared by
        // every thread): 4096 x 64 activations reach PARALLEL_THRESHOLD.
        Job {
            steps: 3,
            ..job(
                5,
                &[64, 64, 10],
                Activation::Relu,
                DType::F32,
                PARALLEL_THRESHOLD / 64,
                Algorithm::Adam,
            )
        },
    ]
}

/// Every job run on its own thread, all at once (twice over, so identical
/// jobs also run side by side), gives bit for bit what it gives alone.
#[test]
fn independent_training_jobs_are_bit_identical_on_threads() -> Result<()> {
    let jobs = jobs();
    let alone: Vec<Outcome> = jobs.iter().map(train).collect::<Result<_>>()?;
    let on_threads: Vec<Outcome> = thread::scope(|scope| {
        let handles: Vec<_> = jobs
            .iter()
            .chain(jobs.iter())
            .map(|job| scope.spawn(move || train(job)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a training thread panicked"))
            .collect::<Result<_>>()
    })?;
    eprintln!(
        "{} jobs ({} threads at once) reproduced bit for bit",
        jobs.len(),
        on_threads.len()
    );
    for (i, outcome) in on_threads.iter().enumerate() {
        let job = &jobs[i % jobs.len()];
        let expected = &alone[i % jobs.len()];
        assert_eq!(outcome, expected, "job {job:?} differs on thread {i}");
    }
    // The jobs really trained: the loss moved.
    for (job, outcome) in jobs.iter().zip(&alone) {
        assert_ne!(
            outcome.losses.first(),
            outcome.losses.last(),
            "job {job:?} did not train"
        );
    }
    Ok(())
}

/// The mean cross-entropy of `model` on `rows` of the data, and its
/// parameter gradients.
fn shard_gradients(
    model: &Mlp,
    x: &[f64],
    labels: &[usize],
    rows: std::ops::Range<usize>,
    dtype: DType,
) -> Result<Gradients> {
    let features = model.sizes()[0];
    let graph = Graph::new();
    let shard = &x[rows.start * features..rows.end * features];
    let input = graph.constant(Tensor::from_f64_slice(
        shard,
        &[rows.len(), features],
        dtype,
    )?);
    let loss = model.forward(&input)?.try_cross_entropy(&labels[rows])?;
    loss.backward()
}

/// Data parallelism: each thread takes a shard of the batch (of unequal
/// sizes) on its own graph, its mean loss's gradients are scaled by its share
/// of the batch, and the sum equals the full-batch gradient; three SGD steps
/// that way land where three full-batch steps do.
#[test]
fn data_parallel_step_matches_the_full_batch() -> Result<()> {
    for (dtype, tolerance) in [(DType::F64, 1e-12), (DType::F32, 2e-6)] {
        let build = || {
            Mlp::builder(&[6, 16, 16, 4])
                .activation(Activation::Tanh)
                .dtype(dtype)
                .seed(11)
                .build()
        };
        let (parallel_model, full_model) = (build()?, build()?);
        let config = SgdConfig::new(0.1).momentum(0.9);
        let mut parallel_sgd = Sgd::new(parallel_model.parameters(), config.clone())?;
        let mut full_sgd = Sgd::new(full_model.parameters(), config)?;
        let batch = 30;
        let shards = [0..12, 12..22, 22..30];
        for step in 0..3 {
            let (x, labels) = synthetic_data(100 + step, batch, 6, 4);
            let full = shard_gradients(&full_model, &x, &labels, 0..batch, dtype)?;
            let mut summed = thread::scope(|scope| {
                let handles: Vec<_> = shards
                    .iter()
                    .map(|rows| {
                        let (model, x, labels) = (&parallel_model, &x, &labels);
                        scope.spawn(move || -> Result<Gradients> {
                            let mut grads = shard_gradients(model, x, labels, rows.clone(), dtype)?;
                            grads.scale(rows.len() as f64 / batch as f64);
                            Ok(grads)
                        })
                    })
                    .collect();
                let mut parts = handles
                    .into_iter()
                    .map(|h| h.join().expect("a shard thread panicked"));
                let mut total = parts.next().expect("three shards")?;
                for part in parts {
                    total.accumulate(&part?)?;
                }
                Ok::<_, Error>(total)
            })?;
            for ((name, p), (_, q)) in parallel_model
                .parameters()
                .iter()
                .zip(full_model.parameters())
            {
                let (a, b) = (summed.of(p).to_f64_vec(), full.of(&q).to_f64_vec());
                let scale = b.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                for (k, (u, v)) in a.iter().zip(&b).enumerate() {
                    assert!(
                        (u - v).abs() <= tolerance * scale,
                        "{dtype:?} step {step}: {name}[{k}]: data-parallel {u} vs full batch {v}"
                    );
                }
            }
            // The summed gradients drive an optimizer like any others.
            clip_grad_norm(&mut summed, 1e9, 2.0)?;
            parallel_sgd.step(&summed)?;
            full_sgd.step(&full)?;
        }
        for ((name, p), (_, q)) in parallel_model
            .parameters()
            .iter()
            .zip(full_model.parameters())
        {
            let (a, b) = (p.value().to_f64_vec(), q.value().to_f64_vec());
            for (k, (u, v)) in a.iter().zip(&b).enumerate() {
                assert!(
                    (u - v).abs() <= 10.0 * tolerance * (1.0 + v.abs()),
                    "{dtype:?}: after 3 steps {name}[{k}]: data-parallel {u} vs full batch {v}"
                );
            }
        }
    }
    Ok(())
}

/// One model shared by reference across threads: concurrent forward and
/// backward passes read the parameters without interfering, and each
/// thread's gradients equal those computed alone.
#[test]
fn a_shared_model_serves_concurrent_graphs() -> Result<()> {
    let model = Mlp::builder(&[5, 8, 3]).dtype(DType::F64).seed(3).build()?;
    let inputs: Vec<(Vec<f64>, Vec<usize>)> =
        (0..6).map(|i| synthetic_data(200 + i, 10, 5, 3)).collect();
    let alone: Vec<Gradients> = inputs
        .iter()
        .map(|(x, labels)| shard_gradients(&model, x, labels, 0..10, DType::F64))
        .collect::<Result<_>>()?;
    let shared: Vec<Gradients> = thread::scope(|scope| {
        let handles: Vec<_> = inputs
            .iter()
            .map(|(x, labels)| {
                let model = &model;
                scope.spawn(move || shard_gradients(model, x, labels, 0..10, DType::F64))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a thread panicked"))
            .collect::<Result<_>>()
    })?;
    for (i, (a, b)) in alone.iter().zip(&shared).enumerate() {
        for (name, p) in model.parameters() {
            assert_eq!(
                bits(&a.of(&p)),
                bits(&b.of(&p)),
                "input {i}: gradient of {name}"
            );
        }
    }
    Ok(())
}

/// Reductions big enough for the parallel kernels give the same bits on
/// every run, however rayon happens to split the work (float addition is
/// not associative, so the partial sums must be formed and merged in a
/// fixed order). Several threads run them at once to vary the scheduling.
#[test]
fn parallel_reductions_are_bit_identical_from_run_to_run() -> Result<()> {
    // [1031, 257]: above PARALLEL_THRESHOLD, reduced over its leading axis.
    let shape = [1031, 257];
    assert!(shape[0] * shape[1] >= PARALLEL_THRESHOLD);
    let n: usize = shape.iter().product();
    let data: Vec<f64> = (0..n)
        .map(|i| ((i as f64 * 0.618_034).fract() - 0.5) * 3.0)
        .collect();
    let x = Tensor::from_f64_slice(&data, &shape, DType::F64)?;
    let weights = Tensor::from_f64_slice(
        &data.iter().map(|v| 0.5 + v.abs()).collect::<Vec<_>>(),
        &shape,
        DType::F64,
    )?;
    type Reduction =
        for<'g> fn(&retrograd::Var<'g>, &retrograd::Var<'g>) -> Result<retrograd::Var<'g>>;
    let reductions: [(&str, Reduction); 6] = [
        ("sum_axes [0]", |x, _| x.try_sum_axes(&[0], false)),
        ("mean_axes [0]", |x, _| x.try_mean_axes(&[0], true)),
        ("var [0]", |x, _| x.try_var(&[0], 1.0, false)),
        ("logsumexp [0]", |x, _| x.try_logsumexp(&[0], false)),
        ("mse_loss", |x, w| x.try_mse_loss(w)),
        ("layer_norm weight and bias", |x, w| {
            // Their gradients sum over the 1031 rows.
            let weight = w.try_narrow(0, 0, 1)?.try_reshape(&[257])?;
            let bias = w.try_narrow(0, 1, 1)?.try_reshape(&[257])?;
            x.try_layer_norm(&[257], Some(&weight), Some(&bias), 1e-5)
        }),
    ];
    let run = |reduce: Reduction| -> Result<(Vec<u64>, Vec<u64>)> {
        let graph = Graph::new();
        let xv = graph.variable(x.clone());
        let wv = graph.variable(weights.clone());
        let y = reduce(&xv, &wv)?;
        let seed = graph.constant(y.value().map_f64(|v| 1.0 + 0.25 * v.sin()));
        let grads = y.try_mul(&seed)?.sum().backward()?;
        let mut grad_bits = bits(&grads.wrt(&xv));
        grad_bits.extend(bits(&grads.wrt(&wv)));
        Ok((bits(y.value()), grad_bits))
    };
    for (name, reduce) in reductions {
        let reference = run(reduce)?;
        let differing: usize = thread::scope(|scope| {
            let handles: Vec<_> = (0..4)
                .map(|_| {
                    scope.spawn(|| -> Result<usize> {
                        let mut differing = 0;
                        for _ in 0..6 {
                            differing += usize::from(run(reduce)? != reference);
                        }
                        Ok(differing)
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a reduction thread panicked"))
                .sum::<Result<usize>>()
        })?;
        assert_eq!(
            differing, 0,
            "{name}: {differing} of 24 runs gave other bits"
        );
    }
    Ok(())
}
