//! Ops by name: the [`OpRegistry`] a graph is made with, and
//! [`Graph::apply`], which records the op registered under a name.
//!
//! Defined here, not in `graph`: a graph's default registry holds every
//! built-in op, and the ops sit a layer above the graph (ARCHITECTURE.md,
//! "Layers"). The graph keeps its registry opaque; this file puts it in and
//! reads it back.

use std::sync::{Arc, OnceLock};

use super::OpRegistry;
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};

impl Graph {
    /// An empty graph whose `apply` looks ops up in `registry`.
    pub fn with_registry(registry: Arc<OpRegistry>) -> Self {
        Self::with_opaque_registry(Some(Box::new(registry)))
    }

    /// The registry `apply` uses.
    pub fn registry(&self) -> &Arc<OpRegistry> {
        match self.opaque_registry() {
            None => default_registry(),
            Some(registry) => registry
                .downcast_ref()
                .expect("only Graph::with_registry sets a graph's registry"),
        }
    }

    /// Applies the op registered as `op_name` to `inputs`, recording a node
    /// if any input requires grad.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, Error};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(2.0));
    /// let y = g.apply("mul", &[&x, &x])?;
    /// assert_eq!(y.value().try_item()?, 4.0);
    /// assert!(matches!(g.apply("mull", &[&x]), Err(Error::UnregisteredOp { .. })));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn apply<'g>(&'g self, op_name: &str, inputs: &[&Var<'g>]) -> Result<Var<'g>> {
        let op = self.registry().get(op_name)?.clone();
        if let Some(n) = op.arity()
            && n != inputs.len()
        {
            return Err(Error::Arity {
                op: op_name.to_string(),
                expected: n,
                got: inputs.len(),
            });
        }
        self.record_shared(Some(op_name), op, inputs)
    }
}

/// [`OpRegistry::default_shared`], kept where a graph can lend it out.
fn default_registry() -> &'static Arc<OpRegistry> {
    static DEFAULT: OnceLock<Arc<OpRegistry>> = OnceLock::new();
    DEFAULT.get_or_init(OpRegistry::default_shared)
}
