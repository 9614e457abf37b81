//! The shared code of every per-parameter optimizer (the shape of burn's
//! `SimpleOptimizer`): an [`UpdateRule`] says what state one parameter
//! keeps ([`StateField`]s) and how one parameter steps; [`RuleOptimizer`]
//! does everything else, once, for every rule: the parameter list and its
//! names, the gradient lookup (a parameter without a gradient is skipped and
//! its state does not advance), lazy state creation, the step count,
//! parameter groups, and state dicts with strict, typed loading.
//!
//! [`Sgd`](super::Sgd), [`Adam`](super::Adam),
//! [`RMSprop`](super::RMSprop) and [`Adagrad`](super::Adagrad) are this
//! struct over their configs (`Adam = RuleOptimizer<AdamConfig>`), so each
//! has `new`, `with_groups`, `config`, `lr_of` and `weight_decay_of`.

use super::group::{flatten_groups, Flattened, GroupSettings, ParamGroup};
use super::state::{read_step, StateReader};
use super::{gradient_sign, update_chunks, NamedParameter, NamedParameters, Optimizer, StateDict};
use crate::base::error::{Error, Result};
use crate::nn::{check_like, Parameter};
use crate::tensor::{Element, Tensor};
use crate::Gradients;

/// The names a rule's errors carry: `name` for its constructor and its
/// hyperparameters (`"Adam"`), `with_groups` for its grouped constructor
/// (`"Adam::with_groups"`). Written with `rule_basics!("Adam")` in the crate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleNames {
    /// The optimizer's name in errors (`"Adam"`).
    pub name: &'static str,
    /// The op named by errors of `with_groups` (`"Adam::with_groups"`).
    pub with_groups: &'static str,
}

/// The `UpdateRule` items that every config with `lr` and `weight_decay`
/// fields writes alike: `NAMES` from one literal, and `lr`, `set_lr`,
/// `weight_decay`; with `kind = expr`, `kind` too. `rule_basics!("Adam");`
/// or `rule_basics!("Sgd", kind = KINDS[0].name);` inside the impl.
macro_rules! rule_basics {
    ($name:literal, kind = $kind:expr) => {
        $crate::optim::rule::rule_basics!($name);

        fn kind(&self) -> &'static str {
            $kind
        }
    };
    ($name:literal) => {
        const NAMES: $crate::optim::RuleNames = $crate::optim::RuleNames {
            name: $name,
            with_groups: concat!($name, "::with_groups"),
        };

        fn lr(&self) -> f64 {
            self.lr
        }

        fn set_lr(&mut self, lr: f64) {
            self.lr = lr;
        }

        fn weight_decay(&self) -> f64 {
            self.weight_decay
        }
    };
}
pub(crate) use rule_basics;

/// A config of hyperparameters from one list: the struct (public fields,
/// each with its doc comment), `Default` (PyTorch's defaults, the values
/// after `=`), for each field marked `set "doc"` the builder method
/// `pub fn field(mut self, field: Type) -> Self` with that doc, and
/// `check_declared(op)`, which runs each field's check (`=> check`, called
/// as `check(op, "field", value)`) in the declared order:
///
/// ```text
/// hyperparameters! {
///     /// Hyperparameters of ...
///     pub struct RMSpropConfig {
///         /// Learning rate.
///         lr: f64 = 1e-2 => check_non_negative, set "Sets the learning rate.";
///         ...
///     }
/// }
/// ```
macro_rules! hyperparameters {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$doc:meta])* $field:ident: $ty:ty = $default:expr $(=> $check:ident)? $(, set $set_doc:literal)?;)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $name {
            $($(#[$doc])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name {
                    $($field: $default,)*
                }
            }
        }

        impl $name {
            $($(
                #[doc = $set_doc]
                pub fn $field(mut self, $field: $ty) -> Self {
                    self.$field = $field;
                    self
                }
            )?)*

            /// Runs the declared checks of the settings, in their order;
            /// errors name `op` and the setting.
            fn check_declared(&self, op: &'static str) -> $crate::base::error::Result<()> {
                $($($check(op, stringify!($field), self.$field)?;)?)*
                Ok(())
            }
        }
    };
}
pub(crate) use hyperparameters;

