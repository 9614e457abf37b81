//! What convolutions and poolings share: PyTorch's "int or tuple" sizes
//! ([`Spatial`]), the output length of a sliding window, and the checks of
//! an `[N, C, spatial...]` input, each a typed error naming the op.

use crate::base::error::{check_dtypes, Error, Result};
use crate::tensor::Tensor;

/// A per-dimension size given as one number for every spatial dimension or
/// one per dimension, like PyTorch's `int or tuple` arguments:
/// `.stride(2)` and `.stride([2, 1])` both work.
pub trait Spatial<const D: usize> {
    /// One value per spatial dimension.
    fn spatial(self) -> [usize; D];
}

impl<const D: usize> Spatial<D> for usize {
    fn spatial(self) -> [usize; D] {
        [self; D]
    }
}

impl<const D: usize> Spatial<D> for [usize; D] {
    fn spatial(self) -> [usize; D] {
        self
    }
}

/// One sliding window along one spatial dimension.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Input length (unpadded).
    pub input: usize,
    /// Kernel size.
    pub kernel: usize,
    /// Step between window starts.
    pub stride: usize,
    /// Zeros (or ignored positions) before the first element.
    pub pad_before: usize,
    /// ... and after the last (equal to `pad_before` except for `"same"`
    /// padding with an even effective kernel, where PyTorch pads the extra
    /// one at the end).
    pub pad_after: usize,
    /// Step between kernel taps.
    pub dilation: usize,
}

impl Window {
    /// The window's extent in input positions: `dilation * (kernel - 1) + 1`.
    pub fn span(&self) -> usize {
        self.dilation * (self.kernel - 1) + 1
    }

    /// The number of window positions, PyTorch's
    /// `floor((in + pads - span) / stride) + 1` (or `ceil` with `ceil_mode`,
    /// where a last window that would start in the trailing padding is
    /// dropped, as PyTorch's pooling does). Errors, naming `op` and the
    /// input shape, on a zero kernel, stride or dilation, and on a window
    /// larger than the padded input.
    pub fn output_len(&self, op: &'static str, shape: &[usize], ceil_mode: bool) -> Result<usize> {
        if self.kernel == 0 || self.stride == 0 || self.dilation == 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "kernel size, stride and dilation must be > 0, got kernel {}, stride {}, dilation {} (input shape {shape:?})",
                    self.kernel, self.stride, self.dilation
                ),
            ));
        }
        let padded = self.input + self.pad_before + self.pad_after;
        let span = self.span();
        if span > padded {
            return Err(Error::invalid(
                op,
                format!(
                    "the window (kernel {} with dilation {}, span {span}) is larger than the padded input ({} + padding {} = {padded}); input shape {shape:?}",
                    self.kernel, self.dilation, self.input, self.pad_before + self.pad_after
                ),
            ));
        }
        let room = padded - span;
        let mut n = if ceil_mode {
            room.div_ceil(self.stride) + 1
        } else {
            room / self.stride + 1
        };
        // A window must start inside the input or the leading padding.
        if ceil_mode && (n - 1) * self.stride >= self.input + self.pad_before {
            n -= 1;
        }
        Ok(n)
    }
}

/// Checks that `x` is `[N, C, spatial...]` with `spatial_dims` spatial
/// dimensions (or, when `allow_unbatched`, also `[C, spatial...]`), naming
/// the op and the shape. Returns whether a batch dimension was present.
pub fn check_rank(
    op: &'static str,
    x: &Tensor,
    spatial_dims: usize,
    allow_unbatched: bool,
) -> Result<bool> {
    let rank = x.rank();
    if rank == spatial_dims + 2 {
        return Ok(true);
    }
    if allow_unbatched && rank == spatial_dims + 1 {
        return Ok(false);
    }
    let expected = if allow_unbatched {
        format!("{} or {}", spatial_dims + 1, spatial_dims + 2)
    } else {
        format!("{}", spatial_dims + 2)
    };
    Err(Error::invalid(
        op,
        format!(
            "expected an input of rank {expected} ([N, C, {spatial_dims} spatial dims]), got shape {:?}",
            x.shape()
        ),
    ))
}

/// Checks that `p` has `x`'s dtype, naming the op.
pub fn check_same_dtype(op: &'static str, x: &Tensor, p: &Tensor) -> Result<()> {
    check_dtypes(op, x.dtype(), p.dtype())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(input: usize, kernel: usize, stride: usize, pad: usize, dilation: usize) -> Window {
        Window {
            input,
            kernel,
            stride,
            pad_before: pad,
            pad_after: pad,
            dilation,
        }
    }

    #[test]
    fn output_lengths_follow_pytorch() {
        // torch: Conv2d/MaxPool2d output sizes for these settings.
        assert_eq!(w(28, 5, 1, 2, 1).output_len("t", &[], false).unwrap(), 28);
        assert_eq!(w(28, 2, 2, 0, 1).output_len("t", &[], false).unwrap(), 14);
        assert_eq!(w(7, 3, 2, 0, 1).output_len("t", &[], false).unwrap(), 3);
        assert_eq!(w(8, 3, 2, 0, 1).output_len("t", &[], true).unwrap(), 4);
        // The last ceil window would start in the padding: dropped.
        assert_eq!(w(5, 2, 2, 1, 1).output_len("t", &[], true).unwrap(), 3);
        assert_eq!(w(10, 3, 1, 0, 3).output_len("t", &[], false).unwrap(), 4);
        let [a, b]: [usize; 2] = 3.spatial();
        assert_eq!((a, b), (3, 3));
        assert_eq!(Spatial::<2>::spatial([1, 2]), [1, 2]);
    }

    #[test]
    fn bad_windows_are_typed_errors() {
        let e = w(3, 5, 1, 0, 1)
            .output_len("conv2d", &[1, 1, 3, 3], false)
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "conv2d", .. }));
        assert!(e.to_string().contains("[1, 1, 3, 3]"), "{e}");
        assert!(w(3, 1, 0, 0, 1).output_len("t", &[], false).is_err());
        assert!(w(3, 0, 1, 0, 1).output_len("t", &[], false).is_err());
        let x = Tensor::zeros(&[2, 3], crate::DType::F32).unwrap();
        let e = check_rank("max_pool2d", &x, 2, true).unwrap_err();
        assert!(e.to_string().contains("[2, 3]"), "{e}");
    }
}
