//! Compiled steps: capture a function of input tensors (a model's forward
//! and loss) once, with its backward, and replay it for new values.
//!
//! ```
//! use retrograd::{compile, CompileOptions, DType, Graph, Tensor, Var};
//! use retrograd::nn::Parameter;
//!
//! let w = Parameter::new(Tensor::from_vec(vec![0.5f32, -1.0, 2.0], &[3, 1])?);
//! // loss = mean((x @ w - y)^2), gradients with respect to w.
//! let mut step = compile(
//!     |g: &Graph, x: &[Var<'_>]| {
//!         let err = x[0].try_matmul(&g.param(&w))?.try_sub(&x[1])?;
//!         Ok((&err * &err).mean())
//!     },
//!     CompileOptions::new().params([&w]),
//! );
//! let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 0.0, 1.0, 0.0], &[2, 3])?;
//! let y = Tensor::from_vec(vec![1.0f32, 0.0], &[2, 1])?;
//! let out = step.run(&[x.clone(), y.clone()])?;     // the first run captures
//! assert_eq!(out.loss(), 6.625);                     // errors 3.5 and -1.0
//! assert_eq!(out.grads().of(&w).to_vec::<f32>()?, vec![3.5, 6.0, 10.5]);
//! let out = step.run(&[x, y])?;                      // later runs replay
//! assert_eq!(out.loss(), 6.625);
//! println!("{}", step.capture().unwrap().explain()); // fusions, buffers, peak
//! # Ok::<(), retrograd::Error>(())
//! ```
//!
//! **Capture.** The first run with a new signature (the inputs' shapes and
//! dtypes, and the step's training mode) calls the function once on a
//! fresh graph whose leaves are the inputs, then records its backward into
//! the same graph as ordinary nodes, with each op's own `Var` formula: the
//! joint forward-backward graph, an ordinary retrograd [`Graph`] that
//! prints and draws like any other ([`Capture::graph`]). Lowering keeps what
//! the loss and the requested gradients depend on, runs a non-elementwise
//! op's backward through its fast rule (`backward_fast`, the eager sweep's
//! own path), sums the gradients of disjoint slices of one value in one
//! buffer (`slice_sum.rs`: the q, k and v heads of a fused projection),
//! fuses elementwise nodes into one pass over memory, and plans every
//! slot's life and every buffer ([`Capture::explain`]). [`Compiled::profile`]
//! times each of the resulting steps.
//!
//! **Replay.** A run binds the inputs, reads the parameters and module
//! state again, and runs the steps: no node is recorded, 0-d arithmetic
//! runs as a flat program over numbers, and every value a step makes is
//! written into its buffer of the memory plan (the same ones every run):
//! after its first runs a replay allocates nothing of its own
//! (`tests/no_growth.rs` counts; the one exception, inside the `gemm`
//! crate, is below).
//!
//! **Gradients as they are final.** Every slot is written once, so a
//! requested gradient is final the moment the step writing its slot is
//! done; the capture notes that step for each ([`Capture::gradient_schedule`]
//! gives the node), and [`Compiled::run_notifying`] hands each gradient to
//! a listener right there, while the rest of the backward runs. That is
//! how data-parallel training starts a bucket's all-reduce during a
//! compiled step's backward, as during an eager one
//! ([`DataParallel::run_compiled`](crate::distributed::DataParallel::run_compiled)).
//!
//! **Allocations inside `gemm`.** A replay's matrix products run through
//! the `gemm` crate (0.19.0, the newest release), which allocates inside
//! every product and frees before returning: `gemm_common::gemm::gemm_basic_generic`
//! makes a `vec![false; mc / MR]` (which lhs panels are packed) on every
//! call, a `dyn_stack::MemBuffer` for the packed right-hand side (and a
//! pre-packed left-hand side) whenever it packs them, and one more flag
//! vector per extra rayon thread. Only the left-hand side's packing
//! buffer comes from a reusable thread-local (`L2_SLAB`). The crate takes
//! no workspace from its caller: `gemm::gemm` has no `MemStack`/`DynStack`
//! argument, `gemm-common`'s public `gemm_basic_generic` is the same
//! function (the stack is made inside it), and no cargo feature changes
//! this (`std`, `rayon`, `f16`, `x86-v4`, `wasm-simd128-enable`,
//! `experimental-apple-amx`). So a replay allocates inside its products,
//! short-lived and the same count every run (6 for `tests/no_growth.rs`'s
//! MLP: three products, each a packing buffer then the flag vector); the
//! test fails on any other. Removing them needs a fork of the crate (or
//! products of our own).
//!
//! **How an op writes into a planned buffer.** Fused steps own their
//! kernels and write into their buffers directly. Every other op (matmul,
//! the fused nn ops, the fast backward rules) builds its outputs through
//! the kernel layer's one constructor, `Tensor::build`; before such a step
//! the replay *lends* that step's planned buffers to the builds of its
//! thread (`tensor::planned`), `build` takes a lent buffer of the right
//! dtype and length before it asks the recycling pool or the allocator,
//! and the replay takes back what was not used. We chose this over an
//! `into` form of each op (`matmul_into(out, a, b)`) because it needs no
//! change to any op, so the ~100 ops and every user op replay allocation-free
//! as they are, and the eager path stays the one path that is tested and
//! measured; it costs eager code one test of an empty list per build (in
//! the pool's thread-local, which every build already touches). A buffer is
//! lent only while nothing else holds it, so an op that builds a temporary
//! of the same size first, or a caller who keeps last run's gradient,
//! gets a correct fresh buffer (from the pool), never a shared one; the
//! value a step returned becomes that slot's buffer for the next run. Fusion never reorders floating-point
//! work, so a compiled step gives the bits of the eager step; only the
//! random masks differ: dropout (plain, or inside attention) draws fresh
//! ones every run from [`CompileOptions::seed`], the run's count
//! ([`Compiled::set_run_count`] sets it, for a resumed loop) and the op's
//! place among the step's random ops, the same mask in an op's forward
//! and its backward. The seed an op was recorded with does not matter.
//!
//! **State.** What the function reads that changes between runs
//! (parameters, module buffers registered with
//! [`Graph::capture_state`](crate::Graph::capture_state)) is read again at
//! every run. What it writes is a *state update*
//! ([`Graph::capture_update`](crate::Graph::capture_update)): a value of
//! the captured graph, computed at every run and handed to a closure that
//! stores it once the run is done. Batch norm in training mode updates its
//! running statistics so (the `batch_norm_running_stats` node, the eager
//! update's bits) and counts `num_batches_tracked` with an effect
//! ([`Graph::capture_effect`](crate::Graph::capture_effect)). Other values
//! the caller wants back (logits, for an accuracy) are named outputs
//! ([`Graph::capture_output`](crate::Graph::capture_output),
//! [`StepOutput::output`]).
//!
//! **What is fixed at capture**, as in `jax.jit`: control flow (an `if` on
//! a value runs once, at capture), every number and tensor the function
//! reads that is not an input, a parameter or registered state, the
//! shapes, the training mode of every layer (batch norm's and dropout's
//! behaviour), the momentum and eps of batch norm and the drop
//! probabilities. A value-dependent shape, an op that cannot take a fresh
//! seed, a backward pass inside the function and `create_graph` are
//! [`Error::NotReplayable`](crate::Error::NotReplayable). Gradients of
//! gradients stay eager.
//!
//! **Data held in ops.** A node replays on new input values, so an op
//! that carries data of its own (indices or targets stored in it, a class
//! weight tensor, a closure) would silently reuse the captured run's.
//! Every op declares what it holds
//! ([`Differentiable::holds`](crate::Differentiable::holds)); capture
//! refuses an op that holds data, or does not say, with
//! `Error::NotReplayable` naming it and why. `embedding`, `nll_loss` and
//! `cross_entropy` given their indices as the step's input `x[1]` (or its
//! tensor `x[1].value()`) take them as an input of the node (one rule for
//! every op with indices: `ops::nn::Indices`), so every run reads its
//! own; given a list, they are refused.
//!
//! **Where things are.** `ir.rs` holds the types the stages hand each
//! other (what a capture records of each backward formula, the fast rules
//! lowering picks, [`GradTarget`], and the lowered `Program` that plan and
//! replay read) and imports no stage, so imports run one way: `lower.rs`
//! imports `capture.rs` and the passes it runs in turn (`slice_sum.rs`,
//! `fuse.rs`, `plan.rs`), none of which imports `lower.rs` or a pass after
//! it, and `replay.rs` reads only the `Program`. `capture.rs` traces the function once on a
//! capturing graph and records its backward into the same graph (each
//! op's own `Var` formula; the seed a traced leaf, so no formula folds to
//! a constant); `passing.rs` lets the graph keep each value as its shape
//! once the formulas that read it are recorded (noting first what lowering
//! reads of it), so a capture's peak memory is the eager step's;
//! `lower.rs` keeps what the outputs need, refuses ops that
//! hold data, runs a non-elementwise op's backward by its fast rule where
//! its formula's nodes stay internal, and binds leaves to inputs,
//! parameters, registered state or constants; `slice_sum.rs` finds the
//! sums of disjoint slices' gradients that run as one step; `fuse.rs` groups
//! elementwise nodes of one shape and runs of 0-d nodes into scalar
//! programs; `kernel.rs` is the chunked interpreter over the rules'
//! `Pointwise` kernels; `plan.rs` the liveness-based memory plan;
//! `replay.rs` one run; `ready.rs` which step makes each requested
//! gradient final (`run_notifying`); `explain.rs` `Capture::explain`,
//! `optimized`, `clusters` and the steps' names in a profile; `give_back.rs` returns what a capture
//! freed to the system after its first replay; `kernels/on_pool.rs` runs later
//! replays on a worker of rayon's pool.
//!
//! **Guards and cache.** A capture holds for its signature; another shape
//! (the last, smaller batch of an epoch) or training mode captures again
//! and both are kept, up to [`CompileOptions::cache_size`] signatures
//! (least recently used first out).