/// One entry of the state a rule keeps per parameter; its state-dict key is
/// `"{parameter name}.{field name}"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StateField {
    /// The step count `"step"`: 0 when the state is created, advanced by one
    /// before each update ([`UpdateContext::step`]); saved as a 0-d f64.
    Step,
    /// A tensor of the parameter's shape and dtype, filled with `fill` when
    /// the parameter first has a gradient.
    Tensor {
        /// Its name (PyTorch's: `"exp_avg"`, `"momentum_buffer"`, ...).
        name: &'static str,
        /// Its value on creation.
        fill: f64,
    },
}

impl StateField {
    /// A tensor field created as zeros.
    pub const fn zeros(name: &'static str) -> Self {
        StateField::Tensor { name, fill: 0.0 }
    }

    /// The field's name in state dicts.
    pub fn name(&self) -> &'static str {
        match self {
            StateField::Step => "step",
            StateField::Tensor { name, .. } => name,
        }
    }
}

/// What one parameter's update needs besides its values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UpdateContext {
    /// The learning rate: the optimizer's times the group's scale.
    pub lr: f64,
    /// The group's weight decay.
    pub weight_decay: f64,
    /// This update's step number, from 1 (0 for a rule without
    /// [`StateField::Step`]).
    pub step: u64,
    /// Whether the state was created for this update (the parameter's first
    /// step with a gradient since construction or the last load).
    pub first: bool,
}

/// One update of one parameter: what [`UpdateRule::update`] is handed.
pub struct Step<'a, T> {
    /// The learning rate, weight decay and step number of this update.
    pub ctx: UpdateContext,
    /// The parameter's values, updated in place.
    pub p: &'a mut [T],
    /// Its gradient (the same length).
    pub g: &'a [T],
    /// Its state; the step count has already advanced.
    pub state: &'a mut ParamState,
}

impl<T: Element> Step<'_, T> {
    /// Runs `f` over matching chunks of the parameter, its gradient and its
    /// `K` state tensors (in declared order), in parallel when they are
    /// large. `f` sees plain slices, so its loop vectorises. Errors if the
    /// rule declared another number of state tensors.
    pub fn each_chunk<const K: usize>(
        self,
        f: impl Fn(&mut [T], &[T], [&mut [T]; K]) + Sync + Send,
    ) -> Result<()> {
        let state = self.state.slices::<T, K>()?;
        update_chunks(self.p, self.g, state, f);
        Ok(())
    }
}

/// The direction of a plain gradient step in the element type,
/// `d = grad (negated if maximize) + weight_decay * p`: how SGD, RMSprop
/// and Adagrad all begin.
pub(super) struct Direction<T> {
    sign: T,
    /// Whether there is an L2 penalty (`decay` is not 0).
    pub(super) has_decay: bool,
    decay: T,
}

impl<T: Element> Direction<T> {
    pub(super) fn new(maximize: bool, ctx: &UpdateContext) -> Self {
        Direction {
            sign: gradient_sign(maximize),
            has_decay: ctx.weight_decay != 0.0,
            decay: T::from_f64(ctx.weight_decay),
        }
    }

    /// `d` for a parameter value `p` and its gradient `g`; `DECAY` is
    /// `has_decay` as a const parameter, for loops instantiated per option.
    #[inline(always)]
    pub(super) fn with<const DECAY: bool>(&self, p: T, g: T) -> T {
        if DECAY {
            g * self.sign + self.decay * p
        } else {
            g * self.sign
        }
    }

    /// `d` for a parameter value `p` and its gradient `g`.
    #[inline(always)]
    pub(super) fn of(&self, p: T, g: T) -> T {
        if self.has_decay {
            self.with::<true>(p, g)
        } else {
            self.with::<false>(p, g)
        }
    }
}

/// One parameter's state: its tensor fields in declared order, and its step.
#[derive(Clone, Debug)]
pub struct ParamState {
    tensors: Vec<Tensor>,
    step: u64,
    first: bool,
}

impl ParamState {
    fn new(fields: &[StateField], like: &Tensor) -> Self {
        let tensors = fields
            .iter()
            .filter_map(|f| match *f {
                StateField::Step => None,
                StateField::Tensor { fill: 0.0, .. } => Some(like.zeros_like()),
                StateField::Tensor { fill, .. } => Some(
                    Tensor::full(like.shape(), fill, like.dtype())
                        .expect("an existing tensor's shape has a valid element count"),
                ),
            })
            .collect();
        ParamState {
            tensors,
            step: 0,
            first: true,
        }
    }

