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
