//! BERT model folders: [`BertModel::from_pretrained`] and the
//! sequence classifier's `from_pretrained` / `save_pretrained`.

use std::path::Path;

use rand::Rng;
use serde_json::Value;

use crate::hub::{LoadReport, ModelConfig, NameMap, Weights, CONFIG_FILE};
use crate::models::{BertForSequenceClassification, BertModel};
use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::{Module, StateDict};

/// The name map of BERT checkpoints: Hugging Face's names as they are,
/// under `bert.` in task checkpoints; the `position_ids` buffer older
/// `transformers` saved and the pre-training heads (`cls.`) are not loaded.
pub fn bert_name_map() -> NameMap {
    NameMap::new()
        .prefix("bert.")
        .ignore("embeddings.position_ids")
        .ignore("cls.")
}

impl BertModel {
    /// Loads a BERT model folder (`config.json` with `model_type: "bert"`
    /// and `model.safetensors` or a sharded index), in f32; f16 and bf16
    /// weights are converted. The pooler is loaded when the checkpoint has
    /// one. Every parameter must be in the checkpoint and every tensor
    /// used (but `position_ids` and pre-training heads): anything else is
    /// a typed error naming the file and the tensor.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Self> {
        Self::from_pretrained_with_report(dir).map(|(m, _)| m)
    }

    /// [`from_pretrained`](Self::from_pretrained), with what was ignored.
    pub fn from_pretrained_with_report(dir: impl AsRef<Path>) -> Result<(Self, LoadReport)> {
        let dir = dir.as_ref();
        let config = ModelConfig::read(dir)?.bert()?;
        let weights = Weights::open(dir)?;
        let map = bert_name_map();
        let has_pooler = ["pooler.dense.weight", "bert.pooler.dense.weight"]
            .iter()
            .any(|n| weights.contains(n));
        let mut loader = map.loader(&weights);
        let model = BertModel::from_source(config, has_pooler, &mut |name, shape, _| {
            loader.take(name, shape, config.dtype)?.ok_or_else(|| {
                Error::invalid("BertModel::from_pretrained", "no optional parameters")
            })
        })?;
        let report = loader.finish()?;
        Ok((model, report))
    }
}

impl BertForSequenceClassification {
    /// Loads a classifier from a model folder: a fine-tuned
    /// `BertForSequenceClassification` checkpoint (its head included), or a
    /// plain encoder (`BertModel`, as a sentence-transformers model ships)
    /// with a new head of `num_labels` drawn from `rng`. `num_labels` must
    /// agree with a checkpoint's own head. The returned report lists the
    /// parameters that were initialised rather than loaded.
    pub fn from_pretrained<R: Rng + ?Sized>(
        dir: impl AsRef<Path>,
        num_labels: usize,
        rng: &mut R,
    ) -> Result<(Self, LoadReport)> {
        let dir = dir.as_ref();
        let model_config = ModelConfig::read(dir)?;
        let config = model_config.bert()?;
        let weights = Weights::open(dir)?;
        // A sentence encoder may come without a trained pooler: then it
        // starts from transformers' initialisation, as the head does.
        let map = bert_name_map()
            .optional("classifier.")
            .optional("bert.pooler.");
        if let Some(shape) = weights.shape("classifier.weight")
            && shape.first() != Some(&num_labels)
        {
            return Err(Error::invalid(
                "BertForSequenceClassification::from_pretrained",
                format!(
                    "{}: the checkpoint's classifier has {} labels, {num_labels} were asked for",
                    dir.display(),
                    shape[0]
                ),
            ));
        }
        let mut loader = map.loader(&weights);
        let bert =
            BertModel::from_source(config, true, &mut |name, shape, init| match loader.take(
                &format!("bert.{name}"),
                shape,
                config.dtype,
            )? {
                Some(t) => Ok(t),
                None => init.tensor(shape, config.dtype, rng),
            })?;
        let model = BertForSequenceClassification::new(
            bert,
            num_labels,
            model_config.classifier_dropout()?,
            rng,
        )?;
        for (name, p) in model.classifier().parameters() {
            let full = format!("classifier.{name}");
            if let Some(v) = loader.take(&full, &p.shape(), p.dtype())? {
                p.set(v)?;
            }
        }
        let report = loader.finish()?;
        Ok((model, report))
    }

    /// Writes the classifier as a folder `transformers` loads with
    /// `BertForSequenceClassification.from_pretrained`: `config.json` (the
    /// encoder's `base_config` with the architecture and `labels`) and
    /// `model.safetensors` under Hugging Face's names.
    pub fn save_pretrained(
        &self,
        dir: impl AsRef<Path>,
        base_config: &ModelConfig,
        labels: &[String],
    ) -> Result<()> {
        let dir = dir.as_ref();
        if labels.len() != self.num_labels() {
            return Err(Error::invalid(
                "BertForSequenceClassification::save_pretrained",
                format!(
                    "{} labels named for a head of {}",
                    labels.len(),
                    self.num_labels()
                ),
            ));
        }
        let mut json = base_config.json().clone();
        json.insert(
            "architectures".into(),
            serde_json::json!(["BertForSequenceClassification"]),
        );
        let id2label: serde_json::Map<String, Value> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (i.to_string(), Value::from(l.as_str())))
            .collect();
        let label2id: serde_json::Map<String, Value> = labels
            .iter()
            .enumerate()
            .map(|(i, l)| (l.clone(), Value::from(i)))
            .collect();
        json.insert("id2label".into(), Value::Object(id2label));
        json.insert("label2id".into(), Value::Object(label2id));
        NameMap::new().save(self, StateDict::new(), dir)?;
        crate::hub::write_json(&dir.join(CONFIG_FILE), &Value::Object(json))
    }
}
