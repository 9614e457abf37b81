//! Training checkpoints: a model's named parameters and buffers and,
//! optionally, its optimizer's state, in one safetensors file.
//!
//! Naming scheme: each parameter and buffer under its own name
//! (`"0.weight"`, `"2.bias"`, `"1.running_mean"`, as `Module::parameters`
//! and `Module::buffers` give them, so the file loads into a PyTorch model
//! with the same layout through `safetensors.torch.load_file`; PyTorch
//! keeps `num_batches_tracked` as int64 where retrograd has a 0-d f64),
//! and each optimizer state tensor under `"optimizer.{parameter}.{field}"`
//! (`optimizer.0.weight.exp_avg`, `optimizer.0.weight.step`, ...). The
//! header's metadata records the format, the optimizer kind and its learning
//! rate, and any metadata of the program's own
//! ([`save_checkpoint_with_metadata`]: a tokenizer's vocabulary, a model's
//! configuration), read back by [`load_checkpoint_with_metadata`] or, before
//! any model exists, by [`checkpoint_metadata`].
//!
//! Loading is strict and all-or-nothing: a missing or unexpected name, a
//! wrong shape or dtype is an [`Error::TensorMismatch`] naming the tensor,
//! and on any error no parameter, buffer or optimizer state is changed.

use std::collections::BTreeMap;
use std::path::Path;

use super::checksum::{checksum_entry, verify_checksum, CHECKSUM_KEY};
use super::safetensors::{load_tensors, save_tensors, TensorFile};
use crate::base::error::{Error, Result};
use crate::nn::{NamedTensors, StateDict};
use crate::optim::Optimizer;

/// Prefix of optimizer state entries.
pub const OPTIMIZER_PREFIX: &str = "optimizer.";
/// Metadata key and value marking a retrograd checkpoint.
const FORMAT_KEY: &str = "format";
const FORMAT: &str = "retrograd.checkpoint.v1";
const OPTIMIZER_KEY: &str = "optimizer";
const LR_KEY: &str = "optimizer.lr";
/// Metadata of a training state (`retrograd::train`): `training_state`
/// and every key under `training_state.`.
pub const TRAINING_STATE_KEY: &str = "training_state";

/// Saves `model`'s parameters and buffers (and `optimizer`'s state, if
/// given) to `path`, atomically. `model` is a [`Module`](crate::nn::Module)
/// (parameters and buffers) or a list of named parameters.
///
/// ```
/// use retrograd::{DType, Tensor, nn::{BatchNorm1d, Forward, Module, Parameter}, io::{load_checkpoint, save_checkpoint}};
/// let dir = tempfile::tempdir().unwrap();
/// // A module: its buffers (running statistics) are saved too.
/// let bn = BatchNorm1d::new(2, DType::F32)?;
/// save_checkpoint(dir.path().join("bn.safetensors"), &bn, None)?;
/// load_checkpoint(dir.path().join("bn.safetensors"), &bn, None)?;
/// assert_eq!(bn.buffers()[0].0, "running_mean");
/// // A plain list of named parameters.
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("model.safetensors");
/// let w = Parameter::new(Tensor::from_vec(vec![1.0f32, 2.0], &[2])?);
/// save_checkpoint(&path, &[("w".to_string(), w.clone())], None)?;
/// w.set(Tensor::from_vec(vec![0.0f32, 0.0], &[2])?)?;
/// load_checkpoint(&path, &[("w".to_string(), w.clone())], None)?;
/// assert_eq!(w.value().to_vec::<f32>()?, vec![1.0, 2.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn save_checkpoint<M: NamedTensors + ?Sized>(
    path: impl AsRef<Path>,
    model: &M,
    optimizer: Option<&dyn Optimizer>,
) -> Result<()> {
    save_checkpoint_with_metadata(path, model, optimizer, &BTreeMap::new())
}

/// Whether a metadata key is retrograd's own (the format, the optimizer's
/// kind and learning rate, the checksum, a training state's entries), which
/// a program's metadata may not use.
fn is_reserved(key: &str) -> bool {
    key == FORMAT_KEY
        || key == OPTIMIZER_KEY
        || key.starts_with(OPTIMIZER_PREFIX)
        || key == CHECKSUM_KEY
        || key == TRAINING_STATE_KEY
        || key
            .strip_prefix(TRAINING_STATE_KEY)
            .is_some_and(|rest| rest.starts_with('.'))
}

