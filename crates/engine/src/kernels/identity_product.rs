//! A product with an identity factor is the other factor. Jacobians seed
//! their sweeps with the rows of the identity (`jacrev`'s vector-Jacobian
//! products, `jacfwd`'s tangents), and vmap folds those seeds into one
//! square product, `I @ B` or `A @ I`: half of `jacrev`'s arithmetic on a
//! two-layer network. Recognising the identity costs one read of it (a
//! non-identity factor is refused at its first element that differs), so
//! every other product pays one or two comparisons.
//!
//! The copy is what gemm would have computed, bit for bit, whenever the
//! other factor is finite: each output element is one exact product
//! `1 * x` plus exact zeros, which turns `-0.0` into `+0.0` (`x + 0.0`
//! does the same). A factor holding an infinity or NaN is left to gemm,
//! where `0 * inf` spreads NaN along its column or row.

use std::mem::MaybeUninit;

use crate::tensor::Element;

/// A `[rows, cols]` matrix read from `data` at the given element strides.
#[derive(Clone, Copy)]
pub(super) struct MatrixRead<'a, T> {
    pub data: &'a [T],
    pub rows: usize,
    pub cols: usize,
    pub row_stride: isize,
    pub col_stride: isize,
}

impl<T: Element> MatrixRead<'_, T> {
    fn at(&self, i: usize, j: usize) -> T {
        self.data[(i as isize * self.row_stride + j as isize * self.col_stride) as usize]
    }

    /// Row `i` as a slice, when the columns are adjacent.
    fn row(&self, i: usize) -> Option<&[T]> {
        let start = (i as isize * self.row_stride) as usize;
        (self.col_stride == 1).then(|| &self.data[start..start + self.cols])
    }

    /// Whether this is the square identity matrix (a zero of either sign
    /// counts as zero).
    fn is_identity(&self) -> bool {
        if self.rows != self.cols {
            return false;
        }
        let zero = T::zero();
        (0..self.rows).all(|i| match self.row(i) {
            Some(row) => {
                // A fold without early exit vectorises; rows still stop
                // at the first one that differs.
                let zeros = |xs: &[T]| xs.iter().fold(true, |ok, &x| ok & (x == zero));
                row[i] == T::one() && zeros(&row[..i]) && zeros(&row[i + 1..])
            }
            None => (0..self.cols).all(|j| self.at(i, j) == if i == j { T::one() } else { zero }),
        })
    }

    /// Row `i` into `out` as `x + 0.0` (added to `out` when `accumulate`);
    /// false if an element is not finite.
    fn copy_row(&self, i: usize, out: &mut [MaybeUninit<T>], accumulate: bool) -> bool {
        let zero = T::zero();
        let mut finite = true;
        let mut put = |slot: &mut MaybeUninit<T>, x: T| {
            finite &= x.is_finite();
            let x = x + zero;
            if accumulate {
                // SAFETY: with `accumulate`, the caller initialised `out`.
                let old = unsafe { slot.assume_init() };
                slot.write(old + x);
            } else {
                slot.write(x);
            }
        };
        match self.row(i) {
            Some(row) => out.iter_mut().zip(row).for_each(|(slot, &x)| put(slot, x)),
            None => out
                .iter_mut()
                .enumerate()
                .for_each(|(j, slot)| put(slot, self.at(i, j))),
        }
        finite
    }

    fn is_finite(&self) -> bool {
        (0..self.rows).all(|i| match self.row(i) {
            Some(row) => row.iter().fold(true, |ok, &x| ok & x.is_finite()),
            None => (0..self.cols).all(|j| self.at(i, j).is_finite()),
        })
    }
}

