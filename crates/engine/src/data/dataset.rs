//! [`Dataset`]: a labelled classification set held in memory, with the
//! shape of one example (a flat vector, or an image `[C, H, W]`), its seeded
//! train/test splits (stratified, or a shuffle cut at an exact size) and
//! feature normalisation.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::base::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Examples with `num_features` features each (row-major, f64) and a class
/// label in `0..num_classes`. Each example has a shape, `[num_features]`
/// unless [`with_feature_shape`](Self::with_feature_shape) gives another
/// (`[1, 28, 28]` for MNIST): batches and [`features_tensor`](Self::features_tensor)
/// are `[n, ..feature_shape]`.
///
/// ```
/// use retrograd::data::Dataset;
/// let ds = Dataset::new(vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0], 2, vec![0, 1, 1], 2)?;
/// assert_eq!(ds.len(), 3);
/// assert_eq!(ds.features_of(1), &[2.0, 3.0]);
/// assert_eq!(ds.class_counts(), vec![1, 2]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    features: Vec<f64>,
    num_features: usize,
    feature_shape: Vec<usize>,
    labels: Vec<usize>,
    num_classes: usize,
}

impl Dataset {
    /// A dataset from row-major `features` (`labels.len()` rows of
    /// `num_features`) and labels in `0..num_classes`.
    pub fn new(
        features: Vec<f64>,
        num_features: usize,
        labels: Vec<usize>,
        num_classes: usize,
    ) -> Result<Self> {
        if num_features == 0 || Some(features.len()) != labels.len().checked_mul(num_features) {
            return Err(Error::invalid(
                "Dataset::new",
                format!(
                    "{} feature values do not make {} rows of {num_features}",
                    features.len(),
                    labels.len()
                ),
            ));
        }
        if let Some(&bad) = labels.iter().find(|&&l| l >= num_classes) {
            return Err(Error::IndexOutOfRange {
                op: "Dataset::new",
                index: bad as i64,
                size: num_classes,
            });
        }
        Ok(Dataset {
            features,
            num_features,
            feature_shape: vec![num_features],
            labels,
            num_classes,
        })
    }

