//! Batch and group normalisation over `[N, C, S]` inputs (`S` the product
//! of the spatial dims, 1 for `[N, C]`): per-channel moments, the
//! normalisation with per-channel (batch norm) or per-(sample, group)
//! (group norm) statistics and a per-channel affine, and batch norm's fused
//! backward.
//!
//! Statistics are two-pass (mean, then the summed squared deviation),
//! accumulated in f64 as in `norm.rs`; each channel's sums run over its
//! planes in a fixed order, and parallel work is split by channel (sums)
//! or by plane (writes), so results do not depend on the thread count.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::norm::deviation;
use crate::kernels::f64x8::{for_octets, with_widest_f64x8, F64x8};
use crate::kernels::parallel::should_parallelize;
use crate::tensor::{Element, Filled};

/// Elements per parallel write task (whole planes).
const TASK_ELEMS: usize = 1 << 14;

/// The layout of an `[N, C, S]` input: `n` samples of `c` channels of
/// `s` contiguous elements (one "plane" per sample and channel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Planes {
    /// Batch size.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Elements per plane (the product of the spatial dims).
    pub s: usize,
}

impl Planes {
    /// The number of elements, `n * c * s`.
    pub fn len(&self) -> usize {
        self.n * self.c * self.s
    }

    /// Elements per channel, `n * s`.
    pub fn per_channel(&self) -> usize {
        self.n * self.s
    }

    #[inline]
    fn plane<'a, T>(&self, x: &'a [T], sample: usize, channel: usize) -> &'a [T] {
        let start = (sample * self.c + channel) * self.s;
        &x[start..start + self.s]
    }
}

/// `f(channel)` for every channel, in order; in parallel when `work` is large.
fn per_channel<R: Send>(c: usize, work: usize, f: impl Fn(usize) -> R + Sync + Send) -> Vec<R> {
    if c > 1 && should_parallelize(work) {
        (0..c).into_par_iter().map(f).collect()
    } else {
        (0..c).map(f).collect()
    }
}

/// For planes of one element (`[N, C]` inputs, each sample's channels
/// contiguous): `f(first, count)` for each octet of channels, a lane per
/// channel (`count` is 8 but in the last octet), in parallel when `work` is
/// large; the lanes' results in channel order. A channel's lane adds its
/// samples in order, reading each sample's octet of channels in place.
fn per_channel_octet(
    c: usize,
    work: usize,
    f: impl Fn(usize, usize) -> [(f64, f64); 8] + Sync + Send,
) -> Vec<(f64, f64)> {
    let firsts: Vec<usize> = (0..c).step_by(8).collect();
    let run = |&first: &usize| {
        let count = (c - first).min(8);
        f(first, count)[..count].to_vec()
    };
    let parts: Vec<Vec<(f64, f64)>> = if firsts.len() > 1 && should_parallelize(work) {
        firsts.par_iter().map(run).collect()
    } else {
        firsts.iter().map(run).collect()
    };
    parts.concat()
}

/// `Σ term(x, y)` over one channel of `x` and `y` (a second input or `x`
/// again) on [`F64x8`] lanes, the planes in sample order into one
/// accumulator: `term` gets each octet and its element count, and must
/// give zeros in the padding of a partial octet. Planes of 8 or more
/// elements are read in place, each in its own octets; shorter ones are
/// gathered into octets of consecutive elements of the channel, so each
/// costs a copy, not a padded load of its own. (Planes of one element take
/// [`per_channel_octet`] instead.)
#[inline(always)]
fn channel_sum<L: F64x8, T: Element>(
    x: &[T],
    y: &[T],
    p: Planes,
    ch: usize,
    term: impl Fn(L, L, usize) -> L,
) -> L {
    let mut acc = L::splat(0.0);
    if p.s >= 8 {
        for b in 0..p.n {
            let (xp, yp) = (p.plane(x, b, ch), p.plane(y, b, ch));
            for_octets(
                p.s,
                #[inline(always)]
                |c, n| {
                    let (xv, yv) = (L::load_part(&xp[c..c + n]), L::load_part(&yp[c..c + n]));
                    acc = acc.add(term(xv, yv, n));
                },
            );
        }
        return acc;
    }
    let (mut xs, mut ys, mut k) = ([T::zero(); 8], [T::zero(); 8], 0);
    for b in 0..p.n {
        for (&xv, &yv) in p.plane(x, b, ch).iter().zip(p.plane(y, b, ch)) {
            (xs[k], ys[k]) = (xv, yv);
            k += 1;
            if k == 8 {
                acc = acc.add(term(L::load(&xs), L::load(&ys), 8));
                k = 0;
            }
        }
    }
    if k > 0 {
        acc = acc.add(term(L::load_part(&xs[..k]), L::load_part(&ys[..k]), k));
    }
    acc
}

