//! [`LoraConfig`]: the settings of a low-rank adapter, as PEFT's
//! `LoraConfig` names them, and which layers it goes on.

use std::collections::BTreeMap;

use crate::base::error::{Error, Result};

/// Which linear layers get an adapter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoraTargets {
    /// Layers whose module path is one of these names or ends with `.`
    /// and one of them (`q_proj` matches `model.layers.3.self_attn.q_proj`),
    /// as PEFT matches a list of `target_modules`.
    Names(Vec<String>),
    /// Every linear layer but the output head (PEFT's `all-linear`).
    AllLinear,
}

impl LoraTargets {
    /// Parses a comma-separated list (`q_proj,v_proj`) or `all-linear`.
    pub fn try_parse(text: &str) -> Result<Self> {
        let text = text.trim();
        if text == "all-linear" {
            return Ok(LoraTargets::AllLinear);
        }
        let names: Vec<String> = text
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            return Err(Error::invalid(
                "LoraTargets",
                format!("no module names in {text:?}"),
            ));
        }
        Ok(LoraTargets::Names(names))
    }

    /// Parses as [`try_parse`](Self::try_parse); panics on an empty list.
    pub fn parse(text: &str) -> Self {
        Self::try_parse(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Whether the layer at `path` is a target; `is_head` marks the output
    /// layer, which `AllLinear` leaves out.
    pub fn matches(&self, path: &str, is_head: bool) -> bool {
        match self {
            LoraTargets::AllLinear => !is_head,
            LoraTargets::Names(names) => names.iter().any(|n| name_matches(path, n)),
        }
    }
}

/// PEFT's rule for a name in `target_modules`, `rank_pattern` or
/// `alpha_pattern`: the whole path, or its tail after a dot.
fn name_matches(path: &str, name: &str) -> bool {
    path == name
        || (path.len() > name.len()
            && path.ends_with(name)
            && path.as_bytes()[path.len() - name.len() - 1] == b'.')
}

/// How a new adapter's matrices start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoraInit {
    /// PEFT's default: `A` Kaiming-uniform as `nn.Linear` starts (bounds
    /// `±1/√in`), `B` zero, so the adapted layer starts as the base.
    Kaiming,
    /// `A` normal with standard deviation `1/r`, `B` zero (PEFT's
    /// `gaussian`).
    Gaussian,
    /// Both `A` and `B` Kaiming-uniform: not the base at the start (PEFT's
    /// `init_lora_weights=False`, for tests of the adapted path).
    Random,
}

/// The settings of one adapter: rank, scale, dropout, targets,
/// initialisation. Build with [`LoraConfig::new`] and the setters.
///
/// ```
/// use retrograd::nn::lora::{LoraConfig, LoraTargets};
/// let c = LoraConfig::new(8, 16.0).targets(LoraTargets::parse("q_proj,v_proj")).dropout(0.05);
/// assert_eq!(c.scaling_for("model.layers.0.self_attn.q_proj"), 2.0);
/// assert!(c.try_check().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LoraConfig {
    /// The rank `r` of `B · A`.
    pub r: usize,
    /// `alpha`: the update is scaled by `alpha / r` (or `alpha / √r`).
    pub alpha: f64,
    /// Dropout on the adapter's input while training.
    pub dropout: f64,
    /// Which layers get an adapter.
    pub targets: LoraTargets,
    /// Scale by `alpha / √r` (rank-stabilised LoRA) instead of `alpha / r`.
    pub use_rslora: bool,
    /// How `A` and `B` start.
    pub init: LoraInit,
    /// Seed of the initialisation and of the dropout masks.
    pub seed: u64,
    /// Ranks that differ from `r`, by module name (PEFT's `rank_pattern`).
    pub rank_pattern: BTreeMap<String, usize>,
    /// Alphas that differ from `alpha`, by module name (`alpha_pattern`).
    pub alpha_pattern: BTreeMap<String, f64>,
}

impl LoraConfig {
    /// Rank `r` and scale `alpha` on the attention's query and value
    /// projections (PEFT's default targets for Llama), no dropout, PEFT's
    /// initialisation, seed 0.
    pub fn new(r: usize, alpha: f64) -> Self {
        LoraConfig {
            r,
            alpha,
            dropout: 0.0,
            targets: LoraTargets::Names(vec!["q_proj".into(), "v_proj".into()]),
            use_rslora: false,
            init: LoraInit::Kaiming,
            seed: 0,
            rank_pattern: BTreeMap::new(),
            alpha_pattern: BTreeMap::new(),
        }
    }

