//! [`Gpt`]: a GPT-2-style language model (nanoGPT's `GPT`): token and
//! position embeddings, pre-norm transformer [`Block`]s, a final layer
//! norm, and an output layer tied to the token embedding.

use rand::Rng;

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Var;
use retrograd_engine::nn::{
    with_default_generator, Activation, Block, Dropout, Embedding, Forward, LayerNorm, Module,
};
use retrograd_engine::tensor::{DType, Tensor};

/// The sizes and settings of a [`Gpt`] (nanoGPT's `GPTConfig`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Tokens in the vocabulary.
    pub vocab_size: usize,
    /// The longest context (positions embedded).
    pub block_size: usize,
    /// Transformer blocks.
    pub n_layer: usize,
    /// Attention heads per block.
    pub n_head: usize,
    /// Model width.
    pub n_embd: usize,
    /// Dropout on embeddings, attention weights and residual branches while
    /// training.
    pub dropout: f64,
    /// Whether linear layers and layer norms have biases.
    pub bias: bool,
    /// The feed-forward activation: the exact GELU (nanoGPT's) or its tanh
    /// form (GPT-2's `gelu_new`).
    pub activation: Activation,
    /// The dtype of the parameters.
    pub dtype: DType,
}

impl GptConfig {
    /// nanoGPT's character-level Shakespeare model on a CPU: block 64,
    /// 4 layers, 4 heads, width 128, no dropout, no biases, f32.
    pub fn shakespeare_char(vocab_size: usize) -> Self {
        GptConfig {
            vocab_size,
            block_size: 64,
            n_layer: 4,
            n_head: 4,
            n_embd: 128,
            dropout: 0.0,
            bias: false,
            activation: Activation::Gelu,
            dtype: DType::F32,
        }
    }

    /// The metadata key [`to_metadata`](Self::to_metadata)'s string is
    /// saved under in a checkpoint.
    pub const METADATA_KEY: &'static str = "gpt_config";

    /// The configuration as a string for a checkpoint's metadata:
    /// `vocab_size=65 block_size=64 ... dtype=f32` (`activation=gelu_tanh`
    /// only when it is not the exact GELU, so older readers still read it).
    ///
    /// ```
    /// use retrograd::nn::GptConfig;
    /// let c = GptConfig::shakespeare_char(65);
    /// assert_eq!(GptConfig::from_metadata(&c.to_metadata())?, c);
    /// assert!(GptConfig::from_metadata("vocab_size=65").is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn to_metadata(&self) -> String {
        let dtype = match self.dtype {
            DType::F64 => "f64",
            _ => "f32",
        };
        let activation = match self.activation {
            Activation::Gelu => String::new(),
            other => format!(" activation={other}"),
        };
        format!(
            "vocab_size={} block_size={} n_layer={} n_head={} n_embd={} dropout={} bias={}{activation} dtype={dtype}",
            self.vocab_size, self.block_size, self.n_layer, self.n_head, self.n_embd, self.dropout, self.bias
        )
    }

    /// Reads [`to_metadata`](Self::to_metadata)'s string; a missing,
    /// unknown or malformed entry is an [`Error::Format`] naming it (a
    /// missing `activation` is the exact GELU).
    pub fn from_metadata(metadata: &str) -> Result<Self> {
        let bad = |reason: String| Error::Format {
            op: "GptConfig::from_metadata",
            path: "<gpt config metadata>".to_string(),
            reason,
        };
        let mut fields = std::collections::BTreeMap::new();
        for entry in metadata.split_whitespace() {
            let (k, v) = entry
                .split_once('=')
                .ok_or_else(|| bad(format!("`{entry}` is not key=value")))?;
            fields.insert(k, v);
        }
        let activation = match fields.remove("activation") {
            None => Activation::Gelu,
            Some(v) => v
                .parse()
                .map_err(|_| bad(format!("`activation={v}` is not an activation")))?,
        };
        let mut take = |key: &str| fields.remove(key).ok_or_else(|| bad(format!("no `{key}`")));
        let size = |key: &str, v: &str| {
            v.parse::<usize>()
                .map_err(|_| bad(format!("`{key}={v}` is not a size")))
        };
        let config = GptConfig {
            vocab_size: size("vocab_size", take("vocab_size")?)?,
            block_size: size("block_size", take("block_size")?)?,
            n_layer: size("n_layer", take("n_layer")?)?,
            n_head: size("n_head", take("n_head")?)?,
            n_embd: size("n_embd", take("n_embd")?)?,
            dropout: {
                let v = take("dropout")?;
                v.parse()
                    .map_err(|_| bad(format!("`dropout={v}` is not a number")))?
            },
            bias: {
                let v = take("bias")?;
                v.parse()
                    .map_err(|_| bad(format!("`bias={v}` is not true or false")))?
            },
            activation,
            dtype: match take("dtype")? {
                "f32" => DType::F32,
                "f64" => DType::F64,
                other => return Err(bad(format!("`dtype={other}` is not f32 or f64"))),
            },
        };
        if let Some(key) = fields.keys().next() {
            return Err(bad(format!("unknown entry `{key}`")));
        }
        config.check()?;
        Ok(config)
    }

    fn check(&self) -> Result<()> {
        let sizes = [
            self.vocab_size,
            self.block_size,
            self.n_layer,
            self.n_head,
            self.n_embd,
        ];
        if sizes.contains(&0) || !self.n_embd.is_multiple_of(self.n_head) {
            return Err(Error::invalid(
                "Gpt",
                format!("sizes must be positive and n_embd a multiple of n_head, got {self:?}"),
            ));
        }
        Ok(())
    }
}

