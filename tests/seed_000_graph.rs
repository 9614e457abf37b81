//! Every worked example and self-check of the textbook's computational-graph
//! chapter, number by number.

use retrograd::{BackwardOptions, BackwardOrder, Error, Graph, Tensor};

fn item(t: &Tensor) -> f64 {
    t.item()
}

/// Worked examples 15.2.1, 15.3.1, 15.4.1 and Chapter 16's x.grad = 5, y.grad = 3.
#[test]
fn running_example_w_equals_xy_plus_x() {
    let g = Graph::new();
    let x = g.named_variable("x", Tensor::scalar(3.0));
    let y = g.named_variable("y", Tensor::scalar(4.0));
    let z = &x * &y;
    let w = &z + &x;

    assert_eq!(item(z.value()), 12.0);
    assert_eq!(item(w.value()), 15.0);
    assert_eq!(g.len(), 2);

    let nodes = g.nodes();
    // GraphNode #0: op_name = "mul", inputs = [x = 3, y = 4], output = z = 12.
    assert_eq!(nodes[0].op_name(), "mul");
    assert_eq!(nodes[0].inputs().len(), 2);
    assert_eq!(item(nodes[0].inputs()[0].value()), 3.0);
    assert_eq!(item(nodes[0].inputs()[1].value()), 4.0);
    assert_eq!(item(nodes[0].output().value()), 12.0);
    assert!(nodes[0].requires_grad());
    // GraphNode #1: op_name = "add", inputs = [z = 12, x = 3], output = w = 15.
    assert_eq!(nodes[1].op_name(), "add");
    assert_eq!(item(nodes[1].inputs()[0].value()), 12.0);
    assert_eq!(item(nodes[1].inputs()[1].value()), 3.0);
    assert_eq!(item(nodes[1].output().value()), 15.0);
    // Node #1's first input *is* node #0's output (shared, not a copy of 12.0).
    assert_eq!(
        nodes[1].inputs()[0].value_id(),
        nodes[0].output().value_id()
    );
    assert_eq!(nodes[1].inputs()[0].value_id(), z.value_id());
    assert_eq!(nodes[1].inputs()[1].value_id(), x.value_id());
    // The output remembers who made it (grad_fn_index).
    assert_eq!(z.node_index(), Some(0));
    assert_eq!(w.node_index(), Some(1));
    assert_eq!(x.node_index(), None);

    // Worked Example 15.4.1: the reverse order is [1, 0].
    assert_eq!(g.topological_backward_order(), vec![1, 0]);
    assert_eq!(g.backward_order(&w), vec![1, 0]);

    let grads = w.backward().unwrap();
    assert_eq!(item(&grads.wrt(&x)), 5.0);
    assert_eq!(item(&grads.wrt(&y)), 3.0);
}

/// The trace prints in the textbook chapter's style.
#[test]
fn trace_is_printed_in_the_seed_style() {
    let g = Graph::new();
    let x = g.named_variable("x", Tensor::scalar(3.0));
    let y = g.named_variable("y", Tensor::scalar(4.0));
    let z = (&x * &y).named("z");
    let _w = (&z + &x).named("w");
    assert_eq!(
        g.to_string(),
        "nodes[0] = mul(x, y) -> 12 (z)\nnodes[1] = add(z, x) -> 15 (w)\n"
    );
}