    /// Sets the targets.
    pub fn targets(mut self, targets: LoraTargets) -> Self {
        self.targets = targets;
        self
    }

    /// Sets the dropout probability.
    pub fn dropout(mut self, p: f64) -> Self {
        self.dropout = p;
        self
    }

    /// Turns rank-stabilised scaling on or off.
    pub fn rslora(mut self, on: bool) -> Self {
        self.use_rslora = on;
        self
    }

    /// Sets the initialisation.
    pub fn init(mut self, init: LoraInit) -> Self {
        self.init = init;
        self
    }

    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Typed errors for settings that cannot make an adapter.
    pub fn try_check(&self) -> Result<()> {
        let bad = |what: String| Err(Error::invalid("LoraConfig", what));
        if self.r == 0 || self.rank_pattern.values().any(|&r| r == 0) {
            return bad(format!("ranks must be positive: r = {}", self.r));
        }
        if !self.alpha.is_finite() || self.alpha_pattern.values().any(|a| !a.is_finite()) {
            return bad(format!("alpha must be finite, got {}", self.alpha));
        }
        if !(0.0..1.0).contains(&self.dropout) {
            return bad(format!("dropout must be in [0, 1), got {}", self.dropout));
        }
        if let LoraTargets::Names(n) = &self.targets
            && n.iter().any(|s| s.is_empty())
        {
            return bad("an empty target module name".into());
        }
        Ok(())
    }

    /// The rank of the adapter on the layer at `path`.
    pub fn rank_for(&self, path: &str) -> usize {
        pattern_value(&self.rank_pattern, path).unwrap_or(self.r)
    }

    /// The alpha of the adapter on the layer at `path`.
    pub fn alpha_for(&self, path: &str) -> f64 {
        pattern_value(&self.alpha_pattern, path).unwrap_or(self.alpha)
    }

    /// The factor of `B · A` on the layer at `path`.
    pub fn scaling_for(&self, path: &str) -> f64 {
        lora_scaling(self.alpha_for(path), self.rank_for(path), self.use_rslora)
    }
}

/// `alpha / r`, or `alpha / √r` when rank-stabilised.
pub(crate) fn lora_scaling(alpha: f64, r: usize, rslora: bool) -> f64 {
    if rslora {
        alpha / (r as f64).sqrt()
    } else {
        alpha / r as f64
    }
}

/// The value of the longest pattern key that matches `path`.
fn pattern_value<T: Copy>(patterns: &BTreeMap<String, T>, path: &str) -> Option<T> {
    patterns
        .iter()
        .filter(|(k, _)| name_matches(path, k))
        .max_by_key(|(k, _)| k.len())
        .map(|(_, &v)| v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_whole_path_segments() {
        let t = LoraTargets::parse("q_proj, v_proj");
        assert!(t.matches("model.layers.0.self_attn.q_proj", false));
        assert!(t.matches("q_proj", false));
        assert!(!t.matches("model.layers.0.self_attn.xq_proj", false));
        assert!(!t.matches("model.layers.0.self_attn.k_proj", false));
        assert!(LoraTargets::AllLinear.matches("model.layers.0.mlp.up_proj", false));
        assert!(!LoraTargets::AllLinear.matches("lm_head", true));
        assert!(LoraTargets::try_parse(" , ").is_err());
    }

    #[test]
    fn patterns_override_rank_and_alpha() {
        let mut c = LoraConfig::new(8, 16.0).rslora(true);
        c.rank_pattern.insert("v_proj".into(), 4);
        c.alpha_pattern
            .insert("layers.1.self_attn.v_proj".into(), 2.0);
        assert_eq!(c.rank_for("model.layers.1.self_attn.v_proj"), 4);
        assert_eq!(c.alpha_for("model.layers.1.self_attn.v_proj"), 2.0);
        assert_eq!(c.alpha_for("model.layers.2.self_attn.v_proj"), 16.0);
        assert_eq!(
            c.scaling_for("model.layers.0.self_attn.q_proj"),
            16.0 / 8f64.sqrt()
        );
        assert!(LoraConfig::new(0, 1.0).try_check().is_err());
        assert!(LoraConfig::new(4, 1.0).dropout(1.0).try_check().is_err());
    }
}
