//! [`DataParallel`]: one model replica per rank, gradients averaged across
//! ranks in buckets while backward runs (PyTorch's DistributedDataParallel).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use super::agreement::{all_succeeded, same_on_every_rank};
use super::buckets::{BucketPlan, DEFAULT_BUCKET_BYTES};
use super::comm::{BucketSink, Communicator, FlatBuf};
use super::wire;
use retrograd_engine::autograd::Gradients;
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::compile::{Capture, Compiled, GradTarget, StepOutput};
use retrograd_engine::core::graph::{Graph, Var};
use retrograd_engine::io::{load_checkpoint_with_metadata, save_checkpoint_with_metadata};
use retrograd_engine::nn::{Buffer, Forward, Module, Parameter};
use retrograd_engine::optim::Optimizer;
use retrograd_engine::tensor::{Dims, Tensor};

/// A model trained data-parallel: every rank holds a replica, computes
/// gradients on its own shard of the batch, and [`backward`](Self::backward)
/// returns the gradients averaged over ranks, so an optimizer step keeps the
/// replicas identical.
///
/// - **Construction** checks that every rank's model has the same
///   parameter and buffer names, shapes and dtypes (a difference is an
///   [`Error::ReplicaMismatch`] on every rank, naming the first one), then
///   copies rank 0's parameters and buffers to every rank.
/// - **Gradients** travel in buckets (about 25 MiB, the first 1 MiB,
///   parameters in reverse order, one dtype each). Backward reports each parameter's gradient as
///   soon as it is final ([`Var::backward_notifying`]); a bucket's
///   non-blocking all-reduce starts once all its gradients are final (and
///   the buckets before it started: every rank starts them in the same
///   order), so communication overlaps the rest of the backward sweep. The
///   last bucket, full only when the sweep is done, is all-reduced at once.
///   Every parameter gets a gradient, zero if no rank used it.
/// - **Gradient accumulation**: backward passes inside
///   [`no_sync`](Self::no_sync) return local gradients and keep their sum;
///   the next synchronised backward adds it in before averaging.
/// - **Buffers follow rank 0**: after every synchronised backward, every
///   rank's buffers (batch norm's running statistics) are replaced by rank
///   0's. PyTorch broadcasts them before each forward instead; either way the
///   replicas are identical at each optimizer step and checkpoint.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, Graph, Tensor, distributed::{DataParallel, SingleProcess}};
/// use retrograd::nn::{Linear, Module};
/// use retrograd::optim::{Optimizer, Sgd, SgdConfig};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let model = Linear::builder(2, 1).dtype(DType::F64).build_with(&mut rng)?;
/// let mut ddp = DataParallel::new(model, SingleProcess)?;
/// let mut opt = Sgd::new(ddp.module().parameters(), SgdConfig::new(0.1))?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?);
/// let loss = ddp.forward(&x)?.sum();
/// let grads = ddp.backward(&loss)?; // averaged over ranks (here one)
/// opt.step(&grads)?;
/// assert_eq!(ddp.size(), 1);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct DataParallel<M: Module, C: Communicator> {
    module: M,
    comm: C,
    params: Vec<(String, Parameter)>,
    /// Parameter index by id.
    index: HashMap<u64, usize>,
    buffers: Vec<(String, Buffer)>,
    plan: BucketPlan,
    send: Vec<FlatBuf>,
    recv: Vec<FlatBuf>,
    no_sync: bool,
    /// Local gradient sums of `no_sync` passes, by parameter index.
    accumulated: Vec<Option<Tensor>>,
}

impl<M: Module, C: Communicator> DataParallel<M, C> {
    /// Wraps `module` with buckets of [`DEFAULT_BUCKET_BYTES`]. Collective:
    /// every rank calls it.
    pub fn new(module: M, comm: C) -> Result<Self> {
        Self::with_bucket_bytes(module, comm, DEFAULT_BUCKET_BYTES)
    }

    /// Wraps `module` with buckets of at most `bucket_bytes` (a parameter
    /// larger than that travels alone). Collective.
    pub fn with_bucket_bytes(module: M, comm: C, bucket_bytes: usize) -> Result<Self> {
        let params = module.parameters();
        let buffers = module.buffers();
        check_replicas(&comm, &params, &buffers)?;
        let plan = BucketPlan::new(&params, bucket_bytes)?;
        broadcast_from_rank0(&comm, &params, &buffers, true)?;
        let send = plan
            .buckets
            .iter()
            .map(|b| FlatBuf::zeros(b.dtype, b.len))
            .collect::<Result<Vec<_>>>()?;
        let recv = send.clone();
        Ok(DataParallel {
            accumulated: vec![None; params.len()],
            index: params
                .iter()
                .enumerate()
                .map(|(i, (_, p))| (p.id(), i))
                .collect(),
            module,
            comm,
            params,
            buffers,
            plan,
            send,
            recv,
            no_sync: false,
        })
    }

