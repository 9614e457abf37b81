//! Finding repeated structure, each run drawn as one node: linear chains
//! of op nodes whose op names repeat with a short period (a thousand
//! `tanh`s, twelve `mul → add → tanh` layers), then repeated blocks, runs
//! of consecutive nodes with the same ops wired the same way (the layers
//! of a transformer, with their residual and attention fan-outs).

use std::collections::HashMap;

use retrograd_engine::core::graph::{GraphState, LEAF_CONSTANT};

/// The longest repeating unit looked for in a chain, in ops.
const MAX_PERIOD: usize = 8;
/// A chain's unit must repeat at least this many times to be collapsed.
const MIN_REPEATS: usize = 3;
/// A block has at least this many ops (shorter units are chains' business)
/// and at most the larger.
const BLOCK_OPS: (usize, usize) = (4, 512);
/// A block must repeat at least this many times.
const MIN_BLOCK_REPEATS: usize = 2;
/// Blocks are looked for among at most this many nodes (a picture of more
/// is not read node by node anyway; the search is quadratic at worst).
const MAX_BLOCK_SEARCH: usize = 20_000;

/// A run of op nodes drawn as one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// The nodes, in chain (append) order.
    pub(crate) members: Vec<usize>,
    /// `tanh`, or `(mul → add → tanh)`, or for a long block
    /// `[layer_norm … add] (28 ops)`.
    pub(crate) pattern: String,
    pub(crate) repeats: usize,
    /// A repeated block rather than a chain: its leaves (parameters, named
    /// or not) are summarised in one node.
    pub(crate) block: bool,
}

/// Groups of repeated ops among the `kept` nodes. Only linear links count:
/// `b` follows `a` when `a`'s output is used exactly once, by `b`, and `a` is
/// `b`'s only input produced by an op (its other inputs are leaves), and both
/// are equally live.
pub(crate) fn find_groups(st: &GraphState, kept: &[bool], live: &[bool]) -> Vec<Group> {
    let n = st.nodes().len();
    let mut uses = vec![0u32; st.values().len()];
    for i in 0..n {
        for &id in st.inputs_of(i) {
            uses[id as usize] += 1;
        }
    }
    let mut next = vec![usize::MAX; n];
    let mut has_prev = vec![false; n];
    for b in 0..n {
        if !kept[b] {
            continue;
        }
        let mut op_inputs = st
            .inputs_of(b)
            .iter()
            .filter(|&&id| st.producers()[id as usize] < LEAF_CONSTANT);
        let (Some(&only), None) = (op_inputs.next(), op_inputs.next()) else {
            continue;
        };
        let a = st.producers()[only as usize] as usize;
        if kept[a] && uses[only as usize] == 1 && live[a] == live[b] {
            next[a] = b;
            has_prev[b] = true;
        }
    }

    let mut groups = Vec::new();
    for start in 0..n {
        if !kept[start] || has_prev[start] {
            continue;
        }
        let mut chain = vec![start];
        while let Some(&last) = chain.last() {
            match next[last] {
                usize::MAX => break,
                b => chain.push(b),
            }
        }
        if chain.len() < MIN_REPEATS {
            continue;
        }
        let names: Vec<&str> = chain
            .iter()
            .map(|&i| st.op_name(st.nodes()[i].op))
            .collect();
        groups.extend(repeats_in(&names).into_iter().map(|(at, period, repeats)| {
            let unit = &names[at..at + period];
            Group {
                members: chain[at..at + period * repeats].to_vec(),
                pattern: if period == 1 {
                    unit[0].to_string()
                } else {
                    format!("({})", unit.join(" → "))
                },
                repeats,
                block: false,
            }
        }));
    }
    let mut taken = vec![false; n];
    for group in &groups {
        group.members.iter().for_each(|&m| taken[m] = true);
    }
    let rest: Vec<usize> = (0..n).filter(|&i| kept[i] && !taken[i]).collect();
    groups.extend(find_blocks(st, &rest, live));
    groups
}