    /// The tensor fields as mutable slices of `T`, in declared order
    /// (copied first where a state dict still shares them). `K` must be the
    /// number of tensor fields the rule declared for this configuration.
    pub fn slices<T: Element, const K: usize>(&mut self) -> Result<[&mut [T]; K]> {
        let found = self.tensors.len();
        let tensors: &mut [Tensor; K] = self.tensors.as_mut_slice().try_into().map_err(|_| {
            Error::invalid(
                "ParamState::slices",
                format!("the rule declared {found} state tensors, not {K}"),
            )
        })?;
        let slices = tensors.each_mut().map(|t| t.make_mut::<T>());
        if let Some(Err(e)) = slices.iter().find(|s| s.is_err()) {
            return Err(e.clone());
        }
        Ok(slices.map(|s| s.expect("checked above")))
    }
}

/// A per-parameter update rule: the one thing an optimizer file writes.
/// Implemented by each optimizer's config (`AdamConfig`, `SgdConfig`, ...);
/// [`RuleOptimizer`] runs it. A program can write its own, here sign
/// descent with a running mean of the gradient's magnitude:
///
/// ```
/// use retrograd::{Element, Graph, Result, Tensor, nn::Parameter};
/// use retrograd::optim::{
///     Optimizer, RuleNames, RuleOptimizer, StateField, Step, UpdateRule,
/// };
/// #[derive(Clone)]
/// struct SignDescent { lr: f64 }
/// impl UpdateRule for SignDescent {
///     const NAMES: RuleNames = RuleNames { name: "SignDescent", with_groups: "SignDescent::with_groups" };
///     fn kind(&self) -> &'static str { "sign_descent" }
///     fn validate(&self) -> Result<()> { Ok(()) }
///     fn lr(&self) -> f64 { self.lr }
///     fn set_lr(&mut self, lr: f64) { self.lr = lr }
///     fn weight_decay(&self) -> f64 { 0.0 }
///     fn state_fields(&self) -> Vec<StateField> {
///         vec![StateField::Step, StateField::zeros("mean_abs")]
///     }
///     fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()> {
///         let (lr, t) = (T::from_f64(step.ctx.lr), T::from_f64(step.ctx.step as f64));
///         step.each_chunk(|p, g, [mean_abs]| {
///             for ((p, &g), m) in p.iter_mut().zip(g).zip(mean_abs) {
///                 *m += (g.abs() - *m) / t;
///                 *p -= lr * g.signum();
///             }
///         })
///     }
/// }
/// let w = Parameter::new(Tensor::from_vec(vec![1.0, -1.0], &[2])?);
/// let mut opt = RuleOptimizer::new([("w", w.clone())], SignDescent { lr: 0.25 })?;
/// for _ in 0..2 {
///     let g = Graph::new();
///     opt.step(&(g.param(&w) * 3.0).sum().backward()?)?;   // gradient [3, 3]
/// }
/// assert_eq!(w.value().to_f64_vec(), [0.5, -1.5]);
/// let state = opt.state_dict();
/// assert_eq!((state["w.step"].try_item()?, state["w.mean_abs"].to_f64_vec()), (2.0, vec![3.0, 3.0]));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub trait UpdateRule: Clone + Send + Sync + 'static {
    /// The names its errors carry.
    const NAMES: RuleNames;

    /// Its registered kind (`"adam"` or `"adamw"` for `AdamConfig`).
    fn kind(&self) -> &'static str;

    /// Checks the hyperparameters: an error names the optimizer and the setting.
    fn validate(&self) -> Result<()>;

    /// The learning rate.
    fn lr(&self) -> f64;

    /// Sets the learning rate.
    fn set_lr(&mut self, lr: f64);

    /// The weight decay a parameter group without its own takes.
    fn weight_decay(&self) -> f64;

    /// The state each parameter keeps with these hyperparameters.
    fn state_fields(&self) -> Vec<StateField>;

    /// Updates one parameter `step.p` from its gradient `step.g` (same
    /// length) and its state; the state's step has already advanced.
    fn update<T: Element>(&self, step: Step<'_, T>) -> Result<()>;
}