    /// The wrapped model.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The wrapped model, mutably (`set_training`). Its parameters must
    /// keep their names, shapes and dtypes.
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The communicator.
    pub fn comm(&self) -> &C {
        &self.comm
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The number of gradient buckets (all-reduces per synchronised step).
    pub fn bucket_count(&self) -> usize {
        self.plan.buckets.len()
    }

    /// The bytes of gradients each rank all-reduces per synchronised step.
    pub fn bytes_per_step(&self) -> usize {
        self.plan.bytes()
    }

    /// Runs `f` with synchronisation off: its backward passes return this
    /// rank's own gradients and add them to a local sum, which the next
    /// synchronised [`backward`](Self::backward) adds in before averaging
    /// (gradient accumulation without communicating every micro-batch).
    pub fn no_sync<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        let was = std::mem::replace(&mut self.no_sync, true);
        let out = f(self);
        self.no_sync = was;
        out
    }

    /// Backpropagates from the one-element `loss` and returns gradients
    /// whose parameter entries ([`Gradients::of`], what optimizers read)
    /// are averaged over ranks, then makes every rank's buffers rank 0's.
    /// Collective, unless inside [`no_sync`](Self::no_sync). An error
    /// (here or on another rank) leaves the ranks out of step: end the run
    /// (see `distributed::run` with feature `mpi`).
    pub fn backward(&mut self, loss: &Var<'_>) -> Result<Gradients> {
        let graph = loss.graph();
        let leaves: Vec<Var<'_>> = self.params.iter().map(|(_, p)| graph.param(p)).collect();
        if self.no_sync {
            let grads = loss.backward()?;
            self.accumulate(&grads)?;
            return Ok(grads);
        }
        let mut result = None;
        self.reduce_as_final(&mut |on_final| {
            result = Some(loss.backward_notifying(&leaves, on_final)?);
            Ok(())
        })?;
        let mut grads = result.expect("produce succeeded, so backward ran");
        self.write_averages(&mut grads, |i| leaves[i].value_id())?;
        self.sync_buffers()?;
        Ok(grads)
    }

