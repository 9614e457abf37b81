//! The part of `cross_entropy` and `nll_loss` (and their backward ops)
//! that is about targets: the options, where the targets come from (stored
//! in the op by the `Var` methods, or a tensor of float class indices as the
//! last input when called through `Graph::apply`), their validation
//! against the input's shape, the per-lane target weights as a recorded
//! value, and the batching rules the four ops share.

use std::sync::Arc;

use super::nll::NllLoss;
use super::support::{
    check_indices, index_source, indices_from_tensor, reduce_examples, reduce_lanes, spread_grad,
    IndexSource, Indices, Reduction,
};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, Differentiable, OpAttributes};
use crate::kernels::nn::classification::Targets;
use crate::kernels::nn::lanes::AxisLanes;
use crate::ops::batching::{fold, materialize, unfold};
use crate::ops::{Node, StructuredOp};
use crate::tensor::{Dims, Element, Tensor};

/// The [`StructuredOp`] methods every class-loss op (`cross_entropy`,
/// `nll_loss` and their backward ops) takes from its [`ClassLossSpec`],
/// inside its `impl StructuredOp`: what it holds (its targets, when
/// stored, under the loss's name), its arity (`leading` inputs, then the
/// targets unless stored) and its attributes.
macro_rules! class_loss_rules {
    ($loss:literal, $leading:literal) => {
        fn holds(&self) -> crate::Holds {
            self.spec.holds($loss)
        }
        fn arity(&self) -> Option<usize> {
            Some(self.spec.arity($leading))
        }
        fn attributes(&self) -> OpAttributes {
            self.spec.attributes()
        }
    };
}
pub(crate) use class_loss_rules;

/// Declares the `Var` methods of a class loss, written once for
/// `cross_entropy` and `nll_loss`: `try_name / name` (default options),
/// `try_name_with` (options; targets a list or a `Var`) and
/// `try_name_input / name_input` (targets a `Var`), each with its doc
/// comment, recording `Op { spec: options.spec(..) }`.
macro_rules! class_loss_methods {
    (
        $op:ident, $loss:literal, $options:ty;
        $(#[$doc:meta])* $try_name:ident / $name:ident;
        $(#[$with_doc:meta])* $try_with:ident;
        $(#[$input_doc:meta])* $try_input:ident / $input:ident;
    ) => {
        impl<'g> Var<'g> {
            $(#[$doc])*
            #[track_caller]
            pub fn $try_name<T: Indices<'g> + ?Sized>(&self, targets: &T) -> Result<Var<'g>> {
                self.$try_with(targets, &<$options>::default())
            }

            #[doc = concat!(
                "Like [`", stringify!($try_name), "`](Self::", stringify!($try_name),
                "), but panics with its error at the caller's line."
            )]
            #[track_caller]
            pub fn $name<T: Indices<'g> + ?Sized>(&self, targets: &T) -> Var<'g> {
                crate::base::error::or_panic(self.$try_name(targets))
            }

            $(#[$with_doc])*
            #[track_caller]
            pub fn $try_with<T: Indices<'g> + ?Sized>(
                &self,
                targets: &T,
                options: &$options,
            ) -> Result<Var<'g>> {
                record_class_loss($loss, self, targets, |targets| $op {
                    spec: options.spec(targets),
                })
            }

            $(#[$input_doc])*
            #[track_caller]
            pub fn $try_input(&self, targets: &Var<'g>, options: &$options) -> Result<Var<'g>> {
                self.$try_with(targets, options)
            }

            #[doc = concat!(
                "Like [`", stringify!($try_input), "`](Self::", stringify!($try_input),
                "), but panics with its error at the caller's line."
            )]
            #[track_caller]
            pub fn $input(&self, targets: &Var<'g>, options: &$options) -> Var<'g> {
                crate::base::error::or_panic(self.$try_input(targets, options))
            }
        }
    };
}
pub(crate) use class_loss_methods;

/// The option setters both class losses' options share (inside their
/// `impl`): reduction, ignored target value, class weights.
macro_rules! class_loss_setters {
    () => {
        /// Sets the reduction.
        pub fn reduction(mut self, reduction: Reduction) -> Self {
            self.reduction = reduction;
            self
        }
        /// Sets (or clears) the ignored target value.
        pub fn ignore_index(mut self, index: Option<i64>) -> Self {
            self.ignore_index = index;
            self
        }
        /// Sets per-class weights.
        pub fn weight(mut self, weight: Tensor) -> Self {
            self.weight = Some(weight);
            self
        }
    };
}
pub(crate) use class_loss_setters;

/// Records the backward op `make` builds of a class loss's node `n`, given
/// the loss's gradient `g`. Targets given as an input stay an input of the
/// backward node (not read into it), so a compiled step replays it on each
/// run's targets; otherwise `stored` gives the spec with them stored.
pub(crate) fn record_class_backward<'g, O: StructuredOp>(
    g: &Var<'g>,
    n: Node<'_, 'g>,
    spec: &ClassLossSpec,
    stored: impl FnOnce() -> Result<ClassLossSpec>,
    make: impl FnOnce(ClassLossSpec) -> O,
) -> Result<Var<'g>> {
    match n.inputs.get(1) {
        Some(t) => g.graph().record(make(spec.clone()), &[g, n.x(0), t]),
        None => g.graph().record(make(stored()?), &[g, n.x(0)]),
    }
}

