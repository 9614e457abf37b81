//! `Einsum` as retrograd ops: diagonals by `index_select`, sums by
//! `sum_axes`, and each pair of operands contracted by one batched
//! `matmul`, so the result differentiates.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// An axis label: a letter, or the `i`-th axis an ellipsis stands for
/// (counted so that the ellipses of all operands align on the right).
type Label = u32;
const ELLIPSIS: Label = 1 << 16;

/// An operand's term: letters and at most one `...`.
fn parse_term(c: &Ctx<'_, '_>, term: &str) -> Result<(Vec<Label>, Option<usize>)> {
    let mut labels = Vec::new();
    let mut dots = None;
    let mut rest = term;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("...") {
            if dots.is_some() {
                return Err(c.error(format!("term {term:?} has two ellipses")));
            }
            dots = Some(labels.len());
            rest = r;
            continue;
        }
        let ch = rest.chars().next().unwrap_or(' ');
        if !ch.is_ascii_alphabetic() {
            return Err(c.error(format!("term {term:?}: {ch:?} is not a letter")));
        }
        labels.push(ch as Label);
        rest = &rest[1..];
    }
    Ok((labels, dots))
}

/// `labels` with the ellipsis expanded to `k` of `max` aligned axes.
fn expand(labels: &[Label], dots: Option<usize>, k: usize, max: usize) -> Vec<Label> {
    match dots {
        None => labels.to_vec(),
        Some(at) => {
            let mut out = labels[..at].to_vec();
            out.extend((max - k..max).map(|i| ELLIPSIS + i as Label));
            out.extend(&labels[at..]);
            out
        }
    }
}

/// `x` with repeated labels reduced to their diagonal.
fn diagonals<'g>(x: Var<'g>, labels: Vec<Label>) -> Result<(Var<'g>, Vec<Label>)> {
    let (mut x, mut labels) = (x, labels);
    loop {
        let Some((a, b)) = (0..labels.len()).find_map(|a| {
            (a + 1..labels.len())
                .find(|&b| labels[b] == labels[a])
                .map(|b| (a, b))
        }) else {
            return Ok((x, labels));
        };
        let rank = labels.len();
        let n = x.shape()[a];
        // Both axes last, flattened, then every (n + 1)-th element.
        let mut perm: Vec<isize> = (0..rank)
            .filter(|&d| d != a && d != b)
            .map(|d| d as isize)
            .collect();
        perm.extend([a as isize, b as isize]);
        let moved = x.try_permute(&perm)?;
        let mut flat: Vec<isize> = moved.shape()[..rank - 2]
            .iter()
            .map(|&d| d as isize)
            .collect();
        flat.push((n * n) as isize);
        let picks: Vec<i64> = (0..n).map(|i| (i * (n + 1)) as i64).collect();
        x = moved
            .try_reshape(&flat)?
            .try_index_select(-1, &Tensor::from_vec(picks, &[n])?)?;
        let keep = labels[a];
        labels = (0..rank)
            .filter(|&d| d != a && d != b)
            .map(|d| labels[d])
            .collect();
        labels.push(keep);
    }
}

/// Sums the axes of `x` whose labels `needed` does not hold.
fn sum_unneeded<'g>(
    x: Var<'g>,
    labels: Vec<Label>,
    needed: impl Fn(Label) -> bool,
) -> Result<(Var<'g>, Vec<Label>)> {
    let gone: Vec<isize> = (0..labels.len())
        .filter(|&d| !needed(labels[d]))
        .map(|d| d as isize)
        .collect();
    if gone.is_empty() {
        return Ok((x, labels));
    }
    let kept = labels.into_iter().filter(|&l| needed(l)).collect();
    Ok((x.try_sum_axes(&gone, false)?, kept))
}

/// `a · b` over the labels both hold that `later` does not need: one
/// batched matmul of `[batch, a-only, shared] × [batch, shared, b-only]`.
fn contract<'g>(
    c: &Ctx<'_, 'g>,
    (a, la): (Var<'g>, Vec<Label>),
    (b, lb): (Var<'g>, Vec<Label>),
    later: impl Fn(Label) -> bool,
) -> Result<(Var<'g>, Vec<Label>)> {
    let size = |x: &Var<'g>, l: &[Label], label: Label| -> usize {
        l.iter()
            .position(|&m| m == label)
            .map_or(1, |p| x.shape()[p])
    };
    let batch: Vec<Label> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && later(*l))
        .collect();
    let shared: Vec<Label> = la
        .iter()
        .copied()
        .filter(|l| lb.contains(l) && !later(*l))
        .collect();
    let a_only: Vec<Label> = la.iter().copied().filter(|l| !lb.contains(l)).collect();
    let b_only: Vec<Label> = lb.iter().copied().filter(|l| !la.contains(l)).collect();
    let dim = |l: Label| size(&a, &la, l).max(size(&b, &lb, l));
    for &l in batch.iter().chain(&shared) {
        let (p, q) = (size(&a, &la, l), size(&b, &lb, l));
        if p != q && p != 1 && q != 1 {
            return Err(c.error(format!(
                "operands of shapes {:?} and {:?} differ on one label ({p} against {q})",
                a.shape(),
                b.shape()
            )));
        }
    }
    let arrange = |x: &Var<'g>, l: &[Label], order: &[&[Label]]| -> Result<Var<'g>> {
        let all: Vec<Label> = order.iter().flat_map(|o| o.iter().copied()).collect();
        let perm: Vec<isize> = all
            .iter()
            .map(|m| l.iter().position(|n| n == m).unwrap_or(0) as isize)
            .collect();
        let sizes: Vec<usize> = all.iter().map(|&m| dim(m)).collect();
        let moved = x.try_permute(&perm)?;
        let moved = if moved.shape() == sizes.as_slice() {
            moved
        } else {
            moved.try_expand(&sizes)?
        };
        let group = |g: &[Label]| g.iter().map(|&m| dim(m)).product::<usize>() as isize;
        moved.try_reshape(&order.iter().map(|g| group(g)).collect::<Vec<_>>())
    };
    let am = arrange(&a, &la, &[&batch, &a_only, &shared])?;
    let bm = arrange(&b, &lb, &[&batch, &shared, &b_only])?;
    let y = am.try_matmul(&bm)?;
    let labels: Vec<Label> = batch
        .iter()
        .chain(&a_only)
        .chain(&b_only)
        .copied()
        .collect();
    let shape: Vec<isize> = labels.iter().map(|&l| dim(l) as isize).collect();
    Ok((y.try_reshape(&shape)?, labels))
}

