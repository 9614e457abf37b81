//! Convolution layers: [`Conv1d`], [`Conv2d`] and [`ConvTranspose2d`], with
//! PyTorch's weight layout, options and initialisation.

use rand::Rng;

use crate::error::{Error, Result};
use crate::graph::Var;
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
#[derive(Clone, Debug, Module)]
pub struct ConvNd<const D: usize> {
    weight: Parameter,
    bias: Option<Parameter>,
    #[module(skip)]
    options: ConvOptions<D>,
}

/// A 1-d convolution layer, PyTorch's `nn.Conv1d`.
pub type Conv1d = ConvNd<1>;
/// A 2-d convolution layer, PyTorch's `nn.Conv2d`.
pub type Conv2d = ConvNd<2>;

impl<const D: usize> ConvNd<D> {
    fn op_name() -> &'static str {
        if D == 1 {
            "Conv1d"
        } else {
            "Conv2d"
        }
    }

    /// A layer with a bias, initialised as PyTorch does from `rng`.
    pub fn new<R: Rng + ?Sized>(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Spatial<D>,
        options: ConvOptions<D>,
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
        options: ConvOptions<D>,
        bias: bool,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        let groups = options.group_count();
        check_groups(Self::op_name(), in_channels, out_channels, groups)?;
        let mut shape = vec![out_channels, in_channels / groups];
        shape.extend(kernel.spatial());
        let (weight, bias) = init_params(
            Self::op_name(),
            &shape,
            bias.then_some(out_channels),
            dtype,
            rng,
        )?;
        Ok(ConvNd {
            weight,
            bias,
            options,
        })
    }

    /// The weight, `[out, in / groups, kernel...]`.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The bias, `[out]`, if any.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl<const D: usize> Forward for ConvNd<D> {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let w = graph.param(&self.weight);
        let b = self.bias.as_ref().map(|b| graph.param(b));
        let op = if D == 1 { "conv1d" } else { "conv2d" };
        record_conv(op, x, &w, b.as_ref(), &self.options)
    }
}

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
#[derive(Clone, Debug, Module)]
pub struct ConvTranspose2d {
    weight: Parameter,
    bias: Option<Parameter>,
    #[module(skip)]
    options: ConvTransposeOptions<2>,
}

impl ConvTranspose2d {
    /// A layer with a bias, initialised as PyTorch does from `rng`.
    pub fn new<R: Rng + ?Sized>(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Spatial<2>,
        options: ConvTransposeOptions<2>,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        Self::with_bias(in_channels, out_channels, kernel, options, true, dtype, rng)
    }

    /// A layer with or without a bias.
    pub fn with_bias<R: Rng + ?Sized>(
        in_channels: usize,
        out_channels: usize,
        kernel: impl Spatial<2>,
        options: ConvTransposeOptions<2>,
        bias: bool,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        let groups = options.group_count();
        check_groups("ConvTranspose2d", in_channels, out_channels, groups)?;
        let mut shape = vec![in_channels, out_channels / groups];
        shape.extend(kernel.spatial());
        let (weight, bias) = init_params(
            "ConvTranspose2d",
            &shape,
            bias.then_some(out_channels),
            dtype,
            rng,
        )?;
        Ok(ConvTranspose2d {
            weight,
            bias,
            options,
        })
    }

    /// The weight, `[in, out / groups, kh, kw]`.
    pub fn weight(&self) -> &Parameter {
        &self.weight
    }

    /// The bias, `[out]`, if any.
    pub fn bias(&self) -> Option<&Parameter> {
        self.bias.as_ref()
    }
}

impl Forward for ConvTranspose2d {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let w = graph.param(&self.weight);
        let b = self.bias.as_ref().map(|b| graph.param(b));
        x.try_conv_transpose2d(&w, b.as_ref(), &self.options)
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
