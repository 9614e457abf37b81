//! L-BFGS in the closure form of `torch.optim.LBFGS`, step for step: the
//! two-loop recursion over a limited history, fixed steps or the
//! strong-Wolfe line search of `line_search.rs`, and PyTorch's stopping
//! rules. Unlike the per-parameter rules it works on all parameters as one
//! flat vector, so it implements [`Optimizer`] itself, with the shared
//! parameter list and the shared strict state-dict reading.

use super::lbfgs_memory::{dot, Memory, MEMORY_FIELDS};
use super::line_search::{max_abs, strong_wolfe, Point, Wolfe};
use super::rule::hyperparameters;
use super::state::{mismatch, read_step, StateReader};
use super::{check_non_negative, collect_named, Closure, NamedParameter, Optimizer, OptimizerKind};
use super::{NamedParameters, StateDict};
use crate::base::error::{Error, Result, TensorProblem};
use crate::nn::{check_like, Parameter};
use crate::tensor::{Element, Tensor};
use crate::Gradients;

/// L-BFGS's optional line search (PyTorch's `line_search_fn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LineSearch {
    /// A fixed step of `lr` (the first iteration scales it by
    /// `min(1, 1 / |g|_1)`), PyTorch's `None`.
    #[default]
    None,
    /// The strong-Wolfe line search with cubic interpolation, PyTorch's
    /// `"strong_wolfe"`.
    StrongWolfe,
}

impl std::str::FromStr for LineSearch {
    type Err = Error;

    /// `"none"` or `"strong_wolfe"`.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(LineSearch::None),
            "strong_wolfe" => Ok(LineSearch::StrongWolfe),
            other => Err(Error::invalid(
                "LineSearch",
                format!("unknown line search `{other}` (none, strong_wolfe)"),
            )),
        }
    }
}

hyperparameters! {
    /// Hyperparameters of [`LBFGS`], with PyTorch's defaults (lr 1, 20
    /// iterations and at most 1.25 times as many loss evaluations per step,
    /// tolerances 1e-7 on the gradient and 1e-9 on changes, a history of 100,
    /// no line search).
    ///
    /// ```
    /// use retrograd::optim::{LBFGSConfig, LineSearch};
    /// let c = LBFGSConfig::default().history_size(10).line_search(LineSearch::StrongWolfe);
    /// assert_eq!((c.max_iter, c.eval_budget(), c.history_size), (20, 25, 10));
    /// ```
    pub struct LBFGSConfig {
        /// Learning rate: the step length (the line search's first trial).
        lr: f64 = 1.0 => check_non_negative, set "Sets the learning rate.";
        /// Iterations per [`step_with_closure`](Optimizer::step_with_closure).
        max_iter: usize = 20, set "Sets the iterations per step.";
        /// Loss evaluations per step (`None`: `max_iter * 5 / 4`).
        max_eval: Option<usize> = None;
        /// Stop when the largest gradient entry is at most this.
        tolerance_grad: f64 = 1e-7 => check_non_negative, set "Sets the tolerance on the largest gradient entry.";
        /// Stop when the loss or the step changes by less than this.
        tolerance_change: f64 = 1e-9 => check_non_negative, set "Sets the tolerance on changes of the loss and the step.";
        /// Curvature pairs kept.
        history_size: usize = 100, set "Sets the number of curvature pairs kept.";
        /// Fixed steps or the strong-Wolfe line search.
        line_search: LineSearch = LineSearch::None, set "Sets the line search.";
        /// Maximise the objective instead of minimising it.
        maximize: bool = false, set "Maximise instead of minimise.";
    }
}

impl LBFGSConfig {
    /// Sets the loss evaluations per step.
    pub fn max_eval(mut self, max_eval: usize) -> Self {
        self.max_eval = Some(max_eval);
        self
    }

    /// The loss evaluations allowed per step: `max_eval`, or by default
    /// `max_iter * 5 / 4`.
    pub fn eval_budget(&self) -> usize {
        self.max_eval.unwrap_or(self.max_iter * 5 / 4)
    }

    fn validate(&self) -> Result<()> {
        self.check_declared("LBFGS")?;
        for (what, n) in [
            ("max_iter", self.max_iter),
            ("max_eval", self.eval_budget()),
            ("history_size", self.history_size),
        ] {
            if n == 0 {
                return Err(Error::invalid(
                    "LBFGS",
                    format!("{what} must be >= 1, got 0"),
                ));
            }
        }
        Ok(())
    }
}

/// Evaluation and iteration counts over all steps, PyTorch's
/// `func_evals` and `n_iter`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Counters {
    func_evals: u64,
    n_iter: u64,
}

