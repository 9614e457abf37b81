//! Box selection for detectors: `NonMaxSuppression`, on the host (its
//! output is indices, which carry no gradient).

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// A box as `(y_min, x_min, y_max, x_max)` with the corners ordered.
fn corners(b: &[f64], center: bool) -> [f64; 4] {
    if center {
        // (x_center, y_center, width, height)
        let (hw, hh) = (b[2] / 2.0, b[3] / 2.0);
        [b[1] - hh, b[0] - hw, b[1] + hh, b[0] + hw]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

/// Whether two boxes overlap by more than `threshold` (intersection over
/// union); boxes with no area never suppress.
fn suppresses(a: &[f64; 4], b: &[f64; 4], threshold: f64) -> bool {
    let h = a[2].min(b[2]) - a[0].max(b[0]);
    let w = a[3].min(b[3]) - a[1].max(b[1]);
    if h <= 0.0 || w <= 0.0 {
        return false;
    }
    let inter = h * w;
    let area = |r: &[f64; 4]| (r[2] - r[0]) * (r[3] - r[1]);
    let (aa, ab) = (area(a), area(b));
    let union = aa + ab - inter;
    if aa <= 0.0 || ab <= 0.0 || union <= 0.0 {
        return false;
    }
    inter / union > threshold
}

/// `NonMaxSuppression`: per batch and class, boxes by falling score (ties
/// to the lower index), each kept unless it overlaps a kept one by more
/// than the IoU threshold, at most `max_output_boxes_per_class` (absent:
/// none); boxes at or under `score_threshold` are dropped. Output rows
/// are `(batch, class, box)`.
pub(super) fn non_max_suppression<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (boxes, scores) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let center = match c.attrs.int("center_point_box", 0)? {
        0 => false,
        1 => true,
        other => return Err(c.error(format!("center_point_box = {other} (0 or 1)"))),
    };
    let (bs, ss) = (boxes.shape(), scores.shape());
    if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
        return Err(c.error(format!(
            "boxes of shape {bs:?} and scores of shape {ss:?} (want [batch, boxes, 4] and [batch, classes, boxes])"
        )));
    }
    let first = |i: usize| -> Result<Option<f64>> {
        match c.opt(ins, i) {
            Some(v) => Ok(v.value().contiguous().to_f64_vec().first().copied()),
            None => Ok(None),
        }
    };
    let max_out = first(2)?.unwrap_or(0.0).max(0.0) as usize;
    let iou = first(3)?.unwrap_or(0.0);
    let score_min = first(4)?;
    let (batches, n, classes) = (bs[0], bs[1], ss[1]);
    let b = boxes.value().contiguous().to_f64_vec();
    let s = scores.value().contiguous().to_f64_vec();
    let mut out: Vec<i64> = Vec::new();
    for batch in 0..batches {
        let rects: Vec<[f64; 4]> = (0..n)
            .map(|i| corners(&b[(batch * n + i) * 4..][..4], center))
            .collect();
        for class in 0..classes {
            let row = &s[(batch * classes + class) * n..][..n];
            let mut order: Vec<usize> = (0..n)
                .filter(|&i| score_min.is_none_or(|t| row[i] > t))
                .collect();
            // Stable: equal scores keep the lower index first.
            order.sort_by(|&p, &q| row[q].total_cmp(&row[p]));
            let mut kept: Vec<usize> = Vec::new();
            for i in order {
                if kept.len() >= max_out {
                    break;
                }
                if kept.iter().all(|&k| !suppresses(&rects[i], &rects[k], iou)) {
                    kept.push(i);
                    out.extend([batch as i64, class as i64, i as i64]);
                }
            }
        }
    }
    let rows = out.len() / 3;
    one(c.constant(Tensor::from_vec(out, &[rows, 3])?))
}
