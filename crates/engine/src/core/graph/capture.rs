//! What a graph notes while a [compiled step](crate::compile) is being
//! captured: where each value that changes between runs comes from (the
//! step's inputs, parameters, module buffers), and the effects a layer
//! has besides its output (batch norm's running statistics). Everything
//! else the function reads is a constant of the capture, as in `jax.jit`.
//!
//! Layers with state call [`Graph::capture_state`] (what they read) and
//! [`Graph::capture_update`] (what they write back: a value of the graph,
//! computed at every run, handed to a closure after the run) or
//! [`Graph::capture_effect`] (a closure of no value); all do nothing on a
//! graph that is not capturing, so a layer calls them unconditionally and
//! applies its effect itself when [`Graph::is_capturing`] is false.
//! [`Graph::capture_output`] names a value the step returns besides the
//! loss (the logits, for an accuracy). The closures are `Send + Sync`: a
//! compiled step replays on one of rayon's workers (`kernels/on_pool.rs`).

use super::{Graph, Var, LEAF_VARIABLE};
use crate::base::error::Result;
use crate::tensor::Tensor;

/// Reads a value that changes between runs (a parameter, a buffer).
pub(crate) type StateRead = Box<dyn Fn() -> Tensor + Send + Sync>;

/// An effect replayed after every run.
pub(crate) type StateEffect = Box<dyn Fn() -> Result<()> + Send + Sync>;

/// Where a state update writes the value its run computed.
pub(crate) type StateWrite = Box<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

/// Where a value read by the captured function comes from at each run.
pub(crate) enum SourceKind {
    /// Input `k` of the step.
    Input(usize),
    /// State read again at every run; a parameter's carries its id.
    State { read: StateRead, param: Option<u64> },
}

/// One value the capture must not treat as a constant.
pub(crate) struct Source {
    /// What the function saw: a constant sharing this storage is this source.
    pub(crate) tensor: Tensor,
    /// The leaf that holds it, when the capture made one.
    pub(crate) value: Option<u32>,
    pub(crate) name: String,
    pub(crate) kind: SourceKind,
}

/// An effect with the name `explain` shows.
pub(crate) struct Effect {
    pub(crate) name: String,
    pub(crate) run: StateEffect,
}

/// A value of the graph every run hands out: by name in the step's
/// output, and to `write` (a state update) when there is one.
pub(crate) struct Output {
    /// Shared with every run's output (no allocation per run).
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) value: u32,
    pub(crate) write: Option<StateWrite>,
}

/// Everything a capture notes, taken by the compiler when the function returns.
#[derive(Default)]
pub(crate) struct CaptureLog {
    pub(crate) sources: Vec<Source>,
    pub(crate) effects: Vec<Effect>,
    pub(crate) outputs: Vec<Output>,
}

impl Graph {
    /// Whether this graph is capturing a compiled step (see
    /// [`compile`](crate::compile)): a layer with state then registers it
    /// with [`capture_state`](Self::capture_state) and
    /// [`capture_effect`](Self::capture_effect) instead of applying effects.
    pub fn is_capturing(&self) -> bool {
        self.capturing.get()
    }

    /// Starts a capture: from now on the graph notes sources and effects.
    pub(crate) fn begin_capture(&self) {
        self.state_mut().capture = Some(Box::default());
        self.capturing.set(true);
    }

    /// Ends the capture and hands over what it noted.
    pub(crate) fn end_capture(&self) -> CaptureLog {
        self.capturing.set(false);
        self.state_mut()
            .capture
            .take()
            .map(|log| *log)
            .unwrap_or_default()
    }

