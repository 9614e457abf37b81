//! [`MultiheadAttention`]: PyTorch's `nn.MultiheadAttention` (batch first),
//! on the fused [`scaled_dot_product_attention`](crate::Var::try_scaled_dot_product_attention).

use rand::Rng;

use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::nn::init;
use crate::nn::setters::setters;
use crate::nn::{Dropout, Forward, Linear, Module, Parameter};
use crate::ops::nn::{AttnMask, SdpaOptions};
use crate::tensor::{DType, Tensor};

/// Multi-head attention over `[batch, length, embed_dim]` inputs (PyTorch's
/// `batch_first=True`; an unbatched `[length, embed_dim]` input works too).
///
/// The query, key and value projections are one `[3E, E]` matrix,
/// `in_proj_weight` (with `in_proj_bias`), and the output projection is
/// `out_proj`, as in PyTorch, so state dicts carry over by name. Self-attention
/// ([`self_attention`](Self::self_attention), or `forward` with one `Var`
/// three times) projects with a single product and splits the heads of it.
/// Initialisation is PyTorch's: `in_proj_weight` Xavier-uniform, biases zero,
/// `out_proj.weight` as a `Linear`'s.
///
/// ```
/// use retrograd::{DType, Graph, Tensor, nn::{Module, MultiheadAttention}};
/// let mha = MultiheadAttention::new(8, 2)?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::ones(&[3, 5, 8], DType::F32)?);
/// let y = mha.self_attention(&x, true)?; // causal
/// assert_eq!(y.shape(), &[3, 5, 8]);
/// let names: Vec<String> = mha.parameters().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Module)]
pub struct MultiheadAttention {
    in_proj_weight: Parameter,
    in_proj_bias: Option<Parameter>,
    out_proj: Linear,
    // Drops attention weights inside the fused op; named like PyTorch's
    // `dropout` argument, it holds no parameters.
    dropout: Dropout,
    num_heads: usize,
}

/// Settings of a [`MultiheadAttention`]; see [`MultiheadAttention::builder`].
#[derive(Clone, Copy, Debug)]
pub struct MultiheadAttentionBuilder {
    embed_dim: usize,
    num_heads: usize,
    bias: bool,
    dropout: f64,
    seed: u64,
    dtype: DType,
}

impl MultiheadAttention {
    /// `num_heads` heads over `embed_dim` features, with biases, no
    /// dropout, f32, initialised from the default generator. Other settings
    /// come through [`builder`](Self::builder).
    pub fn new(embed_dim: usize, num_heads: usize) -> Result<Self> {
        Self::builder(embed_dim, num_heads).build()
    }

    /// Configures a layer: biases, attention dropout, dtype, generator.
    pub fn builder(embed_dim: usize, num_heads: usize) -> MultiheadAttentionBuilder {
        MultiheadAttentionBuilder {
            embed_dim,
            num_heads,
            bias: true,
            dropout: 0.0,
            seed: 0,
            dtype: DType::F32,
        }
    }

    /// The number of heads.
    pub fn num_heads(&self) -> usize {
        self.num_heads
    }

    /// The model width `E`.
    pub fn embed_dim(&self) -> usize {
        self.in_proj_weight.shape()[1]
    }

    /// The output projection.
    pub fn out_proj(&self) -> &Linear {
        &self.out_proj
    }

    /// GPT-2's initialisation: `in_proj_weight` `N(0, std)`,
    /// `out_proj.weight` `N(0, out_std)`, biases zero.
    pub fn gpt2_init<R: Rng + ?Sized>(self, std: f64, out_std: f64, rng: &mut R) -> Result<Self> {
        let w = &self.in_proj_weight;
        w.set(init::normal(&w.shape(), 0.0, std, w.dtype(), rng)?)?;
        if let Some(b) = &self.in_proj_bias {
            b.set(b.value().zeros_like())?;
        }
        self.out_proj.init_normal(out_std, rng)?;
        Ok(self)
    }