/// The counters' and the memory's state-dict fields, PyTorch's names.
const COUNTER_FIELDS: [&str; 2] = ["func_evals", "n_iter"];
/// L-BFGS with PyTorch's algorithm (`torch.optim.LBFGS`, closure form):
/// each [`step_with_closure`](Optimizer::step_with_closure) runs up to
/// `max_iter` iterations, evaluating the closure (a fresh graph, backward,
/// the loss and its [`Gradients`]) at most `eval_budget()` times. It works
/// on all parameters as one vector (a parameter without a gradient counts
/// as a zero gradient, as in PyTorch) and keeps its memory in f64 whatever
/// the parameters' dtype. Its state dict holds PyTorch's entries under the
/// first parameter's name (`"{first}.d"`, `"{first}.old_dirs"` as a
/// `[k, n]` tensor, `"{first}.n_iter"`, ...). [`Optimizer::step`] is an
/// error: L-BFGS must re-evaluate the loss.
///
/// If the closure fails, the parameters are put back where the step began,
/// the memory is dropped (the next step restarts from steepest descent) and
/// the error is returned.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter};
/// use retrograd::optim::{LBFGS, LBFGSConfig, LineSearch, Optimizer};
/// let xy = Parameter::new(Tensor::from_vec(vec![-1.5, 2.0], &[2])?);
/// let config = LBFGSConfig::default().line_search(LineSearch::StrongWolfe);
/// let mut opt = LBFGS::new([("xy", xy.clone())], config)?;
/// let mut rosenbrock = || {
///     let g = Graph::new();
///     let v = g.param(&xy);
///     let (x, y) = (v.try_select(0, 0)?, v.try_select(0, 1)?);
///     let loss = (1.0 - &x) * (1.0 - &x) + (&y - &x * &x) * (&y - &x * &x) * 100.0;
///     Ok((loss.value().try_item()?, loss.backward()?))
/// };
/// for _ in 0..5 {
///     opt.step_with_closure(&mut rosenbrock)?;
/// }
/// let v = xy.value().to_f64_vec();
/// assert!((v[0] - 1.0).abs() < 1e-5 && (v[1] - 1.0).abs() < 1e-5, "{v:?}");   // the minimum (1, 1)
/// # Ok::<(), retrograd::Error>(())
/// ```
#[allow(clippy::upper_case_acronyms)] // PyTorch's name, as `RMSNorm` and `RMSprop`
pub struct LBFGS {
    params: NamedParameters,
    config: LBFGSConfig,
    /// `None` before the first step (nothing to save).
    counters: Option<Counters>,
    /// `None` before the first iteration.
    memory: Option<Memory>,
}

/// The registered kind.
/// The registered kind: with the strong-Wolfe line search, which keeps a
/// command line's learning rate from blowing the loss up.
pub(super) const KINDS: &[OptimizerKind] = &[OptimizerKind {
    name: "lbfgs",
    summary: "L-BFGS, closure form, strong-Wolfe line search (torch.optim.LBFGS)",
    build: |params, s| {
        let config = LBFGSConfig::default()
            .lr(s.lr)
            .line_search(LineSearch::StrongWolfe);
        Ok(Box::new(LBFGS::new(params, config)?))
    },
}];

impl LBFGS {
    /// L-BFGS over `params` (bare parameters, named `"0"`, `"1"`, ... by
    /// position, or `(name, parameter)` pairs); errors on invalid
    /// hyperparameters or a parameter (or name) listed twice. It has no
    /// parameter groups (PyTorch's has none either).
    pub fn new<P: NamedParameter>(
        params: impl IntoIterator<Item = P>,
        config: LBFGSConfig,
    ) -> Result<Self> {
        config.validate()?;
        Ok(LBFGS {
            params: collect_named("LBFGS", params)?,
            config,
            counters: None,
            memory: None,
        })
    }

    /// The hyperparameters.
    pub fn config(&self) -> &LBFGSConfig {
        &self.config
    }

    /// The loss evaluations over all steps so far (PyTorch's `func_evals`).
    pub fn func_evals(&self) -> u64 {
        self.counters.map_or(0, |c| c.func_evals)
    }

    /// The iterations over all steps so far (PyTorch's `n_iter`).
    pub fn n_iter(&self) -> u64 {
        self.counters.map_or(0, |c| c.n_iter)
    }

    /// The total number of elements of the parameters.
    fn numel(&self) -> usize {
        self.params.iter().map(|(_, p)| p.numel()).sum()
    }

