//! What a graph notes while a [compiled step](crate::compile) is being
//! captured: where each value that changes between runs comes from (the
//! step's inputs, parameters, module buffers), and the effects a layer
//! has besides its output (batch norm's running statistics). Everything
//! else the function reads is a constant of the capture, as in `jax.jit`.
//!
//! Layers with state call [`Graph::capture_state`] and
//! [`Graph::capture_effect`]; both do nothing on a graph that is not
//! capturing, so a layer calls them unconditionally and applies its
//! effect itself when [`Graph::is_capturing`] is false.

use super::{Graph, Var, LEAF_VARIABLE};
use crate::error::Result;
use crate::tensor::Tensor;

/// Reads a value that changes between runs (a parameter, a buffer).
pub(crate) type StateRead = Box<dyn Fn() -> Tensor>;

/// An effect replayed after every run.
pub(crate) type StateEffect = Box<dyn Fn() -> Result<()>>;

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

/// Everything a capture notes, taken by the compiler when the function returns.
#[derive(Default)]
pub(crate) struct CaptureLog {
    pub(crate) sources: Vec<Source>,
    pub(crate) effects: Vec<Effect>,
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
    pub fn capture_state(&self, name: &str, current: &Tensor, read: impl Fn() -> Tensor + 'static) {
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
    pub fn capture_effect(&self, name: &str, effect: impl Fn() -> Result<()> + 'static) {
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