    /// Self-attention of `x` (`[B, T, E]` or `[T, E]`), causal or not.
    pub fn self_attention<'g>(&self, x: &Var<'g>, is_causal: bool) -> Result<Var<'g>> {
        self.attend([x, x, x], None, is_causal, true)
    }

    /// Attention of `query` (`[B, L, E]`) over `key` and `value`
    /// (`[B, S, E]`), optionally masked (see [`AttnMask`], broadcastable to
    /// `[B, heads, L, S]`) or causal; the result is `[B, L, E]`. Unbatched
    /// `[L, E]` inputs give an unbatched result.
    pub fn forward<'g>(
        &self,
        query: &Var<'g>,
        key: &Var<'g>,
        value: &Var<'g>,
        attn_mask: Option<AttnMask<'_, 'g>>,
        is_causal: bool,
    ) -> Result<Var<'g>> {
        // One recorded value three times is self-attention. (A value with
        // no slot, such as one on the inference graph, cannot be told apart
        // from another by id: it takes the general path, same result.)
        let id = query.value_id();
        let shared = id.is_some() && id == key.value_id() && id == value.value_id();
        self.attend([query, key, value], attn_mask, is_causal, shared)
    }

    /// [`forward`](Self::forward) of `[query, key, value]`, told whether
    /// the three are one.
    fn attend<'g>(
        &self,
        [query, key, value]: [&Var<'g>; 3],
        attn_mask: Option<AttnMask<'_, 'g>>,
        is_causal: bool,
        shared: bool,
    ) -> Result<Var<'g>> {
        let e = self.embed_dim();
        let unbatched = query.shape().len() == 2;
        for (what, v) in [("query", query), ("key", key), ("value", value)] {
            let rank_ok = v.shape().len() == if unbatched { 2 } else { 3 };
            if !rank_ok || v.shape().last() != Some(&e) {
                return Err(Error::invalid(
                    "MultiheadAttention",
                    format!(
                        "{what} must be [batch, length, {e}] (or [length, {e}] for all three), got {:?}",
                        v.shape()
                    ),
                ));
            }
        }
        let batched = |v: &Var<'g>| {
            if unbatched {
                v.try_unsqueeze(0)
            } else {
                Ok(v.clone())
            }
        };
        let (q, k, v) = (batched(query)?, batched(key)?, batched(value)?);
        let graph = q.graph();
        let w = graph.param(&self.in_proj_weight);
        let b = self.in_proj_bias.as_ref().map(|b| graph.param(b));
        let [q, k, v] = if shared {
            // One [B, T, 3E] product, then the heads of q, k and v.
            let qkv = project(&q, &w, b.as_ref())?;
            self.split_qkv(&qkv)?
        } else {
            let part = |x: &Var<'g>, i: isize| -> Result<Var<'g>> {
                let wi = w.try_narrow(0, i * e as isize, e)?;
                let bi = b
                    .as_ref()
                    .map(|b| b.try_narrow(0, i * e as isize, e))
                    .transpose()?;
                self.heads(&project(x, &wi, bi.as_ref())?)
            };
            [part(&q, 0)?, part(&k, 1)?, part(&v, 2)?]
        };
        let mut options = SdpaOptions::new().is_causal(is_causal);
        if let Some(mask) = attn_mask {
            options = options.attn_mask(mask);
        }
        if let Some(seed) = self.dropout.next_seed() {
            options = options.dropout_p(self.dropout.p(), seed);
        }
        let y = q.try_scaled_dot_product_attention(&k, &v, &options)?;
        // [B, H, L, D] -> [B, L, H·D]
        let [bsz, _, l, _] = y.shape()[..] else {
            unreachable!("attention keeps rank 4")
        };
        let y =
            y.try_permute(&[0, 2, 1, 3])?
                .try_reshape(&[bsz as isize, l as isize, e as isize])?;
        let y = self.out_proj.forward(&y)?;
        if unbatched {
            y.try_squeeze_dim(0)
        } else {
            Ok(y)
        }
    }

    /// `[B, T, E]` -> `[B, H, T, D]`.
    fn heads<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let (b, t, h) = (
            x.shape()[0] as isize,
            x.shape()[1] as isize,
            self.num_heads as isize,
        );
        x.try_reshape(&[b, t, h, -1])?.try_permute(&[0, 2, 1, 3])
    }

    /// `[B, T, 3E]` -> the `[B, H, T, D]` heads of q, k and v: strided
    /// views of the projection, which attention reads in place (no copy).
    /// Each is picked before it is permuted, so the backward's slices
    /// land in the projection's own `[B, T, 3, H, D]` layout and its
    /// gradient reaches the product without a copy back.
    fn split_qkv<'g>(&self, qkv: &Var<'g>) -> Result<[Var<'g>; 3]> {
        let (b, t, h) = (
            qkv.shape()[0] as isize,
            qkv.shape()[1] as isize,
            self.num_heads as isize,
        );
        let all = qkv.try_reshape(&[b, t, 3, h, -1])?;
        let pick = |i: isize| {
            all.try_narrow(2, i, 1)?
                .try_squeeze_dim(2)?
                .try_permute(&[0, 2, 1, 3])
        };
        Ok([pick(0)?, pick(1)?, pick(2)?])
    }
}