    /// Runs a [compiled step](retrograd_engine::compile) on this rank's `inputs` and
    /// returns its output with the parameters' gradients averaged over
    /// ranks. As in [`backward`](Self::backward), each bucket's all-reduce
    /// starts while the backward still runs: the replay tells each
    /// gradient the moment it is final ([`Compiled::run_notifying`]; the
    /// capture knows after which node, [`Capture::gradient_schedule`](retrograd_engine::compile::Capture::gradient_schedule)),
    /// and a bucket starts once all its gradients are in (and the buckets
    /// before it started). It returns once every all-reduce is done, so an
    /// optimizer update after it waits for them; then every rank's buffers
    /// are made rank 0's. The averages are the bits
    /// [`backward`](Self::backward) and
    /// [`reduce_gradients`](Self::reduce_gradients) give. The step should
    /// return the gradients of this model's parameters (its default, every
    /// parameter it uses, or `CompileOptions::params(ddp.module().parameters())`);
    /// a parameter it has no gradient for is averaged as zero, as an unused one.
    /// Collective, unless inside [`no_sync`](Self::no_sync), where the step's
    /// own gradients are added to the local sum and returned as they are.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};
    /// use retrograd::distributed::{DataParallel, SingleProcess};
    /// use retrograd::nn::{Forward, Linear, Module};
    /// use rand::SeedableRng;
    /// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    /// let model = Linear::builder(2, 1).dtype(DType::F64).build_with(&mut rng)?;
    /// let mut ddp = DataParallel::new(model, SingleProcess)?;
    /// let replica = ddp.module().clone(); // shares the parameters
    /// let mut step = compile(
    ///     move |_: &Graph, x: &[Var<'_>]| replica.forward(&x[0])?.try_sum(),
    ///     CompileOptions::new(),
    /// );
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?;
    /// let out = ddp.run_compiled(&mut step, &[x])?; // averaged over ranks (here one)
    /// let w = &ddp.module().parameters()[0].1;
    /// assert_eq!(out.grads().of(w).to_f64_vec(), vec![1.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn run_compiled<'s, F>(
        &mut self,
        step: &'s mut Compiled<F>,
        inputs: &[Tensor],
    ) -> Result<&'s mut StepOutput>
    where
        F: for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>,
    {
        if self.no_sync {
            let out = step.run(inputs)?;
            self.accumulate(out.grads())?;
            return Ok(out);
        }
        let index = std::mem::take(&mut self.index);
        let mut told = vec![false; self.params.len()];
        let (mut step, mut out) = (Some(step), None);
        let reduced = self.reduce_as_final(&mut |on_final| {
            let step = step.take().expect("the communicator produces once");
            let mut on_grad = |target: GradTarget, grad: Option<&Tensor>| match target {
                GradTarget::Param(id) => match index.get(&id) {
                    Some(&i) if !told[i] => {
                        told[i] = true;
                        on_final(i, grad)
                    }
                    _ => Ok(()),
                },
                GradTarget::Input(_) => Ok(()),
            };
            out = Some(step.run_notifying(inputs, &mut on_grad)?);
            // Parameters the step has no gradient for: zero, as unused ones.
            for (i, told) in told.iter_mut().enumerate() {
                if !std::mem::replace(told, true) {
                    on_final(i, None)?;
                }
            }
            Ok(())
        });
        self.index = index;
        reduced?;
        let out = out.expect("produce succeeded, so the step ran");
        self.write_averages(out.grads_mut(), |_| None)?;
        self.sync_buffers()?;
        Ok(out)
    }

    /// Where [`run_compiled`](Self::run_compiled) starts each bucket's
    /// all-reduce in a run of `capture` (a capture of the step it runs:
    /// `step.capture()`): by bucket, the node of the capture's graph after
    /// which it starts (`None`: before the first step). A bucket starts
    /// once the step has all its gradients final and the buckets before it
    /// started; one with a parameter the step has no gradient for starts
    /// after the step's last node.
    pub fn bucket_launches(&self, capture: &Capture) -> Vec<Option<u32>> {
        let plan = &self.plan;
        let mut remaining: Vec<usize> = plan.buckets.iter().map(|b| b.members.len()).collect();
        let mut told = vec![false; self.params.len()];
        let mut launches = Vec::with_capacity(plan.buckets.len());
        let mut tell = |i: usize, node: Option<u32>, launches: &mut Vec<Option<u32>>| {
            if std::mem::replace(&mut told[i], true) {
                return;
            }
            remaining[plan.place[i].0] -= 1;
            while launches.len() < remaining.len() && remaining[launches.len()] == 0 {
                launches.push(node);
            }
        };
        for (target, node) in capture.gradient_schedule() {
            if let GradTarget::Param(id) = target
                && let Some(&i) = self.index.get(&id)
            {
                tell(i, node, &mut launches);
            }
        }
        let last = (capture.graph().len() as u32).checked_sub(1);
        for i in 0..self.params.len() {
            tell(i, last, &mut launches);
        }
        launches
    }

    /// Averages gradients computed elsewhere over ranks in place, through
    /// the same buckets as [`backward`](Self::backward), then makes every
    /// rank's buffers rank 0's. The buckets start once all are given, after
    /// the computation: a compiled step's go through
    /// [`run_compiled`](Self::run_compiled) instead, which starts them while
    /// its backward runs. Collective, unless inside
    /// [`no_sync`](Self::no_sync), where the gradients are added to the
    /// local sum and left as they are.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};
    /// use retrograd::distributed::{DataParallel, SingleProcess};
    /// use retrograd::nn::{Forward, Linear, Module};
    /// use rand::SeedableRng;
    /// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    /// let model = Linear::builder(2, 1).dtype(DType::F64).build_with(&mut rng)?;
    /// let mut ddp = DataParallel::new(model, SingleProcess)?;
    /// let replica = ddp.module().clone(); // shares the parameters
    /// let mut step = compile(
    ///     move |_: &Graph, x: &[Var<'_>]| replica.forward(&x[0])?.try_sum(),
    ///     CompileOptions::new(),
    /// );
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[1, 2])?;
    /// let out = step.run(&[x])?;
    /// ddp.reduce_gradients(out.grads_mut())?; // averaged over ranks (here one)
    /// let w = &ddp.module().parameters()[0].1;
    /// assert_eq!(out.grads().of(w).to_f64_vec(), vec![1.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn reduce_gradients(&mut self, grads: &mut Gradients) -> Result<()> {
        if self.no_sync {
            return self.accumulate(grads);
        }
        let ids: Vec<u64> = self.params.iter().map(|(_, p)| p.id()).collect();
        {
            let grads = &*grads;
            // Parameters in reverse order, as a backward sweep finishes
            // them, so the buckets start in their order.
            self.reduce_as_final(&mut |on_final| {
                for (i, id) in ids.iter().enumerate().rev() {
                    on_final(i, grads.param_grad(*id))?;
                }
                Ok(())
            })?;
        }
        self.write_averages(grads, |_| None)?;
        self.sync_buffers()
    }

    /// Adds the parameters' gradients in `grads` to the local sums of
    /// `no_sync` passes.
    fn accumulate(&mut self, grads: &Gradients) -> Result<()> {
        for (i, (_, p)) in self.params.iter().enumerate() {
            if let Some(g) = grads.get_param(p) {
                self.accumulated[i] = Some(add(self.accumulated[i].take(), g)?);
            }
        }
        Ok(())
    }

    /// Runs `produce`, which reports each parameter's gradient (by index)
    /// once final; each bucket's all-reduce starts as soon as all its
    /// gradients are in (plus the local sums of `no_sync` passes).
    fn reduce_as_final(
        &mut self,
        produce: &mut dyn FnMut(&mut OnFinal<'_>) -> Result<()>,
    ) -> Result<()> {
        let plan = &self.plan;
        let accumulated = &mut self.accumulated;
        let mut pending: Vec<Option<Tensor>> = vec![None; self.params.len()];
        let mut remaining: Vec<usize> = plan.buckets.iter().map(|b| b.members.len()).collect();
        let mut next = 0;
        self.comm
            .all_reduce_overlapped(&mut self.send, &mut self.recv, &mut |sink| {
                let mut on_final = |i: usize, grad: Option<&Tensor>| -> Result<()> {
                    pending[i] = match (grad, accumulated[i].take()) {
                        (Some(g), acc @ Some(_)) => Some(add(acc, g)?),
                        (g, acc) => g.cloned().or(acc),
                    };
                    remaining[plan.place[i].0] -= 1;
                    start_ready(sink, plan, &remaining, &mut next, &mut pending)?;
                    sink.progress();
                    Ok(())
                };
                produce(&mut on_final)
            })
    }

    /// Sets every parameter's gradient in `grads` to the all-reduced sum
    /// over ranks divided by their number (`leaf`: the value id of the
    /// parameter's leaf in a graph, if any).
    fn write_averages(
        &self,
        grads: &mut Gradients,
        leaf: impl Fn(usize) -> Option<usize>,
    ) -> Result<()> {
        let (plan, size) = (&self.plan, self.comm.size());
        for (i, (_, p)) in self.params.iter().enumerate() {
            let (b, off, n) = plan.place[i];
            // Written straight into (recycled) tensor storage: a fresh
            // megabyte `Vec` per parameter per step page-faults.
            let shape = p.shape();
            if shape.iter().product::<usize>() != n {
                // The parameter was replaced by one of another size since
                // the buckets were planned.
                return Err(Error::ElementCount {
                    op: "DataParallel::backward",
                    len: n,
                    shape,
                });
            }
            let shape = Dims::from_vec(shape);
            let avg = match &self.recv[b] {
                FlatBuf::F32(v) => {
                    let d = size as f32;
                    Tensor::from_exact_iter(shape, v[off..off + n].iter().map(|x| x / d))
                }
                FlatBuf::F64(v) => {
                    let d = size as f64;
                    Tensor::from_exact_iter(shape, v[off..off + n].iter().map(|x| x / d))
                }
            };
            grads.set_param_grad(p.id(), leaf(i), avg);
        }
        Ok(())
    }

    /// Makes every rank's buffers rank 0's (done after every synchronised
    /// backward). Collective.
    pub fn sync_buffers(&self) -> Result<()> {
        if self.buffers.is_empty() || self.comm.size() == 1 {
            return Ok(());
        }
        broadcast_from_rank0(&self.comm, &[], &self.buffers, false)
    }

    /// Rank 0 saves the model (and `optimizer`'s state, and `metadata`: an
    /// epoch, a step) to `path`, atomically; the other ranks wait for it and
    /// get its error if it fails. Collective.
    pub fn save_checkpoint(
        &self,
        path: impl AsRef<Path>,
        optimizer: Option<&dyn Optimizer>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<()> {
        let saved = if self.rank() == 0 {
            save_checkpoint_with_metadata(path, &self.module, optimizer, metadata)
        } else {
            Ok(())
        };
        all_succeeded(&self.comm, "DataParallel::save_checkpoint", saved)
    }

    /// Every rank loads the model (and `optimizer`'s state) from `path`
    /// (which each must be able to read: a shared file system, or a copy
    /// per machine) and returns the program's metadata; if any rank fails,
    /// every rank gets an error naming it, and the replicas are left
    /// unchanged where loading failed. Collective.
    pub fn load_checkpoint(
        &self,
        path: impl AsRef<Path>,
        optimizer: Option<&mut dyn Optimizer>,
    ) -> Result<BTreeMap<String, String>> {
        let loaded = load_checkpoint_with_metadata(path, &self.module, optimizer);
        all_succeeded(&self.comm, "DataParallel::load_checkpoint", loaded)
    }
}

impl<M: Forward, C: Communicator> DataParallel<M, C> {
    /// The wrapped model's forward (a model whose forward takes other
    /// inputs is called through [`module`](Self::module)).
    pub fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        self.module.forward(x)
    }
}

