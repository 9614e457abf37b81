//! The strong-Wolfe line search of [`LBFGS`](super::LBFGS), PyTorch's
//! `_strong_wolfe` and `_cubic_interpolate` (ported by PyTorch from
//! `torch/optim`'s `lswolfe.lua` and `polyinterp.lua`), step for step, so
//! that the same trial points are evaluated in the same order.

use crate::base::error::Result;

/// Python's `max(a, b)`: `a` unless `b` is larger (NaN compares false).
fn py_max(a: f64, b: f64) -> f64 {
    if b > a {
        b
    } else {
        a
    }
}

/// Python's `min(a, b)`: `a` unless `b` is smaller (NaN compares false).
fn py_min(a: f64, b: f64) -> f64 {
    if b < a {
        b
    } else {
        a
    }
}

/// The largest absolute value (0 for none), NaN if any is NaN, as
/// PyTorch's `v.abs().max()`.
pub(crate) fn max_abs(v: &[f64]) -> f64 {
    v.iter().fold(0.0, |m: f64, x| {
        if x.abs() > m || x.is_nan() {
            x.abs()
        } else {
            m
        }
    })
}

/// The minimiser of the cubic through `(x1, f1)` and `(x2, f2)` with slopes
/// `g1` and `g2`, clamped to `bounds` (by default the interval between the
/// points); the bounds' midpoint when the cubic has no minimum.
pub(crate) fn cubic_interpolate(
    (x1, f1, g1): (f64, f64, f64),
    (x2, f2, g2): (f64, f64, f64),
    bounds: Option<(f64, f64)>,
) -> f64 {
    let (lo, hi) = bounds.unwrap_or(if x1 <= x2 { (x1, x2) } else { (x2, x1) });
    let d1 = g1 + g2 - 3.0 * (f1 - f2) / (x1 - x2);
    let d2_square = d1 * d1 - g1 * g2;
    if d2_square >= 0.0 {
        let d2 = d2_square.sqrt();
        let min_pos = if x1 <= x2 {
            x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2.0 * d2))
        } else {
            x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2.0 * d2))
        };
        py_min(py_max(min_pos, lo), hi)
    } else {
        (lo + hi) / 2.0
    }
}

/// A point on the line: step `t`, loss `f`, flat gradient `g`, and the
/// directional derivative `gtd = g . d`.
#[derive(Clone)]
pub(crate) struct Point {
    pub(crate) t: f64,
    pub(crate) f: f64,
    pub(crate) g: Vec<f64>,
    pub(crate) gtd: f64,
}

/// The line search's settings (PyTorch's defaults: `c1` 1e-4, `c2` 0.9).
pub(crate) struct Wolfe {
    pub(crate) c1: f64,
    pub(crate) c2: f64,
    pub(crate) tolerance_change: f64,
    /// Evaluations allowed (may be zero: then only the first trial).
    pub(crate) max_ls: i64,
}