/// Per channel `(mean, Σ (x - mean)²)` over every sample and position, in
/// f64 (two passes). A channel of no elements has a NaN mean.
pub fn channel_moments<T: Element>(x: &[T], p: Planes) -> Vec<(f64, f64)> {
    let m = p.per_channel() as f64;
    if p.s == 1 {
        return per_channel_octet(p.c, p.len(), |first, count| {
            with_widest_f64x8!(L => {
                let at = |b: usize| &x[b * p.c + first..b * p.c + first + count];
                let mut sum = L::splat(0.0);
                for b in 0..p.n {
                    sum = sum.add(L::load_part(at(b)));
                }
                let means = sum.to_array().map(|v| v / m);
                let mean_v = L::load(&means);
                let mut m2 = L::splat(0.0);
                for b in 0..p.n {
                    let d = L::load_part(at(b)).sub(mean_v);
                    m2 = m2.add(d.mul(d));
                }
                let m2 = m2.to_array();
                std::array::from_fn(|j| (means[j], m2[j]))
            })
        });
    }
    per_channel(p.c, p.len(), |ch| {
        with_widest_f64x8!(L => {
            let mean = channel_sum::<L, T>(x, x, p, ch, #[inline(always)] |v, _, _| v).sum() / m;
            let mean_v = L::splat(mean);
            let m2 = channel_sum::<L, T>(x, x, p, ch, #[inline(always)] |v, _, n| {
                let d = deviation(v, mean_v, n);
                d.mul(d)
            });
            (mean, m2.sum())
        })
    })
}

/// Per channel `(Σ g, Σ g x̂)` with `x̂ = (x - mean) rstd` from
/// `stats[channel] = (mean, rstd)`: what batch norm's backward needs.
pub fn channel_grad_sums<'a, T: Element>(
    g: &'a [T],
    x: &'a [T],
    p: Planes,
    stats: &[(f64, f64)],
) -> Vec<(f64, f64)> {
    if p.s == 1 {
        return per_channel_octet(p.c, p.len(), |first, count| {
            with_widest_f64x8!(L => {
                let at = |v: &'a [T], b: usize| &v[b * p.c + first..b * p.c + first + count];
                let stat = |j: usize| stats.get(first + j).copied().filter(|_| j < count);
                let mean_v = L::load(&std::array::from_fn::<f64, 8, _>(|j| stat(j).map_or(0.0, |s| s.0)));
                let (mut sg, mut sgx) = (L::splat(0.0), L::splat(0.0));
                for b in 0..p.n {
                    let gv = L::load_part(at(g, b));
                    sg = sg.add(gv);
                    sgx = sgx.add(gv.mul(L::load_part(at(x, b)).sub(mean_v)));
                }
                let (sg, sgx) = (sg.to_array(), sgx.to_array());
                std::array::from_fn(|j| (sg[j], sgx[j] * stat(j).map_or(0.0, |s| s.1)))
            })
        });
    }
    per_channel(p.c, p.len(), |ch| {
        let (mean, rstd) = stats[ch];
        with_widest_f64x8!(L => {
            let mean_v = L::splat(mean);
            let sg = channel_sum::<L, T>(g, g, p, ch, #[inline(always)] |v, _, _| v);
            // The padding's g is zero, so its terms are too.
            let sgx = channel_sum::<L, T>(g, x, p, ch, #[inline(always)] |gv, xv, _| {
                gv.mul(xv.sub(mean_v))
            });
            (sg.sum(), sgx.sum() * rstd)
        })
    })
}