/// Runs of consecutive `nodes` (append order) that repeat a block of ops
/// at least twice: same op names, and each input either from the same
/// place inside the block or from outside it, in every repetition.
fn find_blocks(st: &GraphState, nodes: &[usize], live: &[bool]) -> Vec<Group> {
    if nodes.len() > MAX_BLOCK_SEARCH {
        return Vec::new();
    }
    let mut intern: HashMap<&str, u32> = HashMap::new();
    let names: Vec<u32> = nodes
        .iter()
        .map(|&i| {
            let next = intern.len() as u32;
            *intern.entry(st.op_name(st.nodes()[i].op)).or_insert(next)
        })
        .collect();
    // Same op, same liveness, same wiring relative to the block's first node.
    let same = |a: usize, a0: usize, b: usize, b0: usize, len: usize| -> bool {
        let (na, nb) = (nodes[a], nodes[b]);
        if names[a] != names[b] || live[na] != live[nb] {
            return false;
        }
        let (ia, ib) = (st.inputs_of(na), st.inputs_of(nb));
        let place = |id: u32, start: usize| {
            let p = st.producers()[id as usize];
            let (first, last) = (nodes[start], nodes[start + len - 1]);
            (p < LEAF_CONSTANT && (first..=last).contains(&(p as usize)))
                .then(|| p as usize - first)
        };
        ia.len() == ib.len()
            && ia
                .iter()
                .zip(ib)
                .all(|(&x, &y)| place(x, a0) == place(y, b0))
    };
    let mut groups = Vec::new();
    let mut i = 0;
    while i < nodes.len() {
        let mut best: Option<(usize, usize)> = None;
        let longest = BLOCK_OPS.1.min((nodes.len() - i) / MIN_BLOCK_REPEATS);
        for period in BLOCK_OPS.0..=longest {
            if names[i] != names[i + period] || !primitive(&names[i..i + period]) {
                continue;
            }
            let mut repeats = 1;
            while i + (repeats + 1) * period <= nodes.len() {
                let start = i + repeats * period;
                if !(0..period).all(|j| same(i + j, i, start + j, start, period)) {
                    break;
                }
                repeats += 1;
            }
            if repeats >= MIN_BLOCK_REPEATS && best.is_none_or(|(p, r)| period * repeats > p * r) {
                best = Some((period, repeats));
            }
        }
        let Some((period, repeats)) = best else {
            i += 1;
            continue;
        };
        let op = |k: usize| st.op_name(st.nodes()[nodes[k]].op);
        groups.push(Group {
            members: nodes[i..i + period * repeats].to_vec(),
            pattern: format!("[{} … {}] ({period} ops)", op(i), op(i + period - 1)),
            repeats,
            block: true,
        });
        i += period * repeats;
    }
    groups
}

/// Whether `unit` is not itself a repetition of a shorter unit (four
/// `tanh`s are a chain of one op, not a block of four).
fn primitive(unit: &[u32]) -> bool {
    (1..unit.len())
        .filter(|p| unit.len().is_multiple_of(*p))
        .all(|p| unit.chunks(p).any(|c| c != &unit[..p]))
}