/// An optimizer that applies an [`UpdateRule`] to each of its parameters
/// (see the module docs). Use it through its aliases:
/// [`Sgd`](super::Sgd), [`Adam`](super::Adam), [`RMSprop`](super::RMSprop),
/// [`Adagrad`](super::Adagrad).
pub struct RuleOptimizer<R: UpdateRule> {
    rule: R,
    /// The state each parameter keeps, fixed at construction.
    fields: Vec<StateField>,
    params: Vec<(String, Parameter)>,
    /// Per parameter: its state (created on its first gradient).
    state: Vec<Option<ParamState>>,
    /// Per parameter, the index of its group in `groups`.
    group_of: Vec<usize>,
    /// Per group, its weight decay and learning-rate scale.
    groups: Vec<GroupSettings>,
}

impl<R: UpdateRule> RuleOptimizer<R> {
    /// An optimizer over `params` (bare parameters, named `"0"`, `"1"`, ...
    /// by position, or `(name, parameter)` pairs); errors on invalid
    /// hyperparameters or a parameter (or name) listed twice.
    pub fn new<P: NamedParameter>(params: impl IntoIterator<Item = P>, config: R) -> Result<Self> {
        let group = ParamGroup::new(params);
        Self::build(R::NAMES.name, [group], config)
    }

    /// An optimizer over parameter groups, PyTorch's
    /// `AdamW([{'params': decay, 'weight_decay': 0.1}, {'params': no_decay,
    /// 'weight_decay': 0.0}], ...)`: each group's [`ParamGroup`] settings
    /// override `config`'s weight decay and scale its learning rate. The
    /// state dict names state per parameter, so it is the same as with
    /// [`new`](Self::new) over the same named parameters. Errors on invalid
    /// hyperparameters or a parameter (or name) listed twice, in one group
    /// or across groups.
    ///
    /// ```
    /// use retrograd::{DType, Graph, Tensor, nn::Parameter};
    /// use retrograd::optim::{Adam, AdamConfig, Optimizer, ParamGroup};
    /// let w = Parameter::new(Tensor::from_vec(vec![2.0f64, -4.0], &[1, 2])?);
    /// let b = Parameter::new(Tensor::from_vec(vec![2.0f64], &[1])?);
    /// let mut opt = Adam::with_groups(
    ///     [
    ///         ParamGroup::new([("w", w.clone())]).weight_decay(0.5),
    ///         ParamGroup::new([("b", b.clone())]).weight_decay(0.0).lr_scale(2.0),
    ///     ],
    ///     AdamConfig::adamw().lr(0.1),
    /// )?;
    /// let grads = {
    ///     let g = Graph::new();
    ///     ((g.param(&w) * 0.0).sum() + (g.param(&b) * 0.0).sum()).backward()?
    /// };
    /// opt.step(&grads)?;   // zero gradients: only the decay moves w, nothing moves b
    /// assert_eq!(w.value().to_f64_vec(), [2.0 * 0.95, -4.0 * 0.95]);
    /// assert_eq!(b.value().to_f64_vec(), [2.0]);
    /// assert_eq!(opt.lr_of("b"), Some(0.2));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn with_groups(groups: impl IntoIterator<Item = ParamGroup>, config: R) -> Result<Self> {
        Self::build(R::NAMES.with_groups, groups, config)
    }

    /// [`new`](Self::new), boxed: how a registered kind builds it.
    pub(crate) fn boxed(params: NamedParameters, config: R) -> Result<Box<dyn Optimizer>> {
        Ok(Box::new(Self::new(params, config)?))
    }

    fn build(
        op: &'static str,
        groups: impl IntoIterator<Item = ParamGroup>,
        config: R,
    ) -> Result<Self> {
        config.validate()?;
        let Flattened {
            params,
            group_of,
            groups,
        } = flatten_groups(op, groups, config.weight_decay())?;
        Ok(RuleOptimizer {
            fields: config.state_fields(),
            state: vec![None; params.len()],
            rule: config,
            params,
            group_of,
            groups,
        })
    }

    /// The hyperparameters (a group's weight decay and learning-rate scale
    /// override these; see [`weight_decay_of`](Self::weight_decay_of) and
    /// [`lr_of`](Self::lr_of)).
    pub fn config(&self) -> &R {
        &self.rule
    }

    fn group_settings(&self, name: &str) -> Option<GroupSettings> {
        let i = self.params.iter().position(|(n, _)| n == name)?;
        Some(self.groups[self.group_of[i]])
    }

    /// The weight decay applied to the parameter named `name`, from its
    /// group (`None` if there is no such parameter).
    pub fn weight_decay_of(&self, name: &str) -> Option<f64> {
        self.group_settings(name).map(|g| g.weight_decay)
    }

    /// The learning rate the next step applies to the parameter named
    /// `name`: the optimizer's rate times its group's scale.
    pub fn lr_of(&self, name: &str) -> Option<f64> {
        self.group_settings(name)
            .map(|g| self.rule.lr() * g.lr_scale)
    }

    fn has_step(&self) -> bool {
        self.fields.contains(&StateField::Step)
    }
}

