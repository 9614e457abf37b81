//! [`RandomStream`]: a module's own source of random numbers (dropout's
//! masks), counter-based so that its whole state is one position.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A counter-based random stream: the `k`-th draw is a fixed function of
/// `(seed, k)`, so the stream's state is its seed and how many draws were
/// taken. Dropout layers keep one each;
/// [`Module::visit_random_streams`](crate::nn::Module::visit_random_streams)
/// lists them, so a training
/// state can save every position and a resumed run draws the same masks.
/// State dicts and model checkpoints leave them out (they hold tensors).
///
/// Cloning gives another handle to the same stream (like
/// [`Buffer`](crate::nn::Buffer)); it is `Send + Sync`, and draws go
/// through `&self`.
///
/// ```
/// use retrograd::nn::RandomStream;
/// let s = RandomStream::new(7);
/// let (a, b) = (s.next_seed(), s.next_seed());
/// assert_ne!(a, b);
/// assert_eq!(s.position(), 2);
/// s.set_position(1);
/// assert_eq!(s.next_seed(), b); // the same draw again
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct RandomStream {
    state: Arc<State>,
}

#[derive(Debug)]
struct State {
    seed: AtomicU64,
    position: AtomicU64,
}

impl RandomStream {
    /// A stream at position 0.
    pub fn new(seed: u64) -> Self {
        RandomStream {
            state: Arc::new(State {
                seed: AtomicU64::new(seed),
                position: AtomicU64::new(0),
            }),
        }
    }

    /// A separate stream with this one's seed and position (not a handle
    /// to the same one, as `clone` is).
    pub fn fork(&self) -> Self {
        let s = RandomStream::new(self.seed());
        s.set_position(self.position());
        s
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.state.seed.load(Ordering::Relaxed)
    }

    /// How many draws were taken.
    pub fn position(&self) -> u64 {
        self.state.position.load(Ordering::Relaxed)
    }

    /// Moves the stream to `position` of the same seed.
    pub fn set_position(&self, position: u64) {
        self.state.position.store(position, Ordering::Relaxed)
    }

    /// Makes the stream the one of `seed` at `position` (resuming from a
    /// training state, whatever seed the layer was built with).
    pub fn set_state(&self, seed: u64, position: u64) {
        self.state.seed.store(seed, Ordering::Relaxed);
        self.state.position.store(position, Ordering::Relaxed);
    }

    /// The next draw: 64 well-mixed bits from `(seed, position)`; advances
    /// the position.
    pub fn next_seed(&self) -> u64 {
        let k = self.state.position.fetch_add(1, Ordering::Relaxed);
        mix(self.seed() ^ mix(k.wrapping_add(0x9e37_79b9_7f4a_7c15)))
    }
}

/// SplitMix64's finaliser: spreads consecutive inputs over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
