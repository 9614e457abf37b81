//! `cross_entropy` (logits and integer class targets) and its fused
//! backward op `cross_entropy_backward`.
//!
//! One forward pass computes each sample's `logsumexp` and loss and keeps
//! nothing; the backward recomputes the softmax in the pass that writes
//! the gradient (see `kernels::nn::classification` for why). Both follow
//! PyTorch exactly: `[C]`, `[N, C]` and `[N, C, d...]` inputs, reductions
//! `mean` / `sum` / `none`, class weights, `ignore_index` (default -100) and
//! label smoothing `(1 - ε) nll + ε/C Σ_c -w_c log p_c`.

use std::sync::Arc;

use super::class_targets::{
    batch_class_loss, class_loss_methods, class_loss_rules, class_loss_setters,
    record_class_backward, record_class_loss, ClassLossSpec,
};
use super::cross_entropy_backward::{targets_of, CrossEntropyBackward};
use super::nll::class_sample;
use super::support::{sum_axis, to_i64_list, Indices, IntIndex, Reduction};
use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels::nn::classification as kernel;
use crate::ops::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::Tensor;

/// The options of [`Var::try_cross_entropy_with`], PyTorch's keyword arguments.
///
/// ```
/// use retrograd::ops::nn::{CrossEntropyOptions, Reduction};
/// let opts = CrossEntropyOptions::default().reduction(Reduction::Sum).label_smoothing(0.1);
/// assert_eq!(opts.ignore_index, Some(-100));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CrossEntropyOptions {
    /// How per-sample losses combine (default: mean).
    pub reduction: Reduction,
    /// Label smoothing `ε` in `[0, 1]` (default 0).
    pub label_smoothing: f64,
    /// Samples whose target equals this are skipped (default `Some(-100)`, as PyTorch).
    pub ignore_index: Option<i64>,
    /// Optional per-class weights, shape `[C]`, in the logits' dtype.
    pub weight: Option<Tensor>,
}

impl Default for CrossEntropyOptions {
    fn default() -> Self {
        CrossEntropyOptions {
            reduction: Reduction::Mean,
            label_smoothing: 0.0,
            ignore_index: Some(-100),
            weight: None,
        }
    }
}

impl CrossEntropyOptions {
    class_loss_setters!();
    /// Sets the label smoothing.
    pub fn label_smoothing(mut self, epsilon: f64) -> Self {
        self.label_smoothing = epsilon;
        self
    }

    pub(super) fn spec(&self, targets: Option<Arc<[i64]>>) -> ClassLossSpec {
        ClassLossSpec {
            targets,
            reduction: self.reduction,
            label_smoothing: self.label_smoothing,
            ignore_index: self.ignore_index,
            weight: self.weight.clone(),
        }
    }
}

/// Cross-entropy between logits and class targets. Inputs: the logits, and
/// unless the targets are stored in the op, a tensor of class indices (as
/// floats) of the logits' shape without the class axis. The registry holds
/// it with default options and no stored targets.
#[derive(Clone, Debug, Default)]
pub struct CrossEntropy {
    spec: ClassLossSpec,
}

impl CrossEntropy {
    /// A cross-entropy with `targets` stored in the op (one input: the logits).
    pub fn new<I: IntIndex>(targets: &[I], options: &CrossEntropyOptions) -> Self {
        CrossEntropy {
            spec: options.spec(Some(to_i64_list(targets))),
        }
    }

    /// A cross-entropy taking its targets as a second input tensor.
    pub fn with_options(options: &CrossEntropyOptions) -> Self {
        CrossEntropy {
            spec: options.spec(None),
        }
    }
}