    /// The same examples, each of shape `shape` (row-major; its product must
    /// be `num_features`): `[1, 28, 28]` makes batches of images
    /// `[B, 1, 28, 28]`, as a convolution wants.
    ///
    /// ```
    /// use retrograd::{DType, data::Dataset};
    /// let ds = Dataset::new(vec![0.0; 24], 12, vec![0, 1], 2)?.with_feature_shape(&[3, 2, 2])?;
    /// assert_eq!(ds.feature_shape(), &[3, 2, 2]);
    /// assert_eq!(ds.features_tensor(DType::F32)?.shape(), &[2, 3, 2, 2]);
    /// assert!(ds.with_feature_shape(&[5, 2]).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn with_feature_shape(mut self, shape: &[usize]) -> Result<Self> {
        if shape.is_empty()
            || shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)) != Some(self.num_features)
        {
            return Err(Error::invalid(
                "Dataset::with_feature_shape",
                format!(
                    "shape {shape:?} does not hold the {} features of an example",
                    self.num_features
                ),
            ));
        }
        self.feature_shape = shape.to_vec();
        Ok(self)
    }

    /// The shape of one example: `[num_features]` unless
    /// [`with_feature_shape`](Self::with_feature_shape) set another.
    pub fn feature_shape(&self) -> &[usize] {
        &self.feature_shape
    }

    /// The same examples with every feature `v` replaced by
    /// `(v - mean) / std`, as `torchvision.transforms.Normalize` does with
    /// one channel (MNIST: [`mnist::MEAN`](super::mnist::MEAN),
    /// [`mnist::STD`](super::mnist::STD)). `mean` must be finite and `std`
    /// finite and positive.
    ///
    /// ```
    /// use retrograd::data::Dataset;
    /// let ds = Dataset::new(vec![0.0, 0.5, 1.0], 1, vec![0, 0, 0], 1)?.normalized(0.5, 0.25)?;
    /// assert_eq!(ds.features(), &[-2.0, 0.0, 2.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn normalized(mut self, mean: f64, std: f64) -> Result<Self> {
        if !mean.is_finite() || !std.is_finite() || std <= 0.0 {
            return Err(Error::invalid(
                "Dataset::normalized",
                format!("mean must be finite and std finite and > 0, got mean {mean}, std {std}"),
            ));
        }
        for v in &mut self.features {
            *v = (*v - mean) / std;
        }
        Ok(self)
    }

    /// The number of examples.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no examples.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Features per example.
    pub fn num_features(&self) -> usize {
        self.num_features
    }

    /// The number of classes.
    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// Every label, in order.
    pub fn labels(&self) -> &[usize] {
        &self.labels
    }

    /// A CRC-32 of the examples (features, labels, feature shape, number
    /// of classes): ranks of a data-parallel run compare it to be sure they
    /// train on the same data, and a resumed run to be sure it resumes on it.
    ///
    /// ```
    /// use retrograd::data::Dataset;
    /// let a = Dataset::new(vec![1.0, 2.0], 1, vec![0, 1], 2)?;
    /// let b = Dataset::new(vec![1.0, 2.5], 1, vec![0, 1], 2)?;
    /// assert_eq!(a.checksum(), a.clone().checksum());
    /// assert_ne!(a.checksum(), b.checksum());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn checksum(&self) -> u32 {
        let mut h = crc32fast::Hasher::new();
        for v in &self.features {
            h.update(&v.to_bits().to_le_bytes());
        }
        for &l in &self.labels {
            h.update(&(l as u64).to_le_bytes());
        }
        for &d in &self.feature_shape {
            h.update(&(d as u64).to_le_bytes());
        }
        h.update(&(self.num_classes as u64).to_le_bytes());
        h.finalize()
    }

    /// Every feature value, row-major.
    pub fn features(&self) -> &[f64] {
        &self.features
    }

    /// The features of example `i`.
    pub fn features_of(&self, i: usize) -> &[f64] {
        &self.features[i * self.num_features..(i + 1) * self.num_features]
    }

    /// How many examples each class has.
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.num_classes];
        for &l in &self.labels {
            counts[l] += 1;
        }
        counts
    }

    /// All features as one `[len, ..feature_shape]` tensor of `dtype`.
    pub fn features_tensor(&self, dtype: DType) -> Result<Tensor> {
        let mut shape = vec![self.len()];
        shape.extend_from_slice(&self.feature_shape);
        Tensor::from_f64_slice(&self.features, &shape, dtype)
    }

    /// The examples at `indices`, in that order, as a new dataset.
    pub fn subset(&self, indices: &[usize]) -> Result<Dataset> {
        let mut features = Vec::with_capacity(indices.len() * self.num_features);
        let mut labels = Vec::with_capacity(indices.len());
        for &i in indices {
            if i >= self.len() {
                return Err(Error::IndexOutOfRange {
                    op: "Dataset::subset",
                    index: i as i64,
                    size: self.len(),
                });
            }
            features.extend_from_slice(self.features_of(i));
            labels.push(self.labels[i]);
        }
        Ok(Dataset {
            features,
            num_features: self.num_features,
            feature_shape: self.feature_shape.clone(),
            labels,
            num_classes: self.num_classes,
        })
    }

    /// Splits into `(train, test)` so that each class keeps its proportion:
    /// from every class, `round(count * test_fraction)` examples chosen at
    /// random (seeded) go to the test set. Both sets keep the original order.
    ///
    /// ```
    /// use retrograd::data::Dataset;
    /// let labels: Vec<usize> = (0..100).map(|i| i % 4).collect();
    /// let ds = Dataset::new(vec![0.0; 100], 1, labels, 4)?;
    /// let (train, test) = ds.stratified_split(0.2, 7)?;
    /// assert_eq!(test.class_counts(), vec![5, 5, 5, 5]);
    /// assert_eq!(train.len(), 80);
    /// assert_eq!(ds.stratified_split(0.2, 7)?, (train, test));   // seeded
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn stratified_split(&self, test_fraction: f64, seed: u64) -> Result<(Dataset, Dataset)> {
        if !(0.0..=1.0).contains(&test_fraction) {
            return Err(Error::invalid(
                "stratified_split",
                format!("test_fraction must be in [0, 1], got {test_fraction}"),
            ));
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); self.num_classes];
        for (i, &l) in self.labels.iter().enumerate() {
            by_class[l].push(i);
        }
        let mut in_test = vec![false; self.len()];
        for members in &mut by_class {
            members.shuffle(&mut rng);
            let n_test = (members.len() as f64 * test_fraction).round() as usize;
            for &i in &members[..n_test] {
                in_test[i] = true;
            }
        }
        let (test, train): (Vec<usize>, Vec<usize>) = (0..self.len()).partition(|&i| in_test[i]);
        Ok((self.subset(&train)?, self.subset(&test)?))
    }

    /// Splits into `(train, test)` on a seeded shuffle: the examples are put
    /// in a random order drawn from `seed`, the first `test_len` go to the
    /// test set and the others to the training set, both in that shuffled
    /// order. Unlike [`stratified_split`](Self::stratified_split) the sizes
    /// are exact and class proportions are left to chance.
    ///
    /// ```
    /// use retrograd::data::Dataset;
    /// let ds = Dataset::new((0..10).map(f64::from).collect(), 1, vec![0; 10], 1)?;
    /// let (train, test) = ds.shuffled_split(3, 42)?;
    /// assert_eq!((train.len(), test.len()), (7, 3));
    /// assert_eq!(ds.shuffled_split(3, 42)?, (train, test));   // seeded
    /// assert!(ds.shuffled_split(11, 42).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn shuffled_split(&self, test_len: usize, seed: u64) -> Result<(Dataset, Dataset)> {
        if test_len > self.len() {
            return Err(Error::invalid(
                "shuffled_split",
                format!(
                    "test_len {test_len} is more than the {} examples",
                    self.len()
                ),
            ));
        }
        let mut order: Vec<usize> = (0..self.len()).collect();
        order.shuffle(&mut ChaCha8Rng::seed_from_u64(seed));
        let (test, train) = order.split_at(test_len);
        Ok((self.subset(train)?, self.subset(test)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toy() -> Dataset {
        let labels: Vec<usize> = (0..30)
            .map(|i| if i < 20 { 0 } else { 1 + i % 2 })
            .collect();
        let features: Vec<f64> = (0..60).map(|v| v as f64).collect();
        Dataset::new(features, 2, labels, 3).unwrap()
    }

    /// The first feature of every example of both sides of a split of
    /// [`toy`] (a unique id), train first.
    fn first_features(train: &Dataset, test: &Dataset) -> Vec<f64> {
        train
            .features()
            .chunks(2)
            .chain(test.features().chunks(2))
            .map(|r| r[0])
            .collect()
    }

    #[test]
    fn split_is_stratified_disjoint_and_complete() {
        let ds = toy();
        let (train, test) = ds.stratified_split(0.3, 1).unwrap();
        assert_eq!(test.class_counts(), vec![6, 2, 2]);
        assert_eq!(train.class_counts(), vec![14, 3, 3]);
        // Every example lands in exactly one side (features are unique ids).
        let mut firsts = first_features(&train, &test);
        firsts.sort_by(f64::total_cmp);
        assert_eq!(firsts, (0..30).map(|i| (2 * i) as f64).collect::<Vec<_>>());
        let (_, other) = ds.stratified_split(0.3, 2).unwrap();
        assert_ne!(other, test, "another seed picks other examples");
    }

    #[test]
    fn invalid_inputs() {
        assert!(Dataset::new(vec![0.0; 5], 2, vec![0, 1], 2).is_err());
        assert!(matches!(
            Dataset::new(vec![0.0; 4], 2, vec![0, 2], 2),
            Err(Error::IndexOutOfRange { index: 2, .. })
        ));
        assert!(toy().stratified_split(1.5, 0).is_err());
        assert!(toy().subset(&[30]).is_err());
    }

    #[test]
    fn shuffled_split_is_exact_disjoint_complete_and_seeded() {
        let ds = toy();
        let (train, test) = ds.shuffled_split(7, 3).unwrap();
        assert_eq!((train.len(), test.len()), (23, 7));
        let mut firsts = first_features(&train, &test);
        assert_ne!(
            firsts[..7],
            [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0],
            "shuffled"
        );
        firsts.sort_by(f64::total_cmp);
        assert_eq!(firsts, (0..30).map(|i| (2 * i) as f64).collect::<Vec<_>>());
        assert_eq!(ds.shuffled_split(7, 3).unwrap(), (train, test.clone()));
        assert_ne!(ds.shuffled_split(7, 4).unwrap().1, test);
        let (all, none) = ds.shuffled_split(0, 0).unwrap();
        assert_eq!((all.len(), none.len()), (30, 0));
        assert_eq!(ds.shuffled_split(30, 0).unwrap().1.len(), 30);
        assert!(ds.shuffled_split(31, 0).is_err());
    }

    #[test]
    fn feature_shape_survives_subsets_and_splits() {
        let ds = toy().with_feature_shape(&[1, 2, 1]).unwrap();
        assert_eq!(ds.feature_shape(), &[1, 2, 1]);
        let (train, test) = ds.shuffled_split(5, 0).unwrap();
        assert_eq!(train.feature_shape(), &[1, 2, 1]);
        assert_eq!(
            test.features_tensor(DType::F64).unwrap().shape(),
            &[5, 1, 2, 1]
        );
        let (train, _) = ds.stratified_split(0.5, 0).unwrap();
        assert_eq!(train.feature_shape(), &[1, 2, 1]);
        assert_eq!(toy().feature_shape(), &[2]);
        for bad in [&[][..], &[3], &[2, 2], &[usize::MAX, 2]] {
            assert!(toy().with_feature_shape(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn normalized_maps_every_feature() {
        let ds = toy().normalized(1.0, 2.0).unwrap();
        assert_eq!(&ds.features()[..3], &[-0.5, 0.0, 0.5]);
        assert_eq!(ds.labels(), toy().labels());
        for (m, s) in [
            (f64::NAN, 1.0),
            (0.0, 0.0),
            (0.0, -1.0),
            (0.0, f64::INFINITY),
        ] {
            assert!(toy().normalized(m, s).is_err());
        }
    }

    #[test]
    fn features_tensor_has_the_right_shape() {
        let t = toy().features_tensor(DType::F32).unwrap();
        assert_eq!(t.shape(), &[30, 2]);
        assert_eq!(t.dtype(), DType::F32);
    }
}
