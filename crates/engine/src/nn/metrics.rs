//! Classification metrics on plain tensors, and evaluating a classifier on a
//! [`Dataset`](crate::data::Dataset).

use crate::base::error::{Error, Result};
use crate::core::graph::Graph;
use crate::data::{Batches, Dataset};
use crate::nn::Forward;
use crate::tensor::{DType, Tensor};

/// The index of the largest value in each row of a `[N, C]` tensor (the
/// first one on ties; NaN counts as largest, as in PyTorch's `argmax`).
///
/// ```
/// use retrograd::{Tensor, nn::argmax_rows};
/// let logits = Tensor::from_vec(vec![0.1, 2.0, -1.0, 3.0, 0.0, 3.0], &[2, 3])?;
/// assert_eq!(argmax_rows(&logits)?, vec![1, 0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn argmax_rows(scores: &Tensor) -> Result<Vec<usize>> {
    let [n, c] = scores.shape() else {
        return Err(Error::invalid(
            "argmax_rows",
            format!("expected a [N, C] tensor, found shape {:?}", scores.shape()),
        ));
    };
    if *c == 0 {
        return Err(Error::invalid("argmax_rows", "rows have no columns"));
    }
    let values = scores.to_f64_vec();
    Ok((0..*n)
        .map(|i| {
            let row = &values[i * c..(i + 1) * c];
            let mut best = 0;
            for (j, &v) in row.iter().enumerate().skip(1) {
                if row[best].is_nan() {
                    break;
                }
                if v > row[best] || v.is_nan() {
                    best = j;
                }
            }
            best
        })
        .collect())
}

/// The fraction of rows of `scores` (`[N, C]`) whose argmax is the label.
///
/// ```
/// use retrograd::{Tensor, nn::accuracy};
/// let logits = Tensor::from_vec(vec![0.1, 2.0, 3.0, 0.0], &[2, 2])?;
/// assert_eq!(accuracy(&logits, &[1, 1])?, 0.5);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn accuracy(scores: &Tensor, labels: &[usize]) -> Result<f64> {
    let predicted = argmax_rows(scores)?;
    if predicted.len() != labels.len() {
        return Err(Error::invalid(
            "accuracy",
            format!(
                "{} rows of scores but {} labels",
                predicted.len(),
                labels.len()
            ),
        ));
    }
    if labels.is_empty() {
        return Ok(0.0);
    }
    let correct = predicted.iter().zip(labels).filter(|(p, l)| p == l).count();
    Ok(correct as f64 / labels.len() as f64)
}

/// The accuracy of `model` (mapping `[B, features]` to `[B, classes]`
/// scores) on `data`, in batches of `batch_size`, recording nothing.
/// The caller chooses the mode: call `set_training(false)` first to
/// evaluate without dropout.
pub fn evaluate_accuracy(
    model: &dyn Forward,
    data: &Dataset,
    batch_size: usize,
    dtype: DType,
) -> Result<f64> {
    let mut correct = 0usize;
    for batch in Batches::sequential(data, batch_size, dtype)? {
        let graph = Graph::new();
        let scores = graph.no_grad(|| model.forward(&graph.constant(batch.features)))?;
        let predicted = argmax_rows(scores.value())?;
        correct += predicted
            .iter()
            .zip(&batch.labels)
            .filter(|(p, l)| p == l)
            .count();
    }
    Ok(if data.is_empty() {
        0.0
    } else {
        correct as f64 / data.len() as f64
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argmax_ties_nan_and_errors() {
        let t = Tensor::from_vec(vec![1.0, 1.0, f64::NAN, 0.0, 5.0, 5.0], &[3, 2]).unwrap();
        assert_eq!(argmax_rows(&t).unwrap(), vec![0, 0, 0]);
        let t = Tensor::from_vec(vec![0.0, f64::NAN], &[1, 2]).unwrap();
        assert_eq!(argmax_rows(&t).unwrap(), vec![1]);
        assert!(argmax_rows(&Tensor::zeros(&[3], DType::F32).unwrap()).is_err());
        assert!(argmax_rows(&Tensor::zeros(&[3, 0], DType::F32).unwrap()).is_err());
        let ok = Tensor::zeros(&[2, 2], DType::F32).unwrap();
        assert!(accuracy(&ok, &[0]).is_err());
        assert_eq!(accuracy(&ok, &[0, 1]).unwrap(), 0.5);
    }

    #[test]
    fn evaluates_a_fixed_classifier() {
        // Features are the scores themselves: the identity "model".
        let data = Dataset::new(vec![0.9, 0.1, 0.2, 0.8, 0.6, 0.4], 2, vec![0, 1, 1], 2).unwrap();
        let acc =
            evaluate_accuracy(&crate::nn::Activation::Identity, &data, 2, DType::F64).unwrap();
        assert!((acc - 2.0 / 3.0).abs() < 1e-15);
    }
}
