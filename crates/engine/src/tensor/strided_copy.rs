//! The strided copy: packs a view's elements into a fresh row-major
//! buffer. Dimensions are coalesced first (size-1 ones dropped, neighbours
//! that are contiguous with each other merged), so a narrowed or permuted
//! tensor copies whole runs at once. A permutation that moves the unit
//! stride away from the last dimension is a batch of 2-d transposes, done
//! in tiles so both sides stay in cache.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::{DataType, Dims};

/// Output elements above which the copy is split across threads (as
/// `kernels::parallel`'s threshold: below it, waking the pool costs more).
const PARALLEL_ELEMENTS: usize = 1 << 16;

/// Output tile edge of the blocked transpose.
const TILE: usize = 32;

fn parallel(n: usize) -> bool {
    n >= PARALLEL_ELEMENTS && rayon::current_num_threads() > 1
}

/// Writes the elements of `shape` read from `src` at `strides` into
/// `out`, row-major: every element of `out`, which has `shape`'s count.
pub(crate) fn gather_into<T: DataType>(
    src: &[T],
    out: &mut [MaybeUninit<T>],
    shape: &[usize],
    strides: &[usize],
) {
    let (dims, steps) = coalesce(shape, strides);
    if shape.contains(&0) {
        assert!(out.is_empty(), "an empty shape has no elements");
        return;
    }
    copy(src, out, &dims, &steps);
}

/// `shape` and `strides` without size-1 dimensions and with neighbours
/// merged where one steps exactly over the other; at least one dimension.
fn coalesce(shape: &[usize], strides: &[usize]) -> (Dims, Dims) {
    let (mut dims, mut steps) = (Dims::new(), Dims::new());
    for (&d, &s) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        match (dims.last_mut(), steps.last_mut()) {
            (Some(ld), Some(ls)) if *ls == s * d => {
                *ld *= d;
                *ls = s;
            }
            _ => {
                dims.push(d);
                steps.push(s);
            }
        }
    }
    if dims.is_empty() {
        dims.push(1);
        steps.push(1);
    }
    (dims, steps)
}

/// Writes every element of `out` (`dims.iter().product()` of them).
fn copy<T: DataType>(src: &[T], out: &mut [MaybeUninit<T>], dims: &[usize], strides: &[usize]) {
    assert_eq!(out.len(), dims.iter().product::<usize>());
    let r = dims.len();
    let (last, last_stride) = (dims[r - 1], strides[r - 1]);
    let row_offset = |row: usize, upto: usize| {
        super::shape::strided_offset(row, &dims[..upto], &strides[..upto])
    };
    if r >= 2 && strides[r - 2] == 1 {
        // A batch of 2-d transposes: out[b][p][q] = src[b + p + q * last_stride].
        let (p_len, q_len) = (dims[r - 2], last);
        let transpose = |base: usize, p0: usize, band: &mut [MaybeUninit<T>]| {
            let rows = band.len() / q_len;
            for q0 in (0..q_len).step_by(TILE) {
                let q1 = (q0 + TILE).min(q_len);
                for p in 0..rows {
                    let row = &mut band[p * q_len..][q0..q1];
                    let s = base + p0 + p;
                    for (q, o) in (q0..q1).zip(row) {
                        o.write(src[s + q * last_stride]);
                    }
                }
            }
        };
        let matrices = out.len() / (p_len * q_len);
        let threads = rayon::current_num_threads();
        let run_matrix = |m: usize, mat: &mut [MaybeUninit<T>]| {
            let base = row_offset(m, r - 2);
            if parallel(mat.len()) && matrices < 2 * threads {
                mat.par_chunks_mut(TILE * q_len)
                    .enumerate()
                    .for_each(|(b, band)| transpose(base, b * TILE, band));
            } else {
                for (b, band) in mat.chunks_mut(TILE * q_len).enumerate() {
                    transpose(base, b * TILE, band);
                }
            }
        };
        if parallel(out.len()) && matrices >= 2 * threads {
            out.par_chunks_mut(p_len * q_len)
                .enumerate()
                .for_each(|(m, mat)| run_matrix(m, mat));
        } else {
            for (m, mat) in out.chunks_mut(p_len * q_len).enumerate() {
                run_matrix(m, mat);
            }
        }
        return;
    }
    // Rows of the output: contiguous or strided reads along the last dimension.
    let row = |i: usize, o: &mut [MaybeUninit<T>]| {
        let off = row_offset(i, r - 1);
        if last_stride == 1 {
            for (d, &s) in o.iter_mut().zip(&src[off..off + last]) {
                d.write(s);
            }
        } else {
            for (j, d) in o.iter_mut().enumerate() {
                d.write(src[off + j * last_stride]);
            }
        }
    };
    if parallel(out.len()) && out.len() > last {
        let rows_per_task = (PARALLEL_ELEMENTS / 4 / last).max(1);
        out.par_chunks_mut(rows_per_task * last)
            .enumerate()
            .for_each(|(t, chunk)| {
                for (i, o) in chunk.chunks_mut(last).enumerate() {
                    row(t * rows_per_task + i, o);
                }
            });
    } else {
        for (i, o) in out.chunks_mut(last).enumerate() {
            row(i, o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gather(src: &[i64], shape: &[usize], strides: &[usize]) -> Vec<i64> {
        let n = shape.iter().product();
        let mut out = vec![MaybeUninit::uninit(); n];
        gather_into(src, &mut out, shape, strides);
        // SAFETY: `gather_into` wrote every element.
        out.into_iter()
            .map(|v| unsafe { v.assume_init() })
            .collect()
    }

    /// The reference: every index of `shape`, read one by one.
    fn naive(src: &[i64], shape: &[usize], strides: &[usize]) -> Vec<i64> {
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let mut off = 0;
                for d in (0..shape.len()).rev() {
                    off += (flat % shape[d]) * strides[d];
                    flat /= shape[d];
                }
                src[off]
            })
            .collect()
    }

    #[test]
    fn every_layout_matches_the_one_by_one_copy() {
        let src: Vec<i64> = (0..5000).collect();
        let cases: &[(&[usize], &[usize])] = &[
            (&[7], &[3]),
            (&[3, 4], &[1, 3]),
            (&[2, 3, 4], &[12, 1, 3]),
            (&[40, 70], &[1, 40]),
            (&[5, 1, 6], &[6, 99, 1]),
            (&[4, 3, 2], &[0, 2, 1]),
            (&[2, 5, 3, 4], &[60, 4, 20, 1]),
            (&[3, 33, 35], &[1, 3, 99]),
            (&[1], &[5]),
        ];
        for &(shape, strides) in cases {
            let got = gather(&src, shape, strides);
            assert_eq!(
                &got[..],
                &naive(&src, shape, strides)[..],
                "{shape:?} {strides:?}"
            );
        }
    }

    #[test]
    fn large_copies_split_across_threads_give_the_same_elements() {
        let src: Vec<i64> = (0..300 * 400).collect();
        for (shape, strides) in [([300usize, 400], [1usize, 300]), ([400, 300], [1, 400])] {
            let got = gather(&src, &shape, &strides);
            assert_eq!(&got[..], &naive(&src, &shape, &strides)[..]);
        }
        let rows: Vec<i64> = (0..2 * 600 * 100).collect();
        let got = gather(&rows, &[600, 100], &[200, 2]);
        assert_eq!(&got[..], &naive(&rows, &[600, 100], &[200, 2])[..]);
    }
}
