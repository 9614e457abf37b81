//! [`Sampler`]: the next token from a row of logits, as llama.cpp's
//! default chain picks it: repetition penalty over the recent tokens, then
//! top-k, temperature, top-p and min-p, then a draw from what is left with
//! a seeded generator. Temperature 0 is greedy (the largest logit, the
//! lowest id on a tie).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use retrograd_engine::base::error::{Error, Result};

const OP: &str = "Sampler";

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Divides the logits; 0 is greedy.
    pub temperature: f32,
    /// Keeps the `top_k` most likely tokens (0: all).
    pub top_k: usize,
    /// Keeps the most likely tokens whose probabilities first sum to
    /// `top_p` (1: all).
    pub top_p: f32,
    /// Drops tokens less likely than `min_p` times the most likely (0:
    /// none).
    pub min_p: f32,
    /// Divides positive logits of recent tokens and multiplies negative
    /// ones (1: off).
    pub repetition_penalty: f32,
    /// How many recent tokens the penalty looks at.
    pub repeat_last_n: usize,
    /// The generator's seed.
    pub seed: u64,
}

impl Default for Sampling {
    /// llama.cpp's defaults: temperature 0.8, top-k 40, top-p 0.95,
    /// min-p 0.05, no repetition penalty; seed 0.
    fn default() -> Self {
        Sampling {
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            repetition_penalty: 1.0,
            repeat_last_n: 64,
            seed: 0,
        }
    }
}

impl Sampling {
    /// Always the most likely token.
    pub fn greedy() -> Self {
        Sampling {
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            ..Sampling::default()
        }
    }

    /// Typed errors for settings outside their ranges, naming them.
    pub fn check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::invalid(OP, what));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(format!(
                "temperature must be >= 0, got {}",
                self.temperature
            ));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad(format!("min_p must be in [0, 1], got {}", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(format!(
                "repetition_penalty must be > 0, got {}",
                self.repetition_penalty
            ));
        }
        Ok(())
    }
}

/// Draws tokens by a [`Sampling`] (see the module docs).
#[derive(Clone, Debug)]
pub struct Sampler {
    sampling: Sampling,
    rng: ChaCha8Rng,
}

impl Sampler {
    /// A sampler; settings out of range are an error naming them.
    pub fn try_new(sampling: Sampling) -> Result<Self> {
        sampling.check()?;
        Ok(Sampler {
            sampling,
            rng: ChaCha8Rng::seed_from_u64(sampling.seed),
        })
    }

    /// [`try_new`](Self::try_new), panicking on bad settings.
    #[track_caller]
    pub fn new(sampling: Sampling) -> Self {
        retrograd_engine::base::error::or_panic(Self::try_new(sampling))
    }

    /// The next token after `history` (the tokens so far, for the
    /// repetition penalty) given its `logits`.
    pub fn sample(&mut self, logits: &[f32], history: &[u32]) -> u32 {
        let s = self.sampling;
        let mut logits = logits.to_vec();
        if s.repetition_penalty != 1.0 {
            let recent = &history[history.len().saturating_sub(s.repeat_last_n)..];
            let mut seen = std::collections::HashSet::new();
            for &id in recent {
                if let Some(l) = logits.get_mut(id as usize)
                    && seen.insert(id)
                {
                    *l = if *l > 0.0 {
                        *l / s.repetition_penalty
                    } else {
                        *l * s.repetition_penalty
                    };
                }
            }
        }
        if s.temperature == 0.0 {
            return argmax(&logits);
        }
        let mut candidates: Vec<(u32, f32)> = logits
            .iter()
            .enumerate()
            .map(|(i, &l)| (i as u32, l))
            .collect();
        let by_logit = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if s.top_k > 0 && s.top_k < candidates.len() {
            candidates.select_nth_unstable_by(s.top_k - 1, by_logit);
            candidates.truncate(s.top_k);
        }
        candidates.sort_unstable_by(by_logit);
        let top = candidates[0].1;
        let mut probs: Vec<f64> = candidates
            .iter()
            .map(|&(_, l)| (((l - top) / s.temperature) as f64).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|p| *p /= total);
        let mut keep = probs.len();
        if s.top_p < 1.0 {
            let mut sum = 0.0;
            keep = probs
                .iter()
                .position(|&p| {
                    sum += p;
                    sum >= s.top_p as f64
                })
                .map_or(keep, |i| i + 1);
        }
        if s.min_p > 0.0 {
            let floor = probs[0] * s.min_p as f64;
            keep = keep.min(probs.iter().take_while(|&&p| p >= floor).count().max(1));
        }
        let total: f64 = probs[..keep].iter().sum();
        let mut u = self.rng.random::<f64>() * total;
        for (i, &p) in probs[..keep].iter().enumerate() {
            if u < p {
                return candidates[i].0;
            }
            u -= p;
        }
        candidates[keep - 1].0
    }
}

/// The index of the largest value, the first on a tie.
pub fn argmax(values: &[f32]) -> u32 {
    let mut best = 0;
    for (i, &v) in values.iter().enumerate() {
        if v > values[best] {
            best = i;
        }
    }
    best as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_penalties_filters_and_seeds() {
        let logits = [1.0, 3.0, 2.0, 3.0];
        assert_eq!(Sampler::new(Sampling::greedy()).sample(&logits, &[]), 1);
        // The penalty turns the greedy pick away from a repeated token.
        let penalised = Sampling {
            repetition_penalty: 2.0,
            ..Sampling::greedy()
        };
        assert_eq!(Sampler::new(penalised).sample(&logits, &[1]), 3);
        // top-k 1 is greedy whatever the temperature.
        let k1 = Sampling {
            top_k: 1,
            temperature: 5.0,
            ..Sampling::default()
        };
        assert_eq!(Sampler::new(k1).sample(&[0.0, 9.0, 1.0], &[]), 1);
        // min-p keeps only tokens near the best.
        let min_p = Sampling {
            min_p: 0.5,
            top_k: 0,
            top_p: 1.0,
            temperature: 1.0,
            ..Sampling::default()
        };
        let mut s = Sampler::new(min_p);
        assert!((0..200).all(|_| s.sample(&[0.0, 10.0, 9.9, -5.0], &[]) != 0));
        // The same seed draws the same tokens; every token is drawn at
        // temperature 1 without filters.
        let open = Sampling {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            temperature: 1.0,
            seed: 7,
            ..Sampling::default()
        };
        let draw = |seed| {
            let mut s = Sampler::new(Sampling { seed, ..open });
            (0..300)
                .map(|_| s.sample(&[0.0, 0.1, 0.2], &[]))
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        assert!((0..3).all(|t| draw(7).contains(&t)));
        for bad in [
            Sampling {
                temperature: -1.0,
                ..Sampling::default()
            },
            Sampling {
                top_p: 0.0,
                ..Sampling::default()
            },
            Sampling {
                min_p: 2.0,
                ..Sampling::default()
            },
            Sampling {
                repetition_penalty: 0.0,
                ..Sampling::default()
            },
        ] {
            assert!(Sampler::try_new(bad).is_err());
        }
    }
}