mod capture;
mod explain;
mod fuse;
mod give_back;
#[cfg(test)]
mod held_data_tests;
mod ir;
mod kernel;
mod lower;
#[cfg(test)]
mod model_tests;
mod passing;
mod plan;
mod ready;
mod replay;
mod slice_sum;
#[cfg(test)]
mod tests;
mod value_marks;

use std::collections::HashMap;

pub use ir::GradTarget;

use crate::autograd::Gradients;
use crate::base::error::{Error, Result};
use crate::base::profile::PartClock;
use crate::core::graph::{Graph, Var};
use crate::nn::Parameter;
use crate::optim::NamedParameter;
use crate::tensor::{DType, Dims, Tensor};
use capture::{Captured, Wanted};
use ir::Program;
use ready::ReadySchedule;
use replay::Replay;

/// Options of [`compile`].
#[derive(Clone, Debug)]
pub struct CompileOptions {
    params: Option<Vec<(String, Parameter)>>,
    grad_inputs: Vec<usize>,
    fuse: bool,
    cache_size: usize,
    seed: u64,
    create_graph: bool,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            params: None,
            grad_inputs: Vec::new(),
            fuse: true,
            cache_size: 8,
            seed: 0,
            create_graph: false,
        }
    }
}

impl CompileOptions {
    /// Gradients of every parameter the function uses, fusion on, up to 8
    /// signatures cached, seed 0.
    pub fn new() -> Self {
        Self::default()
    }