impl StructuredOp for CrossEntropy {
    const NAME: &'static str = "cross_entropy";
    const INPUTS: &'static [&'static str] = &["input", "target"];
    const NO_GRAD: &'static [usize] = &[1];
    class_loss_rules!("cross_entropy", 1);
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let r = self.spec.resolve(Self::NAME, x[0], x.get(1).copied())?;
        crate::with_dtype!(Self::NAME, x[0].dtype(), T => self.spec.reduced::<T>(&r, |targets| {
            kernel::cross_entropy_lanes(x[0].as_slice_of::<T>(), r.lanes, targets)
        }))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let stored = || Ok(targets_of(&self.spec, n.x(0).value(), None)?.1);
        record_class_backward(g, n, &self.spec, stored, |spec| CrossEntropyBackward {
            spec,
        })
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(0);
        let axis = usize::from(x.shape().len() > 1);
        // Each lane's loss changes by <its gradient, tx>; the targets stay
        // the node's input when they are one (a formula holding their
        // values would hold one example's under vmap).
        let ones = x
            .graph()
            .constant(Tensor::ones(n.output.shape(), x.dtype())?);
        let spec = self.spec.clone();
        let args: Vec<&Var<'g>> = [&ones, x].into_iter().chain(n.inputs.get(1)).collect();
        let grad = x.graph().record(CrossEntropyBackward { spec }, &args)?;
        let per_lane = sum_axis(&grad.try_mul(tx)?, axis, false)?;
        Ok(match self.spec.reduction {
            Reduction::None => per_lane,
            _ => per_lane.sum(),
        })
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_class_loss(&self.spec, |spec| CrossEntropy { spec }, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(CrossEntropy::with_options(&sample_options()))),
            sample_inputs: Some(|seed| {
                let (logits, targets) = class_sample(seed);
                vec![logits, targets]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

/// The options of the sample instances: label smoothing, the mean (no
/// class weights: a weight tensor held in the op would not follow the
/// inputs' dtype where a suite converts them; the unit tests cover them).
pub(super) fn sample_options() -> CrossEntropyOptions {
    CrossEntropyOptions::default().label_smoothing(0.1)
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(CrossEntropy::default());
}

class_loss_methods! {
    CrossEntropy, "cross_entropy", CrossEntropyOptions;
    /// Cross-entropy of these logits (`[C]`, `[N, C]` or `[N, C, d...]`)
    /// against integer class `targets` (one per sample, in row-major order of
    /// the shape without the class axis), averaged: PyTorch's
    /// `F.cross_entropy(logits, targets)`. Stable for any finite logits.
    ///
    /// Errors: a target outside `0..C` is `Error::IndexOutOfRange`; a
    /// target count that does not match is `Error::InvalidArgument`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let logits = g.variable(Tensor::from_vec(vec![2.0, 0.0, 0.0, 0.0, 1e4, -1e4], &[2, 3])?);
    /// let loss = logits.try_cross_entropy(&[0usize, 1])?;
    /// // (log(e^2 + 2) - 2 + 0) / 2
    /// assert!((loss.value().try_item()? - ((2f64.exp() + 2.0).ln() - 2.0) / 2.0).abs() < 1e-12);
    /// let grad = loss.backward()?.wrt(&logits);
    /// assert!(grad.all_finite());
    /// assert!(logits.try_cross_entropy(&[0usize, 3]).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_cross_entropy / cross_entropy;

    /// Cross-entropy with explicit options: reduction, label smoothing,
    /// `ignore_index`, class weights.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// use retrograd::ops::nn::{CrossEntropyOptions, Reduction};
    /// let g = Graph::new();
    /// let logits = g.variable(Tensor::from_vec(vec![0.0f32, 0.0, 3.0, 1.0], &[2, 2])?);
    /// let opts = CrossEntropyOptions::default().reduction(Reduction::None).label_smoothing(0.2);
    /// let loss = logits.try_cross_entropy_with(&[1i64, -100], &opts)?;
    /// assert_eq!(loss.shape(), &[2]);
    /// let v = loss.value().to_vec::<f32>()?;
    /// assert!((v[0] - 2f32.ln()).abs() < 1e-6);
    /// assert_eq!(v[1], 0.0); // ignored
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_cross_entropy_with;

    /// Cross-entropy against class targets held in a value of the graph (an
    /// integer or float tensor of class indices, one per sample) rather than
    /// stored in the op: the form a [compiled step](crate::compile) needs,
    /// where the targets are an input that changes every run. The same as
    /// [`try_cross_entropy_with`](Self::try_cross_entropy_with) given the
    /// `Var` (one mechanism: see [`Indices`](crate::ops::nn::Indices)).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// use retrograd::ops::nn::CrossEntropyOptions;
    /// let g = Graph::new();
    /// let logits = g.variable(Tensor::from_vec(vec![0.0f64, 0.0, 2.0, 0.0], &[2, 2])?);
    /// let targets = g.constant(Tensor::from_vec(vec![1i64, 0], &[2])?);
    /// let loss = logits.try_cross_entropy_input(&targets, &CrossEntropyOptions::default())?;
    /// let expect = logits.try_cross_entropy(&[1usize, 0])?;
    /// assert_eq!(loss.value(), expect.value());
    /// assert_eq!(loss.value().try_item()?, (2f64.ln() + (1.0 + (-2f64).exp()).ln()) / 2.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_cross_entropy_input / cross_entropy_input;
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ops::testing::fixed;
    use crate::{gradcheck, jvpcheck, DType, Error, Graph};

    use crate::tensor::test_util::tensor as t;

    /// The [3, 4] scores the class-loss tests share (logits here,
    /// log-probabilities for `nll_loss`).
    pub(in crate::ops::nn) fn logits() -> Tensor {
        fixed(&[3, 4])
    }

    /// Options with every setting on: class weights, label smoothing.
    pub(in crate::ops::nn) fn weighted(reduction: Reduction) -> CrossEntropyOptions {
        CrossEntropyOptions::default()
            .reduction(reduction)
            .label_smoothing(0.1)
            .weight(t(&[1.0, 2.0, 0.5, 1.5], &[4]))
    }

    // Expected values: a NumPy transcription of PyTorch's
    // cross_entropy (log_softmax, nll_loss with weights and ignore_index,
    // and the label-smoothing term of aten's cross_entropy_loss_label_smoothing).
    #[test]
    fn forward_values_match_pytorch_formula() {
        let g = Graph::new();
        let x = g.variable(logits());
        let close = |v: &Var, e: f64| assert!((v.value().item() - e).abs() < 1e-14, "{v:?} vs {e}");
        close(&x.cross_entropy(&[0usize, 3, 1]), 1.1826354273449233);
        let tg = [0i64, -100, 2];
        close(
            &x.try_cross_entropy_with(&tg, &weighted(Reduction::Mean))
                .unwrap(),
            2.7029090362996886,
        );
        close(
            &x.try_cross_entropy_with(&tg, &weighted(Reduction::Sum))
                .unwrap(),
            4.054363554449533,
        );
        let none = x
            .try_cross_entropy_with(&tg, &weighted(Reduction::None))
            .unwrap();
        assert!(none.value().allclose(
            &t(&[2.2030025086674154, 0.0, 1.8513610457821175], &[3]),
            1e-14,
            0.0
        ));

        let x3 = g.variable(logits().reshape(&[2, 3, 2]).unwrap());
        close(&x3.cross_entropy(&[0u8, 2, 1, 1]), 1.5376171788935435);
        let opts = CrossEntropyOptions::default()
            .reduction(Reduction::None)
            .label_smoothing(0.25);
        let per = x3.try_cross_entropy_with(&[0u8, 2, 1, 1], &opts).unwrap();
        assert_eq!(per.shape(), &[2, 2]);
        let expect = t(
            &[
                1.7322829364813663,
                2.218044056004825,
                1.1392024054195273,
                0.944272651001789,
            ],
            &[2, 2],
        );
        assert!(per.value().allclose(&expect, 1e-14, 0.0));

        let x1 = g.variable(t(&[1.0, 2.0, 3.0], &[3]));
        let opts = CrossEntropyOptions::default().label_smoothing(0.3);
        close(
            &x1.try_cross_entropy_with(&[2usize], &opts).unwrap(),
            0.7076059644443804,
        );
        let none1 = x1
            .try_cross_entropy_with(&[2usize], &opts.reduction(Reduction::None))
            .unwrap();
        assert_eq!(none1.shape(), &[] as &[usize]);
    }

    #[test]
    fn gradient_is_softmax_minus_onehot_over_n() {
        let g = Graph::new();
        let x = g.variable(logits());
        let grad = x
            .cross_entropy(&[0usize, 3, 1])
            .backward()
            .unwrap()
            .wrt(&x)
            .to_f64_vec();
        let p = x.softmax(1).value().to_f64_vec();
        for (i, (gv, pv)) in grad.iter().zip(&p).enumerate() {
            let onehot = [0, 7, 9].contains(&i) as u8 as f64;
            assert!((gv - (pv - onehot) / 3.0).abs() < 1e-15);
        }
    }

    #[test]
    fn gradients_and_tangents() {
        let tg = [0i64, -100, 2];
        for red in [Reduction::Mean, Reduction::Sum, Reduction::None] {
            let opts = weighted(red);
            gradcheck(|v| v[0].try_cross_entropy_with(&tg, &opts), &[logits()]).unwrap();
            jvpcheck(|v| v[0].try_cross_entropy_with(&tg, &opts), &[logits()]).unwrap();
            let plain = CrossEntropyOptions::default()
                .reduction(red)
                .label_smoothing(0.2);
            let x3 = logits().reshape(&[2, 3, 2]).unwrap();
            gradcheck(
                |v| v[0].try_cross_entropy_with(&[0u8, 2, 1, 1], &plain),
                std::slice::from_ref(&x3),
            )
            .unwrap();
            jvpcheck(
                |v| v[0].try_cross_entropy_with(&[0u8, 2, 1, 1], &plain),
                &[x3],
            )
            .unwrap();
            let x1 = t(&[1.0, 2.0, 3.0], &[3]);
            gradcheck(
                |v| v[0].try_cross_entropy_with(&[1usize], &plain),
                std::slice::from_ref(&x1),
            )
            .unwrap();
            jvpcheck(|v| v[0].try_cross_entropy_with(&[1usize], &plain), &[x1]).unwrap();
        }
        // Two consumers: the logits feed the loss twice.
        gradcheck(
            |v| {
                Ok(v[0].cross_entropy(&[1usize, 2, 3])
                    + (&v[0] * &v[0]).cross_entropy(&[0usize, 0, 1]))
            },
            &[logits()],
        )
        .unwrap();
    }

    #[test]
    fn extreme_logits_are_stable() {
        for dtype in [DType::F32, DType::F64] {
            let g = Graph::new();
            let x = g.variable(
                Tensor::from_f64_slice(&[1e4, -1e4, 0.0, -1e4, 1e4, 1e4], &[2, 3], dtype).unwrap(),
            );
            let opts = CrossEntropyOptions::default().reduction(Reduction::None);
            let per = x.try_cross_entropy_with(&[0usize, 0], &opts).unwrap();
            // Second row: lse = 1e4 + ln 2, minus the target logit -1e4.
            assert!(per
                .value()
                .allclose(&t(&[0.0, 2e4 + 2f64.ln()], &[2]), 1e-7, 0.0));
            let smooth = CrossEntropyOptions::default().label_smoothing(0.1);
            for loss in [
                x.cross_entropy(&[0usize, 0]),
                x.try_cross_entropy_with(&[1usize, 2], &smooth).unwrap(),
            ] {
                assert!(loss.value().all_finite());
                assert!(loss.backward().unwrap().wrt(&x).all_finite());
            }
        }
    }

    #[test]
    fn f32_and_f64_agree() {
        let g = Graph::new();
        let opts = weighted(Reduction::Mean);
        let x64 = g.variable(logits());
        let x32 = g.variable(logits().to_dtype(DType::F32));
        let opts32 =
            weighted(Reduction::Mean).weight(t(&[1.0, 2.0, 0.5, 1.5], &[4]).to_dtype(DType::F32));
        let l64 = x64.try_cross_entropy_with(&[0i64, 1, 2], &opts).unwrap();
        let l32 = x32.try_cross_entropy_with(&[0i64, 1, 2], &opts32).unwrap();
        assert!((l64.value().item() - l32.value().item()).abs() < 1e-6);
        let g64 = l64.backward().unwrap().wrt(&x64);
        let g32 = l32.backward().unwrap().wrt(&x32);
        assert!(g32.allclose(&g64, 1e-5, 1e-6));
    }

    #[test]
    fn registry_form_takes_float_targets() {
        let g = Graph::new();
        let x = g.variable(logits());
        let targets = g.constant(t(&[0.0, 3.0, 1.0], &[3]));
        let loss = g.apply("cross_entropy", &[&x, &targets]).unwrap();
        assert_eq!(
            loss.value().item(),
            x.cross_entropy(&[0usize, 3, 1]).value().item()
        );
        let grads = loss.backward().unwrap();
        assert!(grads.wrt(&x).allclose(
            &x.cross_entropy(&[0usize, 3, 1]).backward().unwrap().wrt(&x),
            0.0,
            0.0
        ));
        let half = g.constant(t(&[0.5, 3.0, 1.0], &[3]));
        assert!(matches!(
            g.apply("cross_entropy", &[&x, &half]),
            Err(Error::InvalidArgument {
                op: "cross_entropy",
                ..
            })
        ));
        let wrong = g.constant(t(&[0.0, 3.0], &[2]));
        assert!(matches!(
            g.apply("cross_entropy", &[&x, &wrong]),
            Err(Error::ShapeMismatch { .. })
        ));
        assert!(matches!(
            g.apply("cross_entropy", &[&x]),
            Err(Error::Arity { .. })
        ));
    }

    #[test]
    fn errors_name_the_op() {
        let g = Graph::new();
        let x = g.variable(logits());
        assert!(matches!(
            x.try_cross_entropy(&[0usize, 4, 1]),
            Err(Error::IndexOutOfRange {
                op: "cross_entropy",
                index: 4,
                size: 4
            })
        ));
        assert!(matches!(
            x.try_cross_entropy(&[-1i64, 0, 1]),
            Err(Error::IndexOutOfRange { index: -1, .. })
        ));
        assert!(matches!(
            x.try_cross_entropy(&[0usize, 1]),
            Err(Error::InvalidArgument { .. })
        ));
        let bad = CrossEntropyOptions::default().label_smoothing(1.5);
        assert!(matches!(
            x.try_cross_entropy_with(&[0usize, 1, 2], &bad),
            Err(Error::InvalidArgument { .. })
        ));
        let w = CrossEntropyOptions::default().weight(t(&[1.0, 2.0], &[2]));
        assert!(matches!(
            x.try_cross_entropy_with(&[0usize, 1, 2], &w),
            Err(Error::ShapeMismatch { .. })
        ));
        let w32 = CrossEntropyOptions::default().weight(Tensor::ones(&[4], DType::F32).unwrap());
        assert!(matches!(
            x.try_cross_entropy_with(&[0usize, 1, 2], &w32),
            Err(Error::DTypeMismatch { .. })
        ));
        let s = g.variable(Tensor::scalar(1.0));
        assert!(matches!(
            s.try_cross_entropy(&[0usize]),
            Err(Error::InvalidArgument { .. })
        ));
        let result = std::panic::catch_unwind(|| {
            let g = Graph::new();
            g.variable(logits()).cross_entropy(&[9usize, 0, 0]);
        });
        assert!(result.is_err());
    }
}