/// A GPT language model: `tokens [B, T]` (i64) to `logits [B, T, vocab]`.
///
/// Initialisation is GPT-2's, as nanoGPT does it: every weight `N(0, 0.02)`,
/// biases zero, the projections into the residual stream
/// `N(0, 0.02 / sqrt(2 · n_layer))`. The output layer is the token embedding
/// itself (tied weights): the one parameter `wte.weight` gathers the
/// gradients of both uses. Parameter names are nanoGPT's without its
/// `transformer.` prefix (`wte.weight`, `h.0.attn.in_proj_weight`, `ln_f.weight`).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::{Gpt, GptConfig, Forward, Module}};
/// let config = GptConfig { block_size: 8, n_layer: 1, n_embd: 16, ..GptConfig::shakespeare_char(10) };
/// let gpt = Gpt::new(config)?;
/// let g = Graph::new();
/// let tokens = Tensor::from_vec(vec![1i64, 2, 3, 4, 5, 6], &[2, 3])?;
/// let next = Tensor::from_vec(vec![2i64, 3, 4, 5, 6, 7], &[2, 3])?;
/// let loss = gpt.loss(&g.constant(tokens), &next)?;
/// assert!((loss.value().try_item()? - 10f64.ln()).abs() < 0.2); // near uniform at init
/// let grads = loss.backward()?;
/// assert_eq!(grads.of(gpt.wte().weight()).shape(), &[10, 16]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct Gpt {
    wte: Embedding,
    wpe: Embedding,
    drop: Dropout,
    h: Vec<Block>,
    ln_f: LayerNorm,
    #[module(skip)]
    config: GptConfig,
}

impl Gpt {
    /// A model initialised from the default generator.
    pub fn new(config: GptConfig) -> Result<Self> {
        with_default_generator(|rng| Self::with_rng(config, rng))
    }

