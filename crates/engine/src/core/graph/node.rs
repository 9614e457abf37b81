//! [`GraphNode`]: a snapshot of one recorded op invocation, and the
//! textbook-style trace line.

use super::{Graph, GraphState, Var};
use crate::core::attributes::OpAttributes;

/// One recorded op invocation (the textbook chapter's `GraphNode`): the op's name, the
/// inputs it was called with (sharing their storage, not copies), its output,
/// and whether it requires grad (always true: a node exists only because some
/// input required grad).
#[derive(Clone, Debug)]
pub struct GraphNode<'g> {
    index: usize,
    op_name: String,
    attributes: OpAttributes,
    inputs: Vec<Var<'g>>,
    output: Var<'g>,
}

impl<'g> GraphNode<'g> {
    pub(crate) fn snapshot(graph: &'g Graph, st: &GraphState, index: usize) -> Self {
        let rec = st.nodes[index];
        let var_of = |id: u32| {
            Var::from_parts(
                graph,
                st.values[id as usize].clone(),
                id,
                st.value_requires_grad(id),
            )
        };
        GraphNode {
            index,
            op_name: st.op_name(rec.op).to_string(),
            attributes: st.op(rec.op).attributes(),
            inputs: st.inputs_of(index).iter().map(|&id| var_of(id)).collect(),
            output: var_of(rec.output),
        }
    }

    /// The node's position in the graph (its append order).
    pub fn index(&self) -> usize {
        self.index
    }

    /// The name of the op, as registered (`"mul"`, `"add"`, ...).
    pub fn op_name(&self) -> &str {
        &self.op_name
    }

    /// The op's settings (axes, eps, a shape), as
    /// [`Differentiable::attributes`](crate::Differentiable::attributes) lists them.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::zeros(&[2, 3], retrograd::DType::F32)?);
    /// let _y = x.try_reshape(&[3, -1])?;
    /// assert_eq!(g.node(0).unwrap().attributes().to_string(), "shape=[3, 2]");
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn attributes(&self) -> &OpAttributes {
        &self.attributes
    }

    /// The inputs the op was called with.
    pub fn inputs(&self) -> &[Var<'g>] {
        &self.inputs
    }

    /// The value the op produced.
    pub fn output(&self) -> &Var<'g> {
        &self.output
    }

    /// Always true: a node is recorded only when some input requires grad.
    pub fn requires_grad(&self) -> bool {
        self.output.requires_grad()
    }
}

/// `nodes[i] = op(a, b) -> value` for node `i`.
pub(crate) fn trace_line(graph: &Graph, st: &GraphState, i: usize) -> String {
    let rec = st.nodes[i];
    let args: Vec<String> = st
        .inputs_of(i)
        .iter()
        .map(|&id| graph.label_of(st, id))
        .collect();
    let out = &st.values[rec.output as usize];
    let out_text = if out.numel() <= 8 {
        out.to_string()
    } else {
        format!("<{} {:?}>", out.dtype(), out.shape())
    };
    let name = st
        .names
        .get(&rec.output)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    format!(
        "nodes[{i}] = {}({}) -> {out_text}{name}",
        st.op_name(rec.op),
        args.join(", ")
    )
}
