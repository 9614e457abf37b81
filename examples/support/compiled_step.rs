//! `--compile` for the classifier jobs (`train_digits`, `train_mnist_cnn`,
//! alone and under `--ddp`): the model's forward and cross-entropy are
//! captured once per batch shape (`retrograd::compile`: the full batches
//! and an epoch's smaller last one) and replayed at every step, fused and
//! without recording a node; the logits come back as a named output for
//! the accuracy, batch norm's running statistics as a state update.
//!
//! Under `--ddp` the step runs through `DataParallel::run_compiled`: each
//! gradient bucket's all-reduce starts as soon as the replay has its
//! gradients final, while the backward still runs, as in the eager step.
//!
//! The compiled function owns a handle on the model ([`Shared`]), so the
//! job keeps the model (switching it to eval mode for testing, saving it)
//! while the step holds it too. Run `k` of the step draws dropout's masks
//! from the job's seed and `k`, so a resumed run draws what the
//! uninterrupted one would.

use std::sync::{Arc, RwLock, RwLockReadGuard};

#[cfg(feature = "mpi")]
use retrograd::distributed::{Communicator, DataParallel};
use retrograd::nn::{accuracy, Buffer, Forward, Module, Parameter, RandomStream};
use retrograd::ops::nn::CrossEntropyOptions;
use retrograd::Gradients;
use retrograd::{compile, CompileOptions, Compiled, Graph, Result, StepOutput, Tensor, Var};

/// A model behind a shared handle: clones are the same model (its
/// parameters, buffers, random streams and training mode).
pub struct Shared<M>(Arc<RwLock<M>>);

impl<M> Shared<M> {
    pub fn new(model: M) -> Self {
        Shared(Arc::new(RwLock::new(model)))
    }

    /// The model, to read.
    pub fn get(&self) -> RwLockReadGuard<'_, M> {
        self.0.read().unwrap_or_else(|p| p.into_inner())
    }
}

impl<M> Clone for Shared<M> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<M: Module> Module for Shared<M> {
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        self.get().visit_parameters(prefix, f)
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        self.get().visit_buffers(prefix, f)
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        self.get().visit_random_streams(prefix, f)
    }
    fn set_training(&mut self, training: bool) {
        self.0
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .set_training(training)
    }
}

impl<M: Forward> Forward for Shared<M> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.get().forward(x)
    }
}

/// The function a compiled classifier step runs.
type StepFn = Box<dyn for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>>;

fn step_fn(f: impl for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>> + 'static) -> StepFn {
    Box::new(f)
}

/// What one training step reports.
pub struct StepResult {
    pub loss: f64,
    /// The share of the batch classified right.
    pub accuracy: f64,
    pub grads: Gradients,
}

/// A classifier's compiled training step: `cross_entropy(model(images), labels)`.
pub struct CompiledClassifier {
    step: Compiled<StepFn>,
    streams: Vec<RandomStream>,
}

impl CompiledClassifier {
    /// The step of `model` (in training mode when it captures), its
    /// dropout masks drawn from `seed` and the step's index.
    pub fn new<M: Forward + 'static>(model: &Shared<M>, seed: u64) -> Self {
        let replica = model.clone();
        let ce = CrossEntropyOptions::default();
        let f = step_fn(move |g: &Graph, x: &[Var<'_>]| {
            let logits = replica.forward(&x[0])?;
            g.capture_output("logits", &logits);
            logits.try_cross_entropy_input(&x[1], &ce)
        });
        let options = CompileOptions::new().params(model.parameters()).seed(seed);
        let streams = model.random_streams().into_iter().map(|(_, s)| s).collect();
        CompiledClassifier {
            step: compile(f, options),
            streams,
        }
    }

    /// Runs step `index` of the run (counted from 0) on a batch.
    pub fn run(&mut self, index: u64, images: Tensor, labels: &[usize]) -> Result<StepResult> {
        self.run_with(index, images, labels, |step, inputs| step.run(inputs))
    }

    /// Runs step `index` on this rank's batch under `ddp`: the gradients
    /// come back averaged over ranks, each bucket's all-reduce started
    /// while the step's backward still runs (`DataParallel::run_compiled`).
    #[cfg(feature = "mpi")]
    pub fn run_data_parallel<M: Module, C: Communicator>(
        &mut self,
        ddp: &mut DataParallel<M, C>,
        index: u64,
        images: Tensor,
        labels: &[usize],
    ) -> Result<StepResult> {
        self.run_with(index, images, labels, |step, inputs| {
            ddp.run_compiled(step, inputs)
        })
    }

    fn run_with(
        &mut self,
        index: u64,
        images: Tensor,
        labels: &[usize],
        run: impl for<'s> FnOnce(&'s mut Compiled<StepFn>, &[Tensor]) -> Result<&'s mut StepOutput>,
    ) -> Result<StepResult> {
        let ids: Vec<i64> = labels.iter().map(|&l| l as i64).collect();
        let ids = Tensor::from_vec(ids, &[labels.len()])?;
        self.step.set_run_count(index);
        // A capture runs the model's forward once, which draws from its
        // random streams: put them back, so that the training states of a
        // compiled run do not depend on when it captured.
        let positions: Vec<u64> = self.streams.iter().map(RandomStream::position).collect();
        let captures = self.step.capture_count();
        let result = {
            let out = run(&mut self.step, &[images, ids])?;
            let logits = out.output("logits").expect("the step names its logits");
            StepResult {
                loss: out.loss(),
                accuracy: accuracy(logits, labels)?,
                grads: out.grads().clone(),
            }
        };
        if self.step.capture_count() != captures {
            for (s, &p) in self.streams.iter().zip(&positions) {
                s.set_position(p);
            }
        }
        Ok(result)
    }
}
