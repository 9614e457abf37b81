//! What the three convolution ops share: [`ConvSpec`], a convolution's
//! settings resolved to two spatial dimensions (a 1-d convolution is a 2-d
//! one of height 1), the geometry it gives for given tensors, and the checks
//! that turn bad shapes into typed errors naming the op.
//!
//! The three ops are the products of one convolution `y = conv(x, w)`:
//! [`Conv`](super::conv::Conv) (`y`), [`ConvTranspose`](super::conv_transpose::ConvTranspose)
//! (`x`-shaped, the gradient with respect to `x`, and PyTorch's
//! `conv_transpose`) and [`ConvWeight`](super::conv_weight::ConvWeight)
//! (`w`-shaped, the gradient with respect to `w`). Each is bilinear, and the
//! derivatives of each are the other two, so the three together are closed
//! under differentiation: every order of derivative exists.

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::Differentiable;
use crate::kernels::nn::conv::ConvGeometry;
use crate::ops::nn::spatial::Window;
use crate::ops::OpAttributes;
use crate::tensor::{Dims, Tensor};

/// A convolution's settings over two spatial dimensions (height, width);
/// for 1-d the height is a dummy of size 1 with stride, dilation 1 and no
/// padding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvSpec {
    /// 1 or 2: how many trailing dims of the tensors are spatial.
    pub spatial: usize,
    pub stride: [usize; 2],
    /// Zeros before the first row and column.
    pub pad_before: [usize; 2],
    /// Zeros after the last row and column. Negative in the convolutions
    /// behind a transposed one: `output_padding`, and rows a strided
    /// convolution never reached, are positions past the last window.
    pub pad_after: [isize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl ConvSpec {
    /// The settings by name: `spatial` (1 or 2), `stride`, `pad_before`,
    /// `pad_after`, `dilation`, `groups`.
    pub fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .int("spatial", self.spatial)
            .ints("stride", &self.stride)
            .ints("pad_before", &self.pad_before)
            .ints("pad_after", &self.pad_after)
            .ints("dilation", &self.dilation)
            .int("groups", self.groups)
    }

    /// The op's name for this spatial rank: `{stem}1d` or `{stem}2d`.
    pub fn name(&self, one: &'static str, two: &'static str) -> &'static str {
        if self.spatial == 1 {
            one
        } else {
            two
        }
    }

    /// Stride 1, no padding, dilation 1, one group.
    pub fn plain(spatial: usize) -> Self {
        ConvSpec {
            spatial,
            stride: [1, 1],
            pad_before: [0, 0],
            pad_after: [0, 0],
            dilation: [1, 1],
            groups: 1,
        }
    }

    /// Checks `t` has rank `spatial + 2` and returns its spatial size as
    /// (height, width).
    pub fn spatial_of(&self, op: &'static str, what: &str, t: &Tensor) -> Result<[usize; 2]> {
        let s = t.shape();
        if s.len() != self.spatial + 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "{what} must have rank {} ([N, C, {} spatial dims]), got shape {s:?}",
                    self.spatial + 2,
                    self.spatial
                ),
            ));
        }
        Ok(self.hw(s))
    }

    /// The spatial size (height, width) of a shape `[_, _, spatial...]` of
    /// this spatial rank: an input's, an output's, or a weight's kernel.
    pub fn hw(&self, shape: &[usize]) -> [usize; 2] {
        if self.spatial == 1 {
            [1, shape[2]]
        } else {
            [shape[2], shape[3]]
        }
    }

    /// `[n, c, spatial...]` for this spatial rank.
    pub fn shape(&self, n: usize, c: usize, hw: [usize; 2]) -> Dims {
        if self.spatial == 1 {
            Dims::from_slice(&[n, c, hw[1]])
        } else {
            Dims::from_slice(&[n, c, hw[0], hw[1]])
        }
    }

    /// The output size of the convolution of an input of spatial size
    /// `input` with a kernel of spatial size `kernel`. With non-negative
    /// padding the checks (and messages) of [`Window::output_len`]; with the
    /// negative padding of internal specs, an error when no window fits.
    pub fn output_of(
        &self,
        op: &'static str,
        shape: &[usize],
        input: [usize; 2],
        kernel: [usize; 2],
    ) -> Result<[usize; 2]> {
        let mut out = [0; 2];
        for d in 0..2 {
            out[d] = match usize::try_from(self.pad_after[d]) {
                Ok(pad_after) => Window {
                    input: input[d],
                    kernel: kernel[d],
                    stride: self.stride[d],
                    pad_before: self.pad_before[d],
                    pad_after,
                    dilation: self.dilation[d],
                }
                .output_len(op, shape, false)?,
                Err(_) => {
                    let span = (self.dilation[d] * (kernel[d].max(1) - 1) + 1) as isize;
                    let room =
                        input[d] as isize + self.pad_before[d] as isize + self.pad_after[d] - span;
                    if room < 0 || self.stride[d] == 0 {
                        return Err(Error::invalid(
                            op,
                            format!("no window fits the input of shape {shape:?}"),
                        ));
                    }
                    (room as usize) / self.stride[d] + 1
                }
            };
        }
        Ok(out)
    }

    /// The spatial size whose convolution has output size `output`, reached
    /// exactly: `(output - 1) * stride - pad_before - pad_after + span`.
    pub fn input_of(&self, output: [usize; 2], kernel: [usize; 2]) -> [isize; 2] {
        let mut input = [0; 2];
        for d in 0..2 {
            let span = (self.dilation[d] * (kernel[d].max(1) - 1) + 1) as isize;
            input[d] = (output[d] as isize - 1) * self.stride[d] as isize
                - self.pad_before[d] as isize
                - self.pad_after[d]
                + span;
        }
        input
    }

    /// The same convolution with the padding after reduced by the rows its
    /// windows never reach on an input of spatial size `input`: it gives the
    /// same output there, and its transpose gives back exactly `input`.
    pub fn fitted_to(&self, input: [usize; 2], kernel: [usize; 2]) -> Self {
        let mut spec = self.clone();
        for d in 0..2 {
            let span = (self.dilation[d] * (kernel[d].max(1) - 1) + 1) as isize;
            let room = input[d] as isize + self.pad_before[d] as isize + self.pad_after[d] - span;
            if room >= 0 && self.stride[d] > 0 {
                spec.pad_after[d] -= room % self.stride[d] as isize;
            }
        }
        spec
    }

    /// Checks the channel counts of an input with `in_channels` against a
    /// weight `[out_channels, in_channels / groups, k...]`.
    pub fn check_channels(
        &self,
        op: &'static str,
        x_shape: &[usize],
        w_shape: &[usize],
    ) -> Result<()> {
        let groups = self.groups;
        let (cin, cout, cin_g) = (x_shape[1], w_shape[0], w_shape[1]);
        if groups == 0 {
            return Err(Error::invalid(op, "groups must be > 0"));
        }
        if cin % groups != 0 || cout % groups != 0 {
            return Err(Error::invalid(
                op,
                format!(
                    "groups = {groups} must divide both the input channels ({cin}, input shape {x_shape:?}) and the output channels ({cout}, weight shape {w_shape:?})"
                ),
            ));
        }
        if cin_g * groups != cin {
            return Err(Error::invalid(
                op,
                format!(
                    "a weight of shape {w_shape:?} with groups = {groups} expects {} input channels, got input of shape {x_shape:?}",
                    cin_g * groups
                ),
            ));
        }
        Ok(())
    }

    /// The kernel geometry for these sizes (already checked).
    pub fn geometry(
        &self,
        batch: usize,
        channels: [usize; 2],
        input: [usize; 2],
        output: [usize; 2],
        kernel: [usize; 2],
    ) -> ConvGeometry {
        ConvGeometry {
            batch,
            in_channels: channels[0],
            out_channels: channels[1],
            groups: self.groups,
            input,
            output,
            kernel,
            stride: self.stride,
            pad: self.pad_before,
            dilation: self.dilation,
        }
    }
}

