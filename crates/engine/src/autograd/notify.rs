//! A backward pass that tells its caller when each of some leaves' gradients
//! is final, while the sweep goes on: what data-parallel training needs to
//! start sending a gradient before the rest of backward has run.
//!
//! The first-order sweep walks node indices downward, so a leaf's gradient
//! is final once the lowest-index node that reads it has run. One scan up
//! the arena finds that node for every watched leaf; the sweep then checks
//! a sorted list after each node (`fast::run_fast_notify`), and the plain
//! sweep (`run_fast`) stays as it was.

use super::backward::{seed_for, BackwardOptions};
use super::fast::run_fast_notify;
use super::gradients::Gradients;
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::store::{GradSlot, TensorStore};
use crate::tensor::Tensor;

/// Marks a value id that no watched leaf has.
const UNWATCHED: u32 = u32::MAX;

impl<'g> Var<'g> {
    /// Backpropagates from this one-element value (seed gradient 1), like
    /// [`backward`](Var::backward), and calls `on_final(i, grad)` once for
    /// each `leaves[i]` as soon as its gradient is final: during the sweep,
    /// right after the last node that adds to it has run. `grad` is `None`
    /// for a leaf that no gradient reached (it reads as zero). Leaves that
    /// no ancestor of the root reads are reported at the end.
    ///
    /// Only the first-order sweep reports early; with hooks, retained
    /// gradients or anomaly mode on, the ordinary backward runs and every
    /// leaf is reported after it. An error from `on_final` stops the sweep
    /// and is returned.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let a = g.variable(Tensor::scalar(2.0));
    /// let b = g.variable(Tensor::scalar(3.0));
    /// let y = (&a * &a) * &b; // b is read last, so its gradient is final first
    /// let mut seen = Vec::new();
    /// let grads = y.backward_notifying(&[a.clone(), b.clone()], &mut |i, grad| {
    ///     seen.push((i, grad.map(|t| t.item())));
    ///     Ok(())
    /// })?;
    /// assert_eq!(seen, vec![(1, Some(4.0)), (0, Some(12.0))]);
    /// assert_eq!(grads.wrt(&a).try_item()?, 12.0);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn backward_notifying(
        &self,
        leaves: &[Var<'g>],
        on_final: &mut dyn FnMut(usize, Option<&Tensor>) -> Result<()>,
    ) -> Result<Gradients> {
        let graph = self.graph();
        super::backward::refuse_while_capturing(graph)?;
        for leaf in leaves {
            if leaf.graph().id() != graph.id() {
                return Err(Error::ForeignVariable {
                    op: "backward_notifying".to_string(),
                });
            }
            if !leaf.is_leaf() {
                return Err(Error::invalid(
                    "backward_notifying",
                    format!("value {:?} is an op's output, not a leaf", leaf.value_id()),
                ));
            }
        }
        let plain = {
            let st = graph.state();
            !st.has_hooks() && st.retained().is_empty() && !graph.anomaly_detection()
        };
        if !plain {
            let grads = self.backward_with_options(&BackwardOptions::new())?;
            for (i, leaf) in leaves.iter().enumerate() {
                on_final(i, grads.get(leaf))?;
            }
            return Ok(grads);
        }
        let seed = seed_for(self, None)?;
        let (slot_count, params) = {
            let st = graph.state();
            (st.values().len(), st.params().clone())
        };
        let (triggers, late) = final_points(self, leaves);
        let mut store = TensorStore {
            slots: super::pool::take_slots(slot_count),
        };
        {
            let _recording_off = graph.no_grad_guard();
            let mut report = |leaf: u32, store: &mut TensorStore| {
                let id = leaves[leaf as usize].value_id();
                let grad = match id.and_then(|id| store.slots.get(id)) {
                    Some(GradSlot::Grad(t)) => Some(t),
                    _ => None,
                };
                on_final(leaf as usize, grad)
            };
            run_fast_notify(graph, self, seed, &triggers, &mut report, &mut store)?;
            for leaf in late {
                report(leaf, &mut store)?;
            }
        }
        Ok(Gradients::new(graph.id(), store.slots, &params))
    }
}

