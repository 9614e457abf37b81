//! The default generator: where a layer built without a caller's RNG
//! (`Linear::new(3, 2)`) draws its initial weights, like PyTorch's global
//! generator. Seeded with [`DEFAULT_SEED`] at start-up and reseeded by
//! [`manual_seed`], so a program that builds its model the same way gets the
//! same weights on every run and machine.

use std::sync::Mutex;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// The seed the default generator starts from.
pub const DEFAULT_SEED: u64 = 0;

// One process-wide generator, as in PyTorch: models built on any thread
// draw from the same sequence. `None` until first use (a `const` Mutex
// cannot build the generator).
static GENERATOR: Mutex<Option<ChaCha8Rng>> = Mutex::new(None);

/// Reseeds the default generator (PyTorch's `torch.manual_seed`).
///
/// ```
/// use retrograd::nn::{manual_seed, Linear};
/// manual_seed(7);
/// let a = Linear::new(3, 2)?;
/// manual_seed(7);
/// let b = Linear::new(3, 2)?;
/// assert_eq!(a.weight().value().to_f64_vec(), b.weight().value().to_f64_vec());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn manual_seed(seed: u64) {
    *lock() = Some(ChaCha8Rng::seed_from_u64(seed));
}

/// A copy of the default generator as it is now (PyTorch's
/// `torch.get_rng_state`): what a training state saves, so that a resumed
/// run draws what the uninterrupted one would have.
///
/// ```
/// use retrograd::nn::{default_generator_state, set_default_generator_state, Linear};
/// let saved = default_generator_state();
/// let a = Linear::new(3, 2)?;
/// set_default_generator_state(saved);
/// let b = Linear::new(3, 2)?;
/// assert_eq!(a.weight().value().to_f64_vec(), b.weight().value().to_f64_vec());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn default_generator_state() -> ChaCha8Rng {
    with_default_generator(|rng| rng.clone())
}

/// Puts the default generator where `state` is (PyTorch's
/// `torch.set_rng_state`; see [`default_generator_state`]).
pub fn set_default_generator_state(state: ChaCha8Rng) {
    *lock() = Some(state);
}

/// Runs `f` with the default generator.
pub fn with_default_generator<T>(f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
    let mut guard = lock();
    f(guard.get_or_insert_with(|| ChaCha8Rng::seed_from_u64(DEFAULT_SEED)))
}

/// The generator, even after a panic on another thread while it was held:
/// its state is a plain value, valid whatever that thread did.
fn lock() -> std::sync::MutexGuard<'static, Option<ChaCha8Rng>> {
    GENERATOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
