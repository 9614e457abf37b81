//! `w1_tape`: W1 on a hand-written tape with no framework at all (the
//! issue's "hand-written tape" row): an enum per node, f32 values and
//! adjoints in flat vectors, a reverse loop with a `match`. The floor any
//! engine is measured against on this machine.

use retrograd::DType;

use crate::report::time;
use crate::Options;

const K: usize = 256;
const L: usize = 100;

#[derive(Clone, Copy)]
enum Node {
    Leaf,
    Mul(u32, u32),
    Add(u32, u32),
    Tanh(u32),
}

#[derive(Default)]
struct Tape {
    values: Vec<f32>,
    nodes: Vec<Node>,
}

impl Tape {
    fn push(&mut self, value: f32, node: Node) -> u32 {
        self.values.push(value);
        self.nodes.push(node);
        (self.values.len() - 1) as u32
    }

    fn value(&self, id: u32) -> f32 {
        self.values[id as usize]
    }
}

/// One forward + backward of W1 in f32; returns (loss, sum of the p gradients).
fn run_once(chains: usize) -> (f64, f64) {
    let mut tape = Tape::default();
    for k in 0..K {
        tape.push(((((k % 17) as f64) - 8.0) * 0.01) as f32, Node::Leaf);
    }
    let mut total = None;
    for c in 0..chains {
        let mut v = tape.push((0.5 + 0.001 * c as f64) as f32, Node::Leaf);
        for j in 0..L {
            let i = c * L + j;
            let (a, b) = ((i % K) as u32, ((7 * i + 3) % K) as u32);
            let m = tape.push(tape.value(v) * tape.value(a), Node::Mul(v, a));
            let s = tape.push(tape.value(m) + tape.value(b), Node::Add(m, b));
            v = tape.push(tape.value(s).tanh(), Node::Tanh(s));
        }
        total = Some(match total {
            None => v,
            Some(t) => tape.push(tape.value(t) + tape.value(v), Node::Add(t, v)),
        });
    }
    let total = total.expect("at least one chain") as usize;
    let (values, nodes) = (&tape.values, &tape.nodes);
    let mut adjoint = vec![0f32; values.len()];
    adjoint[total] = 1.0;
    for n in (0..values.len()).rev() {
        let g = adjoint[n];
        match nodes[n] {
            Node::Mul(a, b) => {
                adjoint[a as usize] += g * values[b as usize];
                adjoint[b as usize] += g * values[a as usize];
            }
            Node::Add(a, b) => {
                adjoint[a as usize] += g;
                adjoint[b as usize] += g;
            }
            Node::Tanh(a) => adjoint[a as usize] += g * (1.0 - values[n] * values[n]),
            Node::Leaf => {}
        }
    }
    let grad_sum = adjoint[..K].iter().map(|&g| g as f64).sum();
    (values[total] as f64, grad_sum)
}

/// The hand-written tape at the W1 sizes, f32.
pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick { &[100] } else { &[1000, 10000] };
    for &chains in sizes {
        let mut check = (0.0, 0.0);
        let nodes = super::w1::nodes(chains, 1);
        let stats = time(opts.repeats, || check = run_once(chains)).per(nodes);
        super::w1::emit_chain_line(
            "hand_written_tape",
            "w1",
            DType::F32,
            chains,
            1,
            stats,
            check,
        );
    }
}
