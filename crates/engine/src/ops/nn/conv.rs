//! `conv1d` and `conv2d` (PyTorch's `F.conv1d`/`F.conv2d`: NCHW, stride,
//! padding as numbers or `"same"`/`"valid"`, dilation, groups, optional
//! bias), as the op [`Conv`] on the GEMM kernels of `kernels::nn::conv`.
//! Its input gradient is a `ConvTranspose`, its weight gradient a
//! `ConvWeight` (the rule shared by the three: `conv_products.rs`), and
//! its bias gradient a sum.

use super::conv_products::{self as products, BiasedConv, ConvProduct, Slot};
use super::conv_spec::{
    check_bias, conv_methods, conv_option_setters, lift, record_batched, sample, ConvSpec,
};
use super::spatial::{check_same_dtype, Spatial};
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::kernels::nn::conv::ConvGeometry;
use crate::kernels::nn::conv_fused::{conv2d_forward_fused, ConvEpilogue, ConvSummation};
use crate::ops::OpAttributes;
use crate::ops::{Node, OpFacts, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// A convolution's padding, PyTorch's `padding` argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Padding<const D: usize> {
    /// Zeros on both sides of each dimension.
    Explicit([usize; D]),
    /// `"same"`: the output has the input's size (stride 1 only); an odd
    /// total padding puts the extra zero at the end, as PyTorch does.
    Same,
    /// `"valid"`: no padding.
    Valid,
}

impl<const D: usize> From<usize> for Padding<D> {
    fn from(p: usize) -> Self {
        Padding::Explicit([p; D])
    }
}

impl<const D: usize> From<[usize; D]> for Padding<D> {
    fn from(p: [usize; D]) -> Self {
        Padding::Explicit(p)
    }
}

/// Options of [`conv1d`](Var::try_conv1d) (`D = 1`) and
/// [`conv2d`](Var::try_conv2d) (`D = 2`), with PyTorch's defaults: stride 1,
/// no padding, dilation 1, one group.
///
/// ```
/// use retrograd::ops::nn::{Conv2dOptions, Padding};
/// let opts = Conv2dOptions::new().stride(2).padding([1, 0]).groups(4);
/// let same = Conv2dOptions::new().padding(Padding::Same).dilation(2);
/// # let _ = (opts, same);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvOptions<const D: usize> {
    stride: [usize; D],
    padding: Padding<D>,
    dilation: [usize; D],
    groups: usize,
}

/// Options of `conv1d`.
pub type Conv1dOptions = ConvOptions<1>;
/// Options of `conv2d`.
pub type Conv2dOptions = ConvOptions<2>;

impl<const D: usize> Default for ConvOptions<D> {
    fn default() -> Self {
        ConvOptions {
            stride: [1; D],
            padding: Padding::Explicit([0; D]),
            dilation: [1; D],
            groups: 1,
        }
    }
}

impl<const D: usize> ConvOptions<D> {
    conv_option_setters!();
    /// Zeros around the input: a number, one per dimension, or
    /// [`Padding::Same`] / [`Padding::Valid`].
    pub fn padding(mut self, padding: impl Into<Padding<D>>) -> Self {
        self.padding = padding.into();
        self
    }

    /// The spec for a weight of spatial size `kernel` (needed by `"same"`).
    pub(crate) fn spec(&self, op: &'static str, kernel: &[usize]) -> Result<ConvSpec> {
        let stride = lift::<D>(self.stride, 1);
        let dilation = lift::<D>(self.dilation, 1);
        let (pad_before, pad_after) = match self.padding {
            Padding::Explicit(p) => {
                let p = lift::<D>(p, 0);
                (p, [p[0] as isize, p[1] as isize])
            }
            Padding::Valid => ([0, 0], [0, 0]),
            Padding::Same => {
                if stride != [1, 1] {
                    return Err(Error::invalid(
                        op,
                        format!(
                            "padding \"same\" needs stride 1, got stride {:?}",
                            self.stride
                        ),
                    ));
                }
                let mut before = [0; 2];
                let mut after = [0; 2];
                let kernel2 = if D == 1 {
                    [1, kernel.last().copied().unwrap_or(1)]
                } else {
                    [kernel[0], kernel[1]]
                };
                for d in 0..2 {
                    let total = dilation[d] * kernel2[d].saturating_sub(1);
                    before[d] = total / 2;
                    after[d] = (total - total / 2) as isize;
                }
                (before, after)
            }
        };
        Ok(ConvSpec {
            spatial: D,
            stride,
            pad_before,
            pad_after,
            dilation,
            groups: self.groups,
        })
    }
}

