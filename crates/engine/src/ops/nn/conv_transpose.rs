//! The transposed convolution, PyTorch's `F.conv_transpose1d`/`conv_transpose2d`
//! (stride, padding, output_padding, dilation, groups, optional bias), as
//! the op [`ConvTranspose`]: the gradient of a convolution with respect to
//! its input, which is also how `Conv`'s backward uses it. Its derivatives
//! are a `Conv` (input) and a `ConvWeight` (weight): `conv_products.rs`.

use super::conv_products::{self as products, BiasedConv, ConvProduct, Slot};
use super::conv_spec::{
    check_bias, conv_methods, conv_option_setters, lift, record_batched, sample, ConvSpec,
};
use super::spatial::{check_same_dtype, Spatial};
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::kernels::nn::conv::ConvGeometry;
use crate::ops::OpAttributes;
use crate::ops::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Options of [`conv_transpose1d`](Var::try_conv_transpose1d) and
/// [`conv_transpose2d`](Var::try_conv_transpose2d), with PyTorch's defaults:
/// stride 1, padding 0, output_padding 0, dilation 1, one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTransposeOptions<const D: usize> {
    stride: [usize; D],
    padding: [usize; D],
    output_padding: [usize; D],
    dilation: [usize; D],
    groups: usize,
}

/// Options of `conv_transpose1d`.
pub type ConvTranspose1dOptions = ConvTransposeOptions<1>;
/// Options of `conv_transpose2d`.
pub type ConvTranspose2dOptions = ConvTransposeOptions<2>;

impl<const D: usize> Default for ConvTransposeOptions<D> {
    fn default() -> Self {
        ConvTransposeOptions {
            stride: [1; D],
            padding: [0; D],
            output_padding: [0; D],
            dilation: [1; D],
            groups: 1,
        }
    }
}

impl<const D: usize> ConvTransposeOptions<D> {
    conv_option_setters!();
    /// The padding of the convolution this transposes: trims the output.
    pub fn padding(mut self, v: impl Spatial<D>) -> Self {
        self.padding = v.spatial();
        self
    }
    /// Extra size on one side of the output (smaller than the stride or
    /// the dilation), to pick among the input sizes a strided convolution
    /// maps to the same output size.
    pub fn output_padding(mut self, v: impl Spatial<D>) -> Self {
        self.output_padding = v.spatial();
        self
    }

    fn spec(&self, op: &'static str) -> Result<ConvSpec> {
        let (stride, dilation) = (lift::<D>(self.stride, 1), lift::<D>(self.dilation, 1));
        let (pad, extra) = (
            lift::<D>(self.padding, 0),
            lift::<D>(self.output_padding, 0),
        );
        for d in 0..2 {
            if stride[d] == 0 || dilation[d] == 0 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "stride and dilation must be > 0, got stride {:?}, dilation {:?}",
                        self.stride, self.dilation
                    ),
                ));
            }
            if extra[d] >= stride[d] && extra[d] >= dilation[d] {
                return Err(Error::invalid(
                    op,
                    format!(
                        "output_padding {:?} must be smaller than either the stride {:?} or the dilation {:?}",
                        self.output_padding, self.stride, self.dilation
                    ),
                ));
            }
        }
        Ok(ConvSpec {
            spatial: D,
            stride,
            pad_before: pad,
            pad_after: [
                pad[0] as isize - extra[0] as isize,
                pad[1] as isize - extra[1] as isize,
            ],
            dilation,
            groups: self.groups,
        })
    }
}

/// The transposed convolution: inputs `z` `[N, C_in, spatial...]`, `w`
/// `[C_in, C_out / groups, kernel...]` and optionally `b` `[C_out]`; the
/// output is the gradient, with respect to its input, of the convolution
/// `spec` whose output gradient is `z`. The registry holds
/// `conv_transpose1d` and `conv_transpose2d` with PyTorch's default options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConvTranspose {
    pub(super) spec: ConvSpec,
}

impl ConvTranspose {
    fn name_str(&self) -> &'static str {
        self.spec.name("conv_transpose1d", "conv_transpose2d")
    }
}

impl ConvProduct for ConvTranspose {
    const MAKES: Slot = Slot::X;
    fn spec(&self) -> &ConvSpec {
        &self.spec
    }
    fn with_spec(&self, spec: ConvSpec) -> Self {
        ConvTranspose { spec }
    }
}

