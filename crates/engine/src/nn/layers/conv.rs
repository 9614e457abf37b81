//! Convolution layers: [`Conv1d`], [`Conv2d`] and [`ConvTranspose2d`], with
//! PyTorch's weight layout, options and initialisation; one [`ConvLayer`]
//! over the options' [`ConvKind`].

use rand::Rng;

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::init::{self, FanMode, Nonlinearity};
use crate::nn::{Forward, Module, Parameter};
use crate::ops::nn::conv::record_conv;
use crate::ops::nn::{ConvOptions, ConvTransposeOptions, Spatial};
use crate::tensor::DType;

/// PyTorch's initialisation of a convolution's weight (shape `shape`,
/// fan-in from `shape[1] * kernel`) and bias: `kaiming_uniform(a = sqrt(5))`,
/// which is `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`, for both.
fn init_params<R: Rng + ?Sized>(
    op: &'static str,
    shape: &[usize],
    bias_len: Option<usize>,
    dtype: DType,
    rng: &mut R,
) -> Result<(Parameter, Option<Parameter>)> {
    if shape.contains(&0) {
        return Err(Error::invalid(
            op,
            format!("channels and kernel sizes must be > 0, got a weight of shape {shape:?}"),
        ));
    }
    let weight = init::kaiming_uniform(
        shape,
        FanMode::FanIn,
        Nonlinearity::LeakyRelu(5f64.sqrt()),
        dtype,
        rng,
    )?;
    let (fan_in, _) = init::fans(shape)?;
    let bias = bias_len
        .map(|n| {
            let bound = 1.0 / (fan_in as f64).sqrt();
            init::uniform(&[n], -bound, bound, dtype, rng).map(Parameter::new)
        })
        .transpose()?;
    Ok((Parameter::new(weight), bias))
}

fn check_groups(op: &'static str, cin: usize, cout: usize, groups: usize) -> Result<()> {
    if groups == 0 || !cin.is_multiple_of(groups) || !cout.is_multiple_of(groups) {
        return Err(Error::invalid(
            op,
            format!("groups = {groups} must divide in_channels = {cin} and out_channels = {cout}"),
        ));
    }
    Ok(())
}

/// What a convolution layer's options say about the layer: its name, how
/// its weight is laid out, its groups, and the op it applies. Implemented
/// by [`ConvOptions`] (a convolution: weight `[out, in / groups,
/// kernel...]`) and [`ConvTransposeOptions`] (a transposed convolution:
/// weight `[in, out / groups, kernel...]`), so [`ConvLayer`] is written once
/// for both.
pub trait ConvKind<const D: usize>: Clone + std::fmt::Debug + Send + Sync + 'static {
    /// The layer's name in errors (`"Conv2d"`).
    const NAME: &'static str;
    /// Whether the weight's leading dimension is the input channels.
    const TRANSPOSED: bool;

    /// The number of channel groups.
    fn groups(&self) -> usize;

    /// The layer's op on input `x` with its weight `w` and bias `b`.
    fn apply<'g>(&self, x: &Var<'g>, w: &Var<'g>, b: Option<&Var<'g>>) -> Result<Var<'g>>;
}

impl<const D: usize> ConvKind<D> for ConvOptions<D> {
    const NAME: &'static str = if D == 1 { "Conv1d" } else { "Conv2d" };
    const TRANSPOSED: bool = false;

    fn groups(&self) -> usize {
        self.group_count()
    }

    fn apply<'g>(&self, x: &Var<'g>, w: &Var<'g>, b: Option<&Var<'g>>) -> Result<Var<'g>> {
        let op = if D == 1 { "conv1d" } else { "conv2d" };
        record_conv(op, x, w, b, self)
    }
}

impl ConvKind<2> for ConvTransposeOptions<2> {
    const NAME: &'static str = "ConvTranspose2d";
    const TRANSPOSED: bool = true;

    fn groups(&self) -> usize {
        self.group_count()
    }

    fn apply<'g>(&self, x: &Var<'g>, w: &Var<'g>, b: Option<&Var<'g>>) -> Result<Var<'g>> {
        x.try_conv_transpose2d(w, b, self)
    }
}

/// A convolution layer over `D` spatial dimensions with the options `O`
/// (see [`ConvKind`]): [`Conv1d`], [`Conv2d`] and [`ConvTranspose2d`]. The
/// weight is laid out as in PyTorch, so checkpoints carry over unchanged.
#[derive(Clone, Debug, Module)]
pub struct ConvLayer<const D: usize, O: ConvKind<D>> {
    weight: Parameter,
    bias: Option<Parameter>,
    #[module(skip)]
    options: O,
}

/// A convolution layer over `D` spatial dimensions: [`Conv1d`] (`D = 1`) or
/// [`Conv2d`] (`D = 2`). The weight is `[out, in / groups, kernel...]` as in
/// PyTorch, so checkpoints carry over unchanged.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, Graph, Tensor, nn::{Conv2d, Forward, Module}, ops::nn::Conv2dOptions};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let conv = Conv2d::new(1, 16, 5, Conv2dOptions::new().padding(2), DType::F32, &mut rng)?;
/// assert_eq!(conv.weight().shape(), vec![16, 1, 5, 5]);
/// let g = Graph::new();
/// let y = conv.forward(&g.constant(Tensor::zeros(&[8, 1, 28, 28], DType::F32)?))?;
/// assert_eq!(y.shape(), &[8, 16, 28, 28]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type ConvNd<const D: usize> = ConvLayer<D, ConvOptions<D>>;