    /// A leaf holding input `index` of a compiled step: differentiable when
    /// it is a float (the capture prunes gradients nobody asked for), and
    /// recorded like a variable whatever its dtype, so every op that reads
    /// it is a node (token ids and targets included).
    pub(crate) fn capture_input(&self, index: usize, value: Tensor, name: String) -> Var<'_> {
        let id = self.state_mut().push_value(value.clone(), LEAF_VARIABLE);
        self.note_source(Source {
            tensor: value.clone(),
            value: Some(id),
            name,
            kind: SourceKind::Input(index),
        });
        Var::from_parts(self, value, id, true)
    }

    /// Notes that the leaf `value` holds parameter `param`, read again at every run.
    pub(crate) fn capture_param(&self, param: u64, value: u32, read: StateRead) {
        if !self.is_capturing() {
            return;
        }
        let tensor = self.state().values()[value as usize].clone();
        self.note_source(Source {
            tensor,
            value: Some(value),
            name: format!("param{param}"),
            kind: SourceKind::State {
                read,
                param: Some(param),
            },
        });
    }

    /// While capturing: `current` (what the function reads now, such as a
    /// module buffer's value) is state that changes between runs, so every
    /// constant of the graph sharing its storage is read again through
    /// `read` at each run instead of being kept as a constant. Does
    /// nothing when the graph is not capturing.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, Graph, Tensor, Var};
    /// use std::sync::{Arc, RwLock};
    /// let scale = Arc::new(RwLock::new(Tensor::scalar(2.0).reshape(&[1])?));
    /// let state = scale.clone();
    /// let mut step = compile(
    ///     move |g: &Graph, x: &[Var<'_>]| {
    ///         let s = state.read().unwrap().clone();
    ///         let reader = state.clone();
    ///         g.capture_state("scale", &s, move || reader.read().unwrap().clone());
    ///         (&x[0] * &g.constant(s)).try_sum()
    ///     },
    ///     CompileOptions::new().grad_inputs(&[0]),
    /// );
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
    /// assert_eq!(step.run(&[x.clone()])?.loss(), 6.0);
    /// *scale.write().unwrap() = Tensor::scalar(3.0).reshape(&[1])?;
    /// assert_eq!(step.run(&[x])?.loss(), 9.0); // read again, not a constant
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn capture_state(
        &self,
        name: &str,
        current: &Tensor,
        read: impl Fn() -> Tensor + Send + Sync + 'static,
    ) {
        if !self.is_capturing() {
            return;
        }
        self.note_source(Source {
            tensor: current.clone(),
            value: None,
            name: name.to_string(),
            kind: SourceKind::State {
                read: Box::new(read),
                param: None,
            },
        });
    }

    /// While capturing: `effect` runs after every run of the compiled step
    /// (after its forward and backward), where an eager layer would apply
    /// it during its forward (batch norm updating its running statistics).
    /// Does nothing when the graph is not capturing: the layer applies the
    /// effect itself then.
    pub fn capture_effect(
        &self,
        name: &str,
        effect: impl Fn() -> Result<()> + Send + Sync + 'static,
    ) {
        if !self.is_capturing() {
            return;
        }
        if let Some(log) = self.state_mut().capture.as_mut() {
            log.effects.push(Effect {
                name: name.to_string(),
                run: Box::new(effect),
            });
        }
    }

    /// While capturing: `value` is the new value of some state (batch
    /// norm's running statistics, computed from the batch), so the step
    /// computes it at every run, as an output of the captured graph, and
    /// hands it to `write` after the run (which stores it: `Buffer::set`).
    /// Its name shows in `explain` and in the step's outputs
    /// ([`StepOutput::output`](crate::StepOutput::output)). Does nothing when the
    /// graph is not capturing: the layer stores the value itself then.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, Graph, Tensor, Var};
    /// use retrograd::nn::Buffer;
    /// // A running sum of the inputs, kept in a buffer.
    /// let total = Buffer::new(Tensor::zeros(&[2], retrograd::DType::F64)?);
    /// let state = total.clone();
    /// let mut step = compile(
    ///     move |g: &Graph, x: &[Var<'_>]| {
    ///         let now = state.value();
    ///         let reader = state.clone();
    ///         g.capture_state("total", &now, move || reader.value());
    ///         let next = g.constant(now).try_add(&x[0])?;
    ///         let writer = state.clone();
    ///         g.capture_update("total", &next, move |t| writer.set(t.clone()));
    ///         x[0].try_sum()
    ///     },
    ///     CompileOptions::new().grad_inputs(&[0]),
    /// );
    /// let x = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
    /// step.run(&[x.clone()])?;
    /// step.run(&[x])?;
    /// assert_eq!(total.value().to_f64_vec(), vec![2.0, 4.0]); // updated at every run
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn capture_update(
        &self,
        name: &str,
        value: &Var<'_>,
        write: impl Fn(&Tensor) -> Result<()> + Send + Sync + 'static,
    ) {
        self.note_output(name, value, Some(Box::new(write)));
    }

    /// While capturing: the step returns `value` at every run besides the
    /// loss, as [`StepOutput::output`](crate::StepOutput::output)`(name)`
    /// (the logits, to count correct predictions). Does nothing when the
    /// graph is not capturing.
    ///
    /// ```
    /// use retrograd::{compile, CompileOptions, Graph, Tensor, Var};
    /// let mut step = compile(
    ///     |g: &Graph, x: &[Var<'_>]| {
    ///         let y = x[0].relu();
    ///         g.capture_output("activations", &y);
    ///         y.try_sum()
    ///     },
    ///     CompileOptions::new().grad_inputs(&[0]),
    /// );
    /// let out = step.run(&[Tensor::from_vec(vec![-1.0, 2.0], &[2])?])?;
    /// assert_eq!(out.output("activations").unwrap().to_f64_vec(), vec![0.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn capture_output(&self, name: &str, value: &Var<'_>) {
        self.note_output(name, value, None);
    }

    fn note_output(&self, name: &str, value: &Var<'_>, write: Option<StateWrite>) {
        if !self.is_capturing() {
            return;
        }
        let value = value.clone().ensure_slot().slot();
        if let Some(log) = self.state_mut().capture.as_mut() {
            log.outputs.push(Output {
                name: name.into(),
                value,
                write,
            });
        }
    }

    /// Whether `value` shares storage with state registered by
    /// [`capture_state`](Self::capture_state).
    pub(crate) fn is_captured_state(&self, value: &Tensor) -> bool {
        let st = self.state();
        st.capture.as_ref().is_some_and(|log| {
            value.rank() > 0
                && log.sources.iter().any(|s| {
                    s.value.is_none() && s.tensor.rank() > 0 && s.tensor.shares_storage_with(value)
                })
        })
    }

    fn note_source(&self, source: Source) {
        if let Some(log) = self.state_mut().capture.as_mut() {
            log.sources.push(source);
        }
    }
}