/// [`save_checkpoint`], with `metadata` of the program's own (string keys
/// and values, kept in the safetensors header) saved alongside: what is
/// needed to rebuild the model, such as a tokenizer's vocabulary. The keys
/// `format`, `optimizer` and `optimizer.*` are retrograd's own; using one is
/// an [`Error::InvalidArgument`] and nothing is written (so are
/// `checksum` and `training_state*`).
///
/// ```
/// use std::collections::BTreeMap;
/// use retrograd::{Tensor, data::CharTokenizer, nn::Parameter};
/// use retrograd::io::{checkpoint_metadata, load_checkpoint_with_metadata, save_checkpoint_with_metadata};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("gpt.safetensors");
/// let model = [("w".to_string(), Parameter::new(Tensor::scalar(1.0f32)))];
/// let tok = CharTokenizer::from_text("to be or not to be");
/// let meta = BTreeMap::from([(CharTokenizer::METADATA_KEY.to_string(), tok.to_metadata())]);
/// save_checkpoint_with_metadata(&path, &model, None, &meta)?;
/// // Before building a model (its size may depend on it):
/// let saved = checkpoint_metadata(&path)?;
/// let back = CharTokenizer::from_metadata(&saved[CharTokenizer::METADATA_KEY])?;
/// assert_eq!((back.vocab_size(), back.encode("not")?), (7, vec![3, 4, 6]));
/// assert_eq!(load_checkpoint_with_metadata(&path, &model, None)?, meta);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn save_checkpoint_with_metadata<M: NamedTensors + ?Sized>(
    path: impl AsRef<Path>,
    model: &M,
    optimizer: Option<&dyn Optimizer>,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let file = checkpoint_contents(model, optimizer, metadata)?;
    write_checkpoint(path.as_ref(), file)
}

/// What a checkpoint of `model` (and `optimizer`) holds, with the program's
/// `metadata`: its tensors (sharing the live values' storage) and header
/// metadata, before the checksum. An error for reserved metadata keys and
/// for names a checkpoint cannot hold.
pub fn checkpoint_contents<M: NamedTensors + ?Sized>(
    model: &M,
    optimizer: Option<&dyn Optimizer>,
    metadata: &BTreeMap<String, String>,
) -> Result<TensorFile> {
    if let Some(key) = metadata.keys().find(|k| is_reserved(k)) {
        return Err(Error::invalid(
            "save_checkpoint_with_metadata",
            format!(
                "metadata key `{key}` is reserved (`{FORMAT_KEY}`, `{OPTIMIZER_KEY}`, `{OPTIMIZER_PREFIX}*`, `{CHECKSUM_KEY}` and `{TRAINING_STATE_KEY}*` are retrograd's)"
            ),
        ));
    }
    let mut tensors = StateDict::new();
    let params = model
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.value()));
    let buffers = model
        .named_buffers()
        .into_iter()
        .map(|(n, b)| (n, b.value()));
    for (name, value) in params.chain(buffers) {
        if name.starts_with(OPTIMIZER_PREFIX) {
            return Err(Error::invalid(
                "save_checkpoint",
                format!("parameter or buffer name `{name}` uses the reserved prefix `{OPTIMIZER_PREFIX}`"),
            ));
        }
        if tensors.contains_key(&name) {
            return Err(Error::invalid(
                "save_checkpoint",
                format!("two parameters or buffers are named `{name}`"),
            ));
        }
        tensors.insert(name, value);
    }
    let mut metadata = metadata.clone();
    metadata.insert(FORMAT_KEY.to_string(), FORMAT.to_string());
    if let Some(opt) = optimizer {
        metadata.insert(OPTIMIZER_KEY.to_string(), opt.kind().to_string());
        // Round-trip exact: Rust prints the shortest string that parses back to the same f64.
        metadata.insert(LR_KEY.to_string(), format!("{:?}", opt.lr()));
        for (name, t) in opt.state_dict() {
            tensors.insert(format!("{OPTIMIZER_PREFIX}{name}"), t);
        }
    }
    Ok(TensorFile { tensors, metadata })
}

/// Writes checkpoint contents to `path` atomically, with the checksum of
/// everything else added to the metadata.
pub fn write_checkpoint(path: &Path, mut file: TensorFile) -> Result<()> {
    file.metadata.remove(CHECKSUM_KEY);
    let (key, value) = checksum_entry(&file);
    file.metadata.insert(key, value);
    save_tensors(path, &file.tensors, &file.metadata)
}

