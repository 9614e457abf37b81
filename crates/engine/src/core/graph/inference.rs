//! The inference graph: evaluation and sampling without building a graph.
//!
//! Ops are methods of [`Var`], and a `Var` lives in a graph. On this
//! thread's inference graph nothing requires grad, so no op records a node
//! and no value is kept: a `Var` there is a plain tensor, and ops run their
//! forward kernels only. `Var::from(tensor)` puts a tensor there, so code
//! that only evaluates needs no `Graph` and no `constant` calls.

use std::cell::Cell;

use super::{Graph, Var};
use crate::tensor::Tensor;

thread_local! {
    // One per thread (a `Graph` is not `Sync`), leaked so that its values
    // can be `Var<'static>`: it holds no values, so it stays a few bytes.
    static INFERENCE: &'static Graph = {
        let mut graph = Graph::with_opaque_registry(None);
        graph.no_grad_depth = Cell::new(1);
        graph.inference = true;
        Box::leak(Box::new(graph))
    };
}

impl Graph {
    /// This thread's inference graph: it never records, keeps nothing, and
    /// brings parameters in as constants (`Graph::param`). Ops on its
    /// values compute forward values only, as on plain tensors.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, Var};
    /// let x = Var::from(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?);
    /// let p = x.try_softmax(0)?;                  // an op on a plain tensor
    /// assert!(!p.requires_grad());
    /// assert_eq!(Graph::inference().value_count(), 0); // nothing kept
    /// let probs: Tensor = p.into_value();
    /// assert!((probs.to_f64_vec().iter().sum::<f64>() - 1.0).abs() < 1e-6);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn inference() -> &'static Graph {
        INFERENCE.with(|g| *g)
    }

    /// Whether this is an inference graph ([`Graph::inference`]).
    pub fn is_inference(&self) -> bool {
        self.inference
    }
}

impl From<Tensor> for Var<'static> {
    /// `value` on this thread's inference graph: ops on it record nothing.
    fn from(value: Tensor) -> Self {
        Var::constant_in(Graph::inference(), value)
    }
}

impl From<&Tensor> for Var<'static> {
    fn from(value: &Tensor) -> Self {
        Var::from(value.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    #[test]
    fn nothing_is_recorded_or_kept_and_variables_are_refused() {
        let g = Graph::inference();
        let x = Var::from(Tensor::ones(&[4], DType::F64).unwrap());
        let y = (&x * &x).sum();
        assert_eq!(y.value().to_f64_vec(), vec![4.0]);
        assert_eq!((g.len(), g.value_count()), (0, 0));
        let c = g.constant(Tensor::scalar(1.0));
        assert_eq!(c.value_id(), None);
        assert!(g.try_variable(Tensor::scalar(1.0)).is_err());
        assert!(g.is_inference() && !Graph::new().is_inference());
        // One per thread.
        let other = std::thread::spawn(|| Graph::inference().id())
            .join()
            .unwrap();
        assert_ne!(other, g.id());
    }
}