/// Told each parameter's gradient (by index) once it is final.
type OnFinal<'a> = dyn FnMut(usize, Option<&Tensor>) -> Result<()> + 'a;

/// Starts every bucket whose gradients are all final, in index order, as
/// far as the next one that is not.
fn start_ready(
    sink: &mut dyn BucketSink,
    plan: &BucketPlan,
    remaining: &[usize],
    next: &mut usize,
    pending: &mut [Option<Tensor>],
) -> Result<()> {
    while *next < plan.buckets.len() && remaining[*next] == 0 {
        let bucket = &plan.buckets[*next];
        sink.start(*next, &mut |buf| {
            for &i in &bucket.members {
                let (_, off, n) = plan.place[i];
                let grad = pending[i].take();
                match buf {
                    FlatBuf::F32(v) => copy_into(&mut v[off..off + n], grad.as_ref())?,
                    FlatBuf::F64(v) => copy_into(&mut v[off..off + n], grad.as_ref())?,
                }
            }
            Ok(())
        })?;
        *next += 1;
    }
    Ok(())
}

/// Writes a gradient (zeros if none) into its place in a bucket.
fn copy_into<T: retrograd_engine::tensor::DataType + Default>(
    dst: &mut [T],
    grad: Option<&Tensor>,
) -> Result<()> {
    match grad {
        Some(g) => {
            let src = g.as_slice::<T>()?;
            if src.len() != dst.len() {
                return Err(Error::shape_mismatch(
                    "DataParallel::backward",
                    &[dst.len()],
                    g.shape(),
                ));
            }
            dst.copy_from_slice(src);
        }
        None => dst.fill(T::default()),
    }
    Ok(())
}