/// Loads a checkpoint written by [`save_checkpoint`] into `model`'s
/// parameters and buffers (every one must be in the file, with its shape
/// and dtype; the file may hold no other parameter or buffer) and, if
/// given, into `optimizer` (which must be of the kind that saved it; its
/// learning rate is restored too). Optimizer entries are ignored when no
/// optimizer is given. All or nothing: on error nothing is changed.
pub fn load_checkpoint<M: NamedTensors + ?Sized>(
    path: impl AsRef<Path>,
    model: &M,
    optimizer: Option<&mut dyn Optimizer>,
) -> Result<()> {
    load_checkpoint_with_metadata(path, model, optimizer).map(drop)
}

/// Reads a safetensors file and checks it is a retrograd checkpoint whose
/// content matches its checksum (files written before checkpoints carried
/// one have none, and load as they did).
pub fn read_checkpoint(op: &'static str, path: &Path) -> Result<TensorFile> {
    let file = load_tensors(path)?;
    match file.metadata.get(FORMAT_KEY).map(String::as_str) {
        Some(FORMAT) => {
            verify_checksum(op, path, &file)?;
            Ok(file)
        }
        other => Err(Error::Format {
            op,
            path: path.display().to_string(),
            reason: format!("not a retrograd checkpoint (format {other:?}, expected {FORMAT:?})"),
        }),
    }
}

/// The program's own metadata of a checkpoint (what
/// [`save_checkpoint_with_metadata`] was given; empty for
/// [`save_checkpoint`]), without loading anything: for what must be known
/// before a model can be built, such as a tokenizer's vocabulary. A file
/// that is not a retrograd checkpoint is an [`Error::Format`].
pub fn checkpoint_metadata(path: impl AsRef<Path>) -> Result<BTreeMap<String, String>> {
    let file = read_checkpoint("checkpoint_metadata", path.as_ref())?;
    Ok(user_metadata(file.metadata))
}

/// A checkpoint's metadata without the keys retrograd writes itself (the
/// format version, the checksum, a training state's): what the program
/// saved.
pub fn user_metadata(metadata: BTreeMap<String, String>) -> BTreeMap<String, String> {
    metadata
        .into_iter()
        .filter(|(k, _)| !is_reserved(k))
        .collect()
}

/// [`load_checkpoint`], returning the program's own metadata saved with
/// [`save_checkpoint_with_metadata`] (empty for [`save_checkpoint`]).
pub fn load_checkpoint_with_metadata<M: NamedTensors + ?Sized>(
    path: impl AsRef<Path>,
    model: &M,
    optimizer: Option<&mut dyn Optimizer>,
) -> Result<BTreeMap<String, String>> {
    let path = path.as_ref();
    let file = read_checkpoint("load_checkpoint", path)?;
    load_contents(path, &file, model, optimizer)?;
    Ok(user_metadata(file.metadata))
}