/// Records the class loss `op` (`cross_entropy`, `nll_loss`) of `x`
/// against `targets`, the op made by `make` from where they are: stored in
/// the op (`Some`) when they are a list, the node's second input (`None`)
/// when they are a value of the graph.
pub(crate) fn record_class_loss<'g, O: StructuredOp, T: Indices<'g> + ?Sized>(
    op: &'static str,
    x: &Var<'g>,
    targets: &T,
    make: impl Fn(Option<Arc<[i64]>>) -> O,
) -> Result<Var<'g>> {
    let lanes = target_shape(x.shape());
    match index_source(x.graph(), op, targets, &lanes)? {
        IndexSource::Input(t) => x.graph().record(make(None), &[x, &t]),
        IndexSource::Stored(list) => x.graph().record(make(Some(list)), &[x]),
    }
}

/// Options shared by the class losses (PyTorch's keyword arguments).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClassLossSpec {
    /// The targets, or `None` when they come as the op's last input.
    pub(crate) targets: Option<Arc<[i64]>>,
    pub(crate) reduction: Reduction,
    /// Cross-entropy only (0 for `nll_loss`).
    pub(crate) label_smoothing: f64,
    pub(crate) ignore_index: Option<i64>,
    /// Per-class weights, `[C]`, in the input's dtype.
    pub(crate) weight: Option<Tensor>,
}

impl Default for ClassLossSpec {
    fn default() -> Self {
        ClassLossSpec {
            targets: None,
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            ignore_index: Some(-100),
            weight: None,
        }
    }
}

/// The targets' shape for a class loss's input of this shape: the shape
/// without the class axis (axis 1, or 0 for `[C]`); empty for a 0-d input,
/// which the op itself rejects.
pub(crate) fn target_shape(x: &[usize]) -> Dims {
    let axis = usize::from(x.len() > 1);
    x.iter()
        .enumerate()
        .filter_map(|(i, &d)| (i != axis).then_some(d))
        .collect()
}

/// A class loss's input seen as lanes along its class axis, with its targets.
pub(crate) struct Resolved {
    pub(crate) lanes: AxisLanes,
    /// The input's shape without the class axis: the targets' and the
    /// unreduced loss's shape.
    pub(crate) lane_shape: Dims,
    pub(crate) targets: Arc<[i64]>,
}

impl ClassLossSpec {
    /// What an op with this spec holds besides its inputs (see
    /// [`Holds`](crate::Holds)): stored targets and class weights are data.
    pub(crate) fn holds(&self, op: &str) -> crate::Holds {
        match (&self.targets, &self.weight) {
            (Some(_), _) => crate::Holds::data(format!(
                "class targets stored in the op (given to {op} as a list); pass them as a \
                 tensor, the step's input (`x[1].value()`), or as a value of the graph \
                 ({op}_input), so that every run reads its own"
            )),
            (None, Some(_)) => crate::Holds::data(
                "a per-class weight tensor, which it cannot take as an input yet \
                 (run this step eagerly, or drop the weights)",
            ),
            (None, None) => crate::Holds::Settings,
        }
    }