/// The builders the convolutions' options share (`ConvOptions`,
/// `ConvTransposeOptions`, generic over `D` spatial dimensions, with
/// `stride`, `dilation` and `groups` fields): `new`, `stride`, `dilation`,
/// `groups`, `group_count`.
macro_rules! conv_option_setters {
    () => {
        /// PyTorch's defaults.
        pub fn new() -> Self {
            Self::default()
        }
        /// Step between windows: one number, or one per spatial dimension
        /// (for a transposed convolution, that of the convolution it
        /// transposes: the upsampling factor).
        pub fn stride(mut self, stride: impl Spatial<D>) -> Self {
            self.stride = stride.spatial();
            self
        }
        /// Step between kernel taps.
        pub fn dilation(mut self, dilation: impl Spatial<D>) -> Self {
            self.dilation = dilation.spatial();
            self
        }
        /// Channel groups (`groups = in_channels` is a depthwise convolution).
        pub fn groups(mut self, groups: usize) -> Self {
            self.groups = groups;
            self
        }
        /// The number of channel groups.
        pub fn group_count(&self) -> usize {
            self.groups
        }
    };
}
pub(super) use conv_option_setters;

/// A per-dimension setting of a `D`-d convolution over two spatial
/// dimensions: a 1-d setting is the width's, with `fill` for the height.
pub fn lift<const D: usize>(v: [usize; D], fill: usize) -> [usize; 2] {
    if D == 1 {
        [fill, v[0]]
    } else {
        [v[0], v[D - 1]]
    }
}

