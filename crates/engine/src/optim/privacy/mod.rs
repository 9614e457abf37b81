//! Privacy accounting for differentially private training (DP-SGD).
//!
//! DP-SGD makes each training step differentially private: every step
//! draws each example with probability `q` (the sample rate), clips each
//! example's gradient to a norm `C`, sums the clipped gradients and adds
//! Gaussian noise of standard deviation `σ·C`, where `σ` is the noise
//! multiplier. One step then reveals little about any one example, but
//! the leaks add up over a run; accounting bounds what the whole run
//! reveals as an (ε, δ) guarantee: no outcome becomes more than `e^ε`
//! times as likely by adding or removing one example, except with
//! probability δ (usually well below one over the dataset size).
//!
//! The accountant here tracks Rényi differential privacy (RDP), which
//! composes by addition: the RDP of the subsampled Gaussian step is
//! computed at a range of orders α (`rdp.rs`), summed over the steps, and
//! converted to ε for the chosen δ at the best order. [`RdpAccountant`]
//! records steps as training runs and answers ε so far;
//! [`noise_multiplier_for_epsilon`] plans a run, searching the noise
//! multiplier that keeps a given number of steps within a target ε
//! (`accountant.rs`). Both follow Opacus's `RDPAccountant` and
//! `get_noise_multiplier` step by step and give the same numbers
//! (`tests.rs` checks them against values Opacus 1.6 computed,
//! `tests/reference/rdp_accountant.py`). [`DpOptimizer`] wraps any
//! optimizer into DP-SGD: it clips and sums per-sample gradients, adds the
//! noise and keeps the accountant (`dp_sgd.rs`).
//!
//! ```
//! use retrograd::optim::privacy::{noise_multiplier_for_epsilon, RdpAccountant};
//! let (q, steps) = (256.0 / 60000.0, 3515);
//! let sigma = noise_multiplier_for_epsilon(3.0, 1e-5, q, steps);
//! let mut accountant = RdpAccountant::new();
//! for _ in 0..steps {
//!     accountant.step(sigma, q); // beside each noisy optimizer step
//! }
//! let eps = accountant.epsilon(1e-5);
//! assert!(eps <= 3.0 && eps > 2.99);
//! ```

mod accountant;
mod dp_sgd;
mod rdp;
#[cfg(test)]
mod tests;

pub use accountant::{
    noise_multiplier_for_epsilon, try_noise_multiplier_for_epsilon, HistoryEntry, RdpAccountant,
};
pub use dp_sgd::{DpOptimizer, DpSgdConfig};
pub use rdp::{
    compute_rdp, get_privacy_spent, try_compute_rdp, try_get_privacy_spent, DEFAULT_ORDERS,
};
