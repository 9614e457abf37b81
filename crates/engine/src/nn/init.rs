//! Weight initialisers with PyTorch's formulas (`torch.nn.init`): Kaiming/He
//! and Xavier/Glorot, uniform and normal, drawn from a caller's seeded RNG so
//! a model built from the same seed is the same model on every machine.
//!
//! Fans follow PyTorch: for a weight of shape `[out, in, k...]`,
//! `fan_in = in * prod(k)` and `fan_out = out * prod(k)`.

use rand::Rng;

use crate::base::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// The nonlinearity that follows a layer, for [`calculate_gain`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Nonlinearity {
    /// No nonlinearity (also convolutions and `sigmoid`): gain 1.
    Linear,
    /// Logistic sigmoid: gain 1.
    Sigmoid,
    /// Hyperbolic tangent: gain 5/3.
    Tanh,
    /// ReLU: gain sqrt(2).
    Relu,
    /// Leaky ReLU with this negative slope: gain sqrt(2 / (1 + slope^2)).
    LeakyRelu(f64),
    /// SELU: gain 3/4.
    Selu,
}

/// Whether Kaiming scaling preserves the variance of activations (`FanIn`,
/// the forward pass) or of gradients (`FanOut`, the backward pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FanMode {
    /// Scale by the number of inputs (PyTorch's default).
    #[default]
    FanIn,
    /// Scale by the number of outputs.
    FanOut,
}

/// The recommended gain for `nonlinearity` (PyTorch's `calculate_gain`).
///
/// ```
/// use retrograd::nn::init::{calculate_gain, Nonlinearity};
/// assert_eq!(calculate_gain(Nonlinearity::Relu), 2f64.sqrt());
/// assert_eq!(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
/// // kaiming_uniform(a = sqrt(5)), nn.Linear's default: gain sqrt(1/3)
/// let g = calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt()));
/// assert!((g - (1.0f64 / 3.0).sqrt()).abs() < 1e-15);
/// ```
pub fn calculate_gain(nonlinearity: Nonlinearity) -> f64 {
    match nonlinearity {
        Nonlinearity::Linear | Nonlinearity::Sigmoid => 1.0,
        Nonlinearity::Tanh => 5.0 / 3.0,
        Nonlinearity::Relu => 2f64.sqrt(),
        Nonlinearity::LeakyRelu(slope) => (2.0 / (1.0 + slope * slope)).sqrt(),
        Nonlinearity::Selu => 0.75,
    }
}

/// `(fan_in, fan_out)` of a weight shape; at least two dimensions are needed.
///
/// ```
/// use retrograd::nn::init::fans;
/// assert_eq!(fans(&[10, 4])?, (4, 10));          // Linear: [out, in]
/// assert_eq!(fans(&[8, 3, 5, 5])?, (75, 200));   // Conv2d: [out, in, kh, kw]
/// assert!(fans(&[7]).is_err());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn fans(shape: &[usize]) -> Result<(usize, usize)> {
    if shape.len() < 2 {
        return Err(Error::invalid(
            "init::fans",
            format!("fan in and fan out need at least 2 dimensions, got shape {shape:?}"),
        ));
    }
    let overflow = || Error::ShapeOverflow {
        op: "init::fans",
        shape: shape.to_vec(),
    };
    let receptive = shape[2..]
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    let fan_in = shape[1].checked_mul(receptive).ok_or_else(overflow)?;
    let fan_out = shape[0].checked_mul(receptive).ok_or_else(overflow)?;
    Ok((fan_in, fan_out))
}

fn fan(shape: &[usize], mode: FanMode) -> Result<usize> {
    let (fan_in, fan_out) = fans(shape)?;
    let fan = match mode {
        FanMode::FanIn => fan_in,
        FanMode::FanOut => fan_out,
    };
    if fan == 0 {
        return Err(Error::invalid(
            "init",
            format!("a zero fan (shape {shape:?}) gives an infinite scale"),
        ));
    }
    Ok(fan)
}