    /// How many inputs an op with this spec and `leading` tensor inputs takes.
    pub(crate) fn arity(&self, leading: usize) -> usize {
        leading + usize::from(self.targets.is_none())
    }

    /// Checks `x` (`[C]`, `[N, C]` or `[N, C, d...]`), the targets (stored
    /// or `target_input`), the weights and the smoothing.
    pub(crate) fn resolve(
        &self,
        op: &'static str,
        x: &Tensor,
        target_input: Option<&Tensor>,
    ) -> Result<Resolved> {
        if x.rank() == 0 {
            return Err(Error::invalid(
                op,
                "expects an input of shape [C], [N, C] or [N, C, d1, ...], got a 0-d tensor",
            ));
        }
        let axis = usize::from(x.rank() > 1);
        let classes = x.shape()[axis];
        if classes == 0 {
            return Err(Error::invalid(
                op,
                format!("input of shape {:?} has no classes", x.shape()),
            ));
        }
        let lanes = AxisLanes::new(x.shape(), axis);
        let lane_shape: Dims = x
            .shape()
            .iter()
            .enumerate()
            .filter_map(|(i, &d)| (i != axis).then_some(d))
            .collect();
        let targets = match (&self.targets, target_input) {
            (Some(t), None) => {
                if t.len() != lanes.count() {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "{} targets for an input of shape {:?} (expected {}, one per sample)",
                            t.len(),
                            x.shape(),
                            lanes.count()
                        ),
                    ));
                }
                t.clone()
            }
            (None, Some(t)) => {
                if t.shape() != lane_shape.as_slice() {
                    return Err(Error::shape_mismatch(op, x.shape(), t.shape()));
                }
                indices_from_tensor(op, t)?
            }
            _ => {
                return Err(Error::invalid(
                    op,
                    "targets must be stored in the op or passed as its last input, not both",
                ))
            }
        };
        check_indices(op, &targets, classes, self.ignore_index)?;
        if let Some(w) = &self.weight {
            if w.shape() != [classes] {
                return Err(Error::shape_mismatch(op, &[classes], w.shape()));
            }
            check_dtypes(op, x.dtype(), w.dtype())?;
        }
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(Error::invalid(
                op,
                format!(
                    "label_smoothing must be in [0, 1], got {}",
                    self.label_smoothing
                ),
            ));
        }
        Ok(Resolved {
            lanes,
            lane_shape,
            targets,
        })
    }

    /// The settings by name: the reduction, `ignore_index` and
    /// `label_smoothing` when set, the class weights and stored targets if
    /// any.
    pub(crate) fn attributes(&self) -> OpAttributes {
        let a = OpAttributes::new()
            .str("reduction", self.reduction.as_str())
            .int_opt("ignore_index", self.ignore_index);
        let a = if self.label_smoothing == 0.0 {
            a
        } else {
            a.float("label_smoothing", self.label_smoothing)
        };
        let a = a.tensor_opt("weight", self.weight.as_ref());
        match &self.targets {
            Some(t) => a.ints("targets", t),
            None => a,
        }
    }

    /// The same options with the targets stored.
    pub(crate) fn with_targets(&self, targets: Arc<[i64]>) -> Self {
        ClassLossSpec {
            targets: Some(targets),
            ..self.clone()
        }
    }

    /// The kernel's view of the targets (the weights read as `T`).
    pub(crate) fn kernel_targets<'a, T: Element>(&'a self, targets: &'a [i64]) -> Targets<'a, T> {
        Targets {
            classes: targets,
            ignore_index: self.ignore_index,
            weight: self.weight.as_ref().map(|w| w.as_slice_of::<T>()),
            label_smoothing: self.label_smoothing,
        }
    }

    /// A class loss's output: its loss per lane (`per_lane`, the loss's
    /// kernel given the targets), reduced as the spec says.
    pub(crate) fn reduced<T: Element>(
        &self,
        r: &Resolved,
        per_lane: impl FnOnce(&Targets<'_, T>) -> Tensor,
    ) -> Result<Tensor> {
        let targets = self.kernel_targets::<T>(&r.targets);
        let losses = per_lane(&targets);
        reduce_lanes(losses, &r.lane_shape, self.reduction, targets.denominator())
    }

    /// What the gradient of each lane's loss is multiplied by: `1 / D` for
    /// a mean (see `Targets::denominator`), else 1.
    pub(crate) fn scale<T: Element>(&self, targets: &Targets<'_, T>) -> f64 {
        match self.reduction {
            Reduction::Mean => 1.0 / targets.denominator(),
            _ => 1.0,
        }
    }

    /// Checks the shape of a gradient of the loss: 0-d (or one element) for
    /// a reduced loss, the lane shape otherwise.
    pub(crate) fn check_grad(
        &self,
        op: &'static str,
        g: &Tensor,
        x: &Tensor,
        r: &Resolved,
    ) -> Result<()> {
        check_dtypes(op, g.dtype(), x.dtype())?;
        let ok = match self.reduction {
            Reduction::None => g.shape() == r.lane_shape.as_slice(),
            _ => g.numel() == 1,
        };
        if ok {
            Ok(())
        } else {
            Err(Error::shape_mismatch(op, &r.lane_shape, g.shape()))
        }
    }
}

