//! `Pad`'s `edge`, `reflect` and `wrap` modes: each padded axis is one
//! `index_select` of the positions the border copies, so the gradient of
//! a copied value flows back to its source.

use super::Ctx;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

/// How a border reads the signal.
#[derive(Clone, Copy)]
pub(super) enum Border {
    /// Repeats the edge value.
    Edge,
    /// Mirrors the signal about its edge value, which is not repeated.
    Reflect,
    /// Continues with the signal's other end.
    Wrap,
}

impl Border {
    pub(super) fn parse(mode: &str) -> Option<Border> {
        match mode {
            "edge" => Some(Border::Edge),
            "reflect" => Some(Border::Reflect),
            "wrap" => Some(Border::Wrap),
            _ => None,
        }
    }

    /// The source of position `i` (which may lie outside `0..n`).
    fn source(self, i: i64, n: i64) -> i64 {
        match self {
            Border::Edge => i.clamp(0, n - 1),
            Border::Wrap => i.rem_euclid(n),
            Border::Reflect if n == 1 => 0,
            Border::Reflect => {
                let m = i.rem_euclid(2 * n - 2);
                if m >= n {
                    2 * n - 2 - m
                } else {
                    m
                }
            }
        }
    }
}

/// `x` padded by `(before, after)` on each axis (negative: cut), reading
/// borders as `border` does; an empty axis has no border to read.
pub(super) fn pad_border<'g>(
    c: &Ctx<'_, 'g>,
    x: &Var<'g>,
    pads: &[(i64, i64)],
    border: Border,
) -> Result<Var<'g>> {
    let mut y = x.clone();
    for (axis, &(before, after)) in pads.iter().enumerate() {
        if before == 0 && after == 0 {
            continue;
        }
        let n = y.shape()[axis] as i64;
        let len = (n + before + after).max(0);
        if n == 0 && len > 0 {
            return Err(c.error(format!("axis {axis} is empty and cannot give a border")));
        }
        let picks: Vec<i64> = (0..len).map(|o| border.source(o - before, n)).collect();
        let picks = Tensor::from_vec(picks, &[len as usize])?;
        y = y.try_index_select(axis as isize, &picks)?;
    }
    Ok(y)
}