/// Uniform samples in `[low, high)`.
pub fn uniform<R: Rng + ?Sized>(
    shape: &[usize],
    low: f64,
    high: f64,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    Tensor::uniform_with(shape, low, high, dtype, rng)
}

/// Normal samples with the given mean and standard deviation.
pub fn normal<R: Rng + ?Sized>(
    shape: &[usize],
    mean: f64,
    std: f64,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
        return Err(Error::invalid(
            "init::normal",
            format!("mean {mean} and std {std} must be finite, std >= 0"),
        ));
    }
    Ok(Tensor::randn_with(shape, DType::F64, rng)?
        .map_f64(|z| mean + std * z)
        .to_dtype(dtype))
}

/// How a new parameter is filled: what a model's constructor asks of the
/// source of its parameters (a generator, or a checkpoint that may lack
/// some of them).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Init {
    /// `N(0, std)`.
    Normal(f64),
    /// All zeros (biases).
    Zeros,
    /// All ones (layer-norm scales).
    Ones,
}

impl Init {
    /// A tensor of `shape` and `dtype` filled this way, drawn from `rng`.
    ///
    /// ```
    /// use rand::SeedableRng;
    /// use retrograd::{DType, nn::init::Init};
    /// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    /// assert_eq!(Init::Ones.tensor(&[2], DType::F32, &mut rng)?.to_vec::<f32>()?, vec![1.0, 1.0]);
    /// assert_eq!(Init::Normal(0.02).tensor(&[3, 4], DType::F64, &mut rng)?.shape(), &[3, 4]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn tensor<R: Rng + ?Sized>(
        self,
        shape: &[usize],
        dtype: DType,
        rng: &mut R,
    ) -> Result<Tensor> {
        match self {
            Init::Normal(std) => normal(shape, 0.0, std, dtype, rng),
            Init::Zeros => Tensor::zeros(shape, dtype),
            Init::Ones => Tensor::ones(shape, dtype),
        }
    }
}

/// Kaiming/He uniform: `U(-b, b)` with `b = gain * sqrt(3 / fan)`
/// (PyTorch's `kaiming_uniform_`). `nn.Linear` uses
/// `Nonlinearity::LeakyRelu(sqrt(5))` with `FanMode::FanIn`, which gives
/// `b = 1 / sqrt(fan_in)`.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, nn::init::{kaiming_uniform, FanMode, Nonlinearity}};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let w = kaiming_uniform(&[64, 100], FanMode::FanIn, Nonlinearity::Relu, DType::F32, &mut rng)?;
/// let bound = (6.0f64 / 100.0).sqrt();
/// assert!(w.to_f64_vec().iter().all(|v| v.abs() <= bound));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn kaiming_uniform<R: Rng + ?Sized>(
    shape: &[usize],
    mode: FanMode,
    nonlinearity: Nonlinearity,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    let std = calculate_gain(nonlinearity) / (fan(shape, mode)? as f64).sqrt();
    let bound = 3f64.sqrt() * std;
    uniform(shape, -bound, bound, dtype, rng)
}

/// Kaiming/He normal: `N(0, std^2)` with `std = gain / sqrt(fan)`
/// (PyTorch's `kaiming_normal_`).
pub fn kaiming_normal<R: Rng + ?Sized>(
    shape: &[usize],
    mode: FanMode,
    nonlinearity: Nonlinearity,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    let std = calculate_gain(nonlinearity) / (fan(shape, mode)? as f64).sqrt();
    normal(shape, 0.0, std, dtype, rng)
}

fn xavier_std(shape: &[usize], gain: f64) -> Result<f64> {
    let (fan_in, fan_out) = fans(shape)?;
    if fan_in + fan_out == 0 {
        return Err(Error::invalid(
            "init::xavier",
            format!("zero fans (shape {shape:?})"),
        ));
    }
    Ok(gain * (2.0 / (fan_in + fan_out) as f64).sqrt())
}