/// Per lane, the class weight of its target (1 without class weights, or
/// with `weighted` false; 0 for an ignored lane), in the lanes' shape (`x`'s
/// without the class axis): `nll_loss` of log-probabilities that are all
/// -1, against the targets stored in `spec` or given as `target`. Recorded
/// from the targets rather than read from their values, so a formula built
/// on it holds no example's data: under `vmap` every example gets its own.
pub(crate) fn target_weights<'g>(
    spec: &ClassLossSpec,
    x: &Var<'g>,
    target: Option<&Var<'g>>,
    weighted: bool,
) -> Result<Var<'g>> {
    let minus_ones = x
        .graph()
        .constant(Tensor::full(x.shape(), -1.0, x.dtype())?);
    let op = NllLoss::from_spec(ClassLossSpec {
        targets: spec.targets.clone(),
        reduction: Reduction::None,
        label_smoothing: 0.0,
        ignore_index: spec.ignore_index,
        weight: spec.weight.clone().filter(|_| weighted),
    });
    let args: Vec<&Var<'g>> = std::iter::once(&minus_ones).chain(target).collect();
    x.graph().record(op, &args)
}

/// A class loss's input and targets over a batch, with the batch folded
/// into the samples (an example `[N, C, d...]` as `[B·N, C, d...]`, its
/// targets `[B·N, d...]`; an example `[C]` is one sample, so a batch of them
/// is already `[B, C]` against `[B]` targets): each example's lanes are
/// lanes of one loss.
pub(crate) struct BatchedLanes<'g> {
    /// The input, folded.
    pub(crate) input: Var<'g>,
    /// The targets (stored ones as a constant), folded.
    pub(crate) targets: Var<'g>,
    /// The per-lane shape of one example (the targets').
    pub(crate) lane_shape: Dims,
    folded: bool,
    batch: usize,
}

impl<'g> BatchedLanes<'g> {
    /// The lanes of `x` (the loss's input) against the targets stored in
    /// `spec` or given as `target`.
    pub(crate) fn new(
        spec: &ClassLossSpec,
        x: &Batched<'g>,
        target: Option<&Batched<'g>>,
        ctx: &BatchContext,
    ) -> Result<Self> {
        let input = materialize(x, ctx)?;
        let lane_shape = target_shape(x.example_shape());
        let stored;
        let target = match (&spec.targets, target) {
            (Some(list), _) => {
                let t = Tensor::from_vec(list.to_vec(), &lane_shape)?;
                stored = Batched::shared(input.graph().constant(t));
                &stored
            }
            (None, Some(t)) => t,
            (None, None) => {
                return Err(Error::invalid(
                    "vmap",
                    "a class loss without targets (stored or as an input)",
                ))
            }
        };
        let targets = materialize(target, ctx)?;
        let folded = x.example_rank() >= 2;
        Ok(BatchedLanes {
            input: if folded { fold(&input)? } else { input },
            targets: if folded { fold(&targets)? } else { targets },
            lane_shape,
            folded,
            batch: ctx.size,
        })
    }

