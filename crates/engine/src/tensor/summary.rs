//! [`TensorSummary`]: a handful of numbers that describe a tensor too large
//! to print (pictures, the backward-sweep page).

use super::{DType, Tensor};

/// A tensor described without listing it: dtype, shape, L2 norm, extremes
/// and mean, and every element when there are few.
///
/// ```
/// use retrograd::Tensor;
/// let t = Tensor::from_vec(vec![3.0, -4.0, 0.0, 1.0], &[2, 2])?;
/// let s = t.summary(8);
/// assert_eq!(s.shape, vec![2, 2]);
/// assert_eq!((s.min, s.max, s.mean), (-4.0, 3.0, 0.0));
/// assert_eq!(s.norm, 26f64.sqrt());
/// assert_eq!(s.values, Some(vec![3.0, -4.0, 0.0, 1.0]));
/// assert_eq!(t.summary(3).values, None);   // more than 3 elements: no listing
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct TensorSummary {
    /// The tensor's dtype.
    pub dtype: DType,
    /// The tensor's shape.
    pub shape: Vec<usize>,
    /// The L2 norm of the finite elements.
    pub norm: f64,
    /// The smallest finite element (NaN when there is none).
    pub min: f64,
    /// The largest finite element (NaN when there is none).
    pub max: f64,
    /// The mean of the finite elements (NaN when there is none).
    pub mean: f64,
    /// How many elements are NaN or infinite.
    pub non_finite: usize,
    /// Every element in row-major order, as f64, when there are at most the
    /// `max_values` asked for.
    pub values: Option<Vec<f64>>,
}

impl TensorSummary {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

impl Tensor {
    /// Describes this tensor: norm, min, max and mean over its finite
    /// elements, how many are not finite, and the elements themselves when
    /// there are at most `max_values` (a bool reads as 0 or 1).
    pub fn summary(&self, max_values: usize) -> TensorSummary {
        let values = self.to_f64_vec();
        let (mut sum, mut squares, mut finite) = (0.0, 0.0, 0usize);
        let (mut min, mut max) = (f64::INFINITY, f64::NEG_INFINITY);
        for &v in values.iter().filter(|v| v.is_finite()) {
            sum += v;
            squares += v * v;
            finite += 1;
            min = min.min(v);
            max = max.max(v);
        }
        let (min, max, mean) = if finite == 0 {
            (f64::NAN, f64::NAN, f64::NAN)
        } else {
            (min, max, sum / finite as f64)
        };
        TensorSummary {
            dtype: self.dtype(),
            shape: self.shape().to_vec(),
            norm: squares.sqrt(),
            min,
            max,
            mean,
            non_finite: values.len() - finite,
            values: (values.len() <= max_values).then_some(values),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    #[test]
    fn non_finite_elements_are_counted_not_summed() {
        let t = Tensor::vector(&[1.0, f64::NAN, f64::INFINITY, -2.0]);
        let s = t.summary(0);
        assert_eq!((s.min, s.max, s.mean, s.non_finite), (-2.0, 1.0, -0.5, 2));
        assert_eq!(s.values, None);
        let empty = Tensor::vector::<f64>(&[]).summary(8);
        assert!(empty.min.is_nan() && empty.mean.is_nan());
        assert_eq!(
            (empty.norm, empty.numel(), empty.values),
            (0.0, 0, Some(vec![]))
        );
        let scalar = Tensor::scalar(2.5f32).summary(1);
        assert_eq!((scalar.numel(), scalar.values), (1, Some(vec![2.5])));
    }
}
