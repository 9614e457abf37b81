//! [`NeverRun`]: stateless ops for the graph's own tests, which sit below
//! the concrete ops: records and op tables point at them, nothing runs them.

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::core::{Differentiable, GradInputs};
use crate::tensor::Tensor;

/// A zero-sized op; each `K` is a type of its own, named "first" (0) or
/// "second" (1).
pub(crate) struct NeverRun<const K: usize>;

const NAMES: [&str; 2] = ["first", "second"];

impl<const K: usize> Differentiable for NeverRun<K> {
    fn name(&self) -> &str {
        NAMES[K]
    }
    fn holds(&self) -> crate::Holds {
        crate::Holds::Settings
    }
    fn forward(&self, _inputs: &[&Tensor]) -> Result<Tensor> {
        unreachable!("test ops are never run")
    }
    fn backward<'g>(
        &self,
        _grad_output: &Var<'g>,
        _inputs: &[Var<'g>],
        _output: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        unreachable!("test ops are never run")
    }
}
