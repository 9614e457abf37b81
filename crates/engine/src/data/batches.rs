//! Mini-batches: an iterator over a [`Dataset`] that yields a features
//! tensor `[B, ..feature_shape]` (`[B, num_features]` for flat examples) and
//! the `B` labels, in order or shuffled by a
//! seeded generator (a new order each epoch, the same orders every run).

use rand::seq::SliceRandom;
use rand::Rng;

use super::Dataset;
use crate::base::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// One mini-batch.
#[derive(Clone, Debug)]
pub struct Batch {
    /// Features, `[B, ..feature_shape]` (see [`Dataset::feature_shape`]).
    pub features: Tensor,
    /// The `B` class labels.
    pub labels: Vec<usize>,
}

/// Iterator over the mini-batches of one epoch.
///
/// ```
/// use rand::SeedableRng;
/// use retrograd::{DType, data::{Batches, Dataset}};
/// let ds = Dataset::new((0..10).map(|v| v as f64).collect(), 2, vec![0, 1, 0, 1, 0], 2)?;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
/// let batches: Vec<_> = Batches::shuffled(&ds, 2, DType::F32, &mut rng)?.collect();
/// assert_eq!(batches.len(), 3);                      // 2 + 2 + 1
/// assert_eq!(batches[0].features.shape(), &[2, 2]);
/// assert_eq!(batches[2].labels.len(), 1);
/// let mut seen: Vec<usize> = batches.iter().flat_map(|b| b.labels.clone()).collect();
/// seen.sort();
/// assert_eq!(seen, vec![0, 0, 0, 1, 1]);             // every example once
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Batches<'a> {
    dataset: &'a Dataset,
    order: Vec<usize>,
    batch_size: usize,
    dtype: DType,
    next: usize,
    drop_last: bool,
}

impl<'a> Batches<'a> {
    /// The batches of `dataset` in its own order.
    pub fn sequential(dataset: &'a Dataset, batch_size: usize, dtype: DType) -> Result<Self> {
        if batch_size == 0 {
            return Err(Error::invalid("Batches", "batch_size must be > 0"));
        }
        Ok(Batches {
            dataset,
            order: (0..dataset.len()).collect(),
            batch_size,
            dtype,
            next: 0,
            drop_last: false,
        })
    }

    /// The batches of `dataset` in an order drawn from `rng` (pass the same
    /// seeded generator every epoch: each epoch gets a fresh permutation, and
    /// a run is reproducible from its seed).
    pub fn shuffled<R: Rng + ?Sized>(
        dataset: &'a Dataset,
        batch_size: usize,
        dtype: DType,
        rng: &mut R,
    ) -> Result<Self> {
        let mut b = Self::sequential(dataset, batch_size, dtype)?;
        b.order.shuffle(rng);
        Ok(b)
    }

    /// The batches of the examples at `indices`, in that order (a
    /// distributed sampler's shard, a hand-picked order); an index past the
    /// dataset's end is an [`Error::IndexOutOfRange`].
    ///
    /// ```
    /// use retrograd::{DType, data::{Batches, Dataset}};
    /// let ds = Dataset::new((0..5).map(|v| v as f64).collect(), 1, vec![0; 5], 1)?;
    /// let b: Vec<_> = Batches::from_indices(&ds, vec![4, 0, 2], 2, DType::F64)?.collect();
    /// assert_eq!(b[0].features.to_f64_vec(), vec![4.0, 0.0]);
    /// assert_eq!(b[1].features.to_f64_vec(), vec![2.0]);
    /// assert!(Batches::from_indices(&ds, vec![5], 2, DType::F64).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn from_indices(
        dataset: &'a Dataset,
        indices: Vec<usize>,
        batch_size: usize,
        dtype: DType,
    ) -> Result<Self> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= dataset.len()) {
            return Err(Error::IndexOutOfRange {
                op: "Batches::from_indices",
                index: bad as i64,
                size: dataset.len(),
            });
        }
        let mut b = Self::sequential(dataset, batch_size, dtype)?;
        b.order = indices;
        Ok(b)
    }

    /// Skips a last batch smaller than `batch_size`.
    pub fn drop_last(mut self, drop_last: bool) -> Self {
        self.drop_last = drop_last;
        self
    }

    /// Skips the first `n` batches without building them: where a run
    /// resumed inside an epoch continues (the order drawn again from the
    /// generator as the epoch began, then the batches already trained on
    /// passed over).
    ///
    /// ```
    /// use retrograd::{DType, data::{Batches, Dataset}};
    /// let ds = Dataset::new((0..5).map(|v| v as f64).collect(), 1, vec![0; 5], 1)?;
    /// let rest: Vec<_> = Batches::sequential(&ds, 2, DType::F64)?.skip_batches(2).collect();
    /// assert_eq!(rest.len(), 1);
    /// assert_eq!(rest[0].features.to_f64_vec(), vec![4.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn skip_batches(mut self, n: usize) -> Self {
        let skipped = n.saturating_mul(self.batch_size);
        self.next = self.next.saturating_add(skipped).min(self.order.len());
        self
    }

    /// How many batches this epoch has in all.
    pub fn num_batches(&self) -> usize {
        let n = self.order.len();
        if self.drop_last {
            n / self.batch_size
        } else {
            n.div_ceil(self.batch_size)
        }
    }
}