    /// A model initialised from `rng`.
    pub fn with_rng<R: Rng + ?Sized>(config: GptConfig, rng: &mut R) -> Result<Self> {
        config.check()?;
        let GptConfig {
            vocab_size,
            block_size,
            n_layer,
            n_head,
            n_embd,
            dropout,
            bias,
            activation,
            dtype,
        } = config;
        let embedding = |n: usize, rng: &mut R| {
            let e = Embedding::builder(n, n_embd).dtype(dtype).build_with(rng)?;
            let w = e.weight();
            w.set(retrograd_engine::nn::init::normal(
                &w.shape(),
                0.0,
                0.02,
                dtype,
                rng,
            )?)?;
            Ok::<_, Error>(e)
        };
        let wte = embedding(vocab_size, rng)?;
        let wpe = embedding(block_size, rng)?;
        let residual_std = 0.02 / (2.0 * n_layer as f64).sqrt();
        let h = (0..n_layer)
            .map(|i| {
                Block::builder(n_embd, n_head)
                    .bias(bias)
                    .dropout(dropout, 0x6770_0000 + i as u64)
                    .activation(activation)
                    .dtype(dtype)
                    .gpt2_init(residual_std)
                    .build_with(rng)
            })
            .collect::<Result<_>>()?;
        Ok(Gpt {
            wte,
            wpe,
            drop: Dropout::new(dropout, 0x6770)?,
            h,
            ln_f: LayerNorm::new(&[n_embd], dtype)?.with_bias(bias),
            config,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    /// The token embedding, also the output layer.
    pub fn wte(&self) -> &Embedding {
        &self.wte
    }

    /// The mean cross-entropy of the next-token predictions for `tokens`
    /// (`[B, T]`) against `targets` (`[B, T]`, i64).
    pub fn loss<'g>(&self, tokens: &Var<'g>, targets: &Tensor) -> Result<Var<'g>> {
        if targets.shape() != tokens.shape() {
            return Err(Error::shape_mismatch(
                "Gpt::loss",
                tokens.shape(),
                targets.shape(),
            ));
        }
        let logits = self.forward(tokens)?;
        logits
            .try_reshape(&[-1, self.config.vocab_size as isize])?
            .try_cross_entropy(targets)
    }

    /// Continues `prompt` by `max_new_tokens` tokens, each drawn from the
    /// softmax of the last position's logits divided by `temperature`,
    /// restricted to the `top_k` most likely tokens when given; the context
    /// is cut to the last `block_size` tokens. Runs without recording
    /// anything (see [`Graph::inference`](retrograd_engine::Graph::inference)).
    pub fn generate<R: Rng + ?Sized>(
        &self,
        prompt: &[i64],
        max_new_tokens: usize,
        temperature: f64,
        top_k: Option<usize>,
        rng: &mut R,
    ) -> Result<Vec<i64>> {
        if prompt.is_empty() || !(temperature > 0.0 && temperature.is_finite()) {
            return Err(Error::invalid(
                "Gpt::generate",
                format!(
                    "needs a non-empty prompt and a positive temperature, got {} tokens and {temperature}",
                    prompt.len()
                ),
            ));
        }
        let mut tokens = prompt.to_vec();
        for _ in 0..max_new_tokens {
            let start = tokens.len().saturating_sub(self.config.block_size);
            let context = Tensor::from_vec(tokens[start..].to_vec(), &[1, tokens.len() - start])?;
            let logits = self.forward(&Var::from(context))?;
            let last = logits
                .try_select(1, tokens.len() - start - 1)?
                .try_reshape(&[-1])?;
            let mut scaled = &last * (1.0 / temperature);
            if let Some(k) = top_k.filter(|&k| k < self.config.vocab_size) {
                // Everything below the k-th largest logit gets no chance.
                let (values, _) = scaled.try_topk(k, true)?;
                let kth = values.try_narrow(0, k as isize - 1, 1)?;
                let below = scaled.try_lt(&kth)?;
                scaled = scaled.try_masked_fill(&below, f64::NEG_INFINITY)?;
            }
            let probs = scaled.try_softmax(-1)?.value().to_f64_vec();
            tokens.push(sample(&probs, rng.random::<f64>()));
        }
        Ok(tokens)
    }
}

/// The index where the running sum of `probs` passes `u` (in `[0, 1)`).
fn sample(probs: &[f64], u: f64) -> i64 {
    let total: f64 = probs.iter().sum();
    let mut acc = 0.0;
    for (i, p) in probs.iter().enumerate() {
        acc += p / total;
        if u < acc {
            return i as i64;
        }
    }
    // Rounding left the sum a hair under 1: the last token with any mass.
    probs.iter().rposition(|&p| p > 0.0).unwrap_or(0) as i64
}

impl Forward for Gpt {
    /// `tokens` `[B, T]` (i64, `T <= block_size`) to logits `[B, T, vocab]`.
    fn forward<'g>(&self, tokens: &Var<'g>) -> Result<Var<'g>> {
        let ids = tokens.value();
        let [_, t] = ids.shape()[..] else {
            return Err(Error::invalid(
                "Gpt",
                format!("tokens must be [batch, time], got {:?}", ids.shape()),
            ));
        };
        if t == 0 || t > self.config.block_size {
            return Err(Error::invalid(
                "Gpt",
                format!(
                    "a context of {t} tokens; the model takes 1 to block_size = {}",
                    self.config.block_size
                ),
            ));
        }
        let graph = tokens.graph();
        let wte = graph.param(self.wte.weight());
        // The ids as the lookup's input, so the recorded graph reads them.
        let tok = wte.try_embedding(tokens, tokens.shape())?;
        let pos = graph.param(self.wpe.weight()).try_narrow(0, 0, t)?;
        let mut x = self.drop.forward(&tok.try_add(&pos)?)?;
        for block in &self.h {
            x = block.forward(&x)?;
        }
        let x = self.ln_f.forward(&x)?;
        x.try_matmul_transposed(&wte, false, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;
    use retrograd_engine::Graph;

    fn tiny(dtype: DType) -> Gpt {
        let config = GptConfig {
            vocab_size: 7,
            block_size: 6,
            n_layer: 2,
            n_head: 2,
            n_embd: 8,
            dropout: 0.0,
            bias: true,
            activation: Activation::Gelu,
            dtype,
        };
        Gpt::with_rng(config, &mut ChaCha8Rng::seed_from_u64(0)).unwrap()
    }

    #[test]
    fn tied_weight_is_one_parameter_with_both_gradients() {
        let gpt = tiny(DType::F64);
        let names: Vec<String> = gpt.parameters().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names.iter().filter(|n| n.starts_with("wte")).count(), 1);
        assert_eq!(names[0], "wte.weight");
        assert!(names.contains(&"h.1.mlp.c_proj.bias".to_string()));
        // The embedding rows of unused tokens still get the output layer's gradient.
        let g = Graph::new();
        let tokens = Tensor::from_vec(vec![0i64, 1, 2], &[1, 3]).unwrap();
        let grads = gpt
            .loss(&g.constant(tokens.clone()), &tokens)
            .unwrap()
            .backward()
            .unwrap();
        let gw = grads.of(gpt.wte().weight()).to_f64_vec();
        assert!(
            gw[6 * 8..].iter().any(|&v| v != 0.0),
            "row 6 only feeds the logits"
        );
    }

