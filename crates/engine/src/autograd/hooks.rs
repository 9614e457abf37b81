//! Gradient hooks and retained gradients: reading or replacing the gradient
//! that flows into a value during backward.

use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::tensor::Tensor;

impl<'g> Var<'g> {
    /// Registers `hook` to run when this value's gradient is complete during
    /// backward (for an op output: before its node's backward runs, so a
    /// replaced gradient is exactly what flows upstream; for a leaf: at the
    /// end). Returning `Some(t)` replaces the gradient (same shape and dtype);
    /// `None` leaves it unchanged. Under `create_graph`, a replaced gradient
    /// is a constant.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(3.0));
    /// let y = &x * &x;
    /// y.register_hook(|grad| Some(grad.map_f64(|v| 2.0 * v)));
    /// let z = &y + 1.0;
    /// assert_eq!(z.backward()?.wrt(&x).try_item()?, 12.0); // 2 * (2x)
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn register_hook(&self, hook: impl Fn(&Tensor) -> Option<Tensor> + 'static) {
        if let Some(id) = self.value_id() {
            self.graph().state_mut().add_hook(id as u32, Box::new(hook));
        }
    }

    /// Keeps this intermediate value's gradient in the `Gradients` backward
    /// returns (leaves always keep theirs).
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(3.0));
    /// let z = &x * 2.0;
    /// z.retain_grad();
    /// let w = &z * &z;
    /// assert_eq!(w.backward()?.wrt(&z).try_item()?, 12.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn retain_grad(&self) {
        if let Some(id) = self.value_id() {
            self.graph().state_mut().retain(id as u32);
        }
    }
}

/// Runs the hooks registered on value `id` over `grad`.
#[inline]
pub(crate) fn apply_hooks<'g>(graph: &'g Graph, id: u32, grad: Var<'g>) -> Result<Var<'g>> {
    let hooks = {
        let mut st = graph.state_mut();
        if !st.has_hooks() {
            return Ok(grad);
        }
        match st.take_hooks(id) {
            Some(h) => h,
            None => return Ok(grad),
        }
    };
    let mut current = grad;
    let mut result = Ok(());
    for hook in &hooks {
        if let Some(replacement) = hook(current.value()) {
            if replacement.shape() != current.shape() || replacement.dtype() != current.dtype() {
                result = Err(Error::BadGradient {
                    op: "hook".to_string(),
                    detail: format!(
                        "a replacement of shape {:?} ({}) for a gradient of shape {:?} ({})",
                        replacement.shape(),
                        replacement.dtype(),
                        current.shape(),
                        current.dtype()
                    ),
                });
                break;
            }
            current = Var::constant_in(graph, replacement);
        }
    }
    graph.state_mut().put_hooks(id, hooks);
    result.map(|()| current)
}