/// `Einsum` with an explicit (`->`) or implicit output (the labels seen
/// once, in alphabetical order, after the ellipsis axes).
pub(super) fn einsum<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let eq: String = c
        .attrs
        .string("equation", "")?
        .chars()
        .filter(|ch| !ch.is_whitespace())
        .collect();
    let (lhs, rhs) = match eq.split_once("->") {
        Some((l, r)) => (l, Some(r)),
        None => (eq.as_str(), None),
    };
    let terms: Vec<&str> = lhs.split(',').collect();
    let xs: Vec<&Var<'g>> = (0..terms.len())
        .map(|i| c.input(ins, i))
        .collect::<Result<_>>()?;
    let parsed: Vec<(Vec<Label>, Option<usize>)> = terms
        .iter()
        .map(|t| parse_term(c, t))
        .collect::<Result<_>>()?;
    let mut dims = Vec::new();
    for ((labels, dots), x) in parsed.iter().zip(&xs) {
        let rank = x.shape().len();
        let k = rank
            .checked_sub(labels.len())
            .filter(|&k| dots.is_some() || k == 0);
        dims.push(k.ok_or_else(|| {
            c.error(format!(
                "term of {} labels for an operand of shape {:?}",
                labels.len(),
                x.shape()
            ))
        })?);
    }
    let max = dims.iter().copied().max().unwrap_or(0);
    let full: Vec<Vec<Label>> = parsed
        .iter()
        .zip(&dims)
        .map(|((l, d), &k)| expand(l, *d, k, max))
        .collect();
    let out: Vec<Label> = match rhs {
        Some(r) => {
            let (l, d) = parse_term(c, r)?;
            expand(&l, d, max, max)
        }
        None => {
            let mut once: Vec<Label> = Vec::new();
            for l in full.iter().flatten().filter(|&&l| l < ELLIPSIS) {
                if full.iter().flatten().filter(|&&m| m == *l).count() == 1 {
                    once.push(*l);
                }
            }
            once.sort_unstable();
            (0..max as Label)
                .map(|i| ELLIPSIS + i)
                .chain(once)
                .collect()
        }
    };
    if let Some(l) = out.iter().find(|l| !full.iter().flatten().any(|m| m == *l)) {
        return Err(c.error(format!(
            "output label {:?} is on no operand",
            char::from_u32(*l)
        )));
    }
    // Each operand's diagonals, then its labels no one else needs summed.
    let mut ops = Vec::new();
    for (i, (x, labels)) in xs.iter().zip(&full).enumerate() {
        let (x, labels) = diagonals((*x).clone(), labels.clone())?;
        let others = labels_except(&full, i);
        let (x, labels) = sum_unneeded(x, labels, |l| out.contains(&l) || others.contains(&l))?;
        ops.push((x, labels));
    }
    let mut ops = ops.into_iter();
    let mut acc = ops.next().ok_or_else(|| c.error("no operands"))?;
    let rest: Vec<_> = ops.collect();
    for (j, next) in rest.iter().enumerate() {
        let later: Vec<Label> = rest[j + 1..]
            .iter()
            .flat_map(|(_, l)| l.iter().copied())
            .collect();
        acc = contract(c, acc, next.clone(), |l| {
            out.contains(&l) || later.contains(&l)
        })?;
    }
    let (y, labels) = sum_unneeded(acc.0, acc.1, |l| out.contains(&l))?;
    let perm: Vec<isize> = out
        .iter()
        .map(|m| labels.iter().position(|l| l == m).unwrap_or(0) as isize)
        .collect();
    one(if perm.iter().enumerate().all(|(i, &p)| i as isize == p) {
        y
    } else {
        y.try_permute(&perm)?
    })
}

/// The labels of every operand but the `i`-th.
fn labels_except(all: &[Vec<Label>], i: usize) -> Vec<Label> {
    all.iter()
        .enumerate()
        .filter(|&(j, _)| j != i)
        .flat_map(|(_, l)| l.iter().copied())
        .collect()
}