/// Writes `a @ b` into the row-major `out` (adding it to `out` when
/// `accumulate`) if one factor is the identity and the other finite, and
/// says whether it did. When it says no, `out` is as it was, or, without
/// `accumulate`, partly written (gemm then writes all of it).
pub(super) fn product_with_identity<T: Element>(
    a: MatrixRead<'_, T>,
    b: MatrixRead<'_, T>,
    out: &mut [MaybeUninit<T>],
    accumulate: bool,
) -> bool {
    let other = if a.is_identity() {
        b
    } else if b.is_identity() {
        a
    } else {
        return false;
    };
    // Accumulating into `out` cannot be undone: check before writing.
    if accumulate && !other.is_finite() {
        return false;
    }
    debug_assert_eq!(out.len(), other.rows * other.cols);
    out.chunks_exact_mut(other.cols.max(1))
        .enumerate()
        .all(|(i, row)| other.copy_row(i, row, accumulate))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(data: &[f32], rows: usize, cols: usize) -> MatrixRead<'_, f32> {
        MatrixRead {
            data,
            rows,
            cols,
            row_stride: cols as isize,
            col_stride: 1,
        }
    }

    fn run(a: MatrixRead<'_, f32>, b: MatrixRead<'_, f32>) -> Option<Vec<f32>> {
        let mut out = vec![MaybeUninit::uninit(); a.rows * b.cols];
        product_with_identity(a, b, &mut out, false)
            // SAFETY: a `true` answer wrote every element.
            .then(|| out.iter().map(|x| unsafe { x.assume_init() }).collect())
    }

    #[test]
    fn either_identity_factor_gives_the_other_with_zeros_made_positive() {
        let eye = [1.0, 0.0, -0.0, 1.0];
        let b = [2.0, -0.0, f32::MIN_POSITIVE, -3.5, 7.0, 1e30];
        let left = run(read(&eye, 2, 2), read(&b, 2, 3)).expect("left identity");
        assert_eq!(left, vec![2.0, 0.0, f32::MIN_POSITIVE, -3.5, 7.0, 1e30]);
        assert!(left[1].is_sign_positive());
        let a = [2.0, -0.0, 4.0, 5.0];
        assert_eq!(
            run(read(&a, 2, 2), read(&eye, 2, 2)),
            Some(vec![2.0, 0.0, 4.0, 5.0])
        );
    }

    #[test]
    fn a_transposed_view_of_the_other_factor_is_read_through_its_strides() {
        let eye = [1.0, 0.0, 0.0, 1.0];
        let b = [1.0, 2.0, 3.0, 4.0];
        let bt = MatrixRead {
            data: &b,
            rows: 2,
            cols: 2,
            row_stride: 1,
            col_stride: 2,
        };
        assert_eq!(run(read(&eye, 2, 2), bt), Some(vec![1.0, 3.0, 2.0, 4.0]));
    }

    #[test]
    fn non_identity_or_non_finite_factors_are_left_to_gemm() {
        let almost = [1.0, 0.0, 1e-30, 1.0];
        let b = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(run(read(&almost, 2, 2), read(&b, 2, 2)), None);
        let eye = [1.0, 0.0, 0.0, 1.0];
        let inf = [1.0, f32::INFINITY, 3.0, 4.0];
        assert_eq!(run(read(&eye, 2, 2), read(&inf, 2, 2)), None);
        let nan = [f32::NAN, 2.0, 3.0, 4.0];
        assert_eq!(run(read(&nan, 2, 2), read(&eye, 2, 2)), None);
        let wide = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0];
        assert_eq!(run(read(&wide, 2, 3), read(&[1.0; 9], 3, 3)), None);
    }

    #[test]
    fn accumulating_adds_the_other_factor_to_the_output() {
        let eye = [1.0, 0.0, 0.0, 1.0];
        let b = [1.0, 2.0, 3.0, 4.0];
        let mut out: Vec<_> = [10.0f32, 20.0, 30.0, 40.0].map(MaybeUninit::new).to_vec();
        assert!(product_with_identity(
            read(&eye, 2, 2),
            read(&b, 2, 2),
            &mut out,
            true
        ));
        // SAFETY: every element was initialised above and added to.
        let out: Vec<f32> = out.iter().map(|x| unsafe { x.assume_init() }).collect();
        assert_eq!(out, vec![11.0, 22.0, 33.0, 44.0]);
    }
}
