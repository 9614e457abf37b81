//! `nll_loss` (log-probabilities and integer class targets) and its
//! backward op `nll_loss_backward`: a gather and a scatter, each the
//! other's transpose, so each is the other's derivative.

use std::sync::Arc;

use super::batch_norm::sample;
use super::class_targets::{
    batch_class_backward, batch_class_loss, class_loss_methods, class_loss_rules,
    class_loss_setters, record_class_backward, record_class_loss, ClassLossSpec,
};
use super::support::{to_i64_list, Indices, IntIndex, Reduction};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels::nn::classification as kernel;
use crate::ops::{Node, OpFacts, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// The options of [`Var::try_nll_loss_with`], PyTorch's keyword arguments.
///
/// ```
/// use retrograd::ops::nn::{NllLossOptions, Reduction};
/// let opts = NllLossOptions::default().reduction(Reduction::Sum).ignore_index(None);
/// assert_eq!(opts.reduction, Reduction::Sum);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct NllLossOptions {
    /// How per-sample losses combine (default: mean).
    pub reduction: Reduction,
    /// Samples whose target equals this are skipped (default `Some(-100)`, as PyTorch).
    pub ignore_index: Option<i64>,
    /// Optional per-class weights, shape `[C]`, in the input's dtype.
    pub weight: Option<Tensor>,
}

impl Default for NllLossOptions {
    fn default() -> Self {
        NllLossOptions {
            reduction: Reduction::Mean,
            ignore_index: Some(-100),
            weight: None,
        }
    }
}

impl NllLossOptions {
    class_loss_setters!();

    fn spec(&self, targets: Option<Arc<[i64]>>) -> ClassLossSpec {
        ClassLossSpec {
            targets,
            reduction: self.reduction,
            label_smoothing: 0.0,
            ignore_index: self.ignore_index,
            weight: self.weight.clone(),
        }
    }
}

/// Negative log-likelihood of log-probabilities (`[C]`, `[N, C]` or
/// `[N, C, d...]`) at class targets: `-w_t x[t]` per sample, reduced.
/// Inputs: the log-probabilities, and unless stored, the targets as floats.
#[derive(Clone, Debug, Default)]
pub struct NllLoss {
    spec: ClassLossSpec,
}

impl NllLoss {
    /// An `nll_loss` with `targets` stored in the op.
    pub fn new<I: IntIndex>(targets: &[I], options: &NllLossOptions) -> Self {
        NllLoss {
            spec: options.spec(Some(to_i64_list(targets))),
        }
    }

    /// An `nll_loss` taking its targets as a second input tensor.
    pub fn with_options(options: &NllLossOptions) -> Self {
        NllLoss {
            spec: options.spec(None),
        }
    }

    /// An `nll_loss` with these options (targets stored or not).
    pub(super) fn from_spec(spec: ClassLossSpec) -> Self {
        NllLoss { spec }
    }
}

/// The gradient of [`NllLoss`]: zeros except `-g w_t / D` at each target.
/// Inputs: `g`, the log-probabilities (for their shape), and the targets
/// unless stored.
#[derive(Clone, Debug, Default)]
pub struct NllLossBackward {
    spec: ClassLossSpec,
}

impl NllLoss {
    fn stored(&self, x: &Tensor, extra: Option<&Var<'_>>) -> Result<ClassLossSpec> {
        let r = self.spec.resolve("nll_loss", x, extra.map(|v| v.value()))?;
        Ok(self.spec.with_targets(r.targets))
    }
}

