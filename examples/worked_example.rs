//! The textbook chapter's running example, w = x*y + x at x = 3, y = 4: the recorded
//! trace, both backward orders, and the gradients (x.grad = 5, y.grad = 3).
//! Then Worked Example 15.4.2's dead node q = x - 1.
//!
//! Run: `cargo run --example worked_example`

use retrograd::{BackwardOptions, BackwardOrder, Graph, Result, Tensor};

fn main() -> Result<()> {
    let graph = Graph::new();
    let x = graph.named_variable("x", Tensor::scalar(3.0));
    let y = graph.named_variable("y", Tensor::scalar(4.0));
    let z = (&x * &y).named("z");
    let w = (&z + &x).named("w");

    println!("w = x*y + x at x = 3, y = 4\n");
    print!("{graph}");
    println!(
        "topological_backward_order() = {:?}",
        graph.topological_backward_order()
    );
    println!(
        "backward_order(w)            = {:?}",
        graph.backward_order(&w)
    );
    let grads = w.backward()?;
    println!("w = {}", w.value());
    println!("x.grad = {}   (dw/dx = y + 1)", grads.wrt(&x));
    println!("y.grad = {}   (dw/dy = x)", grads.wrt(&y));

    println!("\nWorked Example 15.4.2: a dead node q = x - 1 between mul and add\n");
    let graph = Graph::new();
    let x = graph.named_variable("x", Tensor::scalar(3.0));
    let y = graph.named_variable("y", Tensor::scalar(4.0));
    let z = (&x * &y).named("z");
    let _q = (&x - 1.0).named("q");
    let w = (&z + &x).named("w");
    print!("{graph}");
    println!(
        "topological_backward_order() = {:?}",
        graph.topological_backward_order()
    );
    println!(
        "backward_order(w)            = {:?}   (q's node is not an ancestor of w)",
        graph.backward_order(&w)
    );
    let by_ancestors = w.backward()?;
    let by_tape = w.backward_with_options(&BackwardOptions::new().order(BackwardOrder::Tape))?;
    println!(
        "x.grad = {} either way ({} by the tape), y.grad = {} ({})",
        by_ancestors.wrt(&x),
        by_tape.wrt(&x),
        by_ancestors.wrt(&y),
        by_tape.wrt(&y)
    );
    Ok(())
}
