//! The encoder over packed sequences: every text's real tokens one after
//! another, `[N, hidden]` with `N` the sum of the lengths, and no padding.
//!
//! Everything in a BERT layer but attention works token by token, so the
//! dense layers, GELU and the layer norms run on the packed rows as they
//! are; attention runs once per sequence on its own rows. A padded batch
//! spends the same work on its padding positions (sorted by length,
//! sentence-transformers' 256 first Shakespeare speeches at batch 32 carry
//! 1.5 padded tokens per real one), whose states pooling then throws away.
//! The real tokens' states are those of [`BertModel::forward`] with an
//! attention mask (`packed_states_are_the_padded_states` checks it).

use super::{BertEmbeddings, BertLayer, BertModel, BertSelfAttention};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Var;
use retrograd_engine::nn::Forward;
use retrograd_engine::ops::nn::SdpaOptions;
use retrograd_engine::tensor::Tensor;

impl BertEmbeddings {
    /// `input_ids` `[N]` of sequences of `lengths`, each from position 0.
    fn forward_packed<'g>(
        &self,
        input_ids: &Var<'g>,
        lengths: &[usize],
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let positions: Vec<i64> = lengths.iter().flat_map(|&n| 0..n as i64).collect();
        let positions = Tensor::from_vec(positions, &[input_ids.value().numel()])?;
        let positions = input_ids
            .graph()
            .param(self.position_embeddings.weight())
            .try_embedding(&positions, positions.shape())?;
        self.embed(
            "BertModel::forward_packed: token_type_ids",
            input_ids,
            token_type_ids,
            &positions,
        )
    }
}

impl BertSelfAttention {
    /// `x` `[N, E]` packed: each sequence attends to its own rows only.
    fn forward_packed<'g>(&self, x: &Var<'g>, lengths: &[usize]) -> Result<Var<'g>> {
        let q = self.query.forward(x)?;
        let k = self.key.forward(x)?;
        let v = self.value.forward(x)?;
        let heads = self.num_heads as isize;
        let mut outputs = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &n in lengths {
            // [n, E] -> [1, H, n, D]: views, read by attention at their strides.
            let split = |m: &Var<'g>| -> Result<Var<'g>> {
                m.try_narrow(0, start as isize, n)?
                    .try_reshape(&[1, n as isize, heads, -1])?
                    .try_permute(&[0, 2, 1, 3])
            };
            let mut options = SdpaOptions::new();
            if let Some(seed) = self.dropout.next_seed() {
                options = options.dropout_p(self.dropout.p(), seed);
            }
            let y =
                split(&q)?.try_scaled_dot_product_attention(&split(&k)?, &split(&v)?, &options)?;
            outputs.push(
                y.try_permute(&[0, 2, 1, 3])?
                    .try_reshape(&[n as isize, -1])?,
            );
            start += n;
        }
        Var::try_cat(&outputs.iter().collect::<Vec<_>>(), 0)
    }
}

impl BertLayer {
    /// [`forward`](Self::forward) on packed rows `[N, E]`.
    fn forward_packed<'g>(&self, x: &Var<'g>, lengths: &[usize]) -> Result<Var<'g>> {
        let a = self.attention.self_attention.forward_packed(x, lengths)?;
        self.after_attention(&a, x)
    }
}