/// For each watched leaf, the lowest-index node up to the root's that reads
/// it, as `(node, leaf)` sorted by node descending (the sweep's order;
/// ties by leaf index), and the leaves no such node reads.
fn final_points(root: &Var<'_>, leaves: &[Var<'_>]) -> (Vec<(u32, u32)>, Vec<u32>) {
    let st = root.graph().state();
    let mut watched = vec![UNWATCHED; st.values().len()];
    for (i, leaf) in leaves.iter().enumerate() {
        if let Some(id) = leaf.value_id() {
            // A leaf listed twice is reported for its first listing only
            // below; give the later ones the same point.
            if watched[id] == UNWATCHED {
                watched[id] = i as u32;
            }
        }
    }
    let mut point = vec![u32::MAX; leaves.len()];
    let mut left = leaves.iter().filter(|l| l.value_id().is_some()).count();
    if let Some(top) = root.node_index() {
        'scan: for node in 0..=top {
            for &input in st.inputs_of(node) {
                let i = watched[input as usize];
                if i != UNWATCHED && point[i as usize] == u32::MAX {
                    point[i as usize] = node as u32;
                    left -= 1;
                    if left == 0 {
                        break 'scan;
                    }
                }
            }
        }
    }
    let mut triggers = Vec::new();
    let mut late = Vec::new();
    for (i, leaf) in leaves.iter().enumerate() {
        let first = leaf.value_id().map(|id| watched[id] as usize);
        let at = match first {
            Some(first) => point[first],
            None => u32::MAX,
        };
        if at == u32::MAX {
            late.push(i as u32);
        } else {
            triggers.push((at, i as u32));
        }
    }
    triggers.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    (triggers, late)
}

#[cfg(test)]
mod tests {
    use crate::{Graph, Tensor};

    #[test]
    fn reports_each_leaf_once_when_final_with_the_full_gradient() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
        let w = g.variable(Tensor::from_vec(vec![0.5, -1.0], &[2]).unwrap());
        let unused = g.variable(Tensor::scalar(7.0));
        let c = g.constant(Tensor::scalar(3.0));
        // x is read twice, first at the lowest node: final last.
        let h = (&x * &w).tanh();
        let y = (&h * &x + &w * &c).sum();
        let mut order = Vec::new();
        let mut got = vec![None; 4];
        let grads = y
            .backward_notifying(
                &[x.clone(), w.clone(), unused.clone(), c.clone()],
                &mut |i, t| {
                    order.push(i);
                    got[i] = t.cloned();
                    Ok(())
                },
            )
            .unwrap();
        let plain = y.backward().unwrap();
        assert_eq!(order.len(), 4);
        for (i, v) in [&x, &w].into_iter().enumerate() {
            assert_eq!(
                got[i].as_ref().unwrap().to_f64_vec(),
                plain.wrt(v).to_f64_vec()
            );
            assert_eq!(grads.wrt(v).to_f64_vec(), plain.wrt(v).to_f64_vec());
        }
        assert!(got[2].is_none() && got[3].is_none());
        // c is read only by `w * c`, above node 0 (x * w), where x and w
        // are first read; the unread leaf comes last.
        assert_eq!(order, vec![3, 0, 1, 2]);
    }

    #[test]
    fn a_leaf_is_reported_before_the_rest_of_the_sweep() {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(2.0));
        let b = g.variable(Tensor::scalar(3.0));
        let mid = &a * 2.0; // node 0 reads a
        let top = &mid * &b; // node 1 reads b
                             // b's gradient is final after node 1, before node 0 runs.
        let mut events = Vec::new();
        top.backward_notifying(&[a.clone(), b.clone()], &mut |i, _| {
            events.push(i);
            Ok(())
        })
        .unwrap();
        assert_eq!(events, vec![1, 0]);
    }

    #[test]
    fn an_error_from_the_callback_stops_the_sweep() {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(2.0));
        let y = &a * &a;
        let err = y
            .backward_notifying(&[a.clone()], &mut |_, _| {
                Err(crate::Error::invalid("test", "stop"))
            })
            .unwrap_err();
        assert!(err.to_string().contains("stop"));
        let other = Graph::new();
        let foreign = other.variable(Tensor::scalar(1.0));
        assert!(y
            .backward_notifying(&[foreign], &mut |_, _| Ok(()))
            .is_err());
        assert!(y
            .backward_notifying(&[y.clone()], &mut |_, _| Ok(()))
            .is_err());
    }

    #[test]
    fn with_hooks_every_leaf_is_reported_after_the_sweep() {
        let g = Graph::new();
        let a = g.variable(Tensor::scalar(2.0));
        let y = &a * &a;
        y.register_hook(|t| Some(t.map_f64(|v| 10.0 * v)));
        let mut got = None;
        y.backward_notifying(&[a.clone()], &mut |_, t| {
            got = t.map(|t| t.item());
            Ok(())
        })
        .unwrap();
        assert_eq!(got, Some(40.0));
    }
}
