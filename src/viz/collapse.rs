//! Finding repeated structure: linear chains of op nodes whose op names
//! repeat with a short period (a thousand `tanh`s, twelve `mul → add → tanh`
//! layers), each drawn as one node.

use crate::graph::{GraphState, LEAF_CONSTANT};

/// The longest repeating unit looked for, in ops.
const MAX_PERIOD: usize = 8;
/// A unit must repeat at least this many times to be collapsed.
const MIN_REPEATS: usize = 3;

/// A run of op nodes drawn as one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// The nodes, in chain (append) order.
    pub(crate) members: Vec<usize>,
    /// `tanh`, or `(mul → add → tanh)`.
    pub(crate) pattern: String,
    pub(crate) repeats: usize,
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
            }
        }));
    }
    groups
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
    use crate::{Graph, Tensor};

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