impl BertModel {
    /// The last hidden state `[N, hidden]` of packed sequences:
    /// `input_ids` `[N]` (i64) holds the sequences of `lengths` one after
    /// another (each from position 0), `token_type_ids` `[N]` likewise
    /// (zeros when absent). Row `i` is the state [`forward`](Self::forward)
    /// gives that token in a padded batch with an attention mask, without
    /// computing the padding: faster inference for batches of uneven
    /// lengths. Each length must be 1 to `max_position_embeddings`.
    ///
    /// ```
    /// use retrograd::{Graph, Tensor, nn::{BertConfig, BertModel}};
    /// let config = BertConfig { vocab_size: 50, hidden_size: 16, num_hidden_layers: 2,
    ///     num_attention_heads: 4, intermediate_size: 32, max_position_embeddings: 8,
    ///     ..BertConfig::base() };
    /// let bert = BertModel::new(config)?;
    /// let g = Graph::new();
    /// // "1 7 9 2" and "1 5 2", packed.
    /// let ids = g.constant(Tensor::from_vec(vec![1i64, 7, 9, 2, 1, 5, 2], &[7])?);
    /// let hidden = bert.forward_packed(&ids, &[4, 3], None)?;
    /// assert_eq!(hidden.shape(), &[7, 16]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn forward_packed<'g>(
        &self,
        input_ids: &Var<'g>,
        lengths: &[usize],
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        const OP: &str = "BertModel::forward_packed";
        let shape = input_ids.shape();
        let total: usize = lengths.iter().sum();
        if shape.len() != 1 || shape[0] != total {
            return Err(Error::invalid(
                OP,
                format!(
                    "input_ids must be [N] with N = the sum of lengths {lengths:?} = {total}, got {shape:?}"
                ),
            ));
        }
        if lengths.is_empty() {
            return Err(Error::invalid(OP, "no sequences (lengths is empty)"));
        }
        let limit = self.config.max_position_embeddings;
        if let Some(&n) = lengths.iter().find(|&&n| n == 0 || n > limit) {
            return Err(Error::invalid(
                OP,
                format!("a sequence of {n} tokens; the model takes 1 to max_position_embeddings = {limit}"),
            ));
        }
        let mut x = self
            .embeddings
            .forward_packed(input_ids, lengths, token_type_ids)?;
        for layer in &self.encoder.layer {
            x = layer.forward_packed(&x, lengths)?;
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::tiny;
    use retrograd_engine::tensor::{DType, Tensor};
    use retrograd_engine::{Graph, Var};

    #[test]
    fn packed_states_are_the_padded_states() {
        let bert = tiny(DType::F64);
        let texts: [&[i64]; 3] = [&[1, 7, 9, 2, 4, 10], &[1, 5, 2], &[3]];
        let lengths: Vec<usize> = texts.iter().map(|t| t.len()).collect();
        let (b, t) = (texts.len(), 6);
        let mut ids = vec![0i64; b * t];
        let mut mask = vec![0i64; b * t];
        let mut types = vec![0i64; b * t];
        for (r, text) in texts.iter().enumerate() {
            for (c, &id) in text.iter().enumerate() {
                ids[r * t + c] = id;
                mask[r * t + c] = 1;
                types[r * t + c] = (c % 2) as i64;
            }
        }
        let g = Graph::new();
        let padded = bert
            .forward(
                &g.constant(Tensor::from_vec(ids.clone(), &[b, t]).unwrap()),
                Some(&g.constant(Tensor::from_vec(mask.clone(), &[b, t]).unwrap())),
                Some(&g.constant(Tensor::from_vec(types.clone(), &[b, t]).unwrap())),
            )
            .unwrap()
            .value()
            .to_f64_vec();
        let real = |v: &[i64]| -> Vec<i64> {
            (0..b * t).filter(|&i| mask[i] == 1).map(|i| v[i]).collect()
        };
        let n = lengths.iter().sum::<usize>();
        let packed = bert
            .forward_packed(
                &Var::from(Tensor::from_vec(real(&ids), &[n]).unwrap()),
                &lengths,
                Some(&Var::from(Tensor::from_vec(real(&types), &[n]).unwrap())),
            )
            .unwrap()
            .value()
            .to_f64_vec();
        let e = 8;
        let mut row = 0;
        for (r, &len) in lengths.iter().enumerate() {
            for c in 0..len {
                let want = &padded[(r * t + c) * e..(r * t + c + 1) * e];
                let got = &packed[row * e..(row + 1) * e];
                for (w, g) in want.iter().zip(got) {
                    assert!((w - g).abs() < 1e-12, "sequence {r} token {c}: {w} vs {g}");
                }
                row += 1;
            }
        }
    }

    #[test]
    fn bad_packings_are_typed_errors() {
        let bert = tiny(DType::F32);
        let ids = Var::from(Tensor::from_vec(vec![1i64, 2, 3], &[3]).unwrap());
        for lengths in [&[2usize][..], &[1, 1, 1, 1], &[], &[3, 0]] {
            let err = bert
                .forward_packed(&ids, lengths, None)
                .unwrap_err()
                .to_string();
            assert!(err.contains("BertModel::forward_packed"), "{err}");
        }
        let long = Var::from(Tensor::from_vec(vec![1i64; 7], &[7]).unwrap());
        let err = bert
            .forward_packed(&long, &[7], None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("max_position_embeddings = 6"), "{err}");
    }
}