impl StructuredOp for NllLoss {
    const NAME: &'static str = "nll_loss";
    const INPUTS: &'static [&'static str] = &["input", "target"];
    const NO_GRAD: &'static [usize] = &[1];
    const LINEAR: &'static [usize] = &[0];
    class_loss_rules!("nll_loss", 1);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let r = self.spec.resolve(Self::NAME, x[0], x.get(1).copied())?;
        crate::with_dtype!(Self::NAME, x[0].dtype(), T => self.spec.reduced::<T>(&r, |targets| {
            kernel::nll_lanes(x[0].as_slice_of::<T>(), r.lanes, targets)
        }))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let stored = || self.stored(n.x(0).value(), None);
        record_class_backward(g, n, &self.spec, stored, |spec| NllLossBackward { spec })
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_class_loss(&self.spec, |spec| NllLoss { spec }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                let (scores, targets) = class_sample(seed);
                vec![scores, targets]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

impl StructuredOp for NllLossBackward {
    const NAME: &'static str = "nll_loss_backward";
    const INPUTS: &'static [&'static str] = &["grad", "input", "target"];
    const LINEAR: &'static [usize] = &[0];
    /// The output does not depend on the values of the log-probabilities.
    const NO_GRAD: &'static [usize] = &[1, 2];
    class_loss_rules!("nll_loss", 2);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (g, x, target) = (x[0], x[1], x.get(2).copied());
        let r = self.spec.resolve(Self::NAME, x, target)?;
        self.spec.check_grad(Self::NAME, g, x, &r)?;
        crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let targets = self.spec.kernel_targets::<T>(&r.targets);
            let (gs, scale) = (g.as_slice_of::<T>(), self.spec.scale(&targets));
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::nll_backward_lanes(gs, r.lanes, &targets, scale, out)))
        })
    }
    fn grad<'g>(&self, _: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        // The scatter's transpose is the gather: nll_loss of g2.
        let (g, x) = (n.x(0), n.x(1));
        if let Some(t) = n.inputs.get(2) {
            let spec = self.spec.clone();
            return g2
                .graph()
                .record(NllLoss { spec }, &[g2, t])?
                .try_expand(g.shape());
        }
        let r = self.spec.resolve(Self::NAME, x.value(), None)?;
        let spec = self.spec.with_targets(r.targets);
        g2.graph()
            .record(NllLoss { spec }, &[g2])?
            .try_expand(g.shape())
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_class_backward(&self.spec, |spec| NllLossBackward { spec }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            sample_inputs: Some(|seed| {
                let (scores, targets) = class_sample(seed);
                vec![sample(&[], seed + 2, 0.5, 0.3), scores, targets]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// Sample inputs of the class losses: `[3, 4]` scores and 3 targets drawn
/// from the seed, one of them ignored (-100) for some seeds.
pub(super) fn class_sample(seed: u64) -> (Tensor, Tensor) {
    let targets: Vec<i64> = (0..3u64)
        .map(|i| {
            if i == 1 && seed % 3 == 1 {
                -100
            } else {
                ((seed * 5 + i * 3) % 4) as i64
            }
        })
        .collect();
    let targets = Tensor::from_vec(targets, &[3]).expect("a valid shape");
    (sample(&[3, 4], seed, 0.0, 2.0), targets)
}

register_defaults!(NllLoss, NllLossBackward);

class_loss_methods! {
    NllLoss, "nll_loss", NllLossOptions;
    /// Negative log-likelihood of these log-probabilities (`[C]`, `[N, C]`
    /// or `[N, C, d...]`, typically from [`log_softmax`](Self::log_softmax))
    /// at integer class `targets`, averaged: PyTorch's `F.nll_loss`.
    ///
    /// Errors: a target outside `0..C` is `Error::IndexOutOfRange`; a
    /// target count that does not match is `Error::InvalidArgument`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let logp = g.variable(Tensor::from_vec(vec![-0.5, -1.0, -2.0, -0.25], &[2, 2])?);
    /// let loss = logp.try_nll_loss(&[0usize, 1])?;
    /// assert_eq!(loss.value().try_item()?, 0.375);
    /// assert_eq!(loss.backward()?.wrt(&logp).to_f64_vec(), vec![-0.5, 0.0, 0.0, -0.5]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_nll_loss / nll_loss;

    /// `nll_loss` with explicit options: reduction, `ignore_index`, class weights.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// use retrograd::ops::nn::{NllLossOptions, Reduction};
    /// let g = Graph::new();
    /// let logp = g.variable(Tensor::from_vec(vec![-0.5, -1.0, -2.0, -0.25], &[2, 2])?);
    /// let opts = NllLossOptions::default().weight(Tensor::from_vec(vec![1.0, 3.0], &[2])?);
    /// // (1 * 0.5 + 3 * 0.25) / (1 + 3)
    /// assert_eq!(logp.try_nll_loss_with(&[0usize, 1], &opts)?.value().try_item()?, 0.3125);
    /// let none = opts.reduction(Reduction::None).ignore_index(Some(0));
    /// assert_eq!(logp.try_nll_loss_with(&[0usize, 1], &none)?.value().to_f64_vec(), vec![0.0, 0.75]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_nll_loss_with;

    /// `nll_loss` against class targets held in a value of the graph (an
    /// integer or float tensor of class indices, one per sample) rather
    /// than stored in the op: the form a [compiled step](crate::compile)
    /// replays on each run's targets. The same as
    /// [`try_nll_loss_with`](Self::try_nll_loss_with) given the `Var` (one
    /// mechanism: see [`Indices`](crate::ops::nn::Indices)).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// use retrograd::ops::nn::NllLossOptions;
    /// let g = Graph::new();
    /// let logp = g.variable(Tensor::from_vec(vec![-0.5, -1.0, -2.0, -0.25], &[2, 2])?);
    /// let targets = g.constant(Tensor::from_vec(vec![0i64, 1], &[2])?);
    /// let loss = logp.try_nll_loss_input(&targets, &NllLossOptions::default())?;
    /// assert_eq!(loss.value().try_item()?, 0.375);
    /// assert_eq!(loss.backward()?.wrt(&logp).to_f64_vec(), vec![-0.5, 0.0, 0.0, -0.5]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_nll_loss_input / nll_loss_input;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::cross_entropy::tests::logits as logp;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, DType, Error, Graph};

    use crate::tensor::test_util::tensor as t;

    #[test]
    fn forward_values() {
        // NumPy: -mean(x[[0, 1, 2], [0, 3, 1]]); weighted: -(1 * 0.5 + 0.5 * -2.0) / 1.5.
        let g = Graph::new();
        let x = g.variable(logp());
        assert!((x.nll_loss(&[0usize, 3, 1]).value().item() + 0.8333333333333334).abs() < 1e-15);
        let opts = NllLossOptions::default().weight(t(&[1.0, 2.0, 0.5, 1.5], &[4]));
        let l = x.try_nll_loss_with(&[0i64, -100, 2], &opts).unwrap();
        assert!((l.value().item() - 0.3333333333333333).abs() < 1e-15);
        let sum = x
            .try_nll_loss_with(&[0i64, -100, 2], &opts.clone().reduction(Reduction::Sum))
            .unwrap();
        assert_eq!(sum.value().item(), 0.5);
        let none = x
            .try_nll_loss_with(&[0i64, -100, 2], &opts.reduction(Reduction::None))
            .unwrap();
        assert_eq!(none.value().to_f64_vec(), vec![-0.5, 0.0, 1.0]);
        // [N, C, d] and [C].
        let x3 = g.variable(logp().reshape(&[2, 3, 2]).unwrap());
        let per = x3
            .try_nll_loss_with(
                &[0u8, 2, 1, 1],
                &NllLossOptions::default().reduction(Reduction::None),
            )
            .unwrap();
        // Lane (n, d) reads x[n, t, d] = flat n * 6 + t * 2 + d.
        assert_eq!(per.value().to_f64_vec(), vec![-0.5, 0.7, 0.4, -1.1]);
        let x1 = g.variable(t(&[-1.0, -2.0], &[2]));
        assert_eq!(x1.nll_loss(&[1usize]).value().item(), 2.0);
    }

    #[test]
    fn composes_into_cross_entropy() {
        let g = Graph::new();
        let x = g.variable(logp());
        let a = x.log_softmax(1).nll_loss(&[2usize, 0, 3]);
        let b = x.cross_entropy(&[2usize, 0, 3]);
        assert!((a.value().item() - b.value().item()).abs() < 1e-15);
        let ga = a.backward().unwrap().wrt(&x);
        let gb = b.backward().unwrap().wrt(&x);
        assert!(ga.allclose(&gb, 1e-14, 1e-15));
    }

    #[test]
    fn gradients_and_tangents() {
        let opts = NllLossOptions::default().weight(t(&[1.0, 2.0, 0.5, 1.5], &[4]));
        for red in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            let o = opts.clone().reduction(red);
            gradcheck(|v| v[0].try_nll_loss_with(&[0i64, -100, 2], &o), &[logp()]).unwrap();
            jvpcheck(|v| v[0].try_nll_loss_with(&[0i64, -100, 2], &o), &[logp()]).unwrap();
            let x3 = logp().reshape(&[2, 3, 2]).unwrap();
            let plain = NllLossOptions::default().reduction(red);
            gradcheck(
                |v| v[0].try_nll_loss_with(&[0u8, 2, 1, 1], &plain),
                std::slice::from_ref(&x3),
            )
            .unwrap();
        }
        // Two consumers, through log_softmax.
        gradcheck(
            |v| Ok(v[0].log_softmax(1).nll_loss(&[1usize, 2, 3]) * v[0].sum()),
            &[logp()],
        )
        .unwrap();
        let op = NllLossBackward {
            spec: NllLossOptions::default().spec(Some(Arc::from(vec![1i64, 2, 0]))),
        };
        derivatives_agree(&op, &[Tensor::scalar(0.7), logp()]).unwrap();
    }

    #[test]
    fn registry_form_and_errors() {
        let g = Graph::new();
        let x = g.variable(logp());
        let targets = g.constant(t(&[0.0, 3.0, 1.0], &[3]));
        let via_apply = g.apply("nll_loss", &[&x, &targets]).unwrap();
        assert_eq!(via_apply.value(), x.nll_loss(&[0usize, 3, 1]).value());
        assert!(via_apply.backward().is_ok());
        assert!(matches!(
            x.try_nll_loss(&[0usize, 1, 7]),
            Err(Error::IndexOutOfRange {
                op: "nll_loss",
                index: 7,
                size: 4
            })
        ));
        assert!(matches!(
            x.try_nll_loss(&[0usize]),
            Err(Error::InvalidArgument { .. })
        ));
        let w32 = NllLossOptions::default().weight(Tensor::ones(&[4], DType::F32).unwrap());
        assert!(matches!(
            x.try_nll_loss_with(&[0usize, 1, 2], &w32),
            Err(Error::DTypeMismatch { .. })
        ));
        let bad_g = g.constant(t(&[1.0, 2.0], &[2]));
        let op = NllLossBackward {
            spec: NllLossOptions::default().spec(Some(Arc::from(vec![1i64, 2, 0]))),
        };
        assert!(matches!(
            g.record(op, &[&bad_g, &x]),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