impl<R: UpdateRule> Optimizer for RuleOptimizer<R> {
    fn step(&mut self, grads: &Gradients) -> Result<()> {
        let has_step = self.has_step();
        let RuleOptimizer {
            rule,
            fields,
            params,
            state,
            group_of,
            groups,
        } = self;
        for (((name, p), slot), &group) in params.iter().zip(state.iter_mut()).zip(group_of.iter())
        {
            let Some(g) = grads.get_param(p) else {
                continue;
            };
            let GroupSettings {
                weight_decay,
                lr_scale,
            } = groups[group];
            p.update(|value| -> Result<()> {
                if g.shape() != value.shape() || g.dtype() != value.dtype() {
                    check_like(&format!("{}::step", R::NAMES.name), name, g, value)?;
                }
                let st = slot.get_or_insert_with(|| ParamState::new(fields, value));
                if has_step {
                    st.step += 1;
                }
                let ctx = UpdateContext {
                    lr: rule.lr() * lr_scale,
                    weight_decay,
                    step: st.step,
                    first: st.first,
                };
                crate::with_dtype!(rule.kind(), value.dtype(), T => {
                    let (p, g) = (value.make_mut::<T>()?, g.as_slice_of::<T>());
                    rule.update::<T>(Step { ctx, p, g, state: st })?;
                });
                st.first = false;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn lr(&self) -> f64 {
        self.rule.lr()
    }

    fn set_lr(&mut self, lr: f64) {
        self.rule.set_lr(lr);
    }

    fn parameters(&self) -> &[(String, Parameter)] {
        &self.params
    }

    fn kind(&self) -> &'static str {
        self.rule.kind()
    }

    fn state_dict(&self) -> StateDict {
        let mut out = StateDict::new();
        for ((name, _), st) in self.params.iter().zip(&self.state) {
            let Some(st) = st else { continue };
            let mut tensors = st.tensors.iter();
            for field in &self.fields {
                let value = match field {
                    StateField::Step => Tensor::scalar(st.step as f64),
                    StateField::Tensor { .. } => {
                        tensors.next().expect("one tensor per tensor field").clone()
                    }
                };
                out.insert(format!("{name}.{}", field.name()), value);
            }
        }
        out
    }

    fn load_state_dict(&mut self, state: &StateDict) -> Result<()> {
        let context = format!("{}::load_state_dict", R::NAMES.name);
        let mut reader = StateReader::new(&context, state);
        // First which parameters have state (all of a parameter's fields or
        // none) and that nothing else is there; then the values.
        let present = self
            .params
            .iter()
            .map(|(name, _)| reader.all_or_none(name, self.fields.iter().map(StateField::name)))
            .collect::<Result<Vec<bool>>>()?;
        reader.finish()?;
        let mut loaded = Vec::with_capacity(self.params.len());
        for ((name, p), has) in self.params.iter().zip(present) {
            if !has {
                loaded.push(None);
                continue;
            }
            let value = p.value();
            let mut st = ParamState {
                tensors: Vec::with_capacity(self.fields.len()),
                step: 0,
                first: false,
            };
            for field in &self.fields {
                let key = format!("{name}.{}", field.name());
                let t = &state[&key];
                match field {
                    StateField::Step => st.step = read_step(&context, &key, t)?,
                    StateField::Tensor { .. } => {
                        check_like(&context, &key, t, &value)?;
                        st.tensors.push(t.clone());
                    }
                }
            }
            loaded.push(Some(st));
        }
        self.state = loaded;
        Ok(())
    }
}