/// Runs `f(first_plane, out_planes)` over groups of whole planes of `out`,
/// in parallel when large; every element is in exactly one group.
fn for_planes<T: Element>(
    out: &mut [MaybeUninit<T>],
    s: usize,
    f: impl Fn(usize, &mut [MaybeUninit<T>]) + Sync + Send,
) {
    if s == 0 {
        assert!(
            out.is_empty(),
            "planes of no elements cannot cover an output"
        );
        return;
    }
    if should_parallelize(out.len()) {
        let per_task = (TASK_ELEMS / s).max(1);
        out.par_chunks_mut(s * per_task)
            .enumerate()
            .for_each(|(i, c)| f(i * per_task, c));
    } else {
        f(0, out);
    }
}

/// `y = (x - mean) * rstd * w[c] + b[c]` per plane, computed in f64, with
/// `(mean, rstd) = stats[stat_of(sample, channel)]`. Writes every element of
/// `out` (which must have `p.len()` elements): each plane in full, from an
/// `s`-element plane of `x` (it panics if `x` is short).
pub fn normalize<'o, T: Element>(
    x: &[T],
    p: Planes,
    stats: &[(f64, f64)],
    stat_of: impl Fn(usize, usize) -> usize + Sync + Send,
    w: Option<&[T]>,
    b: Option<&[T]>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert_eq!(out.len(), p.len(), "normalize: output length");
    let (w, b) = (w.map(|w| &w[..p.c]), b.map(|b| &b[..p.c]));
    for_planes(out, p.s, |first, chunk| {
        for (k, o) in chunk.chunks_mut(p.s).enumerate() {
            let plane = first + k;
            let (sample, ch) = (plane / p.c, plane % p.c);
            let (mean, rstd) = stats[stat_of(sample, ch)];
            let scale = w.map_or(rstd, |w| rstd * w[ch].to_f64());
            let shift = b.map_or(0.0, |b| b[ch].to_f64());
            let xp = p.plane(x, sample, ch);
            for (d, &v) in o.iter_mut().zip(xp) {
                d.write(T::from_f64((v.to_f64() - mean) * scale + shift));
            }
        }
    });
    // SAFETY: `out` is `p.len()` elements (asserted), every plane of it
    // written in full above.
    unsafe { Filled::assume(out) }
}

/// Batch norm's input gradient in training mode, per channel of `M = n s`
/// elements: `rstd w (g - Σg/M - x̂ Σ(g x̂)/M)`, computed in f64. Writes
/// every element of `out` (`p.len()` elements), plane by plane.
pub fn batch_norm_backward<'o, T: Element>(
    g: &[T],
    x: &[T],
    p: Planes,
    stats: &[(f64, f64)],
    w: Option<&[T]>,
    out: &'o mut [MaybeUninit<T>],
) -> Filled<'o> {
    assert_eq!(out.len(), p.len(), "batch_norm_backward: output length");
    let w = w.map(|w| &w[..p.c]);
    let sums = channel_grad_sums(g, x, p, stats);
    let m = p.per_channel() as f64;
    for_planes(out, p.s, |first, chunk| {
        for (k, o) in chunk.chunks_mut(p.s).enumerate() {
            let plane = first + k;
            let (sample, ch) = (plane / p.c, plane % p.c);
            let (mean, rstd) = stats[ch];
            let (mg, mgx) = (sums[ch].0 / m, sums[ch].1 / m);
            let scale = w.map_or(rstd, |w| rstd * w[ch].to_f64());
            let (xp, gp) = (p.plane(x, sample, ch), p.plane(g, sample, ch));
            for ((d, &xv), &gv) in o.iter_mut().zip(xp).zip(gp) {
                let xhat = (xv.to_f64() - mean) * rstd;
                d.write(T::from_f64(scale * (gv.to_f64() - mg - xhat * mgx)));
            }
        }
    });
    // SAFETY: as in `normalize`: every plane of `out` in full.
    unsafe { Filled::assume(out) }
}