    /// Evaluates the closure: the loss (negated when maximising) and the
    /// flat gradient (likewise).
    fn evaluate(&self, closure: &mut Closure<'_>) -> Result<(f64, f64, Vec<f64>)> {
        let (loss, grads) = closure()?;
        let sign = if self.config.maximize { -1.0 } else { 1.0 };
        Ok((loss, sign * loss, self.flat_grad(&grads, sign)?))
    }

    /// The gradients of all parameters, flattened and concatenated, times
    /// `sign`; a parameter without one contributes zeros.
    fn flat_grad(&self, grads: &Gradients, sign: f64) -> Result<Vec<f64>> {
        let mut flat = Vec::with_capacity(self.numel());
        for (name, p) in &self.params {
            let value = p.value();
            match grads.get_param(p) {
                Some(g) => {
                    check_like("LBFGS::step", name, g, &value)?;
                    flat.extend(g.to_f64_vec().into_iter().map(|x| sign * x));
                }
                None => flat.resize(flat.len() + value.numel(), 0.0),
            }
        }
        Ok(flat)
    }

    /// `p += t * d`, parameter by parameter, in each one's dtype.
    fn add_scaled(&self, t: f64, d: &[f64]) -> Result<()> {
        let mut offset = 0;
        for (_, p) in &self.params {
            p.update(|value| -> Result<()> {
                let n = value.numel();
                let part = d.get(offset..offset + n).ok_or_else(|| {
                    Error::invalid("LBFGS::step", "the parameters changed size during the step")
                })?;
                crate::with_dtype!("lbfgs", value.dtype(), T => {
                    for (x, &di) in value.make_mut::<T>()?.iter_mut().zip(part) {
                        *x = T::from_f64(x.to_f64() + t * di);
                    }
                });
                offset += n;
                Ok(())
            })?;
        }
        Ok(())
    }

    fn values(&self) -> Vec<Tensor> {
        self.params.iter().map(|(_, p)| p.value()).collect()
    }

    fn restore(&self, values: &[Tensor]) -> Result<()> {
        for ((_, p), v) in self.params.iter().zip(values) {
            p.set(v.clone())?;
        }
        Ok(())
    }
}

impl LBFGS {
    /// One step (see [`Optimizer::step_with_closure`]): PyTorch's
    /// `LBFGS.step`, with `counters` already counting this step.
    fn run(&mut self, closure: &mut Closure<'_>, counters: &mut Counters) -> Result<f64> {
        let c = self.config.clone();
        let max_eval = c.eval_budget();
        if let Some(memory) = &self.memory {
            let (n, remembered) = (self.numel(), memory.d.len());
            if n != remembered {
                return Err(Error::invalid(
                    "LBFGS::step",
                    format!("the parameters have {n} elements, the L-BFGS memory {remembered}"),
                ));
            }
        }
        let (orig_loss, mut loss, mut flat_grad) = self.evaluate(closure)?;
        let mut current_evals = 1;
        counters.func_evals += 1;
        if max_abs(&flat_grad) <= c.tolerance_grad {
            return Ok(orig_loss);
        }
        let mut n_iter = 0;
        while n_iter < c.max_iter {
            n_iter += 1;
            counters.n_iter += 1;
            let first = self.memory.is_none();
            let mem = match self.memory.as_mut() {
                None => self.memory.insert(Memory::new(&flat_grad, loss)),
                Some(mem) => {
                    mem.update_direction(&flat_grad, c.history_size);
                    mem.prev_flat_grad.copy_from_slice(&flat_grad);
                    mem.prev_loss = loss;
                    mem
                }
            };
            // The step length: on the very first iteration scaled down by
            // the gradient's L1 norm.
            mem.t = if first {
                let inv_l1 = 1.0 / flat_grad.iter().map(|g| g.abs()).sum::<f64>();
                (if inv_l1 < 1.0 { inv_l1 } else { 1.0 }) * c.lr
            } else {
                c.lr
            };
            let gtd = dot(&flat_grad, &mem.d);
            // The directional derivative is below tolerance.
            if gtd > -c.tolerance_change {
                break;
            }
            let (d, t) = (mem.d.clone(), mem.t);
            let (mut ls_func_evals, mut opt_cond) = (0, false);
            match c.line_search {
                LineSearch::StrongWolfe => {
                    let x_init = self.values();
                    let mut evaluate = |t: f64| -> Result<(f64, Vec<f64>)> {
                        self.add_scaled(t, &d)?;
                        let evaluated = self.evaluate(closure);
                        self.restore(&x_init)?;
                        let (_, loss, grad) = evaluated?;
                        Ok((loss, grad))
                    };
                    let start = Point {
                        t: 0.0,
                        f: loss,
                        g: flat_grad,
                        gtd,
                    };
                    let wolfe = Wolfe {
                        c1: 1e-4,
                        c2: 0.9,
                        tolerance_change: 1e-9,
                        max_ls: max_eval as i64 - current_evals as i64,
                    };
                    let (point, evals) = strong_wolfe(&mut evaluate, &d, &start, t, &wolfe)?;
                    (loss, flat_grad, ls_func_evals) = (point.f, point.g, evals);
                    self.memory.as_mut().expect("set above").t = point.t;
                    self.add_scaled(point.t, &d)?;
                    opt_cond = max_abs(&flat_grad) <= c.tolerance_grad;
                }
                LineSearch::None => {
                    self.add_scaled(t, &d)?;
                    // No use re-evaluating after the last iteration (in a
                    // stochastic setting the next step evaluates anyway).
                    if n_iter != c.max_iter {
                        let (_, new_loss, new_grad) = self.evaluate(closure)?;
                        (loss, flat_grad) = (new_loss, new_grad);
                        opt_cond = max_abs(&flat_grad) <= c.tolerance_grad;
                        ls_func_evals = 1;
                    }
                }
            }
            current_evals += ls_func_evals;
            counters.func_evals += ls_func_evals as u64;
            let mem = self.memory.as_ref().expect("set above");
            if n_iter == c.max_iter
                || current_evals >= max_eval
                || opt_cond
                || max_abs(&mem.d) * mem.t.abs() <= c.tolerance_change
                || (loss - mem.prev_loss).abs() < c.tolerance_change
            {
                break;
            }
        }
        Ok(orig_loss)
    }
}

