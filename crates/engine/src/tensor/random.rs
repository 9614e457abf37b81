//! Seeded random tensors. The same seed gives the same tensor on every
//! platform and every run (ChaCha8 stream, independent of thread count).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};

use super::{shape, storage, DType, Dims, Tensor};
use crate::base::error::Result;

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
        float_dtype("randn", dtype)?;
        let n = shape::checked_numel("randn", shape)?;
        let mut values: Vec<f64> = storage::try_with_capacity("randn", shape, n)?;
        values.extend((0..n).map(|_| -> f64 { StandardNormal.sample(rng) }));
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
        Self::uniform_named("uniform", shape, low, high, dtype, rng)
    }

    /// Uniform samples in `[0, 1)` drawn from `rng`.
    pub fn rand_with<R: Rng + ?Sized>(shape: &[usize], dtype: DType, rng: &mut R) -> Result<Self> {
        Self::uniform_named("rand", shape, 0.0, 1.0, dtype, rng)
    }

    /// `uniform_with` with errors naming `op`.
    fn uniform_named<R: Rng + ?Sized>(
        op: &'static str,
        shape: &[usize],
        low: f64,
        high: f64,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        float_dtype(op, dtype)?;
        let n = shape::checked_numel(op, shape)?;
        if !(low.is_finite() && high.is_finite() && low <= high) {
            return Err(crate::Error::invalid(
                op,
                format!("bounds [{low}, {high}) must be finite and ordered"),
            ));
        }
        let mut values: Vec<f64> = storage::try_with_capacity(op, shape, n)?;
        values.extend((0..n).map(|_| low + (high - low) * rng.random::<f64>()));
        Self::from_f64_slice(&values, &Dims::from_slice(shape), dtype)
    }
}

/// Random samples are floats: an integer or bool `dtype` is `Error::NotFloat`.
fn float_dtype(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(crate::Error::NotFloat { op, found: dtype })
    }
}