    /// The parameters to return gradients for (bare or `(name, parameter)`
    /// pairs, as `Module::parameters` gives; names show in `explain`). By
    /// default, every parameter the function brings into its graph.
    pub fn params<P: NamedParameter>(mut self, params: impl IntoIterator<Item = P>) -> Self {
        self.params = Some(
            params
                .into_iter()
                .enumerate()
                .map(|(i, p)| p.into_named(i))
                .collect(),
        );
        self
    }

    /// Also return the gradients with respect to these inputs (floats).
    pub fn grad_inputs(mut self, inputs: &[usize]) -> Self {
        self.grad_inputs = inputs.to_vec();
        self
    }

    /// Fuse elementwise nodes (on by default); off, every node is a step
    /// of its own (for comparisons).
    pub fn fuse(mut self, on: bool) -> Self {
        self.fuse = on;
        self
    }

    /// How many signatures (input shapes and dtypes, training mode) keep
    /// their capture; at least 1.
    pub fn cache_size(mut self, n: usize) -> Self {
        self.cache_size = n.max(1);
        self
    }

    /// The seed random ops (dropout) draw this step's masks from, mixed with
    /// the run's count so that every run draws fresh ones (and with each
    /// op's place among the step's random ops).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Asks for gradients that can be differentiated again: not supported
    /// by compiled steps (every run is then an `Error::NotReplayable`);
    /// use the eager `grad` with `create_graph`.
    pub fn create_graph(mut self, on: bool) -> Self {
        self.create_graph = on;
        self
    }
}

