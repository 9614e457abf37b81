//! A few ops of the `ai.onnx.ml` domain: `Binarizer`,
//! `ArrayFeatureExtractor` (an `index_select`, differentiable) and
//! `TreeEnsemble` (trees walked on the host; piecewise constant, so no
//! gradient is lost).

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `Binarizer`: 1 where the value exceeds `threshold`, else 0.
pub(super) fn binarizer<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let t = c.attrs.float("threshold", 0.0)?;
    let v: Vec<f64> = x
        .value()
        .contiguous()
        .to_f64_vec()
        .iter()
        .map(|&v| f64::from(u8::from(v > t)))
        .collect();
    one(c.constant(Tensor::from_f64_slice(&v, x.shape(), x.dtype())?))
}

/// `ArrayFeatureExtractor`: the last axis's elements at the indices (a
/// 1-d input comes out as one row).
pub(super) fn array_feature_extractor<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, idx) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let picks = c.ints(idx)?;
    let n = x.shape().last().copied().unwrap_or(0) as i64;
    if let Some(&bad) = picks.iter().find(|&&i| !(0..n).contains(&i)) {
        return Err(c.error(format!("index {bad} for a last axis of {n}")));
    }
    let k = picks.len();
    let y = x.try_index_select(-1, &Tensor::from_vec(picks, &[k])?)?;
    if x.shape().len() == 1 {
        return one(y.try_reshape(&[1, k as isize])?);
    }
    one(y)
}

/// A node's comparison (`nodes_modes`).
fn passes(mode: i64, v: f64, split: f64, members: &[f64]) -> Option<bool> {
    Some(match mode {
        0 => v <= split,
        1 => v < split,
        2 => v >= split,
        3 => v > split,
        4 => v == split,
        5 => v != split,
        6 => members.contains(&v),
        _ => return None,
    })
}

/// `TreeEnsemble` (ml opset 5): each row down every tree to a leaf, the
/// leaves' weights summed, averaged, or the least or largest kept per
/// target. Only `post_transform = 0` (none).
pub(super) fn tree_ensemble<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let a = c.attrs;
    let ints = |name: &str| -> Result<Vec<i64>> {
        a.ints(name)?
            .ok_or_else(|| c.error(format!("{name} is required")))
    };
    let floats = |name: &str| -> Result<Vec<f64>> {
        match a.tensor(name)? {
            Some(t) => Ok(t.contiguous().to_f64_vec()),
            None => Err(c.error(format!("{name} is required"))),
        }
    };
    let (splits, weights) = (floats("nodes_splits")?, floats("leaf_weights")?);
    let modes: Vec<i64> = floats("nodes_modes")?.iter().map(|&m| m as i64).collect();
    let (features, true_ids, false_ids) = (
        ints("nodes_featureids")?,
        ints("nodes_truenodeids")?,
        ints("nodes_falsenodeids")?,
    );
    let (true_leaf, false_leaf) = (ints("nodes_trueleafs")?, ints("nodes_falseleafs")?);
    let (targets, roots) = (ints("leaf_targetids")?, ints("tree_roots")?);
    let n_targets = a.int("n_targets", 0)?;
    let missing_true = a
        .ints("nodes_missing_value_tracks_true")?
        .unwrap_or_default();
    let members: Vec<f64> = match a.tensor("membership_values")? {
        Some(t) => t.contiguous().to_f64_vec(),
        None => Vec::new(),
    };
    if a.int("post_transform", 0)? != 0 {
        return Err(c.error("post_transform other than 0 (none) is not supported"));
    }
    let aggregate = a.int("aggregate_function", 1)?;
    let nodes = splits.len();
    let lens = [
        modes.len(),
        features.len(),
        true_ids.len(),
        false_ids.len(),
        true_leaf.len(),
        false_leaf.len(),
    ];
    if lens.iter().any(|&l| l != nodes) || targets.len() != weights.len() || n_targets <= 0 {
        return Err(c.error("node or leaf attributes of different lengths"));
    }
    // Each set-membership node's members, in the order the trees are read.
    let mut sets: Vec<Vec<f64>> = vec![Vec::new(); nodes];
    let mut next = members.iter();
    let mut stack: Vec<usize> = roots.iter().rev().map(|&r| r as usize).collect();
    let mut seen = vec![false; nodes];
    while let Some(i) = stack.pop() {
        if i >= nodes || seen[i] {
            continue;
        }
        seen[i] = true;
        if modes[i] == 6 {
            for &m in next.by_ref() {
                if m.is_nan() {
                    break;
                }
                sets[i].push(m);
            }
        }
        if false_leaf[i] == 0 {
            stack.push(false_ids[i] as usize);
        }
        if true_leaf[i] == 0 {
            stack.push(true_ids[i] as usize);
        }
    }
    let xs = x.shape().to_vec();
    if xs.len() != 2 {
        return Err(c.error(format!("X of shape {xs:?} (want [rows, features])")));
    }
    let (rows, cols) = (xs[0], xs[1]);
    let t = n_targets as usize;
    c.check_size(&[rows, t])?;
    let v = x.value().contiguous().to_f64_vec();
    let start = match aggregate {
        0 | 1 => 0.0,
        2 if x.dtype() == DType::F32 => f64::from(f32::MAX),
        3 if x.dtype() == DType::F32 => f64::from(f32::MIN),
        2 => f64::MAX,
        3 => f64::MIN,
        other => return Err(c.error(format!("aggregate_function {other}"))),
    };
    let mut out = vec![start; rows * t];
    for r in 0..rows {
        let row = &v[r * cols..][..cols];
        for &root in &roots {
            let mut i = root as usize;
            // A root whose both branches are the same leaf is that leaf.
            let mut leaf = None;
            if i < nodes && true_leaf[i] != 0 && false_leaf[i] != 0 && true_ids[i] == false_ids[i] {
                leaf = Some(true_ids[i] as usize);
            }
            let mut steps = 0;
            while leaf.is_none() {
                steps += 1;
                if i >= nodes || steps > nodes {
                    return Err(c.error(format!(
                        "a tree that does not reach a leaf from node {root}"
                    )));
                }
                let f = usize::try_from(features[i])
                    .ok()
                    .filter(|&f| f < cols)
                    .ok_or_else(|| c.error(format!("feature {} of {cols}", features[i])))?;
                let value = row[f];
                let go = value.is_nan() && missing_true.get(i).is_some_and(|&m| m != 0)
                    || passes(modes[i], value, splits[i], &sets[i])
                        .ok_or_else(|| c.error(format!("node mode {}", modes[i])))?;
                let (id, is_leaf) = if go {
                    (true_ids[i], true_leaf[i])
                } else {
                    (false_ids[i], false_leaf[i])
                };
                if is_leaf != 0 {
                    leaf = Some(id as usize);
                } else {
                    i = id as usize;
                }
            }
            let l = leaf.unwrap_or(0);
            let (Some(&w), Some(&tid)) = (weights.get(l), targets.get(l)) else {
                return Err(c.error(format!("leaf {l} of {}", weights.len())));
            };
            let tid = usize::try_from(tid)
                .ok()
                .filter(|&k| k < t)
                .ok_or_else(|| c.error(format!("target {tid} of {t}")))?;
            let cell = &mut out[r * t + tid];
            *cell = match aggregate {
                0 => *cell + w / roots.len() as f64,
                1 => *cell + w,
                2 => cell.min(w),
                _ => cell.max(w),
            };
        }
    }
    one(c.constant(Tensor::from_f64_slice(&out, &[rows, t], x.dtype())?))
}
