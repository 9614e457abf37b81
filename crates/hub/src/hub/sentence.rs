//! [`SentenceTransformer`]: a sentence-transformers model folder run as
//! its `modules.json` says: the BERT encoder, pooling (mean, CLS, max),
//! then optionally L2 normalisation, batched as `encode` batches.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::hub::{Encoded, Padding, Tokenizer};
use crate::models::{l2_normalize, mean_pool, BertModel};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::core::graph::Var;
use retrograd_engine::nn::Module;
use retrograd_engine::tensor::{DType, Tensor};

/// How token states become one sentence vector (sentence-transformers'
/// `Pooling` modes; several concatenate in this order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pooling {
    /// The first token's state (`pooling_mode_cls_token`).
    Cls,
    /// The elementwise maximum over real tokens (`pooling_mode_max_tokens`).
    Max,
    /// The mean over real tokens (`pooling_mode_mean_tokens`).
    Mean,
    /// The sum over real tokens divided by the square root of their count
    /// (`pooling_mode_mean_sqrt_len_tokens`).
    MeanSqrtLen,
}

/// A sentence encoder from a sentence-transformers folder
/// (`sentence-transformers/all-MiniLM-L6-v2` and its kind): the modules of
/// `modules.json` (`Transformer`, `Pooling`, `Normalize`), the
/// `max_seq_length` of `sentence_bert_config.json`, the folder's
/// `tokenizer.json`. Runs on the inference graph (nothing recorded) in
/// evaluation mode, each batch's real tokens packed (see
/// [`packed`](Self::packed)). Embeddings match `SentenceTransformer.encode`
/// within 1e-5 (tests/hub_minilm.rs).
///
/// ```no_run
/// use retrograd::hub::SentenceTransformer;
/// let model = SentenceTransformer::from_pretrained(".cache/models/all-MiniLM-L6-v2")?;
/// let e = model.encode(&["A cat sleeps.", "Un chat dort."], 32, |_, _| {})?;
/// assert_eq!(e.shape(), &[2, 384]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Debug)]
pub struct SentenceTransformer {
    model: BertModel,
    tokenizer: Tokenizer,
    pooling: Vec<Pooling>,
    normalize: bool,
    max_seq_length: usize,
    dir: PathBuf,
    packed: bool,
}

fn read_json(op: &'static str, path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Io {
        op,
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| Error::Format {
        op,
        path: path.display().to_string(),
        reason: format!("not valid JSON: {e}"),
    })
}