/// What makes a capture valid: the inputs' dtypes and shapes, and the mode.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Signature {
    inputs: Vec<(DType, Dims)>,
    training: bool,
}

impl Signature {
    /// Whether `inputs` in mode `training` have this signature (compared
    /// in place: a replay allocates nothing).
    fn matches(&self, inputs: &[Tensor], training: bool) -> bool {
        self.training == training
            && self.inputs.len() == inputs.len()
            && self
                .inputs
                .iter()
                .zip(inputs)
                .all(|((d, s), t)| *d == t.dtype() && s.as_slice() == t.shape())
    }

    fn of(inputs: &[Tensor], training: bool) -> Self {
        Signature {
            inputs: inputs
                .iter()
                .map(|t| (t.dtype(), Dims::from_slice(t.shape())))
                .collect(),
            training,
        }
    }
}

/// One signature's capture: the joint graph, its program and the replay
/// state. What [`Compiled::capture`] shows.
pub struct Capture {
    signature: Signature,
    captured: Captured,
    program: Program,
    ready: ReadySchedule,
    replay: Replay,
    names: HashMap<u64, String>,
}

impl Capture {
    /// The joint forward-backward graph as captured (before dead code goes
    /// and fusion): an ordinary graph; `println!("{}", c.graph())` prints
    /// it in the textbook chapter's trace format. Values of more than 8
    /// elements are kept as their shape only.
    pub fn graph(&self) -> &Graph {
        &self.captured.graph
    }

    /// The number of forward nodes: nodes `0..forward_len()` are the
    /// forward pass, the rest its recorded backward.
    pub fn forward_len(&self) -> usize {
        self.captured.forward_nodes as usize
    }

    /// The input shapes and dtypes this capture holds for.
    pub fn input_shapes(&self) -> Vec<(DType, Vec<usize>)> {
        self.signature
            .inputs
            .iter()
            .map(|(d, s)| (*d, s.to_vec()))
            .collect()
    }

    /// The training mode it was captured in.
    pub fn training(&self) -> bool {
        self.signature.training
    }

    /// Each requested gradient (a parameter's or an input's) with the node
    /// of [`graph`](Self::graph) after which a run has it final, in the
    /// order a run makes them final: what [`Compiled::run_notifying`] follows.
    /// `None`: final before the first step (nothing reached it, or it is
    /// not computed). A parameter used only near the loss is final early,
    /// while the backward of the layers below still runs.
    pub fn gradient_schedule(&self) -> Vec<(GradTarget, Option<u32>)> {
        self.ready.nodes(&self.program)
    }
}

/// The result of a run: the loss and the gradients, valid until the next
/// run (which writes into the same buffers).
pub struct StepOutput {
    loss: Tensor,
    grads: Gradients,
    input_grads: Vec<(usize, Tensor)>,
    outputs: Vec<(std::sync::Arc<str>, Tensor)>,
}

impl StepOutput {
    /// The loss as a number.
    pub fn loss(&self) -> f64 {
        self.loss.to_f64_vec().first().copied().unwrap_or(f64::NAN)
    }

    /// The loss as a tensor (one element).
    pub fn loss_value(&self) -> &Tensor {
        &self.loss
    }

    /// The parameters' gradients, by parameter (`grads().of(&p)`), for an
    /// optimizer's `step`.
    pub fn grads(&self) -> &Gradients {
        &self.grads
    }

    /// The parameters' gradients, to change (clipping).
    pub fn grads_mut(&mut self) -> &mut Gradients {
        &mut self.grads
    }

    /// The gradient with respect to input `k` (named in
    /// [`CompileOptions::grad_inputs`]); zeros when nothing reached it.
    pub fn input_grad(&self, k: usize) -> Option<&Tensor> {
        self.input_grads
            .iter()
            .find(|(i, _)| *i == k)
            .map(|(_, t)| t)
    }

    /// The value the function named with
    /// [`Graph::capture_output`](crate::Graph::capture_output) or
    /// [`Graph::capture_update`](crate::Graph::capture_update), as this run
    /// computed it.
    pub fn output(&self, name: &str) -> Option<&Tensor> {
        self.outputs
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, t)| t)
    }

    fn clear(&mut self) {
        self.loss = Tensor::scalar(0.0);
        self.grads.params_mut().clear();
        self.input_grads.clear();
        self.outputs.clear();
    }
}