impl BiasedConv for ConvTranspose {
    fn plan(&self, z: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<(Dims, ConvGeometry)> {
        let op = self.name_str();
        let zin = self.spec.spatial_of(op, "the input", z)?;
        let kernel = self.spec.spatial_of(op, "the weight", w)?;
        check_same_dtype(op, z, w)?;
        let groups = self.spec.groups;
        let (cin, ws) = (z.shape()[1], w.shape());
        if groups == 0 || ws[0] % groups != 0 || ws[0] != cin {
            return Err(Error::invalid(
                op,
                format!(
                    "a weight of shape {ws:?} with groups = {groups} needs an input with {} channels (and groups dividing it), got input of shape {:?}",
                    ws[0],
                    z.shape()
                ),
            ));
        }
        let cout = ws[1] * groups;
        let size = self.spec.input_of(zin, kernel);
        if size.iter().any(|&s| s < 1) {
            return Err(Error::invalid(
                op,
                format!(
                    "the output would have spatial size {size:?} for input shape {:?} and weight shape {ws:?}",
                    z.shape()
                ),
            ));
        }
        let output = [size[0] as usize, size[1] as usize];
        // The convolution this transposes must map `output` back to `zin`.
        if self.spec.output_of(op, z.shape(), output, kernel)? != zin {
            return Err(Error::invalid(
                op,
                format!(
                    "inconsistent sizes: input shape {:?}, weight shape {ws:?}",
                    z.shape()
                ),
            ));
        }
        check_bias(op, b, cout, z)?;
        let n = z.shape()[0];
        let geo = self.spec.geometry(n, [cout, cin], output, zin, kernel);
        Ok((self.spec.shape(n, cout, output), geo))
    }
}

impl StructuredOp for ConvTranspose {
    const NAME: &'static str = "conv_transpose2d";
    const INPUTS: &'static [&'static str] = &["input", "weight", "bias"];
    products::conv_product_rules!(with_bias);
    fn facts(&self) -> OpFacts {
        let spatial = self.spec.spatial;
        let example = ConvTransposeOptions::<2>::new()
            .stride(2)
            .padding(1)
            .output_padding(1)
            .dilation([2, 1])
            .groups(2);
        let spec = if spatial == 1 {
            ConvTransposeOptions::<1>::new()
                .stride(2)
                .padding(1)
                .output_padding(1)
                .groups(2)
                .spec("conv_transpose1d")
        } else {
            example.spec("conv_transpose2d")
        };
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: spec
                .ok()
                .map(|spec| std::sync::Arc::new(ConvTranspose { spec }) as _),
            sample_inputs: Some(if spatial == 1 {
                |seed| {
                    vec![
                        sample(&[2, 4, 4], seed, 1.0),
                        sample(&[4, 2, 3], seed + 7, 0.5),
                        sample(&[4], seed + 9, 0.3),
                    ]
                }
            } else {
                |seed| {
                    vec![
                        sample(&[2, 4, 3, 4], seed, 1.0),
                        sample(&[4, 1, 2, 3], seed + 7, 0.5),
                        sample(&[2], seed + 9, 0.3),
                    ]
                }
            }),
            ..OpFacts::opaque(None)
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(ConvTranspose {
        spec: ConvSpec::plain(1),
    });
    reg.add_builtin(ConvTranspose {
        spec: ConvSpec::plain(2),
    });
}

fn record_transpose<'g, const D: usize>(
    op: &'static str,
    x: &Var<'g>,
    weight: &Var<'g>,
    bias: Option<&Var<'g>>,
    opts: &ConvTransposeOptions<D>,
) -> Result<Var<'g>> {
    let spec = opts.spec(op)?;
    record_batched(ConvTranspose { spec }, x, weight, bias, D)
}

