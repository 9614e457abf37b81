//! Shapes and NumPy broadcasting rules.

use smallvec::SmallVec;

use crate::base::error::{Error, Result};

/// A tensor's dimensions, stored inline up to rank 4.
pub type Dims = SmallVec<[usize; 4]>;

/// Whether two shapes are equal, without a call to `memcmp` for the ranks
/// small-op graphs use (measured: a tenth of W1v's instructions went to
/// comparing shapes through `memcmp`).
#[inline(always)]
pub fn same_dims(a: &[usize], b: &[usize]) -> bool {
    match (a, b) {
        ([], []) => true,
        ([a0], [b0]) => a0 == b0,
        ([a0, a1], [b0, b1]) => a0 == b0 && a1 == b1,
        _ => a == b,
    }
}

/// The most elements a tensor may have: its bytes (at most 8 per element)
/// must fit in `isize::MAX`, the largest allocation Rust can ask for.
pub const MAX_ELEMENTS: usize = isize::MAX as usize / std::mem::size_of::<f64>();

/// The number of elements of `shape`, or `Error::ShapeOverflow` if the
/// product overflows `usize` or exceeds [`MAX_ELEMENTS`] (so no buffer of
/// that shape could ever be allocated: an error instead of an allocator panic).
pub fn checked_numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    // A zero anywhere makes it empty, however large the other dimensions.
    if shape.contains(&0) {
        return Ok(0);
    }
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .filter(|&n| n <= MAX_ELEMENTS)
        .ok_or_else(|| Error::ShapeOverflow {
            op,
            shape: shape.to_vec(),
        })
}

/// Row-major (C-order) strides of `shape`, in elements.
pub fn contiguous_strides(shape: &[usize]) -> Dims {
    let mut strides: Dims = smallvec::smallvec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d);
    }
    strides
}

/// The broadcast shape of `a` and `b` under NumPy's rules: align on the right;
/// each pair of dimensions must be equal or one of them must be 1.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Dims> {
    if a == b {
        return Ok(Dims::from_slice(a));
    }
    let rank = a.len().max(b.len());
    let mut out: Dims = smallvec::smallvec![0; rank];
    for i in 0..rank {
        let da = if i + a.len() >= rank {
            a[i + a.len() - rank]
        } else {
            1
        };
        let db = if i + b.len() >= rank {
            b[i + b.len() - rank]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape_mismatch(op, a, b));
        };
    }
    Ok(out)
}

/// Whether `from` can be broadcast to exactly `to`.
pub fn broadcastable_to(from: &[usize], to: &[usize]) -> bool {
    if from.len() > to.len() {
        return false;
    }
    let offset = to.len() - from.len();
    from.iter()
        .zip(&to[offset..])
        .all(|(&f, &t)| f == t || f == 1)
}

/// Strides for reading a tensor of shape `from` as if it had shape `to`
/// (which it must broadcast to): broadcast dimensions get stride 0.
pub fn broadcast_strides(from: &[usize], to: &[usize]) -> Dims {
    let own = contiguous_strides(from);
    let offset = to.len() - from.len();
    let mut strides: Dims = smallvec::smallvec![0; to.len()];
    for (i, s) in strides.iter_mut().enumerate().skip(offset) {
        let d = from[i - offset];
        *s = if d == 1 { 0 } else { own[i - offset] };
    }
    strides
}

/// Resolves a possibly negative axis against `rank`.
pub fn normalize_axis(op: &'static str, axis: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(Error::AxisOutOfRange { op, axis, rank });
    }
    Ok(a as usize)
}

/// Resolves a list of axes, rejecting duplicates; the result is sorted.
pub fn normalize_axes(op: &'static str, axes: &[isize], rank: usize) -> Result<Dims> {
    let mut out = Dims::new();
    for &a in axes {
        let n = normalize_axis(op, a, rank)?;
        if out.contains(&n) {
            return Err(Error::invalid(
                op,
                format!("axis {a} is repeated in {axes:?}"),
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// The shape left after reducing `axes` (sorted, unique) of `shape`.
pub fn reduced_shape(shape: &[usize], axes: &[usize], keepdim: bool) -> Dims {
    let mut out = Dims::new();
    for (i, &d) in shape.iter().enumerate() {
        if axes.contains(&i) {
            if keepdim {
                out.push(1);
            }
        } else {
            out.push(d);
        }
    }
    out
}

/// The element offset of index `i` (row-major over `dims`) in a layout
/// with these `strides` (0 along a broadcast dimension).
#[inline]
pub(crate) fn strided_offset(mut i: usize, dims: &[usize], strides: &[usize]) -> usize {
    let mut offset = 0;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        offset += (i % d) * s;
        i /= d;
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        assert_eq!(
            broadcast_shapes("t", &[2, 3], &[3]).unwrap().as_slice(),
            &[2, 3]
        );
        assert_eq!(
            broadcast_shapes("t", &[4, 1, 3], &[5, 1])
                .unwrap()
                .as_slice(),
            &[4, 5, 3]
        );
        assert_eq!(broadcast_shapes("t", &[], &[2]).unwrap().as_slice(), &[2]);
        assert!(matches!(
            broadcast_shapes("add", &[2, 3], &[4]),
            Err(Error::ShapeMismatch { op: "add", .. })
        ));
    }

    #[test]
    fn overflowing_shapes_are_errors() {
        assert!(checked_numel("t", &[usize::MAX, 2]).is_err());
        assert_eq!(checked_numel("t", &[0, usize::MAX]).unwrap(), 0);
        assert_eq!(checked_numel("t", &[usize::MAX, usize::MAX, 0]).unwrap(), 0);
        // Fits usize, but its bytes would not fit isize::MAX.
        assert!(checked_numel("t", &[MAX_ELEMENTS + 1]).is_err());
        assert_eq!(checked_numel("t", &[MAX_ELEMENTS]).unwrap(), MAX_ELEMENTS);
    }

    #[test]
    fn strides() {
        assert_eq!(contiguous_strides(&[2, 3, 4]).as_slice(), &[12, 4, 1]);
        assert_eq!(
            broadcast_strides(&[3, 1], &[2, 3, 4]).as_slice(),
            &[0, 1, 0]
        );
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axis("t", -1, 3).unwrap(), 2);
        assert!(normalize_axis("t", 3, 3).is_err());
        assert!(normalize_axes("t", &[0, -3], 3).is_err());
    }
}
