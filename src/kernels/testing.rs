//! What the kernels' unit tests share: reading back an output a kernel
//! filled.

use std::mem::MaybeUninit;

use super::nn::conv::ConvGeometry;
use crate::tensor::{Element, Filled};

/// The elements of `out`, which the kernel under test filled.
pub(crate) fn assume_filled<T>(out: Vec<MaybeUninit<T>>) -> Vec<T> {
    out.into_iter()
        // SAFETY: the kernels under test write every element of `out`
        // (what these tests check; Miri runs them).
        .map(|v| unsafe { v.assume_init() })
        .collect()
}

/// Runs the kernel `f` on a fresh output of `len` elements and returns them.
pub(crate) fn filled<T: Element>(
    len: usize,
    f: impl for<'o> FnOnce(&'o mut [MaybeUninit<T>]) -> Filled<'o>,
) -> Vec<T> {
    let mut out = vec![MaybeUninit::uninit(); len];
    let _filled = f(&mut out);
    assume_filled(out)
}

/// A convolution geometry with PyTorch's output size, from `[in_channels,
/// out_channels, groups]` and the per-dimension settings.
pub(crate) fn conv_geometry(
    batch: usize,
    [in_channels, out_channels, groups]: [usize; 3],
    input: [usize; 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    pad: [usize; 2],
    dilation: [usize; 2],
) -> ConvGeometry {
    let out =
        |i: usize| (input[i] + 2 * pad[i] - dilation[i] * (kernel[i] - 1) - 1) / stride[i] + 1;
    ConvGeometry {
        batch,
        in_channels,
        out_channels,
        groups,
        input,
        output: [out(0), out(1)],
        kernel,
        stride,
        pad,
        dilation,
    }
}