/// The convolution `y = conv(x, w) + b`: inputs `x` `[N, C_in, spatial...]`,
/// `w` `[C_out, C_in / groups, kernel...]` and optionally `b` `[C_out]`.
/// The registry holds `conv1d` and `conv2d` with PyTorch's default options
/// (a bias when a third input is given).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conv {
    pub(super) spec: ConvSpec,
}

impl Conv {
    fn name_str(&self) -> &'static str {
        self.spec.name("conv1d", "conv2d")
    }
}

/// `g` summed over everything but the channel dim: a bias gradient.
pub(super) fn bias_grad<'g>(g: &Var<'g>, channels: usize, spatial: usize) -> Result<Var<'g>> {
    let keep: Vec<usize> = std::iter::once(channels)
        .chain(std::iter::repeat_n(1, spatial))
        .collect();
    g.sum_to_size(&keep)?.try_reshape(&[channels as isize])
}

/// [`bias_grad`] on a plain tensor, through the same kernel.
pub(super) fn bias_grad_plain(g: &Tensor, channels: usize, spatial: usize) -> Result<Tensor> {
    let keep: Vec<usize> = std::iter::once(channels)
        .chain(std::iter::repeat_n(1, spatial))
        .collect();
    crate::kernels::sum_to_shape("sum_to_size", g, &keep)?.reshape(&[channels])
}

/// A bias `[C]` viewed to broadcast over `[N, C, spatial...]`.
pub(super) fn bias_view<'g>(b: &Var<'g>, spatial: usize) -> Result<Var<'g>> {
    let shape: Vec<isize> = std::iter::once(-1)
        .chain(std::iter::repeat_n(1, spatial))
        .collect();
    b.try_reshape(&shape)
}

impl ConvProduct for Conv {
    const MAKES: Slot = Slot::Y;
    fn spec(&self) -> &ConvSpec {
        &self.spec
    }
    fn with_spec(&self, spec: ConvSpec) -> Self {
        Conv { spec }
    }
}

impl BiasedConv for Conv {
    fn plan(&self, x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<(Dims, ConvGeometry)> {
        let op = self.name_str();
        let input = self.spec.spatial_of(op, "the input", x)?;
        let kernel = self.spec.spatial_of(op, "the weight", w)?;
        check_same_dtype(op, x, w)?;
        self.spec.check_channels(op, x.shape(), w.shape())?;
        let output = self.spec.output_of(op, x.shape(), input, kernel)?;
        let (n, cout) = (x.shape()[0], w.shape()[0]);
        check_bias(op, b, cout, x)?;
        let geo = self
            .spec
            .geometry(n, [x.shape()[1], cout], input, output, kernel);
        Ok((self.spec.shape(n, cout, output), geo))
    }
}

impl StructuredOp for Conv {
    const NAME: &'static str = "conv2d";
    const INPUTS: &'static [&'static str] = &["input", "weight", "bias"];
    products::conv_product_rules!(with_bias);
    fn facts(&self) -> OpFacts {
        let spatial = self.spec.spatial;
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(std::sync::Arc::new(Conv {
                spec: ConvSpec {
                    stride: [if spatial == 1 { 1 } else { 2 }, 2],
                    pad_before: [if spatial == 1 { 0 } else { 1 }, 2],
                    pad_after: [if spatial == 1 { 0 } else { 1 }, 2],
                    dilation: [1, 2],
                    groups: 2,
                    ..ConvSpec::plain(spatial)
                },
            })),
            sample_inputs: Some(if spatial == 1 {
                |seed| {
                    vec![
                        sample(&[2, 4, 9], seed, 1.0),
                        sample(&[6, 2, 3], seed + 7, 0.5),
                        sample(&[6], seed + 9, 0.3),
                    ]
                }
            } else {
                |seed| {
                    vec![
                        sample(&[2, 4, 5, 6], seed, 1.0),
                        sample(&[6, 2, 3, 2], seed + 7, 0.5),
                        sample(&[6], seed + 9, 0.3),
                    ]
                }
            }),
            ..OpFacts::opaque(None)
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(Conv {
        spec: ConvSpec::plain(1),
    });
    reg.add_builtin(Conv {
        spec: ConvSpec::plain(2),
    });
}

/// Records a convolution, lifting an unbatched input (`[C, spatial...]`)
/// to a batch of one and back, as PyTorch accepts.
pub(crate) fn record_conv<'g, const D: usize>(
    op: &'static str,
    x: &Var<'g>,
    weight: &Var<'g>,
    bias: Option<&Var<'g>>,
    opts: &ConvOptions<D>,
) -> Result<Var<'g>> {
    let spec = opts.spec(op, weight.shape().get(2..).unwrap_or(&[]))?;
    record_batched(Conv { spec }, x, weight, bias, D)
}