impl SentenceTransformer {
    /// Loads a sentence-transformers folder. Without `modules.json` it is
    /// a plain encoder with mean pooling and no normalisation (what
    /// sentence-transformers does with a bare `transformers` model).
    /// Unknown module types are an [`Error::Format`] naming them.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        const OP: &str = "SentenceTransformer::from_pretrained";
        let dir = dir.as_ref();
        let bad = |path: &Path, reason: String| Error::Format {
            op: OP,
            path: path.display().to_string(),
            reason,
        };
        let mut pooling = vec![Pooling::Mean];
        let mut normalize = false;
        let mut encoder_dir = dir.to_path_buf();
        let modules_path = dir.join("modules.json");
        if modules_path.is_file() {
            let modules = read_json(OP, &modules_path)?;
            let Some(list) = modules.as_array() else {
                return Err(bad(&modules_path, "not a list of modules".into()));
            };
            for module in list {
                let kind = module.get("type").and_then(Value::as_str).unwrap_or("");
                let sub = dir.join(module.get("path").and_then(Value::as_str).unwrap_or(""));
                match kind.rsplit('.').next().unwrap_or("") {
                    "Transformer" => encoder_dir = sub,
                    "Pooling" => pooling = Self::read_pooling(&sub.join("config.json"))?,
                    "Normalize" => normalize = true,
                    _ => {
                        return Err(bad(
                            &modules_path,
                            format!("module type `{kind}` is not one retrograd runs (Transformer, Pooling, Normalize)"),
                        ))
                    }
                }
            }
        }
        let mut model = BertModel::from_pretrained(&encoder_dir)?.without_pooler();
        model.set_training(false);
        let limit = model.config().max_position_embeddings;
        let st_config = encoder_dir.join("sentence_bert_config.json");
        let max_seq_length = if st_config.is_file() {
            read_json(OP, &st_config)?
                .get("max_seq_length")
                .and_then(Value::as_u64)
                .map(|n| n as usize)
                .unwrap_or(limit)
        } else {
            limit
        }
        .min(limit);
        let tokenizer = Tokenizer::from_pretrained(&encoder_dir)?
            .with_truncation(Some(max_seq_length))?
            .with_padding(Some(Padding::Longest));
        Ok(SentenceTransformer {
            model,
            tokenizer,
            pooling,
            normalize,
            max_seq_length,
            dir: dir.to_path_buf(),
            packed: true,
        })
    }

    fn read_pooling(path: &Path) -> Result<Vec<Pooling>> {
        let json = read_json("SentenceTransformer::from_pretrained", path)?;
        let on = |key: &str| json.get(key).and_then(Value::as_bool) == Some(true);
        for unsupported in ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"] {
            if on(unsupported) {
                return Err(Error::Format {
                    op: "SentenceTransformer::from_pretrained",
                    path: path.display().to_string(),
                    reason: format!("`{unsupported}` is not supported"),
                });
            }
        }
        let modes: Vec<Pooling> = [
            ("pooling_mode_cls_token", Pooling::Cls),
            ("pooling_mode_max_tokens", Pooling::Max),
            ("pooling_mode_mean_tokens", Pooling::Mean),
            ("pooling_mode_mean_sqrt_len_tokens", Pooling::MeanSqrtLen),
        ]
        .into_iter()
        .filter(|(key, _)| on(key))
        .map(|(_, mode)| mode)
        .collect();
        if modes.is_empty() {
            return Err(Error::Format {
                op: "SentenceTransformer::from_pretrained",
                path: path.display().to_string(),
                reason: "no pooling mode is on".into(),
            });
        }
        Ok(modes)
    }

    /// The encoder.
    pub fn model(&self) -> &BertModel {
        &self.model
    }

    /// The tokenizer (truncating at [`max_seq_length`](Self::max_seq_length),
    /// padding each batch to its longest text).
    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The folder loaded.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The longest input in tokens; longer texts are cut.
    pub fn max_seq_length(&self) -> usize {
        self.max_seq_length
    }

    /// The pooling modes, in the order their outputs are concatenated.
    pub fn pooling(&self) -> &[Pooling] {
        &self.pooling
    }

    /// Whether embeddings are L2-normalised.
    pub fn normalizes(&self) -> bool {
        self.normalize
    }

    /// The embedding size.
    pub fn dim(&self) -> usize {
        self.model.config().hidden_size * self.pooling.len()
    }

    /// Whether [`embed_batch`](Self::embed_batch) and
    /// [`encode`](Self::encode) skip the padding positions (on by
    /// default): the texts' real tokens run packed, one after another
    /// ([`BertModel::forward_packed`]), and give the padded batch's
    /// embeddings without computing its padding. Off, a batch runs padded
    /// to its longest text, as sentence-transformers runs it.
    pub fn packed(mut self, on: bool) -> Self {
        self.packed = on;
        self
    }

    /// The embeddings `[N, dim]` (f32) of `texts` as one batch.
    pub fn embed_batch(&self, texts: &[&str]) -> Result<Tensor> {
        let batch = self.tokenizer.encode_batch(texts)?;
        let packed = if self.packed { pack(&batch)? } else { None };
        if let Some((ids, types)) = packed {
            let hidden = self.model.forward_packed(
                &Var::from(ids),
                &batch.lengths,
                Some(&Var::from(types)),
            )?;
            return self.pool_packed(&hidden, &batch.lengths);
        }
        let ids = Var::from(batch.input_ids);
        let mask = Var::from(batch.attention_mask);
        let types = Var::from(batch.token_type_ids);
        Ok(self.forward(&ids, &mask, Some(&types))?.value().clone())
    }

    /// The sentence embeddings `[B, dim]` of a tokenized batch (`input_ids`,
    /// `attention_mask` and optionally `token_type_ids`, each `[B, T]`):
    /// the encoder, then [`pool`](Self::pool). Every step reads the inputs
    /// as graph values, so a recorded graph depends on them (what
    /// `onnx export minilm` writes).
    pub fn forward<'g>(
        &self,
        input_ids: &Var<'g>,
        attention_mask: &Var<'g>,
        token_type_ids: Option<&Var<'g>>,
    ) -> Result<Var<'g>> {
        let hidden = self
            .model
            .forward(input_ids, Some(attention_mask), token_type_ids)?;
        self.pool(&hidden, attention_mask)
    }

    /// [`pool`](Self::pool) for packed states `[N, E]` of sequences of
    /// `lengths`: each mode over each sequence's own rows.
    fn pool_packed(&self, hidden: &Var<'_>, lengths: &[usize]) -> Result<Tensor> {
        let mut rows = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &n in lengths {
            let states = hidden.try_narrow(0, start as isize, n)?;
            let mut parts = Vec::with_capacity(self.pooling.len());
            for mode in &self.pooling {
                parts.push(match mode {
                    Pooling::Cls => states.try_narrow(0, 0, 1)?,
                    Pooling::Mean => states.try_mean_axes(&[0], true)?,
                    Pooling::MeanSqrtLen => states
                        .try_mean_axes(&[0], true)?
                        .mul_scalar((n as f64).sqrt()),
                    Pooling::Max => states.try_max_axes(&[0], true)?,
                });
            }
            rows.push(Var::try_cat(&parts.iter().collect::<Vec<_>>(), -1)?);
            start += n;
        }
        let pooled = Var::try_cat(&rows.iter().collect::<Vec<_>>(), 0)?;
        let out = if self.normalize {
            l2_normalize(&pooled)?
        } else {
            pooled
        };
        Ok(out.value().clone())
    }

    /// Pools `hidden` `[B, T, E]` over `attention_mask` `[B, T]` (a value
    /// of the same graph) and normalises, as the folder's modules say.
    pub fn pool<'g>(&self, hidden: &Var<'g>, attention_mask: &Var<'g>) -> Result<Var<'g>> {
        let mut parts = Vec::with_capacity(self.pooling.len());
        for mode in &self.pooling {
            parts.push(match mode {
                Pooling::Cls => hidden.try_select(1, 0)?,
                Pooling::Mean => mean_pool(hidden, attention_mask)?,
                Pooling::MeanSqrtLen => {
                    let count = attention_mask
                        .try_ne_scalar(0.0)?
                        .try_to_dtype(hidden.dtype())?
                        .try_sum_axes(&[1], true)?;
                    mean_pool(hidden, attention_mask)?.try_mul(&count.sqrt())?
                }
                Pooling::Max => {
                    // sentence-transformers sets padded states to -1e9 first.
                    let padded = attention_mask.try_eq_scalar(0.0)?.try_unsqueeze(-1)?;
                    hidden
                        .try_masked_fill(&padded, -1e9)?
                        .try_max_axes(&[1], false)?
                }
            });
        }
        let pooled = if parts.len() == 1 {
            parts.pop().expect("one part")
        } else {
            Var::try_cat(&parts.iter().collect::<Vec<_>>(), -1)?
        };
        if self.normalize {
            l2_normalize(&pooled)
        } else {
            Ok(pooled)
        }
    }

    /// The embeddings `[N, dim]` (f32) of `texts`, in their order, as
    /// sentence-transformers' `encode` computes them: texts sorted by
    /// length (longest first), cut into batches of `batch_size`, each run
    /// packed (or padded to its longest text: [`packed`](Self::packed)).
    /// `progress(done, total)` is called after each batch.
    pub fn encode(
        &self,
        texts: &[&str],
        batch_size: usize,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Tensor> {
        if batch_size == 0 {
            return Err(Error::invalid(
                "SentenceTransformer::encode",
                "batch_size must be > 0",
            ));
        }
        let dim = self.dim();
        if texts.is_empty() {
            return Tensor::zeros(&[0, dim], DType::F32);
        }
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(texts[i].chars().count()));
        let mut out = vec![0f32; texts.len() * dim];
        for (done, chunk) in order.chunks(batch_size).enumerate() {
            let batch: Vec<&str> = chunk.iter().map(|&i| texts[i]).collect();
            let e = self.embed_batch(&batch)?.to_vec::<f32>()?;
            for (row, &i) in chunk.iter().enumerate() {
                out[i * dim..(i + 1) * dim].copy_from_slice(&e[row * dim..(row + 1) * dim]);
            }
            progress(
                (done * batch_size + chunk.len()).min(texts.len()),
                texts.len(),
            );
        }
        Tensor::from_vec(out, &[texts.len(), dim])
    }
}

/// The real tokens of a right-padded batch, one text after another: ids
/// and token types `[N]`; `None` when some text is not padded on the right
/// (then the batch runs padded).
fn pack(batch: &Encoded) -> Result<Option<(Tensor, Tensor)>> {
    let t = batch.input_ids.shape()[1];
    let mask = batch.attention_mask.to_vec::<i64>()?;
    let right_padded = batch.lengths.iter().enumerate().all(|(r, &n)| {
        let row = &mask[r * t..(r + 1) * t];
        n > 0 && row[..n].iter().all(|&m| m != 0) && row[n..].iter().all(|&m| m == 0)
    });
    if !right_padded {
        return Ok(None);
    }
    let real = |m: &Tensor| -> Result<Tensor> {
        let v = m.to_vec::<i64>()?;
        let kept: Vec<i64> = batch
            .lengths
            .iter()
            .enumerate()
            .flat_map(|(r, &n)| v[r * t..r * t + n].iter().copied())
            .collect();
        let n = kept.len();
        Tensor::from_vec(kept, &[n])
    };
    Ok(Some((
        real(&batch.input_ids)?,
        real(&batch.token_type_ids)?,
    )))
}
