//! A pre-norm transformer [`Block`] (GPT-2's): `x + attn(ln_1(x))`, then
//! `x + mlp(ln_2(x))`, with the [`FeedForward`] network it uses.

use rand::Rng;

use crate::base::error::Result;
use crate::core::graph::Var;
use crate::nn::setters::setters;
use crate::nn::{Activation, Dropout, Forward, LayerNorm, Linear, Module, MultiheadAttention};
use crate::tensor::DType;

/// The position-wise network of a transformer block: `Linear(E, 4E)`, an
/// activation (the exact GELU unless [`BlockBuilder::activation`] says
/// otherwise), `Linear(4E, E)`, dropout. Parameter names follow nanoGPT
/// (`c_fc`, `c_proj`).
#[derive(Clone, Debug, Module)]
pub struct FeedForward {
    c_fc: Linear,
    c_proj: Linear,
    dropout: Dropout,
    activation: Activation,
}

impl Forward for FeedForward {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let h = self.activation.apply(&self.c_fc.forward(x)?)?;
        self.dropout.forward(&self.c_proj.forward(&h)?)
    }
}

/// A pre-norm transformer block over `[B, T, E]`: causal self-attention and
/// a [`FeedForward`] network, each behind a layer norm and added back
/// (GPT-2's and nanoGPT's `Block`; names `ln_1`, `attn`, `ln_2`, `mlp`).
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Block, Forward, Module}};
/// let block = Block::new(16, 4)?;
/// let g = Graph::new();
/// let x = g.variable(Tensor::randn(&[2, 5, 16], DType::F32, 0)?);
/// assert_eq!(block.forward(&x)?.shape(), &[2, 5, 16]);
/// assert_eq!(block.num_parameters(), 2 * 16 + (3 * 16 * 16 + 3 * 16) + (16 * 16 + 16) + 2 * 16
///     + (16 * 64 + 64) + (64 * 16 + 16));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct Block {
    ln_1: LayerNorm,
    attn: MultiheadAttention,
    ln_2: LayerNorm,
    mlp: FeedForward,
}

/// Settings of a [`Block`]; see [`Block::builder`].
#[derive(Clone, Copy, Debug)]
pub struct BlockBuilder {
    embed_dim: usize,
    num_heads: usize,
    bias: bool,
    dropout: f64,
    seed: u64,
    dtype: DType,
    residual_std: Option<f64>,
    activation: Activation,
}

impl Block {
    /// A block of width `embed_dim` with `num_heads` heads: biases, no
    /// dropout, f32, initialised from the default generator.
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<Self> {
        Self::builder(embed_dim, num_heads).build()
    }

    /// Configures a block: biases, dropout, dtype, initialisation.
    pub fn builder(embed_dim: usize, num_heads: usize) -> BlockBuilder {
        BlockBuilder {
            embed_dim,
            num_heads,
            bias: true,
            dropout: 0.0,
            seed: 0,
            dtype: DType::F32,
            residual_std: None,
            activation: Activation::Gelu,
        }
    }

    /// The attention layer.
    pub fn attn(&self) -> &MultiheadAttention {
        &self.attn
    }
}

impl Forward for Block {
    /// Causal self-attention, then the feed-forward network.
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let a = self.attn.self_attention(&self.ln_1.forward(x)?, true)?;
        let x = x.try_add(&a)?;
        let m = self.mlp.forward(&self.ln_2.forward(&x)?)?;
        x.try_add(&m)
    }
}

setters! {
    impl BlockBuilder builds Block {
        /// Whether linear layers and layer norms have biases (default true).
        bias(bias: bool);
        /// Dropout on the attention weights and on each branch's output while
        /// training (default 0), masks seeded from `seed`.
        dropout(dropout: f64, seed: u64);
        /// The feed-forward activation (default the exact GELU; GPT-2 uses
        /// [`Activation::GeluTanh`]).
        activation(activation: Activation);
        /// The dtype of the parameters (default f32).
        dtype(dtype: DType);
    }
}

impl BlockBuilder {
    /// GPT-2's initialisation instead of PyTorch's layer defaults: every
    /// weight `N(0, 0.02)`, biases zero, and the two projections back into
    /// the residual stream (`attn.out_proj`, `mlp.c_proj`) `N(0, residual_std)`;
    /// nanoGPT uses `0.02 / sqrt(2 · layers)`.
    pub fn gpt2_init(mut self, residual_std: f64) -> Self {
        self.residual_std = Some(residual_std);
        self
    }

    /// The block, initialised from `rng`.
    pub fn build_with<R: Rng + ?Sized>(self, rng: &mut R) -> Result<Block> {
        let BlockBuilder {
            embed_dim: e,
            num_heads,
            bias,
            dropout,
            seed,
            dtype,
            residual_std,
            activation,
        } = self;
        let norm = || LayerNorm::new(&[e], dtype).map(|n| n.with_bias(bias));
        let linear = |rng: &mut R, i: usize, o: usize, std: Option<f64>| -> Result<Linear> {
            let l = Linear::builder(i, o)
                .bias(bias)
                .dtype(dtype)
                .build_with(rng)?;
            if let Some(std) = std {
                l.init_normal(std, rng)?;
            }
            Ok(l)
        };
        let mut attn = MultiheadAttention::builder(e, num_heads)
            .bias(bias)
            .dropout(dropout, seed)
            .dtype(dtype)
            .build_with(rng)?;
        if let Some(std) = residual_std {
            attn = attn.gpt2_init(0.02, std, rng)?;
        }
        let c_fc = linear(rng, e, 4 * e, residual_std.map(|_| 0.02))?;
        let c_proj = linear(rng, 4 * e, e, residual_std)?;
        Ok(Block {
            ln_1: norm()?,
            attn,
            ln_2: norm()?,
            mlp: FeedForward {
                c_fc,
                c_proj,
                dropout: Dropout::new(dropout, seed ^ 0x5eed)?,
                activation,
            },
        })
    }
}