/// `relu(conv2d(x, weight, bias))`, then 2x2 max pooling with stride 2
/// if `pool`, on plain tensors in one pass over the output
/// ([`conv2d_forward_fused`]), summed as `summation` allows (with
/// [`ConvSummation::Exact`] the bits of the three ops), for a forward no
/// backward follows (an imported model's `Conv`, `Relu` and `MaxPool` at
/// inference). `x` is `[N, C_in, H, W]`. Errors: as
/// [`conv2d`](Var::try_conv2d)'s, and an output smaller than the pooling
/// window.
pub fn conv2d_relu_values(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
    pool: bool,
    summation: ConvSummation,
) -> Result<Tensor> {
    let op = "conv2d";
    let spec = opts.spec(op, weight.shape().get(2..).unwrap_or(&[]))?;
    let (x, w, b) = (
        x.contiguous(),
        weight.contiguous(),
        bias.map(Tensor::contiguous),
    );
    let (_, geo) = Conv { spec }.plan(&x, &w, b.as_ref())?;
    if pool && (geo.output[0] < 2 || geo.output[1] < 2) {
        return Err(Error::invalid(
            op,
            format!(
                "a 2x2 pooling window does not fit its output of size {:?}",
                geo.output
            ),
        ));
    }
    let epilogue = ConvEpilogue { relu: true, pool };
    let [h, w_out] = epilogue.output_plane(geo.output);
    let shape = [geo.batch, geo.out_channels, h, w_out];
    crate::with_dtype!(op, x.dtype(), T => {
        let (xs, ws) = (x.as_slice_of::<T>(), w.as_slice_of::<T>());
        let bs = b.as_ref().map(|b| b.as_slice_of::<T>());
        Ok(Tensor::build::<T>(Dims::from_slice(&shape), |out| {
            conv2d_forward_fused(&geo, xs, ws, bs, epilogue, summation, out)
        }))
    })
}