    /// A value laid out as the folded lanes (`[B·N, ...]`) back to
    /// `[B, N, ...]`.
    pub(crate) fn unfold(&self, v: &Var<'g>) -> Result<Var<'g>> {
        if self.folded {
            Ok(unfold(v, self.batch)?.value)
        } else {
            Ok(v.clone())
        }
    }

    /// A value laid out per example (`[B, N, ...]`) folded as the lanes.
    fn fold(&self, v: &Var<'g>) -> Result<Var<'g>> {
        if self.folded {
            fold(v)
        } else {
            Ok(v.clone())
        }
    }

    /// Each example's denominator of a mean (`[B]`): the summed weight of
    /// its counted targets.
    fn denominators(&self, spec: &ClassLossSpec) -> Result<Var<'g>> {
        let spec = ClassLossSpec {
            targets: None,
            ..spec.clone()
        };
        let weights = target_weights(&spec, &self.input, Some(&self.targets), true)?;
        reduce_examples(self.unfold(&weights)?, Reduction::Sum)
    }
}

/// `spec` with the targets as the op's input and no reduction: the op each
/// batching rule records on the folded lanes.
fn per_lane(spec: &ClassLossSpec) -> ClassLossSpec {
    ClassLossSpec {
        targets: None,
        reduction: Reduction::None,
        ..spec.clone()
    }
}

/// The batching rule of a class loss (`cross_entropy`, `nll_loss`; inputs
/// the scores, then the targets unless stored): the loss `make` builds with
/// reduction `none` on the folded lanes ([`BatchedLanes`]), each example's
/// lanes then reduced on their own: summed, or for a mean divided by that
/// example's summed target weight.
pub(crate) fn batch_class_loss<'g, O: Differentiable + Clone>(
    spec: &ClassLossSpec,
    make: impl Fn(ClassLossSpec) -> O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let lanes = BatchedLanes::new(spec, &inputs[0], inputs.get(1), ctx)?;
    let graph = lanes.input.graph();
    let losses = graph.record(make(per_lane(spec)), &[&lanes.input, &lanes.targets])?;
    let losses = lanes.unfold(&losses)?;
    let out = match spec.reduction {
        Reduction::None => losses,
        Reduction::Sum => reduce_examples(losses, Reduction::Sum)?,
        Reduction::Mean => {
            reduce_examples(losses, Reduction::Sum)?.try_div(&lanes.denominators(spec)?)?
        }
    };
    Ok(Batched::along_batch(out))
}

/// The batching rule of a class loss's backward op (`cross_entropy_backward`,
/// `nll_loss_backward`; inputs the loss's gradient `g`, the scores, then the
/// targets unless stored): each example's `g` spread over its lanes (divided
/// by its own denominator for a mean), and the backward op `make` builds
/// with reduction `none` on the folded lanes.
pub(crate) fn batch_class_backward<'g, O: Differentiable + Clone>(
    spec: &ClassLossSpec,
    make: impl Fn(ClassLossSpec) -> O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let lanes = BatchedLanes::new(spec, &inputs[1], inputs.get(2), ctx)?;
    let g = &inputs[0];
    let mut shape = vec![ctx.size];
    shape.extend_from_slice(&lanes.lane_shape);
    let g = match spec.reduction {
        Reduction::None => materialize(g, ctx)?,
        reduction => {
            // One value per example: `[B]`, or one shared scalar.
            let dims: &[usize] = if g.batched { &[ctx.size] } else { &[] };
            let mut per = g.value.reshape_dims(dims)?;
            if reduction == Reduction::Mean {
                per = per.try_div(&lanes.denominators(spec)?)?;
            }
            let per = Batched {
                batched: per.shape().len() == 1,
                value: per,
            };
            spread_grad(&per, &shape, ctx)?
        }
    };
    let g = lanes.fold(&g)?;
    let graph = g.graph();
    let out = graph.record(make(per_lane(spec)), &[&g, &lanes.input, &lanes.targets])?;
    Ok(Batched::along_batch(lanes.unfold(&out)?))
}

