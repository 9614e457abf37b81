//! Backward over very long chains must not recurse: it runs here on a thread
//! with a deliberately small stack.

use retrograd::{Graph, Tensor};

#[test]
fn a_million_node_chain_backward_does_not_overflow_the_stack() {
    let handle = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let g = Graph::new();
            let x = g.variable(Tensor::scalar(1.0));
            let mut v = x.clone();
            let n = 1_000_000;
            for _ in 0..n {
                v = &v + 1e-6;
            }
            assert_eq!(g.len(), n);
            let order = g.backward_order(&v);
            assert_eq!(order.len(), n);
            assert_eq!(order[0], n - 1);
            let grads = v.backward().unwrap();
            assert_eq!(grads.wrt(&x).item(), 1.0);
            assert!((v.value().item() - 2.0).abs() < 1e-6);
            drop(g);
        })
        .unwrap();
    handle.join().unwrap();
}