conv_methods! {
    /// 1-d convolution, PyTorch's `F.conv1d(x, weight, bias, stride, padding,
    /// dilation, groups)`: `x` is `[N, C_in, L]` (or `[C_in, L]`), `weight`
    /// `[C_out, C_in / groups, k]`, `bias` `[C_out]`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::Conv1dOptions};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[1, 1, 4])?);
    /// let w = g.variable(Tensor::from_vec(vec![1.0, -1.0], &[1, 1, 2])?);
    /// let y = x.try_conv1d(&w, None, &Conv1dOptions::new().padding(1))?;
    /// // Cross-correlation: y[i] = x[i - 1] - x[i], zeros outside.
    /// assert_eq!(y.value().to_f64_vec(), vec![-1.0, -1.0, -1.0, -1.0, 4.0]);
    /// let grads = y.sum().backward()?;
    /// assert_eq!(grads.wrt(&w).to_f64_vec(), vec![10.0, 10.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_conv1d / conv1d(Conv1dOptions) => record_conv;

    /// 2-d convolution, PyTorch's `F.conv2d(x, weight, bias, stride, padding,
    /// dilation, groups)`: `x` is `[N, C_in, H, W]` (or `[C_in, H, W]`),
    /// `weight` `[C_out, C_in / groups, kh, kw]`, `bias` `[C_out]`. As in
    /// PyTorch it is a cross-correlation (the kernel is not flipped).
    ///
    /// Errors name the op and the shapes: a wrong rank, channels that do
    /// not match the weight or are not divisible by `groups`, a kernel
    /// larger than the padded input, a zero stride or dilation, `"same"`
    /// padding with a stride, a dtype mismatch.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, ops::nn::{Conv2dOptions, Padding}};
    /// let g = Graph::new();
    /// let x = g.variable(Tensor::from_vec((1..=9).map(f64::from).collect(), &[1, 1, 3, 3])?);
    /// let w = g.variable(Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[1, 1, 2, 2])?);
    /// let b = g.variable(Tensor::from_vec(vec![0.5], &[1])?);
    /// let y = x.try_conv2d(&w, Some(&b), &Conv2dOptions::new())?;
    /// // Each output: top-left + bottom-right of a 2x2 window, plus the bias.
    /// assert_eq!(y.value().to_f64_vec(), vec![6.5, 8.5, 12.5, 14.5]);
    /// let same = x.try_conv2d(&w, None, &Conv2dOptions::new().padding(Padding::Same))?;
    /// assert_eq!(same.shape(), &[1, 1, 3, 3]);
    /// let grads = y.sum().backward()?;
    /// assert_eq!(grads.wrt(&b).to_f64_vec(), vec![4.0]);
    /// assert_eq!(grads.wrt(&w).to_f64_vec(), vec![12.0, 16.0, 24.0, 28.0]);
    /// assert!(x.try_conv2d(&w, None, &Conv2dOptions::new().groups(2)).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    try_conv2d / conv2d(Conv2dOptions) => record_conv;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, jvpcheck, DType, Graph};

    use crate::ops::nn::conv_spec::testing::{hr, s};

    #[test]
    fn gradients_over_random_configurations() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        for case in 0..12 {
            let groups = [1, 2][rng.random_range(0..2)];
            let cin = groups * rng.random_range(1..3);
            let cout = groups * rng.random_range(1..3);
            let k = [rng.random_range(1..4), rng.random_range(1..4)];
            let opts = Conv2dOptions::new()
                .stride([rng.random_range(1..3), rng.random_range(1..3)])
                .padding([rng.random_range(0..2), rng.random_range(0..2)])
                .dilation([rng.random_range(1..3), rng.random_range(1..3)])
                .groups(groups);
            let x = s(&[2, cin, 7, 6], case);
            let w = s(&[cout, cin / groups, k[0], k[1]], case + 50);
            let b = s(&[cout], case + 90);
            let f = hr(|v| v[0].try_conv2d(&v[1], Some(&v[2]), &opts));
            gradcheck(f, &[x.clone(), w.clone(), b.clone()])
                .unwrap_or_else(|e| panic!("case {case} {opts:?}: {e}"));
            jvpcheck(f, &[x, w, b]).unwrap();
        }
    }

    #[test]
    fn same_padding_keeps_the_size_even_with_an_even_kernel() {
        let g = Graph::new();
        let x = g.variable(s(&[1, 2, 5, 4], 1));
        let w = g.variable(s(&[3, 2, 2, 4], 2));
        let opts = Conv2dOptions::new().padding(Padding::Same).dilation([2, 1]);
        let y = x.conv2d(&w, None, &opts);
        assert_eq!(y.shape(), &[1, 3, 5, 4]);
        gradcheck(
            |v| v[0].try_conv2d(&v[1], None, &opts),
            &[s(&[1, 2, 5, 4], 1), s(&[3, 2, 2, 4], 2)],
        )
        .unwrap();
        // "same" with a stride is PyTorch's error too.
        let strided = Conv2dOptions::new().padding(Padding::Same).stride(2);
        assert!(matches!(
            x.try_conv2d(&w, None, &strided),
            Err(Error::InvalidArgument { op: "conv2d", .. })
        ));
    }

    #[test]
    fn conv1d_and_unbatched_inputs() {
        let opts = Conv1dOptions::new()
            .stride(2)
            .padding(1)
            .dilation(2)
            .groups(2);
        let f = hr(|v| v[0].try_conv1d(&v[1], Some(&v[2]), &opts));
        gradcheck(f, &[s(&[2, 4, 9], 3), s(&[6, 2, 3], 4), s(&[6], 5)]).unwrap();
        let g = Graph::new();
        let x = g.variable(s(&[2, 5, 5], 6));
        let w = g.variable(s(&[3, 2, 3, 3], 7));
        let y = x.conv2d(&w, None, &Conv2dOptions::new().padding(1));
        assert_eq!(y.shape(), &[3, 5, 5]);
        let batched = g
            .variable(s(&[2, 5, 5], 6).reshape(&[1, 2, 5, 5]).unwrap())
            .conv2d(&w, None, &Conv2dOptions::new().padding(1));
        assert_eq!(y.value().to_f64_vec(), batched.value().to_f64_vec());
    }

    #[test]
    fn bad_configurations_are_typed_errors() {
        let g = Graph::new();
        let x = g.variable(s(&[1, 4, 5, 5], 1));
        let w = g.variable(s(&[6, 2, 3, 3], 2));
        let msg = |r: Result<Var<'_>>| r.unwrap_err().to_string();
        // Groups that do not divide the channels.
        let e = msg(x.try_conv2d(&w, None, &Conv2dOptions::new().groups(3)));
        assert!(
            e.contains("groups = 3") && e.contains("[1, 4, 5, 5]"),
            "{e}"
        );
        // A weight whose channels do not match.
        let e = msg(x.try_conv2d(&w, None, &Conv2dOptions::new()));
        assert!(e.contains("[6, 2, 3, 3]"), "{e}");
        // A kernel larger than the padded input.
        let big = g.variable(s(&[1, 4, 7, 7], 3));
        let e = msg(x.try_conv2d(&big, None, &Conv2dOptions::new()));
        assert!(e.contains("larger than the padded input"), "{e}");
        assert!(x
            .try_conv2d(&big, None, &Conv2dOptions::new().padding(1))
            .is_ok());
        // A zero stride.
        let w1 = g.variable(s(&[2, 4, 3, 3], 4));
        let e = msg(x.try_conv2d(&w1, None, &Conv2dOptions::new().stride(0)));
        assert!(e.contains("stride"), "{e}");
        // A wrong rank.
        let flat = g.variable(s(&[4, 25], 5));
        assert!(msg(flat.try_conv2d(&w1, None, &Conv2dOptions::new())).contains("rank"));
        // Dtypes.
        let w32 = g.variable(s(&[2, 4, 3, 3], 4).to_dtype(DType::F32));
        assert!(matches!(
            x.try_conv2d(&w32, None, &Conv2dOptions::new()),
            Err(Error::DTypeMismatch { op: "conv2d", .. })
        ));
        // A bias of the wrong length.
        let b = g.variable(s(&[3], 6));
        assert!(matches!(
            x.try_conv2d(&w1, Some(&b), &Conv2dOptions::new()),
            Err(Error::ShapeMismatch { .. })
        ));
    }

    /// The gradients of `sum(pool(relu(conv(x, w) + b))^2)` with respect
    /// to `w` and `b`, recorded so that `vmap` can batch them.
    fn cnn_grads<'s>(v: &[Var<'s>]) -> Result<Vec<Var<'s>>> {
        use crate::{grad, GradOptions, MaxPool2dOptions};
        let (w, b, x) = (&v[0], &v[1], &v[2]);
        let y = x
            .try_conv2d(w, Some(b), &Conv2dOptions::new().padding(1))?
            .relu()
            .try_max_pool2d(&MaxPool2dOptions::new(2))?;
        let loss = (&y * &y).sum();
        grad(&[&loss], &[w, b], &GradOptions::new().create_graph(true))
    }

    #[test]
    fn per_sample_gradients_of_a_small_cnn_are_each_examples() {
        use crate::autograd::VMap;
        let (w, b, xs) = (s(&[3, 2, 3, 3], 1), s(&[3], 2), s(&[4, 1, 2, 6, 6], 3));
        let g = Graph::new();
        let (wv, bv, xv) = (
            g.variable(w.clone()),
            g.variable(b.clone()),
            g.variable(xs.clone()),
        );
        let got = VMap::new()
            .in_axes(&[None, None, Some(0)])
            .try_call(cnn_grads, &[&wv, &bv, &xv])
            .unwrap();
        assert_eq!(got[0].shape(), &[4, 3, 2, 3, 3]);
        assert_eq!(got[1].shape(), &[4, 3]);
        for e in 0..4 {
            let h = Graph::new();
            let x = xs.select(0, e).unwrap().contiguous();
            let args = [h.variable(w.clone()), h.variable(b.clone()), h.variable(x)];
            let want = cnn_grads(&args).unwrap();
            for (got, want) in got.iter().zip(&want) {
                let got = got.value().select(0, e).unwrap().contiguous();
                assert!(got.allclose(want.value(), 1e-10, 1e-12), "example {e}");
            }
        }
    }

    #[test]
    fn f32_agrees_with_f64() {
        let g = Graph::new();
        let opts = Conv2dOptions::new().stride(2).padding(1);
        let (x, w) = (s(&[3, 3, 8, 8], 1), s(&[4, 3, 3, 3], 2));
        let y64 = g
            .variable(x.clone())
            .conv2d(&g.variable(w.clone()), None, &opts);
        let y32 = g.variable(x.to_dtype(DType::F32)).conv2d(
            &g.variable(w.to_dtype(DType::F32)),
            None,
            &opts,
        );
        assert!(y32.value().allclose(y64.value(), 1e-5, 1e-5));
    }
}