/// `acc + g` (`g` when there is no sum yet).
fn add(acc: Option<Tensor>, g: &Tensor) -> Result<Tensor> {
    match acc {
        None => Ok(g.clone()),
        Some(acc) => retrograd_engine::kernels::elementwise::zip_assign(
            "DataParallel::no_sync",
            acc,
            g,
            retrograd_engine::kernels::functors::Add,
        ),
    }
}

/// One line per parameter and buffer: what every replica must agree on.
fn describe(params: &[(String, Parameter)], buffers: &[(String, Buffer)]) -> Vec<String> {
    let params = params.iter().map(|(name, p)| {
        format!(
            "parameter `{name}` of shape {:?} ({})",
            p.shape(),
            p.dtype()
        )
    });
    let buffers = buffers
        .iter()
        .map(|(name, b)| format!("buffer `{name}` of shape {:?} ({})", b.shape(), b.dtype()));
    params.chain(buffers).collect()
}

/// Every rank gathers every rank's description and finds the lowest rank
/// that differs from rank 0 and its first difference: the same verdict
/// everywhere, so every rank returns the same error and none waits.
fn check_replicas<C: Communicator + ?Sized>(
    comm: &C,
    params: &[(String, Parameter)],
    buffers: &[(String, Buffer)],
) -> Result<()> {
    same_on_every_rank(comm, "DataParallel::new", &describe(params, buffers))
}

/// Copies rank 0's parameters (if `with_params`) and buffers to every rank.
fn broadcast_from_rank0<C: Communicator + ?Sized>(
    comm: &C,
    params: &[(String, Parameter)],
    buffers: &[(String, Buffer)],
    with_params: bool,
) -> Result<()> {
    if comm.size() == 1 {
        return Ok(());
    }
    let params = if with_params { params } else { &[] };
    let mut bytes = Vec::new();
    if comm.rank() == 0 {
        for (_, p) in params {
            wire::put(&mut bytes, &p.value())?;
        }
        for (_, b) in buffers {
            wire::put(&mut bytes, &b.value())?;
        }
    }
    comm.broadcast_bytes(0, &mut bytes)?;
    if comm.rank() != 0 {
        let mut pos = 0;
        for (_, p) in params {
            let value = wire::take(&bytes, &mut pos, &p.value())?;
            p.set(value)?;
        }
        for (_, b) in buffers {
            let value = wire::take(&bytes, &mut pos, &b.value())?;
            b.set(value)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