/// Self-check 1: x = 5, y = 2 gives z = 10 and w = 15.
#[test]
fn self_check_1_x5_y2() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(5.0));
    let y = g.variable(Tensor::scalar(2.0));
    let w = g
        .apply("add", &[&g.apply("mul", &[&x, &y]).unwrap(), &x])
        .unwrap();
    let nodes = g.nodes();
    assert_eq!(nodes.len(), 2);
    assert_eq!(nodes[0].op_name(), "mul");
    assert_eq!(item(nodes[0].inputs()[0].value()), 5.0);
    assert_eq!(item(nodes[0].inputs()[1].value()), 2.0);
    assert_eq!(item(nodes[0].output().value()), 10.0);
    assert_eq!(nodes[1].op_name(), "add");
    assert_eq!(item(nodes[1].inputs()[0].value()), 10.0);
    assert_eq!(item(nodes[1].inputs()[1].value()), 5.0);
    assert_eq!(item(nodes[1].output().value()), 15.0);
    assert_eq!(item(w.value()), 15.0);
    // Its gradients: dw/dx = y + 1 = 3, dw/dy = x = 5.
    let grads = w.backward().unwrap();
    assert_eq!(item(&grads.wrt(&x)), 3.0);
    assert_eq!(item(&grads.wrt(&y)), 5.0);
}

/// Worked Example 15.2.2: a frozen y still gives a full mul node, y included.
#[test]
fn one_frozen_input_still_records_a_full_node() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(3.0));
    let y = g.constant(Tensor::scalar(4.0));
    assert!(!y.requires_grad());
    let z = &x * &y;
    assert_eq!(g.len(), 1);
    let node = g.node(0).unwrap();
    assert_eq!(node.op_name(), "mul");
    assert_eq!(node.inputs().len(), 2);
    assert_eq!(node.inputs()[1].value_id(), y.value_id());
    assert!(!node.inputs()[1].requires_grad());
    assert!(z.requires_grad());
    let w = &z + &x;
    let grads = w.backward().unwrap();
    assert_eq!(item(&grads.wrt(&x)), 5.0); // still needs y's value: dz/dx = y
    assert!(grads.get(&y).is_none()); // nobody asked for dz/dy
}

/// Self-check 2: x and y both frozen: no node, a plain value comes back.
#[test]
fn all_frozen_inputs_record_nothing() {
    let g = Graph::new();
    let x = g.constant(Tensor::scalar(3.0));
    let y = g.constant(Tensor::scalar(4.0));
    let z = g.apply("mul", &[&x, &y]).unwrap();
    assert_eq!(g.len(), 0);
    assert!(!z.requires_grad());
    assert_eq!(z.node_index(), None);
    assert_eq!(item(z.value()), 12.0);
    assert!(matches!(z.backward(), Err(Error::RootDoesNotRequireGrad)));
}

/// Worked Example 15.4.2: the dead node q = x - 1 is on the tape but not an
/// ancestor of w; both orders give the same gradients.
#[test]
fn dead_node_is_in_the_tape_order_but_not_the_ancestor_order() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(3.0));
    let y = g.variable(Tensor::scalar(4.0));
    let one = g.constant(Tensor::scalar(1.0));
    let z = &x * &y;
    let q = g.apply("sub", &[&x, &one]).unwrap();
    let w = &z + &x;
    assert_eq!(g.nodes()[1].op_name(), "sub");
    assert_eq!(item(q.value()), 2.0);

    assert_eq!(g.topological_backward_order(), vec![2, 1, 0]);
    assert_eq!(g.backward_order(&w), vec![2, 0]);

    let by_ancestors = w.backward().unwrap();
    let by_tape = w
        .backward_with_options(&BackwardOptions::new().order(BackwardOrder::Tape))
        .unwrap();
    for v in [&x, &y] {
        assert_eq!(by_ancestors.wrt(v), by_tape.wrt(v));
    }
    assert_eq!(item(&by_tape.wrt(&x)), 5.0);
    assert_eq!(item(&by_tape.wrt(&y)), 3.0);
    // Self-check 5: the dead node's gradient is a well-defined zero; running
    // its backward (tape order) contributes exactly nothing.
    assert_eq!(item(&by_tape.try_wrt(&q).unwrap()), 0.0);
}

