//! Seeded random tensors. The same seed gives the same tensor on every
//! platform and every run (ChaCha8 stream, independent of thread count).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{shape, DType, Dims, Tensor};
use crate::error::Result;

impl Tensor {
    /// Standard-normal samples (mean 0, variance 1) from a seeded generator.
    ///
    /// ```
    /// use retrograd::{Tensor, DType};
    /// let a = Tensor::randn(&[2, 3], DType::F32, 42)?;
    /// let b = Tensor::randn(&[2, 3], DType::F32, 42)?;
    /// assert_eq!(a, b);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> Result<Self> {
        Self::randn_with(shape, dtype, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    /// Uniform samples in `[0, 1)` from a seeded generator.
    pub fn rand(shape: &[usize], dtype: DType, seed: u64) -> Result<Self> {
        Self::rand_with(shape, dtype, &mut ChaCha8Rng::seed_from_u64(seed))
    }

    /// Standard-normal samples drawn from `rng`.
    pub fn randn_with<R: Rng + ?Sized>(shape: &[usize], dtype: DType, rng: &mut R) -> Result<Self> {
        let n = shape::checked_numel("randn", shape)?;
        let values: Vec<f64> = (0..n).map(|_| StandardNormal.sample(rng)).collect();
        Self::from_f64_slice(&values, shape, dtype)
    }

    /// Uniform samples in `[low, high)` drawn from `rng`.
    pub fn uniform_with<R: Rng + ?Sized>(
        shape: &[usize],
        low: f64,
        high: f64,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        let n = shape::checked_numel("uniform", shape)?;
        if !(low.is_finite() && high.is_finite() && low <= high) {
            return Err(crate::Error::invalid(
                "uniform",
                format!("bounds [{low}, {high}) must be finite and ordered"),
            ));
        }
        let values: Vec<f64> = (0..n)
            .map(|_| low + (high - low) * rng.random::<f64>())
            .collect();
        Self::from_f64_slice(&values, &Dims::from_slice(shape), dtype)
    }

    /// Uniform samples in `[0, 1)` drawn from `rng`.
    pub fn rand_with<R: Rng + ?Sized>(shape: &[usize], dtype: DType, rng: &mut R) -> Result<Self> {
        Self::uniform_with(shape, 0.0, 1.0, dtype, rng)
    }
}