conv_methods! {
    /// 1-d transposed convolution, PyTorch's `F.conv_transpose1d(x, weight,
    /// bias, stride, padding, output_padding, groups, dilation)`: `x` is
    /// `[N, C_in, L]`, `weight` `[C_in, C_out / groups, k]`, `bias` `[C_out]`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::ConvTranspose1dOptions};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[1, 1, 2])?);
    /// let w = g.variable(Tensor::from_vec(vec![1.0, 10.0, 100.0], &[1, 1, 3])?);
    /// // Stride 2: each input scatters the kernel, two positions apart.
    /// let y = x.try_conv_transpose1d(&w, None, &ConvTranspose1dOptions::new().stride(2))?;
    /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 10.0, 102.0, 20.0, 200.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_conv_transpose1d / conv_transpose1d(ConvTranspose1dOptions) => record_transpose;

    /// 2-d transposed convolution, PyTorch's `F.conv_transpose2d(x, weight,
    /// bias, stride, padding, output_padding, groups, dilation)`: `x` is
    /// `[N, C_in, H, W]` (or `[C_in, H, W]`), `weight` `[C_in, C_out / groups,
    /// kh, kw]`, `bias` `[C_out]`; the output size is
    /// `(H - 1) * stride - 2 * padding + dilation * (kh - 1) + output_padding + 1`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::ConvTranspose2dOptions};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2])?);
    /// let w = g.variable(Tensor::ones(&[1, 2, 2, 2], retrograd::DType::F64)?);
    /// let opts = ConvTranspose2dOptions::new().stride(2).output_padding(1);
    /// let y = x.try_conv_transpose2d(&w, None, &opts)?;
    /// assert_eq!(y.shape(), &[1, 2, 5, 5]);
    /// // Each input value fills its own 2x2 block; the extra row and column are 0.
    /// assert_eq!(y.value().to_f64_vec()[..5], [1.0, 1.0, 2.0, 2.0, 0.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_conv_transpose2d / conv_transpose2d(ConvTranspose2dOptions) => record_transpose;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::Conv2dOptions;
    use crate::{gradcheck, jvpcheck, Graph};

    use crate::ops::nn::conv_spec::testing::{hr, s};

    #[test]
    fn is_the_adjoint_of_conv2d() {
        // <conv(x, w), z> = <x, conv_transpose(z, w)> for matching settings.
        let g = Graph::new();
        let x = g.variable(s(&[2, 4, 7, 6], 1));
        let w = g.variable(s(&[6, 2, 3, 2], 2));
        let conv = Conv2dOptions::new()
            .stride([2, 1])
            .padding([1, 0])
            .dilation([1, 2])
            .groups(2);
        let y = x.conv2d(&w, None, &conv);
        let z = g.variable(s(y.shape(), 3));
        // The strided conv of 7 rows reaches row 6 exactly: output_padding 0.
        let t = ConvTranspose2dOptions::new()
            .stride([2, 1])
            .padding([1, 0])
            .dilation([1, 2])
            .groups(2);
        let xt = z.conv_transpose2d(&w, None, &t);
        assert_eq!(xt.shape(), x.shape());
        let lhs = (&y * &z).sum().value().item();
        let rhs = (&x * &xt).sum().value().item();
        assert!((lhs - rhs).abs() < 1e-10, "{lhs} vs {rhs}");
    }

    #[test]
    fn gradients_over_configurations() {
        for (stride, pad, extra, dil, groups) in [
            (1, 0, 0, 1, 1),
            (2, 1, 1, 1, 2),
            (2, 0, 1, 2, 1),
            (1, 1, 1, 2, 2),
            (3, 1, 2, 1, 1),
        ] {
            let opts = ConvTranspose2dOptions::new()
                .stride(stride)
                .padding(pad)
                .output_padding(extra)
                .dilation(dil)
                .groups(groups);
            let f = hr(|v| v[0].try_conv_transpose2d(&v[1], Some(&v[2]), &opts));
            let inputs = [
                s(&[2, 2, 3, 4], 4),
                s(&[2, 3 / groups.min(3), 3, 2], 5),
                s(&[3 / groups.min(3) * groups], 6),
            ];
            gradcheck(f, &inputs).unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            jvpcheck(f, &inputs).unwrap();
        }
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        let g = Graph::new();
        let x = g.variable(s(&[1, 2, 3, 3], 1));
        let w = g.variable(s(&[2, 3, 3, 3], 2));
        let bad = ConvTranspose2dOptions::new().stride(2).output_padding(2);
        let e = x.try_conv_transpose2d(&w, None, &bad).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "conv_transpose2d",
                    ..
                }
            ),
            "{e}"
        );
        let w3 = g.variable(s(&[3, 3, 3, 3], 2));
        let e = x
            .try_conv_transpose2d(&w3, None, &ConvTranspose2dOptions::new())
            .unwrap_err();
        assert!(e.to_string().contains("[3, 3, 3, 3]"), "{e}");
        let zero = ConvTranspose2dOptions::new().stride(0);
        assert!(x.try_conv_transpose2d(&w, None, &zero).is_err());
        // Padding that trims the whole output.
        let trim = ConvTranspose2dOptions::new().padding(3);
        assert!(x.try_conv_transpose2d(&w, None, &trim).is_err());
    }
}
