//! Gradient checkpointing: a region whose intermediates are not kept, but
//! recomputed during backward, trading compute for memory.

use std::sync::Arc;

use smallvec::SmallVec;

use super::grad::{grad, GradOptions};
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::core::{Differentiable, GradInputs};
use crate::tensor::Tensor;

/// The function a checkpointed region runs.
type RegionFn = dyn for<'a> Fn(&[Var<'a>]) -> Result<Var<'a>> + Send + Sync;

/// One node standing for a whole region: its forward runs the region
/// without recording (so no intermediate is kept), its backward runs it
/// again, recording, and differentiates that.
struct Checkpoint {
    region: Arc<RegionFn>,
}

impl Differentiable for Checkpoint {
    fn name(&self) -> &str {
        "checkpoint"
    }
    fn holds(&self) -> crate::Holds {
        crate::Holds::data(
            "a closure (the checkpointed region), whose captured values a compiled step cannot see; \
             call the region directly inside the compiled function",
        )
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let inner = Graph::new();
        let vars: Vec<Var<'_>> = inputs
            .iter()
            .map(|t| inner.constant((*t).clone()))
            .collect();
        Ok((self.region)(&vars)?.value().clone())
    }

    fn backward<'g>(
        &self,
        g: &Var<'g>,
        inputs: &[Var<'g>],
        _out: &Var<'g>,
    ) -> Result<GradInputs<'g>> {
        let outer = g.graph();
        if outer.is_recording() {
            // create_graph: recompute inside the outer graph so the gradient
            // stays differentiable.
            let out = (self.region)(inputs)?;
            return region_grads(&out, inputs, g, true);
        }
        // First order: recompute in a scratch graph that is dropped as soon
        // as the input gradients are out.
        let inner = Graph::new();
        let vars: Vec<Var<'_>> = inputs
            .iter()
            .map(|v| {
                if v.requires_grad() {
                    inner.variable(v.value().clone())
                } else {
                    inner.constant(v.value().clone())
                }
            })
            .collect();
        let out = (self.region)(&vars)?;
        let seed = inner.constant(g.value().clone());
        let grads = region_grads(&out, &vars, &seed, false)?;
        Ok(grads
            .into_iter()
            .map(|gi| gi.map(|v| Var::constant_in(outer, v.value().clone())))
            .collect())
    }
}

/// Gradients of `out` (seeded with `seed`) with respect to each input that
/// requires grad.
fn region_grads<'a>(
    out: &Var<'a>,
    inputs: &[Var<'a>],
    seed: &Var<'a>,
    create_graph: bool,
) -> Result<GradInputs<'a>> {
    let mut result: GradInputs<'a> = SmallVec::from_elem(None, inputs.len());
    let wanted: Vec<(usize, &Var<'a>)> = inputs
        .iter()
        .enumerate()
        .filter(|(_, v)| v.requires_grad())
        .collect();
    if wanted.is_empty() || !out.requires_grad() {
        return Ok(result);
    }
    let targets: Vec<&Var<'a>> = wanted.iter().map(|(_, v)| *v).collect();
    let opts = GradOptions::new()
        .create_graph(create_graph)
        .allow_unused(true)
        .grad_outputs(vec![seed.value().clone()]);
    // A recorded seed keeps the chain to g (create_graph); a constant seed suffices otherwise.
    let grads = if create_graph && seed.requires_grad() {
        let weighted = out.try_mul(seed)?;
        let opts = GradOptions::new().create_graph(true).allow_unused(true);
        grad(&[&weighted.sum()], &targets, &opts)?
    } else {
        grad(&[out], &targets, &opts)?
    };
    for ((i, _), gi) in wanted.into_iter().zip(grads) {
        result[i] = Some(gi);
    }
    Ok(result)
}

impl Graph {
    /// Runs `region` on `inputs` as one checkpointed node: its intermediate
    /// values are not kept, and backward recomputes them. Every value the
    /// region differentiates through must be passed in `inputs` (parameters
    /// included); the region must be deterministic.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![0.5, -1.0], &[2])?);
    /// let y = g.checkpoint(&[&x], |v| Ok((&v[0] * &v[0]).tanh().exp()))?;
    /// assert_eq!(g.len(), 1);                      // one node for the whole region
    /// let direct = (&x * &x).tanh().exp();
    /// assert!(y.value().allclose(direct.value(), 1e-15, 0.0));
    /// let (a, b) = (y.sum().backward()?, direct.sum().backward()?);
    /// assert!(a.wrt(&x).allclose(&b.wrt(&x), 1e-12, 0.0));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    #[track_caller]
    pub fn checkpoint<'g, F>(&'g self, inputs: &[&Var<'g>], region: F) -> Result<Var<'g>>
    where
        F: for<'a> Fn(&[Var<'a>]) -> Result<Var<'a>> + Send + Sync + 'static,
    {
        if inputs.is_empty() {
            return Err(Error::invalid(
                "checkpoint",
                "a region needs at least one input",
            ));
        }
        self.record(
            Checkpoint {
                region: Arc::new(region),
            },
            inputs,
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::{grad, gradcheck, GradOptions, Graph, Tensor};

    #[test]
    fn checkpointed_gradients_match_finite_differences() {
        let x = Tensor::from_vec(vec![0.3, -0.8, 1.2], &[3]).unwrap();
        let w = Tensor::from_vec(vec![0.5, 1.5, -0.4], &[3]).unwrap();
        gradcheck(
            |v| {
                v[0].graph()
                    .checkpoint(&[&v[0], &v[1]], |r| Ok((&r[0] * &r[1]).tanh() * &r[0]))
            },
            &[x, w],
        )
        .unwrap();
    }

    #[test]
    fn checkpoint_supports_gradients_of_gradients() {
        // f(x) = x^3 through a checkpoint: f'' = 6x.
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(1.5));
        let y = g.checkpoint(&[&x], |v| Ok(&v[0] * &v[0] * &v[0])).unwrap();
        let opts = GradOptions::new().create_graph(true);
        let dy = grad(&[&y], &[&x], &opts).unwrap().remove(0);
        assert!((dy.value().item() - 6.75).abs() < 1e-12);
        let d2y = grad(&[&dy], &[&x], &opts).unwrap().remove(0);
        assert!((d2y.value().item() - 9.0).abs() < 1e-12);
    }

    #[test]
    fn frozen_inputs_get_no_gradient() {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(2.0));
        let c = g.constant(Tensor::scalar(3.0));
        let y = g.checkpoint(&[&x, &c], |v| Ok(&v[0] * &v[1])).unwrap();
        let grads = y.backward().unwrap();
        assert_eq!(grads.wrt(&x).item(), 3.0);
        assert!(grads.get(&c).is_none());
    }
}
