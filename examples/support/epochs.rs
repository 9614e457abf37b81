//! What the two epoch-based jobs (`train_digits`, `train_mnist_cnn`) keep
//! in a training state to resume inside an epoch: the epoch's running sums
//! and the shuffling generator as the epoch began.

use rand_chacha::ChaCha8Rng;
use retrograd::data::{Batches, Dataset};
use retrograd::train::RankState;
use retrograd::{DType, Error, Result};

/// An epoch's running sums (and the rate it began with), kept in a
/// training state so that a run resumed inside an epoch prints the row the
/// uninterrupted run prints.
#[derive(Clone, Copy, Debug, Default)]
pub struct EpochSums {
    pub lr: f64,
    pub loss: f64,
    pub correct: f64,
    pub seen: f64,
}

impl EpochSums {
    /// Fresh sums of an epoch that begins at rate `lr`.
    pub fn starting(lr: f64) -> Self {
        EpochSums {
            lr,
            ..Self::default()
        }
    }

    /// Adds the sums to a rank's state.
    pub fn save(&self, rank: RankState) -> RankState {
        rank.with_value("epoch_lr", self.lr)
            .with_value("epoch_loss_sum", self.loss)
            .with_value("epoch_correct", self.correct)
            .with_value("epoch_seen", self.seen)
    }

    /// The sums saved in a rank's state.
    pub fn restore(rank: &RankState) -> Result<Self> {
        Ok(EpochSums {
            lr: rank.value("epoch_lr")?,
            loss: rank.value("epoch_loss_sum")?,
            correct: rank.value("epoch_correct")?,
            seen: rank.value("epoch_seen")?,
        })
    }
}

/// The batches of an epoch of `train` in the order `rng` draws, the first
/// `done` skipped. At an epoch's start (`done == 0`) `epoch_start` becomes
/// a copy of `rng`, the order is drawn from it and `rng` moves past the
/// draw, as `Batches::shuffled(train, .., rng)` moves it; inside an epoch
/// (a resumed run) the order is drawn again from `epoch_start` and `rng`
/// is left where it is.
pub fn shuffled_epoch<'a>(
    train: &'a Dataset,
    batch_size: usize,
    rng: &mut ChaCha8Rng,
    epoch_start: &mut ChaCha8Rng,
    done: u64,
) -> Result<Batches<'a>> {
    if done == 0 {
        *epoch_start = rng.clone();
    }
    let mut order = epoch_start.clone();
    let batches = Batches::shuffled(train, batch_size, DType::F32, &mut order)?;
    if done == 0 {
        *rng = order;
    }
    let done = usize::try_from(done).map_err(|_| Error::InvalidArgument {
        op: "resume",
        reason: format!("batch {done} of an epoch"),
    })?;
    Ok(batches.skip_batches(done))
}