/// Loads checkpoint contents read from `path` (for messages) into `model`
/// and `optimizer`: all or nothing.
pub fn load_contents<M: NamedTensors + ?Sized>(
    path: &Path,
    file: &TensorFile,
    model: &M,
    optimizer: Option<&mut dyn Optimizer>,
) -> Result<()> {
    let (params, buffers) = (model.named_parameters(), model.named_buffers());
    let context = format!("load_checkpoint({})", path.display());
    let format_error = |reason: String| Error::Format {
        op: "load_checkpoint",
        path: path.display().to_string(),
        reason,
    };

    let (mut tensors, mut optim) = (StateDict::new(), StateDict::new());
    for (name, t) in &file.tensors {
        match name.strip_prefix(OPTIMIZER_PREFIX) {
            Some(rest) => optim.insert(rest.to_string(), t.clone()),
            None => tensors.insert(name.clone(), t.clone()),
        };
    }
    let (values, buffer_values) =
        crate::nn::check_module_state(&context, &params, &buffers, &tensors)?;

    if let Some(opt) = optimizer {
        let saved_kind = file.metadata.get(OPTIMIZER_KEY);
        if saved_kind.map(String::as_str) != Some(opt.kind()) {
            return Err(format_error(format!(
                "the checkpoint holds {} optimizer state; cannot load it into {}",
                saved_kind.map_or("no", String::as_str),
                opt.kind()
            )));
        }
        let lr = file
            .metadata
            .get(LR_KEY)
            .and_then(|s| s.parse::<f64>().ok())
            .ok_or_else(|| format_error("missing or invalid optimizer.lr metadata".into()))?;
        opt.load_state_dict(&optim).map_err(|e| match e {
            Error::TensorMismatch { name, problem, .. } => Error::TensorMismatch {
                context: context.clone(),
                name: format!("{OPTIMIZER_PREFIX}{name}"),
                problem,
            },
            other => other,
        })?;
        opt.set_lr(lr);
    }
    for ((_, p), value) in params.iter().zip(values) {
        p.set(value)?;
    }
    for ((_, b), value) in buffers.iter().zip(buffer_values) {
        b.set(value)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::error::TensorProblem;
    use crate::nn::Parameter;
    use crate::optim::{Adam, AdamConfig, Sgd, SgdConfig};
    use crate::{DType, Graph, Tensor};

    fn model() -> Vec<(String, Parameter)> {
        vec![
            (
                "0.weight".into(),
                Parameter::new(Tensor::randn(&[3, 2], DType::F32, 1).unwrap()),
            ),
            (
                "0.bias".into(),
                Parameter::new(Tensor::randn(&[3], DType::F32, 2).unwrap()),
            ),
        ]
    }

    fn train_step(params: &[(String, Parameter)], opt: &mut dyn Optimizer) {
        let grads = {
            let g = Graph::new();
            let mut loss = g.constant(Tensor::scalar(0.0f32));
            for (_, p) in params {
                let x = g.param(p);
                loss = loss + (&x * &x).sum();
            }
            loss.backward().unwrap()
        };
        opt.step(&grads).unwrap();
    }

    #[test]
    fn model_and_adam_state_round_trip_bit_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let params = model();
        let mut opt = Adam::new(&params, AdamConfig::default().lr(0.01)).unwrap();
        train_step(&params, &mut opt);
        train_step(&params, &mut opt);
        save_checkpoint(&path, &params, Some(&opt)).unwrap();

        let names: Vec<String> = load_tensors(&path).unwrap().tensors.into_keys().collect();
        assert!(names.contains(&"optimizer.0.weight.exp_avg".to_string()));
        assert!(names.contains(&"optimizer.0.bias.step".to_string()));

        let restored = model(); // other values, same names and shapes
        let mut opt2 = Adam::new(&restored, AdamConfig::default().lr(0.5)).unwrap();
        load_checkpoint(&path, &restored, Some(&mut opt2)).unwrap();
        assert_eq!(opt2.lr(), 0.01);
        assert_eq!(opt2.state_dict(), opt.state_dict());
        for ((_, a), (_, b)) in params.iter().zip(&restored) {
            assert_eq!(a.value(), b.value());
        }
        // Training continues identically from the restored state.
        train_step(&params, &mut opt);
        train_step(&restored, &mut opt2);
        for ((_, a), (_, b)) in params.iter().zip(&restored) {
            assert_eq!(a.value(), b.value());
        }
    }

    #[test]
    fn mismatches_are_typed_errors_naming_the_tensor_and_change_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let params = model();
        save_checkpoint(&path, &params, None).unwrap();

        let fresh = model();
        let before: Vec<Tensor> = fresh.iter().map(|(_, p)| p.value()).collect();
        // Wrong shape.
        let mut wrong = fresh.clone();
        wrong[1] = (
            "0.bias".into(),
            Parameter::new(Tensor::zeros(&[4], DType::F32).unwrap()),
        );
        let e = load_checkpoint(&path, &wrong, None).unwrap_err();
        assert!(
            matches!(&e, Error::TensorMismatch { name, problem: TensorProblem::Shape { expected, found }, .. }
                if name == "0.bias" && expected == &[4] && found == &[3]),
            "{e}"
        );
        assert_eq!(fresh[0].1.value(), before[0], "nothing loaded on error");
        // Wrong dtype.
        wrong[1] = (
            "0.bias".into(),
            Parameter::new(Tensor::zeros(&[3], DType::F64).unwrap()),
        );
        assert!(matches!(
            load_checkpoint(&path, &wrong, None),
            Err(Error::TensorMismatch {
                problem: TensorProblem::DType { .. },
                ..
            })
        ));
        // Missing and unexpected names.
        let mut extra = fresh.clone();
        extra.push((
            "1.weight".into(),
            Parameter::new(Tensor::zeros(&[1], DType::F32).unwrap()),
        ));
        assert!(matches!(
            load_checkpoint(&path, &extra, None),
            Err(Error::TensorMismatch { ref name, problem: TensorProblem::Missing, .. }) if name == "1.weight"
        ));
        assert!(matches!(
            load_checkpoint(&path, &fresh[..1], None),
            Err(Error::TensorMismatch { ref name, problem: TensorProblem::Unexpected, .. }) if name == "0.bias"
        ));
    }

    #[test]
    fn optimizer_kind_and_presence_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let params = model();
        let mut sgd = Sgd::new(&params, SgdConfig::new(0.1).momentum(0.9)).unwrap();
        train_step(&params, &mut sgd);
        save_checkpoint(&path, &params, Some(&sgd)).unwrap();
        let mut adam = Adam::new(&params, AdamConfig::default()).unwrap();
        let e = load_checkpoint(&path, &params, Some(&mut adam)).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e}");
        // Without an optimizer, the optimizer entries are ignored.
        load_checkpoint(&path, &params, None).unwrap();
        // A model-only checkpoint cannot restore an optimizer.
        save_checkpoint(&path, &params, None).unwrap();
        assert!(load_checkpoint(&path, &params, Some(&mut sgd)).is_err());
    }

    #[test]
    fn truncated_and_foreign_files_are_format_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let params = model();
        save_checkpoint(&path, &params, None).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 5]).unwrap();
        let e = load_checkpoint(&path, &params, None).unwrap_err();
        assert!(
            matches!(&e, Error::Format { path: p, .. } if p.ends_with("ckpt.safetensors")),
            "{e}"
        );
        // A valid safetensors file that is not a retrograd checkpoint.
        let mut t = StateDict::new();
        t.insert("x".into(), Tensor::scalar(1.0));
        save_tensors(&path, &t, &BTreeMap::new()).unwrap();
        assert!(matches!(
            load_checkpoint(&path, &params, None),
            Err(Error::Format { .. })
        ));
    }

    #[test]
    fn program_metadata_round_trips_beside_optimizer_state() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let params = model();
        let mut opt = Adam::new(&params, AdamConfig::adamw().lr(0.01)).unwrap();
        train_step(&params, &mut opt);
        let meta = BTreeMap::from([
            ("tokenizer".to_string(), "v1:\n ab\u{e9}".to_string()),
            ("n_layer".to_string(), "4".to_string()),
        ]);
        save_checkpoint_with_metadata(&path, &params, Some(&opt), &meta).unwrap();
        assert_eq!(checkpoint_metadata(&path).unwrap(), meta);
        let mut opt2 = Adam::new(&params, AdamConfig::adamw()).unwrap();
        let back = load_checkpoint_with_metadata(&path, &params, Some(&mut opt2)).unwrap();
        assert_eq!(back, meta);
        assert_eq!((opt2.lr(), opt2.state_dict()), (0.01, opt.state_dict()));
        // Plain checkpoints have none, and still load through both paths.
        save_checkpoint(&path, &params, Some(&opt)).unwrap();
        assert!(checkpoint_metadata(&path).unwrap().is_empty());
        assert!(load_checkpoint_with_metadata(&path, &params, None)
            .unwrap()
            .is_empty());
        // Reserved keys are refused and nothing is written.
        let other = dir.path().join("other.safetensors");
        for key in ["format", "optimizer", "optimizer.lr", "optimizer.x"] {
            let bad = BTreeMap::from([(key.to_string(), "x".to_string())]);
            assert!(matches!(
                save_checkpoint_with_metadata(&other, &params, None, &bad),
                Err(Error::InvalidArgument { op: "save_checkpoint_with_metadata", ref reason })
                    if reason.contains(key)
            ));
        }
        assert!(!other.exists());
        // A file that is not a checkpoint.
        save_tensors(&other, &StateDict::new(), &BTreeMap::new()).unwrap();
        assert!(matches!(
            checkpoint_metadata(&other),
            Err(Error::Format {
                op: "checkpoint_metadata",
                ..
            })
        ));
    }

    #[test]
    fn reserved_and_duplicate_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ckpt.safetensors");
        let p = Parameter::new(Tensor::scalar(1.0));
        assert!(save_checkpoint(&path, &[("optimizer.x".into(), p.clone())], None).is_err());
        assert!(save_checkpoint(&path, &[("a".into(), p.clone()), ("a".into(), p)], None).is_err());
        assert!(!path.exists());
    }
}
