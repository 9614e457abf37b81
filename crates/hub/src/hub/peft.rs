//! LoRA adapters as PEFT's folders: `adapter_config.json` and
//! `adapter_model.safetensors`, the form `peft.PeftModel.from_pretrained`
//! loads onto a `transformers` model and `save_pretrained` writes.
//!
//! Tensor names are PEFT's saved names, the model's module path under
//! `base_model.model.` with the adapter name left out:
//! `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`.
//! Which layers carry an adapter is written as a list of layer names when
//! every layer of those names has one, else as PEFT's full-match regular
//! expression of their paths; ranks and alphas that differ by layer go in
//! `rank_pattern` and `alpha_pattern`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::{json, Value};

use retrograd_engine::base::error::{format_error, io_error, Error, Result};
use retrograd_engine::io::{load_tensors, save_tensors};
use retrograd_engine::nn::lora::{LoraAdapter, LoraModel};
use retrograd_engine::nn::StateDict;
use retrograd_engine::tensor::DType;

/// The adapter's settings file in a PEFT folder.
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// The adapter's matrices in a PEFT folder.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

const PREFIX: &str = "base_model.model.";

/// What [`save_peft_adapter`] writes besides the matrices.
#[derive(Clone, Debug, Default)]
pub struct PeftSaveOptions {
    /// `base_model_name_or_path`: where PEFT users find the base model.
    pub base_model_name_or_path: Option<String>,
}

/// Writes adapter `name` of `model` as a PEFT folder at `dir` (created if
/// needed; each file written atomically). The task type is `CAUSAL_LM`.
pub fn save_peft_adapter(
    model: &impl LoraModel,
    name: &str,
    dir: impl AsRef<Path>,
    options: &PeftSaveOptions,
) -> Result<()> {
    const OP: &str = "save_peft_adapter";
    let dir = dir.as_ref();
    let adapters = model.adapters_named(name);
    let Some((_, first)) = adapters.first() else {
        return Err(Error::invalid(
            OP,
            format!("the model has no adapter named `{name}`"),
        ));
    };
    let (use_rslora, dropout) = (first.use_rslora(), first.dropout());
    if adapters.iter().any(|(_, a)| a.use_rslora() != use_rslora) {
        return Err(Error::invalid(
            OP,
            format!("adapter `{name}` mixes rank-stabilised and plain scaling, which PEFT's config cannot say"),
        ));
    }
    let r = most_common(adapters.iter().map(|(_, a)| a.rank()));
    let alpha = most_common(adapters.iter().map(|(_, a)| a.alpha().to_bits()));
    let mut rank_pattern = serde_json::Map::new();
    let mut alpha_pattern = serde_json::Map::new();
    let mut tensors = StateDict::new();
    for (path, a) in &adapters {
        if a.rank() != r {
            rank_pattern.insert(path.clone(), json!(a.rank()));
        }
        if a.alpha().to_bits() != alpha {
            alpha_pattern.insert(path.clone(), json!(a.alpha()));
        }
        tensors.insert(format!("{PREFIX}{path}.lora_A.weight"), a.lora_a().value());
        tensors.insert(format!("{PREFIX}{path}.lora_B.weight"), a.lora_b().value());
    }
    let config = json!({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": options.base_model_name_or_path,
        "revision": null,
        "inference_mode": true,
        "r": r,
        "lora_alpha": f64::from_bits(alpha),
        "lora_dropout": dropout,
        "target_modules": target_modules(model, &adapters),
        "exclude_modules": null,
        "fan_in_fan_out": false,
        "bias": "none",
        "use_rslora": use_rslora,
        "use_dora": false,
        "lora_bias": false,
        "modules_to_save": null,
        "init_lora_weights": true,
        "layers_to_transform": null,
        "layers_pattern": null,
        "rank_pattern": rank_pattern,
        "alpha_pattern": alpha_pattern,
    });
    std::fs::create_dir_all(dir).map_err(|e| io_error(OP, dir, e))?;
    let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
    save_tensors(dir.join(ADAPTER_WEIGHTS_FILE), &tensors, &metadata)?;
    super::write_json(&dir.join(ADAPTER_CONFIG_FILE), &config)
}