/// `x Wᵀ + b`.
fn project<'g>(x: &Var<'g>, w: &Var<'g>, b: Option<&Var<'g>>) -> Result<Var<'g>> {
    let y = x.try_matmul_transposed(w, false, true)?;
    match b {
        Some(b) => y.try_add(b),
        None => Ok(y),
    }
}

setters! {
    impl MultiheadAttentionBuilder builds MultiheadAttention {
        /// Whether the projections add biases (default true).
        bias(bias: bool);
        /// Dropout of the attention weights while training (default 0), its
        /// masks seeded from `seed`.
        dropout(dropout: f64, seed: u64);
        /// The dtype of the parameters (default f32).
        dtype(dtype: DType);
    }
}

impl MultiheadAttentionBuilder {
    /// The layer, initialised as in PyTorch from `rng`.
    pub fn build_with<R: Rng + ?Sized>(self, rng: &mut R) -> Result<MultiheadAttention> {
        let MultiheadAttentionBuilder {
            embed_dim: e,
            num_heads,
            bias,
            dropout,
            seed,
            dtype,
        } = self;
        if e == 0 || num_heads == 0 || e % num_heads != 0 {
            return Err(Error::invalid(
                "MultiheadAttention",
                format!("embed_dim = {e} must be a positive multiple of num_heads = {num_heads}"),
            ));
        }
        let in_proj_weight = Parameter::new(init::xavier_uniform(&[3 * e, e], 1.0, dtype, rng)?);
        let out_weight = Linear::builder(e, e)
            .bias(false)
            .dtype(dtype)
            .build_with(rng)?;
        let zeros = |n: usize| Tensor::zeros(&[n], dtype).map(Parameter::new);
        let out_bias = if bias { Some(zeros(e)?) } else { None };
        let out_proj = Linear::from_parameters(out_weight.weight().clone(), out_bias)?;
        let in_proj_bias = if bias { Some(zeros(3 * e)?) } else { None };
        Ok(MultiheadAttention {
            in_proj_weight,
            in_proj_bias,
            out_proj,
            dropout: Dropout::new(dropout, seed)?,
            num_heads,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::scaled_dot_product_attention_unfused;
    use crate::{gradcheck, Graph};
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn layer(bias: bool) -> MultiheadAttention {
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        MultiheadAttention::builder(6, 2)
            .bias(bias)
            .dtype(DType::F64)
            .build_with(&mut rng)
            .unwrap()
    }

    /// The same attention written out: separate projections, per-head
    /// softmax(q kᵀ / sqrt(d)) v through the unfused composition.
    fn reference<'g>(m: &MultiheadAttention, q: &Var<'g>, kv: &Var<'g>, causal: bool) -> Var<'g> {
        let g = q.graph();
        let w = g.param(&m.in_proj_weight);
        let e = 6;
        let proj = |x: &Var<'g>, i: isize| {
            let mut y = x.matmul(&w.narrow(0, i * e, 6).t());
            if let Some(b) = &m.in_proj_bias {
                y = &y + &g.param(b).narrow(0, i * e, 6);
            }
            y.reshape(&[x.shape()[0] as isize, x.shape()[1] as isize, 2, 3])
                .permute(&[0, 2, 1, 3])
        };
        let (qh, kh, vh) = (proj(q, 0), proj(kv, 1), proj(kv, 2));
        let o = scaled_dot_product_attention_unfused(
            &qh,
            &kh,
            &vh,
            &SdpaOptions::new().is_causal(causal),
        )
        .unwrap();
        let o =
            o.permute(&[0, 2, 1, 3])
                .reshape(&[q.shape()[0] as isize, q.shape()[1] as isize, 6]);
        m.out_proj.forward(&o).unwrap()
    }

    #[test]
    fn self_and_cross_attention_match_the_written_out_formula() {
        for bias in [true, false] {
            let m = layer(bias);
            let g = Graph::new();
            let x = g.variable(Tensor::randn(&[2, 4, 6], DType::F64, 1).unwrap());
            let y = g.variable(Tensor::randn(&[2, 5, 6], DType::F64, 2).unwrap());
            for causal in [false, true] {
                let fused = m.self_attention(&x, causal).unwrap();
                assert!(fused.value().allclose(
                    reference(&m, &x, &x, causal).value(),
                    1e-12,
                    1e-12
                ));
            }
            let cross = m.forward(&x, &y, &y, None, false).unwrap();
            assert_eq!(cross.shape(), &[2, 4, 6]);
            assert!(cross
                .value()
                .allclose(reference(&m, &x, &y, false).value(), 1e-12, 1e-12));
        }
    }

    #[test]
    fn gradients_agree_with_finite_differences() {
        let m = layer(true);
        let x = Tensor::randn(&[1, 3, 6], DType::F64, 4).unwrap();
        gradcheck(|v| Ok(m.self_attention(&v[0], true)?.tanh().sum()), &[x]).unwrap();
        // The weights receive the gradient of all three projections.
        let g = Graph::new();
        let x = g.constant(Tensor::randn(&[2, 3, 6], DType::F64, 5).unwrap());
        let grads = m
            .self_attention(&x, false)
            .unwrap()
            .sum()
            .backward()
            .unwrap();
        let gw = grads.of(&m.in_proj_weight);
        assert_eq!(gw.shape(), &[18, 6]);
        assert!(
            gw.to_f64_vec()[12 * 6..].iter().any(|&v| v != 0.0),
            "value rows reached"
        );
    }

    #[test]
    fn cross_attention_on_the_inference_graph_is_not_taken_for_self_attention() {
        let m = layer(true);
        let x = Tensor::randn(&[2, 4, 6], DType::F64, 7).unwrap();
        let y = Tensor::randn(&[2, 5, 6], DType::F64, 8).unwrap();
        let g = Graph::new();
        let want = m.forward(
            &g.constant(x.clone()),
            &g.constant(y.clone()),
            &g.constant(y.clone()),
            None,
            false,
        );
        let (xi, yi) = (Var::from(&x), Var::from(&y));
        let got = m.forward(&xi, &yi, &yi, None, false).unwrap();
        assert!(got.value().allclose(want.unwrap().value(), 1e-12, 1e-12));
        let own = m.self_attention(&xi, true).unwrap();
        assert!(own.value().allclose(
            m.self_attention(&g.constant(x), true).unwrap().value(),
            1e-12,
            1e-12
        ));
    }

    #[test]
    fn unbatched_input_and_bad_shapes() {
        let m = layer(true);
        let g = Graph::new();
        let x = g.constant(Tensor::randn(&[4, 6], DType::F64, 6).unwrap());
        let y = m.self_attention(&x, true).unwrap();
        assert_eq!(y.shape(), &[4, 6]);
        let batched = m.self_attention(&x.unsqueeze(0), true).unwrap();
        assert_eq!(y.value().to_f64_vec(), batched.value().to_f64_vec());
        let wrong = g.constant(Tensor::zeros(&[2, 4, 5], DType::F64).unwrap());
        let err = m.self_attention(&wrong, false).unwrap_err().to_string();
        assert!(
            err.contains("MultiheadAttention") && err.contains("[2, 4, 5]"),
            "{err}"
        );
        assert!(MultiheadAttention::new(6, 4).is_err());
        assert!(MultiheadAttention::new(0, 1).is_err());
    }
}