/// Non-overlapping runs `(start, period, repeats)` in `names`, scanning left
/// to right and taking at each position the run covering the most ops
/// (the shorter period on a tie).
fn repeats_in(names: &[&str]) -> Vec<(usize, usize, usize)> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < names.len() {
        let mut best: Option<(usize, usize)> = None;
        for period in 1..=MAX_PERIOD.min((names.len() - i) / MIN_REPEATS) {
            let unit = &names[i..i + period];
            let mut repeats = 1;
            while i + (repeats + 1) * period <= names.len()
                && &names[i + repeats * period..i + (repeats + 1) * period] == unit
            {
                repeats += 1;
            }
            let better = best.is_none_or(|(p, r)| period * repeats > p * r);
            if repeats >= MIN_REPEATS && better {
                best = Some((period, repeats));
            }
        }
        match best {
            Some((period, repeats)) => {
                runs.push((i, period, repeats));
                i += period * repeats;
            }
            None => i += 1,
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrograd_engine::{Graph, Tensor};

    #[test]
    fn runs_take_the_widest_cover() {
        assert_eq!(repeats_in(&["tanh"; 5]), vec![(0, 1, 5)]);
        let layers = [
            "mul", "add", "tanh", "mul", "add", "tanh", "mul", "add", "tanh",
        ];
        assert_eq!(repeats_in(&layers), vec![(0, 3, 3)]);
        // Two repeats are not enough; a run can start after a prefix.
        assert_eq!(repeats_in(&["exp", "log", "exp", "log"]), vec![]);
        assert_eq!(
            repeats_in(&["sum", "relu", "relu", "relu", "neg"]),
            vec![(1, 1, 3)]
        );
    }

    #[test]
    fn chains_with_leaf_side_inputs_collapse() {
        let g = Graph::new();
        let mut h = g.variable(Tensor::scalar(0.5));
        for k in 0..4 {
            let w = g.variable(Tensor::scalar(0.1 * f64::from(k)));
            h = (&h * &w + 1.0).tanh();
        }
        let _loss = &h * &h; // h used twice: not part of a link, so the chain ends at tanh
        let st = g.state();
        let n = st.nodes().len();
        let groups = find_groups(&st, &vec![true; n], &vec![true; n]);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].pattern, "(mul → add → tanh)");
        assert_eq!(groups[0].repeats, 4);
        assert_eq!(groups[0].members, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn repeated_blocks_with_fan_outs_collapse() {
        // Three residual blocks: h + tanh(h * w) * h; h fans out three ways.
        let g = Graph::new();
        let mut h = g.variable(Tensor::vector(&[0.5, -0.5]));
        for k in 0..3 {
            let w = g.variable(Tensor::vector(&[0.1 * f64::from(k), 1.0]));
            h = &h + &((&h * &w).tanh() * &h);
        }
        let _loss = h.sum();
        let st = g.state();
        let n = st.nodes().len();
        let groups = find_groups(&st, &vec![true; n], &vec![true; n]);
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].pattern, "[mul … add] (4 ops)");
        assert_eq!((groups[0].repeats, groups[0].block), (3, true));
        assert_eq!(groups[0].members, (0..12).collect::<Vec<_>>());
    }

    #[test]
    fn blocks_must_be_wired_alike_and_not_chains() {
        // The same four ops twice, but the second block reads its input
        // from another place: no block.
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(0.5));
        let a = (&x * &x).tanh();
        let b = &(&a * &a) + &a;
        let c = (&b * &b).tanh();
        let _d = &(&c * &x) + &c; // mul reads x, not the block's own tanh
        let st = g.state();
        let n = st.nodes().len();
        assert!(find_groups(&st, &vec![true; n], &vec![true; n]).is_empty());
        assert!(primitive(&[1, 2, 1, 3]) && !primitive(&[1, 2, 1, 2]) && !primitive(&[4; 4]));
    }

    #[test]
    fn a_value_used_twice_breaks_the_chain() {
        let g = Graph::new();
        let x = g.variable(Tensor::scalar(0.5));
        let a = x.tanh().tanh();
        let b = a.tanh();
        let _c = &b.tanh().tanh() + &a; // a feeds two nodes
        let st = g.state();
        let n = st.nodes().len();
        let groups = find_groups(&st, &vec![true; n], &vec![true; n]);
        // x -> tanh -> tanh (a) ends a chain; b, tanh, tanh form another one.
        assert_eq!(groups.len(), 1);
        assert_eq!(groups[0].members, vec![2, 3, 4]);
    }
}