/// Reads the PEFT folder at `dir` into `model` as adapter `name` (active
/// from now on, the rest of the model frozen). Returns the adapted layers'
/// paths. Errors name the file and the key: not a LoRA adapter, settings
/// this model cannot follow (DoRA, biases, modules to save, transposed
/// weights), a tensor for a layer the model lacks, a shape that does not
/// fit.
pub fn load_peft_adapter(
    model: &mut impl LoraModel,
    dir: impl AsRef<Path>,
    name: &str,
) -> Result<Vec<String>> {
    const OP: &str = "load_peft_adapter";
    let dir = dir.as_ref();
    let config_path = dir.join(ADAPTER_CONFIG_FILE);
    let text = std::fs::read_to_string(&config_path).map_err(|e| io_error(OP, &config_path, e))?;
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| format_error(OP, &config_path, format!("not JSON: {e}")))?;
    let bad = |reason: String| format_error(OP, &config_path, reason);
    let get = |key: &str| config.get(key).unwrap_or(&Value::Null);
    match get("peft_type").as_str() {
        Some("LORA") => {}
        other => return Err(bad(format!("peft_type is {other:?}, not \"LORA\""))),
    }
    for (key, plain) in [
        ("use_dora", json!(false)),
        ("fan_in_fan_out", json!(false)),
        ("lora_bias", json!(false)),
        ("bias", json!("none")),
    ] {
        let v = get(key);
        if !v.is_null() && *v != plain {
            return Err(bad(format!(
                "`{key}` = {v} is not supported (only {plain})"
            )));
        }
    }
    if !get("modules_to_save").is_null() {
        return Err(bad(format!(
            "`modules_to_save` = {} is not supported: only LoRA matrices load",
            get("modules_to_save")
        )));
    }
    let alpha = get("lora_alpha").as_f64().ok_or_else(|| {
        bad(format!(
            "`lora_alpha` = {} is not a number",
            get("lora_alpha")
        ))
    })?;
    let use_rslora = get("use_rslora").as_bool().unwrap_or(false);
    let dropout = get("lora_dropout").as_f64().unwrap_or(0.0);
    let alpha_pattern: Vec<(String, f64)> = get("alpha_pattern")
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_f64().map(|a| (k.clone(), a)))
                .collect()
        })
        .unwrap_or_default();
    let weights_path = dir.join(ADAPTER_WEIGHTS_FILE);
    let mut tensors = load_tensors(&weights_path)?.tensors;
    let mut adapters = Vec::new();
    let mut paths = Vec::new();
    model.visit_linears(&mut |path, _, _| paths.push(path.to_string()));
    for (i, path) in paths.iter().enumerate() {
        let (ka, kb) = (
            format!("{PREFIX}{path}.lora_A.weight"),
            format!("{PREFIX}{path}.lora_B.weight"),
        );
        let (a, b) = match (tensors.remove(&ka), tensors.remove(&kb)) {
            (None, None) => continue,
            (Some(a), Some(b)) => (a, b),
            (a, _) => {
                let missing = if a.is_none() { ka } else { kb };
                return Err(format_error(
                    OP,
                    &weights_path,
                    format!("`{missing}` is missing: an adapter needs both matrices"),
                ));
            }
        };
        for (key, t) in [(&ka, &a), (&kb, &b)] {
            if !matches!(
                t.dtype(),
                DType::F32 | DType::F16 | DType::BF16 | DType::F64
            ) {
                return Err(format_error(
                    OP,
                    &weights_path,
                    format!("`{key}` is {:?}, not a float", t.dtype()),
                ));
            }
        }
        let alpha = alpha_pattern
            .iter()
            .filter(|(k, _)| path_matches_pattern(path, k))
            .max_by_key(|(k, _)| k.len())
            .map_or(alpha, |&(_, a)| a);
        let adapter =
            LoraAdapter::try_from_weights(a, b, alpha, use_rslora, (dropout, i as u64 + 1))
                .map_err(|e| format_error(OP, &weights_path, format!("`{path}`: {e}")))?;
        adapters.push((path.clone(), adapter));
    }
    if let Some(key) = tensors.keys().next() {
        return Err(format_error(
            OP,
            &weights_path,
            format!(
                "`{key}` is for no linear layer of this model ({} tensors left over)",
                tensors.len()
            ),
        ));
    }
    if adapters.is_empty() {
        return Err(format_error(
            OP,
            &weights_path,
            "no LoRA matrices in the file",
        ));
    }
    let adapted = adapters.iter().map(|(p, _)| p.clone()).collect();
    model.try_insert_adapters(name, adapters)?;
    Ok(adapted)
}

/// PEFT's `target_modules` for these adapted paths: the layers' names
/// when each layer of those names is adapted, else a regular expression
/// matching exactly these paths.
fn target_modules(model: &impl LoraModel, adapters: &[(String, LoraAdapter)]) -> Value {
    let leaf = |p: &str| p.rsplit('.').next().unwrap_or(p).to_string();
    let names: BTreeSet<String> = adapters.iter().map(|(p, _)| leaf(p)).collect();
    let mut every = true;
    model.visit_linears(&mut |path, _, _| {
        let targeted = names.contains(&leaf(path));
        if targeted && !adapters.iter().any(|(p, _)| p == path) {
            every = false;
        }
    });
    if every {
        json!(names.into_iter().collect::<Vec<_>>())
    } else {
        let alternatives: Vec<String> = adapters
            .iter()
            .map(|(p, _)| p.replace('.', "\\."))
            .collect();
        json!(format!("^({})$", alternatives.join("|")))
    }
}

/// PEFT's rule for a `rank_pattern`/`alpha_pattern` key: the key matches
/// the whole path or its tail after a dot (keys here are plain names or
/// paths, dots escaped or not).
fn path_matches_pattern(path: &str, key: &str) -> bool {
    let key = key.replace("\\.", ".");
    path == key || path.ends_with(&format!(".{key}"))
}

/// The value that occurs most often (the first of the most frequent).
fn most_common<T: Copy + Ord>(values: impl Iterator<Item = T>) -> T {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    let mut order = Vec::new();
    for v in values {
        let c = counts.entry(v).or_insert(0);
        if *c == 0 {
            order.push(v);
        }
        *c += 1;
    }
    let best = order
        .iter()
        .map(|v| counts[v])
        .max()
        .expect("at least one value");
    *order
        .iter()
        .find(|v| counts[v] == best)
        .expect("one has the maximum")
}