/// Records the convolution op `op` on `x`, `weight` and, if given, `bias`,
/// lifting an unbatched `x` (`[C, spatial...]`, `spatial` dims) to a batch
/// of one and back, as PyTorch accepts.
pub fn record_batched<'g>(
    op: impl Differentiable,
    x: &Var<'g>,
    weight: &Var<'g>,
    bias: Option<&Var<'g>>,
    spatial: usize,
) -> Result<Var<'g>> {
    let record = |x: &Var<'g>| {
        let mut inputs = vec![x, weight];
        inputs.extend(bias);
        x.graph().record(op, &inputs)
    };
    if x.shape().len() != spatial + 1 {
        return record(x);
    }
    record(&x.try_unsqueeze(0)?)?.try_squeeze_dim(0)
}

/// Checks that an optional bias is `[channels]` of `x`'s dtype.
pub fn check_bias(
    op: &'static str,
    bias: Option<&Tensor>,
    channels: usize,
    x: &Tensor,
) -> Result<()> {
    if let Some(b) = bias {
        super::spatial::check_same_dtype(op, x, b)?;
        if b.shape() != [channels] {
            return Err(Error::shape_mismatch(op, &[channels], b.shape()));
        }
    }
    Ok(())
}

/// `inputs` as (first, second, optional bias), or an arity error.
pub fn split_inputs<'a>(
    op: &'static str,
    inputs: &[&'a Tensor],
) -> Result<(&'a Tensor, &'a Tensor, Option<&'a Tensor>)> {
    match inputs {
        [a, b] => Ok((a, b, None)),
        [a, b, c] => Ok((a, b, Some(c))),
        _ => Err(Error::Arity {
            op: op.to_string(),
            expected: 2,
            got: inputs.len(),
        }),
    }
}

/// Declares the `Var` methods of a convolution op: each entry,
/// `try_name / name(Options) => record;` with its doc comment, gives the
/// `fallible!` pair taking `(weight, bias, opts)` and calling
/// `record("name", self, weight, bias, opts)`.
macro_rules! conv_methods {
    ($($(#[$m:meta])* $try_name:ident / $name:ident($opts:ty) => $record:ident;)*) => {
        impl<'g> Var<'g> {
            $(
                fallible! {
                    $(#[$m])*
                    pub fn $try_name / $name(
                        &self,
                        weight: &Var<'g>,
                        bias: Option<&Var<'g>>,
                        opts: &$opts,
                    ) -> Var<'g> {
                        $record(stringify!($name), self, weight, bias, opts)
                    }
                }
            )*
        }
    };
}
pub(crate) use conv_methods;

/// The sample inputs of the convolution ops' [`OpFacts`](crate::OpFacts):
/// a tensor of `shape` with values from `seed`.
pub fn sample(shape: &[usize], seed: u64, scale: f64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as f64 * 0.37 + seed as f64 * 1.3 + 0.1).sin()) * scale)
        .collect();
    Tensor::from_vec(v, shape).expect("a valid sample shape")
}

/// Test helpers of the convolution ops.
#[cfg(test)]
pub(super) mod testing {
    use crate::{Result, Tensor, Var};

    /// Pins a closure to the higher-ranked signature the checkers take.
    pub(crate) fn hr<F: for<'g> Fn(&[Var<'g>]) -> Result<Var<'g>>>(f: F) -> F {
        f
    }

    /// A sample tensor of `shape` (scale 1).
    pub(crate) fn s(shape: &[usize], seed: u64) -> Tensor {
        super::sample(shape, seed, 1.0)
    }
}