/// Xavier/Glorot uniform: `U(-b, b)` with
/// `b = gain * sqrt(6 / (fan_in + fan_out))` (PyTorch's `xavier_uniform_`).
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, nn::init::xavier_uniform};
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let w = xavier_uniform(&[30, 20], 1.0, DType::F64, &mut rng)?;
/// assert!(w.to_f64_vec().iter().all(|v| v.abs() <= (6.0f64 / 50.0).sqrt()));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn xavier_uniform<R: Rng + ?Sized>(
    shape: &[usize],
    gain: f64,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    let bound = 3f64.sqrt() * xavier_std(shape, gain)?;
    uniform(shape, -bound, bound, dtype, rng)
}

/// Xavier/Glorot normal: `N(0, std^2)` with
/// `std = gain * sqrt(2 / (fan_in + fan_out))` (PyTorch's `xavier_normal_`).
pub fn xavier_normal<R: Rng + ?Sized>(
    shape: &[usize],
    gain: f64,
    dtype: DType,
    rng: &mut R,
) -> Result<Tensor> {
    normal(shape, 0.0, xavier_std(shape, gain)?, dtype, rng)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn moments(t: &Tensor) -> (f64, f64, f64) {
        let v = t.to_f64_vec();
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
        let max = v.iter().fold(0f64, |m, x| m.max(x.abs()));
        (mean, var.sqrt(), max)
    }

    #[test]
    fn kaiming_and_xavier_have_the_documented_scale() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let shape = [200, 300];
        // Kaiming normal, ReLU, fan_in: std = sqrt(2 / 300).
        let t = kaiming_normal(
            &shape,
            FanMode::FanIn,
            Nonlinearity::Relu,
            DType::F64,
            &mut rng,
        )
        .unwrap();
        let (m, s, _) = moments(&t);
        assert!(m.abs() < 0.003 && (s / (2.0f64 / 300.0).sqrt() - 1.0).abs() < 0.02);
        // Kaiming uniform, fan_out: bound sqrt(6 / 200), std bound / sqrt(3).
        let t = kaiming_uniform(
            &shape,
            FanMode::FanOut,
            Nonlinearity::Relu,
            DType::F32,
            &mut rng,
        )
        .unwrap();
        let (_, s, max) = moments(&t);
        let bound = (6.0f64 / 200.0).sqrt();
        assert!(max <= bound && max > 0.99 * bound);
        assert!((s / (bound / 3f64.sqrt()) - 1.0).abs() < 0.02);
        // Xavier normal with gain 2: std = 2 sqrt(2 / 500).
        let t = xavier_normal(&shape, 2.0, DType::F64, &mut rng).unwrap();
        let (_, s, _) = moments(&t);
        assert!((s / (2.0 * (2.0f64 / 500.0).sqrt()) - 1.0).abs() < 0.02);
        assert_eq!(t.dtype(), DType::F64);
    }

    #[test]
    fn seeded_and_reproducible() {
        let draw = |seed| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            xavier_uniform(&[4, 5], 1.0, DType::F32, &mut rng).unwrap()
        };
        assert_eq!(draw(1), draw(1));
        assert_ne!(draw(1), draw(2));
    }

    #[test]
    fn bad_shapes_and_arguments_are_errors() {
        let mut rng = ChaCha8Rng::seed_from_u64(0);
        assert!(kaiming_uniform(
            &[5],
            FanMode::FanIn,
            Nonlinearity::Relu,
            DType::F32,
            &mut rng
        )
        .is_err());
        assert!(kaiming_normal(
            &[5, 0],
            FanMode::FanIn,
            Nonlinearity::Relu,
            DType::F32,
            &mut rng
        )
        .is_err());
        assert!(normal(&[2], 0.0, -1.0, DType::F32, &mut rng).is_err());
        assert!(uniform(&[2], 1.0, 0.0, DType::F32, &mut rng).is_err());
        assert_eq!(fans(&[3, 0]).unwrap(), (0, 3));
    }
}