impl Optimizer for LBFGS {
    fn step(&mut self, _grads: &Gradients) -> Result<()> {
        Err(Error::invalid(
            "LBFGS::step",
            "L-BFGS evaluates the loss several times per step: call step_with_closure \
             with a closure that builds the graph, runs backward and returns the loss \
             and the gradients",
        ))
    }

    fn step_with_closure(&mut self, closure: &mut Closure<'_>) -> Result<f64> {
        if self.params.is_empty() {
            return Ok(closure()?.0);
        }
        let start = self.values();
        let mut counters = self.counters.unwrap_or_default();
        let result = self.run(closure, &mut counters);
        self.counters = Some(counters);
        if result.is_err() {
            self.restore(&start)?;
            self.memory = None;
        }
        result
    }

    fn lr(&self) -> f64 {
        self.config.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.config.lr = lr;
    }

    fn parameters(&self) -> &[(String, Parameter)] {
        &self.params
    }

    fn kind(&self) -> &'static str {
        KINDS[0].name
    }

    fn state_dict(&self) -> StateDict {
        let mut out = StateDict::new();
        let (Some((first, _)), Some(counters)) = (self.params.first(), self.counters) else {
            return out;
        };
        let mut put = |field: &str, t: Tensor| {
            out.insert(format!("{first}.{field}"), t);
        };
        put("func_evals", Tensor::scalar(counters.func_evals as f64));
        put("n_iter", Tensor::scalar(counters.n_iter as f64));
        if let Some(memory) = &self.memory {
            memory.write(&mut put);
        }
        out
    }

    fn load_state_dict(&mut self, state: &StateDict) -> Result<()> {
        const CONTEXT: &str = "LBFGS::load_state_dict";
        let mut reader = StateReader::new(CONTEXT, state);
        let Some((first, _)) = self.params.first() else {
            return reader.finish();
        };
        let has_counters = reader.all_or_none(first, COUNTER_FIELDS)?;
        let has_memory = reader.all_or_none(first, MEMORY_FIELDS)?;
        reader.finish()?;
        if has_memory && !has_counters {
            return Err(mismatch(
                CONTEXT,
                &format!("{first}.n_iter"),
                TensorProblem::Missing,
            ));
        }
        let key = |field: &str| format!("{first}.{field}");
        let counters = if has_counters {
            Some(Counters {
                func_evals: read_step(CONTEXT, &key("func_evals"), &state[&key("func_evals")])?,
                n_iter: read_step(CONTEXT, &key("n_iter"), &state[&key("n_iter")])?,
            })
        } else {
            None
        };
        let memory = if has_memory {
            Some(Memory::read(
                CONTEXT,
                state,
                &key,
                self.numel(),
                self.config.history_size,
            )?)
        } else {
            None
        };
        self.counters = counters;
        self.memory = memory;
        Ok(())
    }
}