/// Searches along `d` from `start` (step 0) with first trial step `t` for a
/// step satisfying the strong Wolfe conditions; `evaluate(t)` returns the
/// loss and flat gradient at step `t`. Returns the chosen point and the
/// number of evaluations.
pub(crate) fn strong_wolfe(
    evaluate: &mut dyn FnMut(f64) -> Result<(f64, Vec<f64>)>,
    d: &[f64],
    start: &Point,
    mut t: f64,
    w: &Wolfe,
) -> Result<(Point, usize)> {
    let dot = |g: &[f64]| -> f64 { g.iter().zip(d).map(|(a, b)| a * b).sum() };
    let d_norm = max_abs(d);
    let (f, gtd) = (start.f, start.gtd);
    let (f_new, g_new) = evaluate(t)?;
    let mut evals = 1;
    let mut new = Point {
        t,
        gtd: dot(&g_new),
        f: f_new,
        g: g_new,
    };

    // Bracket an interval containing a point satisfying the Wolfe criteria.
    let mut prev = Point {
        t: 0.0,
        ..start.clone()
    };
    let mut done = false;
    let mut ls_iter = 0i64;
    let mut bracket: Option<[Point; 2]> = None;
    while ls_iter < w.max_ls {
        if new.f > f + w.c1 * t * gtd || (ls_iter > 1 && new.f >= prev.f) {
            bracket = Some([prev, new.clone()]);
            break;
        }
        if new.gtd.abs() <= -w.c2 * gtd {
            bracket = Some([new.clone(), new.clone()]);
            done = true;
            break;
        }
        if new.gtd >= 0.0 {
            bracket = Some([prev, new.clone()]);
            break;
        }
        // Interpolate.
        let min_step = t + 0.01 * (t - prev.t);
        let max_step = t * 10.0;
        let tmp = t;
        t = cubic_interpolate(
            (prev.t, prev.f, prev.gtd),
            (t, new.f, new.gtd),
            Some((min_step, max_step)),
        );
        // Next step.
        prev = Point { t: tmp, ..new };
        let (f_new, g_new) = evaluate(t)?;
        evals += 1;
        new = Point {
            t,
            gtd: dot(&g_new),
            f: f_new,
            g: g_new,
        };
        ls_iter += 1;
    }
    // Out of evaluations: bracket between the start and the last trial.
    if ls_iter == w.max_ls {
        bracket = Some([
            Point {
                t: 0.0,
                ..start.clone()
            },
            new,
        ]);
    }
    let mut b = bracket.expect("the loop breaks with a bracket or runs out of evaluations");

    // Zoom: refine the bracket until a point satisfies the criteria.
    let mut insuf_progress = false;
    let order = |b: &[Point; 2]| if b[0].f <= b[1].f { (0, 1) } else { (1, 0) };
    let (mut low, mut high) = order(&b);
    while !done && ls_iter < w.max_ls {
        // The bracket is too small.
        if (b[1].t - b[0].t).abs() * d_norm < w.tolerance_change {
            break;
        }
        t = cubic_interpolate((b[0].t, b[0].f, b[0].gtd), (b[1].t, b[1].f, b[1].gtd), None);
        // Near an end of the bracket twice in a row (or outside it), move
        // to 0.1 of its length away from the nearest end.
        let (b_max, b_min) = (py_max(b[0].t, b[1].t), py_min(b[0].t, b[1].t));
        let eps = 0.1 * (b_max - b_min);
        if py_min(b_max - t, t - b_min) < eps {
            if insuf_progress || t >= b_max || t <= b_min {
                t = if (t - b_max).abs() < (t - b_min).abs() {
                    b_max - eps
                } else {
                    b_min + eps
                };
                insuf_progress = false;
            } else {
                insuf_progress = true;
            }
        } else {
            insuf_progress = false;
        }
        let (f_new, g_new) = evaluate(t)?;
        evals += 1;
        ls_iter += 1;
        let point = Point {
            t,
            gtd: dot(&g_new),
            f: f_new,
            g: g_new,
        };
        if point.f > f + w.c1 * t * gtd || point.f >= b[low].f {
            // Armijo fails, or not below the lowest point: a new high end.
            b[high] = point;
            (low, high) = order(&b);
        } else {
            if point.gtd.abs() <= -w.c2 * gtd {
                done = true;
            } else if point.gtd * (b[high].t - b[low].t) >= 0.0 {
                // The old high end becomes the low end.
                b[high] = b[low].clone();
            }
            // The new point becomes the low end.
            b[low] = point;
        }
    }
    let [first, second] = b;
    Ok((if low == 0 { first } else { second }, evals))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cubic_interpolation_finds_the_minimum_of_a_cubic() {
        // f(x) = (x - 1)^2 (a cubic with zero x^3 term), f' = 2 (x - 1).
        let f = |x: f64| (x - 1.0) * (x - 1.0);
        let g = |x: f64| 2.0 * (x - 1.0);
        let t = cubic_interpolate((0.0, f(0.0), g(0.0)), (3.0, f(3.0), g(3.0)), None);
        assert!((t - 1.0).abs() < 1e-12, "{t}");
        // Clamped to the bounds given.
        let t = cubic_interpolate(
            (0.0, f(0.0), g(0.0)),
            (3.0, f(3.0), g(3.0)),
            Some((2.0, 5.0)),
        );
        assert_eq!(t, 2.0);
        // No minimum (d2^2 < 0): the midpoint of the bounds.
        let t = cubic_interpolate((0.0, 0.0, 1.5), (1.0, 1.0, 1.5), None);
        assert_eq!(t, 0.5);
    }

    #[test]
    fn strong_wolfe_on_a_quadratic_accepts_a_good_step() {
        // f(t) = (t - 2)^2 along d = [1] from 0: the Wolfe step is near 2.
        let mut evaluate = |t: f64| Ok(((t - 2.0) * (t - 2.0), vec![2.0 * (t - 2.0)]));
        let start = Point {
            t: 0.0,
            f: 4.0,
            g: vec![-4.0],
            gtd: -4.0,
        };
        let wolfe = Wolfe {
            c1: 1e-4,
            c2: 0.9,
            tolerance_change: 1e-9,
            max_ls: 25,
        };
        let (point, evals) = strong_wolfe(&mut evaluate, &[1.0], &start, 1.0, &wolfe).unwrap();
        assert!(
            point.f < 4.0 && point.gtd.abs() <= 0.9 * 4.0,
            "t {}",
            point.t
        );
        assert!(evals >= 1);
    }
}
