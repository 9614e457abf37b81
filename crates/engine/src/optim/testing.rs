//! What the optimizers' unit tests share.

use super::{RuleOptimizer, UpdateRule};
use crate::nn::Parameter;
use crate::{Error, Gradients, Graph, Tensor};

/// The gradients of `sum(w * w)`: `2 w`.
pub(crate) fn grads_of_sum_sq(w: &Parameter) -> Gradients {
    let g = Graph::new();
    let x = g.param(w);
    (&x * &x).sum().backward().unwrap()
}

/// Each config is refused by the constructor with an `InvalidArgument`
/// that names the optimizer and begins with the setting's name.
pub(crate) fn assert_each_rejected<R: UpdateRule>(
    cases: impl IntoIterator<Item = (R, &'static str)>,
) {
    let w = Parameter::new(Tensor::scalar(1.0));
    for (config, what) in cases {
        let e = RuleOptimizer::new([&w], config).err().unwrap();
        assert!(
            matches!(&e, Error::InvalidArgument { op, reason } if *op == R::NAMES.name && reason.starts_with(what)),
            "{e}"
        );
    }
}