/// Self-check 3: r = q * x after the add makes q an ancestor of r, not of w.
#[test]
fn later_use_of_q_does_not_change_w() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(3.0));
    let y = g.variable(Tensor::scalar(4.0));
    let z = &x * &y;
    let q = &x - 1.0;
    let w = &z + &x;
    let r = &q * &x;
    assert_eq!(g.len(), 4);
    assert_eq!(g.topological_backward_order(), vec![3, 2, 1, 0]);
    assert_eq!(g.backward_order(&w), vec![2, 0]);
    assert_eq!(g.backward_order(&r), vec![3, 1]);

    let grads = w.backward().unwrap();
    assert_eq!(item(&grads.wrt(&x)), 5.0);
    assert_eq!(item(&grads.wrt(&y)), 3.0);
    let tape = w
        .backward_with_options(&BackwardOptions::new().order(BackwardOrder::Tape))
        .unwrap();
    assert_eq!(item(&tape.wrt(&x)), 5.0);
    assert_eq!(item(&tape.wrt(&y)), 3.0);
    // r = (x - 1) x: dr/dx = 2x - 1 = 5, and y does not feed r.
    let rg = r.backward().unwrap();
    assert_eq!(item(&rg.wrt(&x)), 5.0);
    assert_eq!(item(&rg.wrt(&y)), 0.0);
}

/// Self-check 4: an unregistered op is a typed error naming it, in every
/// build profile (CI also runs this file with `--release`).
#[test]
fn unregistered_op_is_a_typed_error_in_every_profile() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(1.0));
    let empty = std::sync::Arc::new(retrograd::OpRegistry::new());
    let bare = Graph::with_registry(empty);
    let bx = bare.variable(Tensor::scalar(1.0));
    match bare.apply("relu", &[&bx]) {
        Err(Error::UnregisteredOp { name, suggestion }) => {
            assert_eq!(name, "relu");
            assert_eq!(suggestion, None);
        }
        other => panic!("expected UnregisteredOp, got {other:?}"),
    }
    let err = g.apply("rleu", &[&x]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "unregistered op `rleu` (did you mean `relu`?)"
    );
    assert!(!cfg!(debug_assertions) || err.to_string().contains("rleu"));
}

/// A handle from another graph is an error, never silent.
#[test]
fn foreign_variables_are_errors() {
    let g1 = Graph::new();
    let g2 = Graph::new();
    let a = g1.variable(Tensor::scalar(1.0));
    let b = g2.variable(Tensor::scalar(2.0));
    assert!(matches!(a.try_mul(&b), Err(Error::ForeignVariable { .. })));
    assert!(matches!(
        g1.apply("add", &[&a, &b]),
        Err(Error::ForeignVariable { .. })
    ));
    let grads = (&a * 2.0).backward().unwrap();
    assert!(matches!(
        grads.try_wrt(&b),
        Err(Error::ForeignVariable { .. })
    ));
}

/// A non-scalar root needs an explicit grad_output.
#[test]
fn non_scalar_root_needs_a_seed() {
    let g = Graph::new();
    let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap());
    let y = &x * &x;
    assert!(matches!(y.backward(), Err(Error::NonScalarRoot { .. })));
    let grads = y
        .backward_with(&Tensor::from_vec(vec![1.0, 1.0], &[2]).unwrap())
        .unwrap();
    assert_eq!(grads.wrt(&x).to_f64_vec(), vec![2.0, 4.0]);
    assert!(matches!(
        y.backward_with(&Tensor::scalar(1.0)),
        Err(Error::ShapeMismatch { op: "backward", .. })
    ));
}

/// Intermediates are released after use unless retained.
#[test]
fn intermediates_are_released_unless_retained() {
    let g = Graph::new();
    let x = g.variable(Tensor::scalar(3.0));
    let z = &x * 2.0;
    let w = &z * &z;
    let grads = w.backward().unwrap();
    assert!(matches!(
        grads.try_wrt(&z),
        Err(Error::GradientNotRetained { .. })
    ));
    z.retain_grad();
    let grads = w.backward().unwrap();
    assert_eq!(item(&grads.wrt(&z)), 12.0);
    assert_eq!(item(&grads.wrt(&x)), 24.0);
}