/// Batch norm's weight gradient in training mode: `Σ g x̂` per channel.
pub fn batch_norm_weight_backward<T: Element>(
    g: &[T],
    x: &[T],
    p: Planes,
    stats: &[(f64, f64)],
) -> Vec<T> {
    channel_grad_sums(g, x, p, stats)
        .into_iter()
        .map(|(_, sgx)| T::from_f64(sgx))
        .collect()
}

/// `(mean, 1/sqrt(var + eps))` per channel from [`channel_moments`]
/// (biased variance).
pub fn batch_stats(moments: &[(f64, f64)], per_channel: usize, eps: f64) -> Vec<(f64, f64)> {
    let m = per_channel as f64;
    moments
        .iter()
        .map(|&(mean, m2)| (mean, 1.0 / (m2 / m + eps).sqrt()))
        .collect()
}

/// Per `(sample, group)` `(mean, 1/sqrt(var + eps))` of an input whose
/// groups are contiguous rows of `row` elements (group norm: `C/G * S`).
pub fn row_stats_all<T: Element>(x: &[T], row: usize, eps: f64) -> Vec<(f64, f64)> {
    if row == 0 {
        return Vec::new();
    }
    let rows = x.len() / row;
    let one = |r: usize| super::norm::row_stats(&x[r * row..(r + 1) * row], eps);
    if rows > 1 && should_parallelize(x.len()) {
        (0..rows).into_par_iter().map(one).collect()
    } else {
        (0..rows).map(one).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::testing::filled;

    fn run<T: Element>(
        f: impl for<'o> FnOnce(&'o mut [MaybeUninit<T>]) -> Filled<'o>,
        n: usize,
    ) -> Vec<f64> {
        filled(n, f).into_iter().map(|v| v.to_f64()).collect()
    }

    #[test]
    fn moments_and_normalisation_per_channel() {
        // [N=2, C=2, S=2]: channel 0 holds 1, 2, 5, 6; channel 1 holds 3, 4, 7, 8.
        let x: Vec<f64> = (1..=8).map(f64::from).collect();
        let p = Planes { n: 2, c: 2, s: 2 };
        let mom = channel_moments(&x, p);
        assert_eq!(mom, vec![(3.5, 17.0), (5.5, 17.0)]);
        let stats = batch_stats(&mom, 4, 0.0);
        let y = run::<f64>(|o| normalize(&x, p, &stats, |_, c| c, None, None, o), 8);
        let r = 1.0 / 4.25f64.sqrt();
        let expect = [
            -2.5 * r,
            -1.5 * r,
            -2.5 * r,
            -1.5 * r,
            1.5 * r,
            2.5 * r,
            1.5 * r,
            2.5 * r,
        ];
        for (a, e) in y.iter().zip(expect) {
            assert!((a - e).abs() < 1e-15, "{a} vs {e}");
        }
        // A gradient equal to x̂ is projected away entirely except for its own direction.
        let g: Vec<f64> = vec![1.0; 8];
        let dx = run::<f64>(|o| batch_norm_backward(&g, &x, p, &stats, None, o), 8);
        assert!(dx.iter().all(|v| v.abs() < 1e-15));
    }

    #[test]
    fn parallel_and_serial_agree_bit_for_bit() {
        let p = Planes {
            n: 8,
            c: 3,
            s: 4096,
        };
        let x: Vec<f32> = (0..p.len())
            .map(|i| ((i as f32) * 0.37).sin() + 100.0)
            .collect();
        let g: Vec<f32> = (0..p.len()).map(|i| ((i as f32) * 0.11).cos()).collect();
        let stats = batch_stats(&channel_moments(&x, p), p.per_channel(), 1e-5);
        let a = run::<f32>(|o| batch_norm_backward(&g, &x, p, &stats, None, o), p.len());
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .unwrap();
        let stats1 = pool.install(|| batch_stats(&channel_moments(&x, p), p.per_channel(), 1e-5));
        assert_eq!(stats, stats1);
        let b = pool
            .install(|| run::<f32>(|o| batch_norm_backward(&g, &x, p, &stats, None, o), p.len()));
        assert_eq!(a, b);
    }
}
