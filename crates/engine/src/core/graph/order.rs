//! The two backward orders: the textbook chapter's reverse append order over the whole
//! tape, and the production order over the ancestors of one output.

use super::{Graph, GraphState, Var, LEAF_CONSTANT};
use crate::base::error::{Error, Result};

impl Graph {
    /// Every node, newest first: the textbook chapter's `topological_backward_order`.
    /// Append order is a topological order (inputs are always recorded before
    /// the ops that use them), so reversing it is a valid backward order, but
    /// it also visits nodes that do not feed the output being differentiated.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(3.0));
    /// let y = g.variable(Tensor::scalar(4.0));
    /// let _w = &x * &y + &x;
    /// assert_eq!(g.topological_backward_order(), vec![1, 0]);
    /// ```
    pub fn topological_backward_order(&self) -> Vec<usize> {
        (0..self.len()).rev().collect()
    }

    /// The nodes that are ancestors of `root`, newest first. Nodes recorded
    /// but not feeding `root` (the textbook chapter's dead `q = x - 1`) are excluded.
    ///
    /// One descending scan with a mark bit per node, no recursion and no
    /// stack: a node can only be an input to nodes appended after it, so by
    /// the time the scan reaches a node, every consumer has marked it.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::scalar(3.0));
    /// let y = g.variable(Tensor::scalar(4.0));
    /// let z = &x * &y;
    /// let _q = &x - 1.0;            // recorded, but w does not use it
    /// let w = &z + &x;
    /// assert_eq!(g.topological_backward_order(), vec![2, 1, 0]);
    /// assert_eq!(g.backward_order(&w), vec![2, 0]);
    /// ```
    pub fn backward_order(&self, root: &Var<'_>) -> Vec<usize> {
        if !std::ptr::eq(self, root.graph()) {
            return Vec::new();
        }
        match root.node_index() {
            Some(n) => ancestors_of(&self.state.borrow(), n)
                .into_iter()
                .map(|i| i as usize)
                .collect(),
            None => Vec::new(),
        }
    }

    /// `backward_order` with a check that `root` belongs to this graph.
    pub fn try_backward_order(&self, root: &Var<'_>) -> Result<Vec<usize>> {
        self.check_same("backward_order", root)?;
        Ok(self.backward_order(root))
    }
}

/// Ancestor nodes of node `root`, newest first.
pub fn ancestors_of(st: &GraphState, root: usize) -> Vec<u32> {
    ancestors_of_many(st, &[root])
}

/// Ancestor nodes of any of `roots` (node indices), newest first.
pub(crate) fn ancestors_of_many(st: &GraphState, roots: &[usize]) -> Vec<u32> {
    let Some(&top) = roots.iter().max() else {
        return Vec::new();
    };
    let mut marked = vec![0u64; top / 64 + 1];
    for &root in roots {
        marked[root / 64] |= 1 << (root % 64);
    }
    let mut order = Vec::new();
    for n in (0..=top).rev() {
        if marked[n / 64] & (1 << (n % 64)) == 0 {
            continue;
        }
        order.push(n as u32);
        for &input in st.inputs_of(n) {
            let p = st.producers[input as usize];
            if p < LEAF_CONSTANT {
                let p = p as usize;
                marked[p / 64] |= 1 << (p % 64);
            }
        }
    }
    order
}

/// Checks that `order` lists each ancestor of `root` exactly once and every
/// node after all nodes that consume its output (a valid reverse topological
/// order); nodes outside the ancestors are allowed and contribute nothing.
pub(crate) fn validate_order(st: &GraphState, order: &[usize]) -> Result<()> {
    let n = st.nodes.len();
    let mut position = vec![usize::MAX; n];
    for (pos, &node) in order.iter().enumerate() {
        if node >= n {
            return Err(Error::InvalidOrder {
                reason: format!("node {node} does not exist (the graph has {n})"),
            });
        }
        if position[node] != usize::MAX {
            return Err(Error::InvalidOrder {
                reason: format!("node {node} appears twice"),
            });
        }
        position[node] = pos;
    }
    for (pos, &node) in order.iter().enumerate() {
        for &input in st.inputs_of(node) {
            let p = st.producers[input as usize];
            if p < LEAF_CONSTANT {
                let pp = position[p as usize];
                if pp != usize::MAX && pp < pos {
                    return Err(Error::InvalidOrder {
                        reason: format!(
                            "node {p} is visited before node {node}, which consumes its output"
                        ),
                    });
                }
                if pp == usize::MAX {
                    return Err(Error::InvalidOrder {
                        reason: format!("node {p} (an input of node {node}) is missing"),
                    });
                }
            }
        }
    }
    Ok(())
}
