//! [`DistributedSampler`]: which examples each rank trains on in an epoch.
//! PyTorch's `DistributedSampler` rules: disjoint shards of equal length,
//! reshuffled each epoch from a seed shared by every rank, padded by
//! repeating the first indices (or cut, with `drop_last`) so that every rank
//! runs the same number of steps.

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::data::{Batches, Dataset};
use retrograd_engine::nn::setters::setters;
use retrograd_engine::tensor::DType;

/// This rank's share of a dataset of `len` examples, epoch by epoch.
///
/// Each epoch's order is a permutation of `0..len` drawn from
/// `seed + epoch` (the same on every rank; a ChaCha8 generator, so not the
/// very permutation PyTorch's `randperm` draws), or `0..len` unshuffled.
/// Without `drop_last` the order is padded with its own first indices up
/// to a multiple of `num_replicas`; with it, cut down to one. Rank `r`
/// takes positions `r, r + num_replicas, ...`. So every rank gets
/// `num_samples()` examples and the shards of one epoch are disjoint
/// (except for the padding, as in PyTorch).
///
/// ```
/// use retrograd::distributed::DistributedSampler;
/// let r0 = DistributedSampler::new(10, 3, 0)?.shuffle(false);
/// let r2 = DistributedSampler::new(10, 3, 2)?.shuffle(false);
/// assert_eq!(r0.indices(), vec![0, 3, 6, 9]);
/// assert_eq!(r2.indices(), vec![2, 5, 8, 1]); // padded with index 1
/// let cut = DistributedSampler::new(10, 3, 2)?.shuffle(false).drop_last(true);
/// assert_eq!(cut.indices(), vec![2, 5, 8]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DistributedSampler {
    len: usize,
    num_replicas: usize,
    rank: usize,
    shuffle: bool,
    seed: u64,
    drop_last: bool,
    epoch: u64,
}

setters! {
    impl DistributedSampler {
        /// Whether each epoch draws a new order (default true).
        shuffle(shuffle: bool);
        /// The seed every rank shares (default 0).
        seed(seed: u64);
        /// Cut the order to a multiple of `num_replicas` instead of padding it.
        drop_last(drop_last: bool);
    }
}

impl DistributedSampler {
    /// A shuffling sampler (seed 0, no `drop_last`, epoch 0) of `len`
    /// examples for `rank` of `num_replicas`.
    pub fn new(len: usize, num_replicas: usize, rank: usize) -> Result<Self> {
        if num_replicas == 0 || rank >= num_replicas {
            return Err(Error::invalid(
                "DistributedSampler::new",
                format!("rank {rank} of {num_replicas} replicas"),
            ));
        }
        Ok(DistributedSampler {
            len,
            num_replicas,
            rank,
            shuffle: true,
            seed: 0,
            drop_last: false,
            epoch: 0,
        })
    }

    /// Sets the epoch (call it at the start of each; every rank with the
    /// same value), which picks the epoch's order.
    pub fn set_epoch(&mut self, epoch: u64) {
        self.epoch = epoch;
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// How many examples each rank gets per epoch.
    pub fn num_samples(&self) -> usize {
        if self.drop_last && !self.len.is_multiple_of(self.num_replicas) {
            // PyTorch: ceil((len - num_replicas) / num_replicas) == floor(len / num_replicas).
            self.len / self.num_replicas
        } else {
            self.len.div_ceil(self.num_replicas)
        }
    }

    /// This rank's example indices for the current epoch, in order.
    pub fn indices(&self) -> Vec<usize> {
        let mut order: Vec<usize> = (0..self.len).collect();
        if self.shuffle {
            let mut rng = ChaCha8Rng::seed_from_u64(self.seed.wrapping_add(self.epoch));
            order.shuffle(&mut rng);
        }
        let total = self.num_samples() * self.num_replicas;
        if total <= order.len() {
            order.truncate(total);
        } else if !order.is_empty() {
            // Pad by repeating the order from its start, as often as needed.
            let padding = total - order.len();
            let head: Vec<usize> = order.iter().copied().cycle().take(padding).collect();
            order.extend(head);
        }
        order
            .into_iter()
            .skip(self.rank)
            .step_by(self.num_replicas)
            .collect()
    }

    /// This rank's mini-batches of `dataset` for the current epoch (the
    /// dataset must have the `len` the sampler was made for).
    pub fn batches<'a>(
        &self,
        dataset: &'a Dataset,
        batch_size: usize,
        dtype: DType,
    ) -> Result<Batches<'a>> {
        if dataset.len() != self.len {
            return Err(Error::invalid(
                "DistributedSampler::batches",
                format!(
                    "the sampler is for {} examples, the dataset has {}",
                    self.len,
                    dataset.len()
                ),
            ));
        }
        Batches::from_indices(dataset, self.indices(), batch_size, dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(len: usize, n: usize, drop_last: bool, epoch: u64) -> Vec<Vec<usize>> {
        (0..n)
            .map(|r| {
                let mut s = DistributedSampler::new(len, n, r)
                    .unwrap()
                    .seed(7)
                    .drop_last(drop_last);
                s.set_epoch(epoch);
                s.indices()
            })
            .collect()
    }

    #[test]
    fn shards_are_disjoint_cover_everything_and_have_equal_length() {
        for (len, n) in [(10, 2), (10, 3), (7, 4), (100, 8), (3, 5)] {
            let parts = shards(len, n, false, 0);
            let per = len.div_ceil(n);
            assert!(parts.iter().all(|p| p.len() == per));
            let mut all: Vec<usize> = parts.concat();
            all.sort();
            all.dedup();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "len {len}, n {n}");
            if len % n == 0 {
                assert_eq!(parts.concat().len(), len, "no padding needed");
            }
            let cut = shards(len, n, true, 0);
            let per = len / n;
            assert!(cut.iter().all(|p| p.len() == per));
            let mut all: Vec<usize> = cut.concat();
            all.sort();
            let before = all.len();
            all.dedup();
            assert_eq!(all.len(), before, "drop_last shards are disjoint");
        }
    }

    #[test]
    fn each_epoch_reshuffles_the_same_way_on_every_run() {
        let a = shards(50, 2, false, 0);
        let b = shards(50, 2, false, 1);
        assert_ne!(a, b);
        assert_eq!(a, shards(50, 2, false, 0));
    }

    #[test]
    fn bad_ranks_and_lengths_are_errors() {
        assert!(DistributedSampler::new(10, 0, 0).is_err());
        assert!(DistributedSampler::new(10, 2, 2).is_err());
        let ds = Dataset::new(vec![0.0; 4], 1, vec![0; 4], 1).unwrap();
        let s = DistributedSampler::new(5, 2, 0).unwrap();
        assert!(s.batches(&ds, 2, DType::F64).is_err());
        let s = DistributedSampler::new(4, 2, 1).unwrap().shuffle(false);
        let b: Vec<_> = s.batches(&ds, 2, DType::F64).unwrap().collect();
        assert_eq!(b.len(), 1);
        assert_eq!(b[0].labels.len(), 2);
    }
}