impl Iterator for Batches<'_> {
    type Item = Batch;

    fn next(&mut self) -> Option<Batch> {
        let remaining = self.order.len() - self.next;
        let take = remaining.min(self.batch_size);
        if take == 0 || (self.drop_last && take < self.batch_size) {
            return None;
        }
        let rows = &self.order[self.next..self.next + take];
        self.next += take;
        let width = self.dataset.num_features();
        let mut values = Vec::with_capacity(take * width);
        for &i in rows {
            values.extend_from_slice(self.dataset.features_of(i));
        }
        let mut shape = vec![take];
        shape.extend_from_slice(self.dataset.feature_shape());
        let features = Tensor::from_f64_slice(&values, &shape, self.dtype).expect(
            "the batch holds take * width values, and width is the product of feature_shape",
        );
        let labels = rows.iter().map(|&i| self.dataset.labels()[i]).collect();
        Some(Batch { features, labels })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let left = self
            .num_batches()
            .saturating_sub(self.next.div_ceil(self.batch_size));
        (left, Some(left))
    }
}

impl ExactSizeIterator for Batches<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn ds(n: usize) -> Dataset {
        Dataset::new((0..n).map(|v| v as f64).collect(), 1, vec![0; n], 1).unwrap()
    }

    #[test]
    fn sequential_covers_in_order_and_drop_last() {
        let d = ds(7);
        let b: Vec<Vec<f64>> = Batches::sequential(&d, 3, DType::F64)
            .unwrap()
            .map(|b| b.features.to_f64_vec())
            .collect();
        assert_eq!(b, vec![vec![0., 1., 2.], vec![3., 4., 5.], vec![6.]]);
        let it = Batches::sequential(&d, 3, DType::F64)
            .unwrap()
            .drop_last(true);
        assert_eq!(it.len(), 2);
        assert_eq!(it.count(), 2);
        assert!(Batches::sequential(&d, 0, DType::F64).is_err());
    }

    #[test]
    fn shuffles_differ_per_epoch_and_repeat_per_seed() {
        let d = ds(50);
        let epoch = |rng: &mut ChaCha8Rng| -> Vec<f64> {
            Batches::shuffled(&d, 16, DType::F32, rng)
                .unwrap()
                .flat_map(|b| b.features.to_f64_vec())
                .collect()
        };
        let mut rng = ChaCha8Rng::seed_from_u64(9);
        let (e1, e2) = (epoch(&mut rng), epoch(&mut rng));
        assert_ne!(e1, e2);
        let mut again = ChaCha8Rng::seed_from_u64(9);
        assert_eq!(epoch(&mut again), e1);
        let mut sorted = e1.clone();
        sorted.sort_by(f64::total_cmp);
        assert_eq!(sorted, (0..50).map(|v| v as f64).collect::<Vec<_>>());
    }

    #[test]
    fn batches_have_the_feature_shape() {
        let d = Dataset::new((0..24).map(f64::from).collect(), 6, vec![0; 4], 1)
            .unwrap()
            .with_feature_shape(&[1, 2, 3])
            .unwrap();
        let shapes: Vec<Vec<usize>> = Batches::sequential(&d, 3, DType::F32)
            .unwrap()
            .map(|b| b.features.shape().to_vec())
            .collect();
        assert_eq!(shapes, vec![vec![3, 1, 2, 3], vec![1, 1, 2, 3]]);
    }

    #[test]
    fn size_hint_counts_down() {
        let d = ds(5);
        let mut it = Batches::sequential(&d, 2, DType::F32).unwrap();
        assert_eq!(it.len(), 3);
        it.next();
        assert_eq!(it.len(), 2);
        it.next();
        it.next();
        assert_eq!(it.len(), 0);
        assert!(it.next().is_none());
    }
}