/// What [`Compiled::run_notifying`] tells: a requested gradient, the
/// moment it is final (`None`: nothing reached it, a zero).
pub type OnGrad<'a> = dyn FnMut(GradTarget, Option<&Tensor>) -> Result<()> + 'a;

/// A compiled function: captures per signature, replays otherwise. See the
/// [module docs](self).
pub struct Compiled<F> {
    f: F,
    options: CompileOptions,
    /// Captures, least recently used first.
    cache: Vec<Capture>,
    training: bool,
    runs: u64,
    captures: u64,
    output: StepOutput,
}

/// Compiles `f`: nothing runs until the first [`Compiled::run`], which
/// captures. See the [module docs](self).
pub fn compile<F>(f: F, options: CompileOptions) -> Compiled<F>
where
    F: for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>,
{
    Compiled {
        f,
        options,
        cache: Vec::new(),
        training: true,
        runs: 0,
        captures: 0,
        output: StepOutput {
            loss: Tensor::scalar(0.0),
            grads: Gradients::for_params(0),
            input_grads: Vec::new(),
            outputs: Vec::new(),
        },
    }
}

impl<F> Compiled<F>
where
    F: for<'g> Fn(&'g Graph, &[Var<'g>]) -> Result<Var<'g>>,
{
    /// Runs the step on `inputs`: forward and backward, replayed from the
    /// capture of this signature (captured first if there is none). The
    /// output borrows the step until the next run.
    pub fn run(&mut self, inputs: &[Tensor]) -> Result<&mut StepOutput> {
        self.run_with(inputs, None)
    }

    /// Runs the step as [`run`](Self::run) does, and tells `on_grad` each
    /// requested gradient (`None`: nothing reached it, a zero) the moment
    /// the replay has it final, while the rest of the backward still runs
    /// ([`Capture::gradient_schedule`] says after which node): each
    /// gradient once, in that order. Data-parallel training starts a
    /// bucket's all-reduce from here
    /// ([`DataParallel::run_compiled`](crate::distributed::DataParallel::run_compiled)).
    /// An error of `on_grad` ends the run with it.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, Graph, Tensor, Var};
    /// use retrograd::compile::GradTarget;
    /// use retrograd::nn::Parameter;
    ///
    /// let w1 = Parameter::new(Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 1.0], &[2, 2])?);
    /// let w2 = Parameter::new(Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1])?);
    /// // loss = sum(tanh(x @ w1) @ w2): the backward reaches w2 first.
    /// let mut step = compile(
    ///     |g: &Graph, x: &[Var<'_>]| {
    ///         x[0].try_matmul(&g.param(&w1))?.tanh().try_matmul(&g.param(&w2))?.try_sum()
    ///     },
    ///     CompileOptions::new().params([&w1, &w2]),
    /// );
    /// let x = Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2])?;
    /// let mut told = Vec::new();
    /// let out = step.run_notifying(&[x], &mut |target, grad| {
    ///     told.push((target, grad.map(|g| g.to_f64_vec())));
    ///     Ok(())
    /// })?;
    /// assert_eq!(told[0], (GradTarget::Param(w2.id()), Some(out.grads().of(&w2).to_f64_vec())));
    /// assert_eq!(told[1], (GradTarget::Param(w1.id()), Some(out.grads().of(&w1).to_f64_vec())));
    /// assert_eq!(told.len(), 2);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn run_notifying(
        &mut self,
        inputs: &[Tensor],
        on_grad: &mut OnGrad<'_>,
    ) -> Result<&mut StepOutput> {
        self.run_with(inputs, Some(on_grad))
    }

    /// Runs the step `runs` times on `inputs` and times each step of the
    /// replay: where a compiled step's time goes, step by step and by
    /// kind (an op, a fast backward rule, a fused group), beside
    /// [`Capture::explain`]'s account of what each step is. A signature
    /// not yet captured is captured and replayed once first, untimed (the
    /// capture and the first replay's allocations are not a steady run's).
    /// These are real runs: a captured optimizer update or state write
    /// happens each time, and dropout draws the masks of the runs they are.
    ///
    /// Errors: `runs` of 0 is [`Error::InvalidArgument`]; otherwise
    /// [`run`](Self::run)'s.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, Graph, Tensor, Var};
    /// use retrograd::nn::Parameter;
    ///
    /// let w = Parameter::new(Tensor::from_vec(vec![0.5f32, -1.0, 2.0, 1.0], &[2, 2])?);
    /// let mut step = compile(
    ///     |g: &Graph, x: &[Var<'_>]| x[0].try_matmul(&g.param(&w))?.tanh().try_sum(),
    ///     CompileOptions::new().params([&w]),
    /// );
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
    /// let profile = step.profile(&[x], 10)?;
    /// assert_eq!(profile.runs(), 10);
    /// // One part per step of the capture's program, the product first.
    /// assert_eq!(profile.parts()[0].kind, "matmul");
    /// println!("{profile}");
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn profile(&mut self, inputs: &[Tensor], runs: u32) -> Result<crate::Profile> {
        if runs == 0 {
            return Err(Error::invalid("profile", "runs must be at least 1"));
        }
        let training = self.training;
        let at = match self
            .cache
            .iter()
            .position(|c| c.signature.matches(inputs, training))
        {
            Some(at) => at,
            None => {
                self.run(inputs)?;
                // A capture goes last (most recently used).
                self.cache.len() - 1
            }
        };
        let steps = self.cache[at].program.steps.len();
        self.cache[at].replay.clock = Some(PartClock::new(steps));
        let mut timed = Ok(());
        for _ in 0..runs {
            timed = self.run(inputs).map(|_| ());
            if timed.is_err() {
                break;
            }
        }
        // The runs moved the capture last (most recently used).
        let c = self.cache.last_mut().expect("a capture ran");
        let clock = c.replay.clock.take().unwrap_or_default();
        timed?;
        Ok(crate::Profile::of_clock(runs, c.step_parts(), &clock))
    }

    fn run_with(
        &mut self,
        inputs: &[Tensor],
        on_grad: Option<&mut OnGrad<'_>>,
    ) -> Result<&mut StepOutput> {
        if self.options.create_graph {
            return Err(Error::NotReplayable {
                op: "compile".into(),
                node: 0,
                reason:
                    "create_graph (gradients of gradients) is not supported by compiled steps; \
                         use grad with GradOptions::create_graph on an eager graph"
                        .into(),
            });
        }
        let training = self.training;
        let mut captured_now = false;
        let at = match self
            .cache
            .iter()
            .position(|c| c.signature.matches(inputs, training))
        {
            Some(i) => i,
            None => {
                let capture = self.capture_new(inputs, Signature::of(inputs, training))?;
                if self.cache.len() >= self.options.cache_size {
                    self.cache.remove(0);
                }
                self.cache.push(capture);
                captured_now = true;
                // The capture's values went to this thread's tensor pool as
                // it let go of them. Its pool's classes are not the plan's
                // buffers (a pooled buffer the first replay cannot draw stays
                // beside the one it makes), so the pool goes to the
                // allocator, whose free chunks the first replay reuses
                // instead (W4's peak RSS over the capture: BENCHMARKS.md,
                // "The compiled step's memory"). Eager code on this thread
                // refills the pool in its next step.
                crate::tensor::recycle::release();
                self.cache.len() - 1
            }
        };
        // Most recently used last; `remove` and `push` keep the capacity.
        if at + 1 != self.cache.len() {
            let c = self.cache.remove(at);
            self.cache.push(c);
        }
        self.runs += 1;
        let seed = self.options.seed ^ self.runs.wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // Last run's gradients give their buffers back before this run writes.
        self.output.clear();
        let c = self.cache.last_mut().expect("just made sure");
        match on_grad {
            // The first replay draws the plan's buffers: on this thread, so
            // that they come from the arena the capture freed into.
            None if captured_now => {
                c.replay
                    .run(&c.program, &c.captured.log, inputs, seed, None)?
            }
            // Later replays allocate nothing; on a worker, their parallel
            // kernels do not each wake the pool and sleep (on_pool.rs).
            None => {
                let (replay, program, log) = (&mut c.replay, &c.program, &c.captured.log);
                crate::kernels::on_pool::on_pool(program.parallel, || {
                    replay.run(program, log, inputs, seed, None)
                })?
            }
            Some(on_grad) => {
                let grads = &c.program.grads;
                let mut on_ready = |k: usize, g: Option<&Tensor>| on_grad(grads[k].0, g);
                let notify = Some((&c.ready, &mut on_ready as &mut replay::OnReady<'_>));
                c.replay
                    .run(&c.program, &c.captured.log, inputs, seed, notify)?;
            }
        }
        if captured_now {
            // The plan now holds its buffers and a replay allocates nothing
            // more: what the capture freed and the first replay did not
            // reuse goes back to the system (glibc keeps it mapped), and
            // so does what this replay left in the pool.
            crate::tensor::recycle::release();
            give_back::give_back_freed_memory();
        }
        let out = &mut self.output;
        out.loss = c.replay.value(c.program.root).clone();
        for &(target, slot) in &c.program.grads {
            let Some(slot) = slot else { continue };
            let g = c.replay.value(slot).clone();
            match target {
                GradTarget::Param(id) => {
                    out.grads.params_mut().insert(id, g);
                }
                GradTarget::Input(k) => out.input_grads.push((k, g)),
            }
        }
        for &(target, slot) in &c.program.grads {
            if let (GradTarget::Input(k), None) = (target, slot) {
                out.input_grads.push((k, inputs[k].zeros_like()));
            }
        }
        // State updates write back after the whole step ran, as the eager
        // layer's own update would have before the next step.
        for (named, &slot) in c.captured.log.outputs.iter().zip(&c.program.outputs) {
            let value = c.replay.value(slot).clone();
            if let Some(write) = &named.write {
                write(&value)?;
            }
            out.outputs.push((named.name.clone(), value));
        }
        Ok(&mut self.output)
    }

    fn capture_new(&mut self, inputs: &[Tensor], signature: Signature) -> Result<Capture> {
        let ids: Option<Vec<u64>> = self
            .options
            .params
            .as_ref()
            .map(|ps| ps.iter().map(|(_, p)| p.id()).collect());
        let wanted = Wanted {
            params: ids.as_deref(),
            inputs: &self.options.grad_inputs,
        };
        let captured = capture::capture(&self.f, inputs, &wanted)?;
        let program = lower::lower(&captured, self.options.fuse)?;
        let ready = ReadySchedule::of(&program);
        let names = self
            .options
            .params
            .iter()
            .flatten()
            .map(|(n, p)| (p.id(), n.clone()))
            .collect();
        self.captures += 1;
        let mut capture = Capture {
            signature,
            captured,
            program,
            ready,
            replay: Replay::default(),
            names,
        };
        capture.slim();
        Ok(capture)
    }

    /// Sets the training mode the step runs in (part of the signature: the
    /// other mode captures again). The function reads the model's own
    /// mode at capture, so switch both together.
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    /// The most recently used capture, if any run happened.
    pub fn capture(&self) -> Option<&Capture> {
        self.cache.last()
    }

    /// Every cached capture, least recently used first.
    pub fn captures(&self) -> &[Capture] {
        &self.cache
    }

    /// How many runs this step has made: run `k` draws its random masks
    /// (dropout's) from the seed and `k`.
    pub fn run_count(&self) -> u64 {
        self.runs
    }

    /// Sets the count of runs made, so that the next run draws the masks
    /// of run `runs + 1` whatever ran before: a training loop resumed
    /// after `k` steps sets `k` and draws the masks the uninterrupted loop
    /// would.
    pub fn set_run_count(&mut self, runs: u64) {
        self.runs = runs;
    }

    /// How many captures this step has made (a steady loop makes one per signature).
    pub fn capture_count(&self) -> u64 {
        self.captures
    }
}

impl Capture {
    /// Keeps the graph's values and the capture's sources as shapes only,
    /// so the capture holds no activation, input or parameter storage.
    fn slim(&mut self) {
        let mut st = self.captured.graph.state_mut();
        for id in 0..st.values().len() {
            let t = &st.values()[id];
            if t.numel() > 8 {
                let shape_only = shape_only(t);
                *st.value_mut(id as u32) = shape_only;
            }
        }
        drop(st);
        for source in &mut self.captured.log.sources {
            if source.tensor.numel() > 8 {
                source.tensor = shape_only(&source.tensor);
            }
        }
    }
}

/// A tensor of `t`'s shape and dtype that owns one element.
pub(crate) fn shape_only(t: &Tensor) -> Tensor {
    Tensor::scalar_of(0.0, t.dtype())
        .expand(t.shape())
        .unwrap_or_else(|_| t.clone())
}