#[cfg(test)]
mod tests {
    use super::super::batch_norm::sample;
    use super::super::support::tests::vmap_agrees;
    use super::*;
    use crate::ops::nn::{CrossEntropyOptions, NllLossOptions};

    /// Targets of `shape` from `seed`, the second ignored (-100) for odd
    /// seeds when there are several.
    fn targets(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        let v = (0..n as u64)
            .map(|i| {
                if n > 1 && i == 1 && seed % 2 == 1 {
                    -100
                } else {
                    ((seed * 5 + i * 3) % 4) as i64
                }
            })
            .collect();
        Tensor::from_vec(v, shape).unwrap()
    }

    // Each example's loss, with its own targets, weights and ignored lanes
    // (a mean divides by the example's own summed weight), for the three
    // layouts, each reduction, and the targets batched, shared or stored.
    #[test]
    fn class_losses_batch_example_by_example() {
        let w = Tensor::from_vec(vec![1.0, 2.0, 0.5, 1.5], &[4]).unwrap();
        let layouts: [(&[usize], &[usize]); 3] =
            [(&[4], &[]), (&[3, 4], &[3]), (&[2, 4, 2], &[2, 2])];
        for reduction in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            let ce = CrossEntropyOptions::default()
                .reduction(reduction)
                .label_smoothing(0.1)
                .weight(w.clone());
            let nll = NllLossOptions::default()
                .reduction(reduction)
                .weight(w.clone());
            for (x_shape, t_shape) in layouts {
                let examples: Vec<Vec<Tensor>> = (0..3)
                    .map(|s| vec![sample(x_shape, s, 0.0, 2.0), targets(t_shape, s)])
                    .collect();
                for batched in [[true, true], [true, false], [false, true]] {
                    vmap_agrees(
                        |v| v[0].try_cross_entropy_input(&v[1], &ce),
                        &examples,
                        &batched,
                    );
                    vmap_agrees(
                        |v| v[0].try_nll_loss_input(&v[1], &nll),
                        &examples,
                        &batched,
                    );
                }
                let stored = examples[0][1].to_vec::<i64>().unwrap();
                let xs: Vec<Vec<Tensor>> = examples.iter().map(|e| vec![e[0].clone()]).collect();
                vmap_agrees(|v| v[0].try_cross_entropy_with(&stored, &ce), &xs, &[true]);
                vmap_agrees(|v| v[0].try_nll_loss_with(&stored, &nll), &xs, &[true]);
            }
        }
    }

    // Per-sample gradients of a linear classifier (DP-SGD's use): each
    // example a feature vector and its class, the weights shared.
    #[test]
    fn per_sample_gradients_of_a_linear_classifier() {
        let examples: Vec<Vec<Tensor>> = (0..4)
            .map(|s| {
                vec![
                    sample(&[5], s, 0.0, 1.0),
                    targets(&[], s),
                    sample(&[4, 5], 9, 0.0, 0.5),
                    sample(&[4], 10, 0.0, 0.5),
                ]
            })
            .collect();
        fn logits<'s>(v: &[Var<'s>]) -> Result<Var<'s>> {
            v[2].try_matmul(&v[0])?.try_add(&v[3])
        }
        vmap_agrees(
            |v| logits(v)?.try_cross_entropy_input(&v[1], &CrossEntropyOptions::default()),
            &examples,
            &[true, true, false, false],
        );
        vmap_agrees(
            |v| {
                logits(v)?
                    .log_softmax(0)
                    .try_nll_loss_input(&v[1], &NllLossOptions::default())
            },
            &examples,
            &[true, true, false, false],
        );
    }
}