/// A 1-d convolution layer, PyTorch's `nn.Conv1d`.
pub type Conv1d = ConvNd<1>;
/// A 2-d convolution layer, PyTorch's `nn.Conv2d`.
pub type Conv2d = ConvNd<2>;

/// A 2-d transposed convolution layer, PyTorch's `nn.ConvTranspose2d`: the
/// weight is `[in, out / groups, kh, kw]`.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, Graph, Tensor, nn::{ConvTranspose2d, Forward, Module}};
/// use retrograd::ops::nn::ConvTranspose2dOptions;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let opts = ConvTranspose2dOptions::new().stride(2).padding(1).output_padding(1);
/// let up = ConvTranspose2d::new(8, 4, 3, opts, DType::F32, &mut rng)?;
/// let g = Graph::new();
/// let y = up.forward(&g.constant(Tensor::zeros(&[2, 8, 7, 7], DType::F32)?))?;
/// assert_eq!(y.shape(), &[2, 4, 14, 14]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub type ConvTranspose2d = ConvLayer<2, ConvTransposeOptions<2>>;

impl<const D: usize, O: ConvKind<D>> ConvLayer<D, O> {
    /// A layer with a bias, initialised as PyTorch does from `rng`.
    pub fn new<R: Rng + ?Sized>(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Spatial<D>,
        options: O,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        Self::with_bias(in_channels, out_channels, kernel, options, true, dtype, rng)
    }

    /// A layer with or without a bias.
    pub fn with_bias<R: Rng + ?Sized>(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Spatial<D>,
        options: O,
        bias: bool,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        let groups = options.groups();
        check_groups(O::NAME, in_channels, out_channels, groups)?;
        let mut shape = if O::TRANSPOSED {
            vec![in_channels, out_channels / groups]
        } else {
            vec![out_channels, in_channels / groups]
        };
        shape.extend(kernel.spatial());
        let (weight, bias) =
            init_params(O::NAME, &shape, bias.then_some(out_channels), dtype, rng)?;
        Ok(ConvLayer {
            weight,
            bias,
            options,
        })
    }

    /// The weight: `[out, in / groups, kernel...]`, or `[in, out / groups,
    /// kernel...]` for a transposed convolution.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The bias, `[out]`, if any.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl<const D: usize, O: ConvKind<D>> Forward for ConvLayer<D, O> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let w = graph.param(&self.weight);
        let b = self.bias.as_ref().map(|b| graph.param(b));
        self.options.apply(x, &w, b.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::{Conv1dOptions, Conv2dOptions};
    use crate::{Graph, Tensor};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn init_follows_pytorch_bounds_and_names() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let conv = Conv2d::new(16, 32, 5, Conv2dOptions::new(), DType::F64, &mut rng).unwrap();
        let bound = 1.0 / (16.0 * 25.0f64).sqrt();
        let w = conv.weight().value().to_f64_vec();
        let max = w.iter().fold(0f64, |m, v| m.max(v.abs()));
        assert!(max <= bound && max > 0.99 * bound, "{max} vs {bound}");
        let b = conv.bias().unwrap().value().to_f64_vec();
        assert!(b.iter().all(|v| v.abs() <= bound));
        let names: Vec<String> = conv.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["weight", "bias"]);
        let depthwise = Conv1d::with_bias(
            4,
            8,
            3,
            Conv1dOptions::new().groups(4),
            false,
            DType::F32,
            &mut rng,
        )
        .unwrap();
        assert_eq!(depthwise.weight().shape(), vec![8, 1, 3]);
        assert!(depthwise.bias().is_none());
        let g = Graph::new();
        let y = depthwise
            .forward(&g.constant(Tensor::zeros(&[2, 4, 10], DType::F32).unwrap()))
            .unwrap();
        assert_eq!(y.shape(), &[2, 8, 8]);
    }

    #[test]
    fn bad_settings_are_typed_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let e = Conv2d::new(
            3,
            4,
            3,
            Conv2dOptions::new().groups(2),
            DType::F32,
            &mut rng,
        )
        .unwrap_err();
        assert!(e.to_string().contains("groups = 2"), "{e}");
        assert!(Conv2d::new(3, 4, 0, Conv2dOptions::new(), DType::F32, &mut rng).is_err());
        assert!(Conv2d::new(0, 4, 3, Conv2dOptions::new(), DType::F32, &mut rng).is_err());
        let conv = Conv2d::new(3, 4, 3, Conv2dOptions::new(), DType::F32, &mut rng).unwrap();
        let g = Graph::new();
        let wrong = g.constant(Tensor::zeros(&[1, 2, 8, 8], DType::F32).unwrap());
        assert!(conv.forward(&wrong).is_err());
    }
}
