//! The textbook's backward-order chapter: the backward sweep in reverse topological order, on the
//! two-tower diamond; every valid order gives identical gradients.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use retrograd::{BackwardOptions, BackwardOrder, Error, Graph, Tensor, Var};

fn vector(v: &[f64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap()
}

/// One tower: two elementwise "layers" with tanh.
fn tower<'g>(input: &Var<'g>, w1: &Var<'g>, b1: &Var<'g>, w2: &Var<'g>) -> Var<'g> {
    let h = (input * w1 + b1).tanh();
    (&h * w2).tanh()
}

struct Diamond<'g> {
    params: Vec<Var<'g>>,
    dot_nodes: Vec<usize>,
    loss_nodes: Vec<usize>,
    query_nodes: std::ops::Range<usize>,
    doc_nodes: std::ops::Range<usize>,
    loss: Var<'g>,
}

fn build(g: &Graph) -> Diamond<'_> {
    let q_in = g.constant(vector(&[0.5, -1.0, 2.0, 0.1]));
    let d_in = g.constant(vector(&[1.5, 0.3, -0.7, 0.9]));
    let p = |v: &[f64]| g.variable(vector(v));
    let (qw1, qb1, qw2) = (
        p(&[0.1, 0.2, -0.3, 0.4]),
        p(&[0.0, 0.1, 0.0, -0.1]),
        p(&[1.0, -0.5, 0.3, 0.8]),
    );
    let (dw1, db1, dw2) = (
        p(&[-0.2, 0.3, 0.5, 0.1]),
        p(&[0.2, 0.0, -0.1, 0.0]),
        p(&[0.7, 0.4, -0.6, 1.1]),
    );
    let n0 = g.len();
    let q = tower(&q_in, &qw1, &qb1, &qw2);
    let n1 = g.len();
    let d = tower(&d_in, &dw1, &db1, &dw2);
    let n2 = g.len();
    let dot = (&q * &d).sum();
    let n3 = g.len();
    let err = &dot - 0.25;
    let loss = &err * &err;
    let n4 = g.len();
    Diamond {
        params: vec![qw1, qb1, qw2, dw1, db1, dw2],
        dot_nodes: (n2..n3).collect(),
        loss_nodes: (n3..n4).collect(),
        query_nodes: n0..n1,
        doc_nodes: n1..n2,
        loss,
    }
}

#[test]
fn backward_order_visits_loss_then_dot_then_towers() {
    let g = Graph::new();
    let m = build(&g);
    let order = g.backward_order(&m.loss);
    let pos = |n: usize| order.iter().position(|&o| o == n).unwrap();
    let last_loss = m.loss_nodes.iter().map(|&n| pos(n)).max().unwrap();
    let first_dot = m.dot_nodes.iter().map(|&n| pos(n)).min().unwrap();
    let last_dot = m.dot_nodes.iter().map(|&n| pos(n)).max().unwrap();
    let first_tower = m
        .query_nodes
        .clone()
        .chain(m.doc_nodes.clone())
        .map(pos)
        .min()
        .unwrap();
    assert!(last_loss < first_dot, "loss nodes come first");
    assert!(
        last_dot < first_tower,
        "the dot product comes before both towers"
    );
    assert_eq!(order.len(), g.len());
}

fn grads_for(g: &Graph, m: &Diamond<'_>, order: BackwardOrder) -> Vec<Vec<f64>> {
    let grads = m
        .loss
        .backward_with_options(&BackwardOptions::new().order(order))
        .unwrap();
    let _ = g;
    m.params.iter().map(|p| grads.wrt(p).to_f64_vec()).collect()
}

#[test]
fn every_valid_order_gives_identical_gradients() {
    let g = Graph::new();
    let m = build(&g);
    let reference = grads_for(&g, &m, BackwardOrder::Ancestors);
    assert!(reference.iter().flatten().any(|&v| v != 0.0));

    let head: Vec<usize> = m
        .dot_nodes
        .iter()
        .chain(&m.loss_nodes)
        .rev()
        .copied()
        .collect();
    let query: Vec<usize> = m.query_nodes.clone().rev().collect();
    let doc: Vec<usize> = m.doc_nodes.clone().rev().collect();
    // Query tower first, document tower first, and interleaved layer by layer.
    let query_first: Vec<usize> = head.iter().chain(&query).chain(&doc).copied().collect();
    let doc_first: Vec<usize> = head.iter().chain(&doc).chain(&query).copied().collect();
    let mut interleaved = head.clone();
    for i in 0..query.len().max(doc.len()) {
        interleaved.extend(query.get(i));
        interleaved.extend(doc.get(i));
    }
    for order in [query_first, doc_first, interleaved] {
        assert_eq!(grads_for(&g, &m, BackwardOrder::Custom(order)), reference);
    }
    assert_eq!(grads_for(&g, &m, BackwardOrder::Tape), reference);

    // Random valid reverse topological orders (Kahn's algorithm on the
    // reversed graph, picking a random ready node each step).
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let nodes = g.nodes();
    let n = nodes.len();
    let producers: Vec<Vec<usize>> = nodes
        .iter()
        .map(|node| {
            node.inputs()
                .iter()
                .filter_map(|v| v.node_index())
                .collect()
        })
        .collect();
    for _ in 0..50 {
        let mut consumers_left = vec![0usize; n];
        for ps in &producers {
            for &p in ps {
                consumers_left[p] += 1;
            }
        }
        let mut ready: Vec<usize> = (0..n).filter(|&i| consumers_left[i] == 0).collect();
        let mut order = Vec::with_capacity(n);
        while !ready.is_empty() {
            ready.shuffle(&mut rng);
            let next = ready.pop().unwrap();
            order.push(next);
            for &p in &producers[next] {
                consumers_left[p] -= 1;
                if consumers_left[p] == 0 {
                    ready.push(p);
                }
            }
        }
        assert_eq!(grads_for(&g, &m, BackwardOrder::Custom(order)), reference);
    }
}

#[test]
fn an_invalid_order_is_rejected() {
    let g = Graph::new();
    let m = build(&g);
    let mut order = g.backward_order(&m.loss);
    order.reverse(); // forward order: every node before its consumers
    assert!(matches!(
        m.loss
            .backward_with_options(&BackwardOptions::new().order(BackwardOrder::Custom(order))),
        Err(Error::InvalidOrder { .. })
    ));
    let mut missing = g.backward_order(&m.loss);
    missing.pop();
    assert!(matches!(
        m.loss
            .backward_with_options(&BackwardOptions::new().order(BackwardOrder::Custom(missing))),
        Err(Error::InvalidOrder { .. })
    ));
}