    #[test]
    fn logits_are_causal() {
        let gpt = tiny(DType::F64);
        let g = Graph::new();
        let a = Tensor::from_vec(vec![1i64, 2, 3, 4], &[1, 4]).unwrap();
        let b = Tensor::from_vec(vec![1i64, 2, 5, 6], &[1, 4]).unwrap();
        let la = gpt.forward(&g.constant(a)).unwrap().value().to_f64_vec();
        let lb = gpt.forward(&g.constant(b)).unwrap().value().to_f64_vec();
        assert_eq!(la[..14], lb[..14], "positions 0 and 1 see only tokens 1, 2");
        assert_ne!(la[14..21], lb[14..21]);
    }

    #[test]
    fn gradients_agree_with_finite_differences() {
        let gpt = tiny(DType::F64);
        let tokens = Tensor::from_vec(vec![3i64, 1, 4, 1, 5, 2], &[2, 3]).unwrap();
        let (_, wpe) = gpt
            .parameters()
            .into_iter()
            .find(|(n, _)| n == "wpe.weight")
            .unwrap();
        retrograd_engine::gradcheck(
            |v| {
                let g = v[0].graph();
                // The loss as a function of the position table, through every block.
                let logits = {
                    let pos = v[0].try_narrow(0, 0, 3)?;
                    let tok = g
                        .param(gpt.wte().weight())
                        .try_embedding(&tokens, tokens.shape())?;
                    let mut x = tok.try_add(&pos)?;
                    for block in &gpt.h {
                        x = block.forward(&x)?;
                    }
                    gpt.ln_f.forward(&x)?.try_matmul_transposed(
                        &g.param(gpt.wte().weight()),
                        false,
                        true,
                    )?
                };
                logits.try_reshape(&[-1, 7])?.try_cross_entropy(&tokens)
            },
            &[wpe.value()],
        )
        .unwrap();
    }

    #[test]
    fn generation_is_seeded_and_respects_top_k() {
        let gpt = tiny(DType::F32);
        let run = |seed| {
            gpt.generate(
                &[1, 2],
                10,
                0.8,
                Some(1),
                &mut ChaCha8Rng::seed_from_u64(seed),
            )
            .unwrap()
        };
        // top-k = 1 is greedy: the same continuation from any seed.
        assert_eq!(run(1), run(2));
        assert_eq!(run(1).len(), 12);
        let sampled = gpt
            .generate(&[1], 20, 1.0, None, &mut ChaCha8Rng::seed_from_u64(3))
            .unwrap();
        assert!(sampled.iter().all(|&t| (0..7).contains(&t)));
        assert!(gpt
            .generate(&[], 1, 1.0, None, &mut ChaCha8Rng::seed_from_u64(0))
            .is_err());
        assert!(gpt
            .generate(&[1], 1, 0.0, None, &mut ChaCha8Rng::seed_from_u64(0))
            .is_err());
    }

    #[test]
    fn bad_contexts_are_typed_errors() {
        let gpt = tiny(DType::F32);
        let g = Graph::new();
        let long = Tensor::from_vec(vec![0i64; 7], &[1, 7]).unwrap();
        assert!(gpt
            .forward(&g.constant(long))
            .unwrap_err()
            .to_string()
            .contains("block_size"));
        let flat = Tensor::from_vec(vec![0i64; 3], &[3]).unwrap();
        assert!(gpt.forward(&g.constant(flat)).is_err());
        let oob = Tensor::from_vec(vec![9i64], &[1, 1]).unwrap();
        assert!(gpt.forward(&g.constant(oob)).is_err());
    }
}
