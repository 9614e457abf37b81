//! `grad`: gradients of outputs with respect to chosen inputs, in the style
//! of `torch.autograd.grad`, optionally recorded (`create_graph`) so they can
//! be differentiated again.

use std::collections::HashSet;

use super::backward::{run, seed_for, GradStore, VarStore};
use crate::base::error::{Error, Result};
use crate::core::graph::{order, Graph, Var, NO_SLOT};
use crate::core::store::{GradSlot, TensorStore};
use crate::tensor::Tensor;

/// Options of [`grad`].
#[derive(Clone, Debug, Default)]
pub struct GradOptions {
    /// Record the backward pass, so the returned gradients are `Var`s that
    /// can be differentiated again (Hessians, gradient penalties).
    pub create_graph: bool,
    /// Seed gradients, one per output (required for non-scalar outputs).
    pub grad_outputs: Option<Vec<Tensor>>,
    /// Return zeros for inputs no output depends on, instead of an error.
    pub allow_unused: bool,
}

impl GradOptions {
    /// First order, seeds of 1, unused inputs are an error.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `create_graph`.
    pub fn create_graph(mut self, on: bool) -> Self {
        self.create_graph = on;
        self
    }

    /// Sets the seed gradients (one per output).
    pub fn grad_outputs(mut self, seeds: Vec<Tensor>) -> Self {
        self.grad_outputs = Some(seeds);
        self
    }

    /// Sets `allow_unused`.
    pub fn allow_unused(mut self, on: bool) -> Self {
        self.allow_unused = on;
        self
    }
}

/// The gradients of the sum of `outputs` (each weighted by its seed) with
/// respect to each of `inputs`, as `Var`s of the same graph.
///
/// With `create_graph`, the backward formulas record, so the results can be
/// differentiated again:
///
/// ```
/// use retrograd::{grad, GradOptions, Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::scalar(2.0));
/// let y = &x * &x * &x;                                   // x^3
/// let opts = GradOptions::new().create_graph(true);
/// let dy = grad(&[&y], &[&x], &opts)?.remove(0);          // 3x^2 = 12
/// let d2y = grad(&[&dy], &[&x], &opts)?.remove(0);        // 6x = 12
/// assert_eq!(dy.value().try_item()?, 12.0);
/// assert_eq!(d2y.value().try_item()?, 12.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn grad<'g>(
    outputs: &[&Var<'g>],
    inputs: &[&Var<'g>],
    opts: &GradOptions,
) -> Result<Vec<Var<'g>>> {
    let Some(first) = outputs.first() else {
        return Err(Error::invalid("grad", "no outputs given"));
    };
    let graph: &'g Graph = first.graph();
    super::backward::refuse_while_capturing(graph)?;
    for v in outputs.iter().chain(inputs) {
        graph.check_same("grad", v)?;
    }
    if let Some(seeds) = &opts.grad_outputs
        && seeds.len() != outputs.len()
    {
        return Err(Error::invalid(
            "grad",
            format!("{} grad_outputs for {} outputs", seeds.len(), outputs.len()),
        ));
    }
    let mut seeds = Vec::with_capacity(outputs.len());
    for (i, out) in outputs.iter().enumerate() {
        let seed = seed_for(out, opts.grad_outputs.as_ref().map(|s| &s[i]))?;
        seeds.push((out.slot(), Var::constant_in(graph, seed)));
    }
    let order = {
        let st = graph.state();
        let roots: Vec<usize> = outputs.iter().filter_map(|o| o.node_index()).collect();
        order::ancestors_of_many(&st, &roots)
    };
    let keep: HashSet<u32> = inputs
        .iter()
        .map(|v| v.slot())
        .filter(|&s| s != NO_SLOT)
        .collect();
    let slot_count = graph.value_count();
    let found: Vec<Option<Var<'g>>> = if opts.create_graph {
        let mut store = VarStore {
            slots: vec![None; slot_count],
        };
        run(graph, &seeds, &order, &mut store, &keep)?;
        inputs
            .iter()
            .map(|v| store.take(graph, v.slot(), true))
            .collect()
    } else {
        let mut store = TensorStore {
            slots: super::pool::take_slots(slot_count),
        };
        {
            let _off = graph.no_grad_guard();
            run(graph, &seeds, &order, &mut store, &keep)?;
        }
        inputs
            .iter()
            .map(|v| match store.slots.get(v.slot() as usize) {
                Some(GradSlot::Grad(t)) => Some(Var::constant_in(graph, t.clone())),
                _ => None,
            })
            .collect()
    };
    found
        .into_iter()
        .zip(inputs)
        .enumerate()
        .map(|(i, (g, input))| match g {
            Some(g) => Ok(g),
            None if opts.allow_unused || !input.requires_grad() => {
                Ok(Var::constant_in(graph, input.value().zeros_like()))
            }
            None => Err(Error::invalid(
                "grad",
                format!("input {i} is not used by any output (set allow_unused to get zeros)"),
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_derivative_of_cube_is_6x() {
        for x0 in [-1.5, 0.5, 2.0] {
            let g = Graph::new();
            let x = g.variable(Tensor::scalar(x0));
            let y = &x * &x * &x;
            let opts = GradOptions::new().create_graph(true);
            let dy = grad(&[&y], &[&x], &opts).unwrap().remove(0);
            assert!((dy.value().item() - 3.0 * x0 * x0).abs() < 1e-12);
            let d2y = grad(&[&dy], &[&x], &opts).unwrap().remove(0);
            assert!((d2y.value().item() - 6.0 * x0).abs() < 1e-12);
            let d3y = grad(&[&d2y], &[&x], &opts).unwrap().remove(0);
            assert!((d3y.value().item() - 6.0).abs() < 1e-12);
        }
    }

    #[test]
    fn first_order_matches_backward_and_unused_inputs() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        let unused = g.variable(Tensor::scalar(1.0));
        let y = (&x * &x).sum();
        let gx = grad(&[&y], &[&x], &GradOptions::new()).unwrap();
        assert_eq!(gx[0].value().to_f64_vec(), vec![2.0, 4.0]);
        assert!(!gx[0].requires_grad());
        assert!(grad(&[&y], &[&unused], &GradOptions::new()).is_err());
        let z = grad(&[&y], &[&unused], &GradOptions::new().allow_unused(true)).unwrap();
        assert_eq!(z[0].value().item(), 0.0);
    }

    #[test]
    fn gradient_of_an_intermediate() {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(3.0));
        let z = &x * 2.0;
        let w = &z * &z;
        let gz = grad(&[&w], &[&z, &x], &GradOptions::new()).unwrap();
        assert_eq!(gz[0].value().item(), 12.0);
        assert_eq!(gz[1].value().item(), 24.0);
    }

    #[test]
    fn several_outputs_sum() {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(3.0));
        let a = &x * &x;
        let b = &x * 5.0;
        let gx = grad(&[&a, &b], &[&x], &GradOptions::new()).unwrap();
        assert_eq!(gx[0].value().item(), 11.0);
    }
}
