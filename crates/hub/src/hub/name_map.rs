//! [`NameMap`]: how a checkpoint's tensor names map onto a module's
//! parameter names, and the loading and saving that follow it. A model
//! that keeps Hugging Face's names needs only prefixes and a list of
//! tensors to ignore; one that does not (`Gpt`) adds renames and the
//! tensors stored transposed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::hub::Weights;
use retrograd_engine::base::error::{Error, Result, TensorProblem};
use retrograd_engine::nn::{Module, Parameter, StateDict};
use retrograd_engine::tensor::Tensor;

/// How checkpoint names relate to a module's parameter names.
///
/// ```
/// use retrograd::hub::NameMap;
/// let map = NameMap::new()
///     .prefix("transformer.")
///     .rename(".attn.in_proj_", ".attn.c_attn.")
///     .transposed(".attn.in_proj_weight");
/// assert_eq!(map.checkpoint_name("h.0.attn.in_proj_weight"), "h.0.attn.c_attn.weight");
/// ```
#[derive(Clone, Debug, Default)]
pub struct NameMap {
    prefixes: Vec<String>,
    save_prefix: Option<String>,
    renames: Vec<(String, String)>,
    transposed: Vec<String>,
    ignored: Vec<String>,
    optional: Vec<String>,
}

/// What a load did besides loading: checkpoint tensors it ignored (by the
/// map's rules) and parameters the checkpoint did not have (allowed by the
/// map; they keep their initialisation, as a new classification head does).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadReport {
    /// Parameters loaded from the checkpoint.
    pub loaded: usize,
    /// Checkpoint tensors not loaded (the map ignores them).
    pub ignored: Vec<String>,
    /// Parameters the checkpoint lacked, left as initialised.
    pub initialized: Vec<String>,
}

impl NameMap {
    /// Names match exactly.
    pub fn new() -> Self {
        Self::default()
    }

    /// A prefix a name may carry on one side and not the other
    /// (`bert.` of a classification checkpoint, `transformer.` of GPT-2's).
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.prefixes.push(prefix.to_string());
        self
    }

    /// The prefix [`save`](Self::save) writes before every name.
    pub fn save_prefix(mut self, prefix: &str) -> Self {
        self.save_prefix = Some(prefix.to_string());
        self
    }

    /// The module's `module_part` is the checkpoint's `checkpoint_part`
    /// (substrings; the first rename that matches applies).
    pub fn rename(mut self, module_part: &str, checkpoint_part: &str) -> Self {
        self.renames
            .push((module_part.to_string(), checkpoint_part.to_string()));
        self
    }

    /// Module parameters ending in `suffix` are stored transposed (GPT-2's
    /// `Conv1D` weights, `[in, out]`).
    pub fn transposed(mut self, suffix: &str) -> Self {
        self.transposed.push(suffix.to_string());
        self
    }

    /// Checkpoint tensors ending in `suffix`, or starting with it when it
    /// ends in `.`, are not loaded (buffers such as `position_ids`, heads
    /// the model does not have).
    pub fn ignore(mut self, pattern: &str) -> Self {
        self.ignored.push(pattern.to_string());
        self
    }

    /// Module parameters starting with `prefix` may be absent from the
    /// checkpoint (a new head): they keep their initialisation.
    pub fn optional(mut self, prefix: &str) -> Self {
        self.optional.push(prefix.to_string());
        self
    }

    /// The checkpoint name of module parameter `name`, as [`save`](Self::save)
    /// writes it (renamed, with the save prefix).
    pub fn checkpoint_name(&self, name: &str) -> String {
        let renamed = self.renamed(name);
        match &self.save_prefix {
            Some(p) => format!("{p}{renamed}"),
            None => renamed,
        }
    }

    fn renamed(&self, name: &str) -> String {
        for (from, to) in &self.renames {
            if name.contains(from.as_str()) {
                return name.replacen(from.as_str(), to, 1);
            }
        }
        name.to_string()
    }

    fn is_transposed(&self, name: &str) -> bool {
        self.transposed.iter().any(|s| name.ends_with(s.as_str()))
    }

    fn is_ignored(&self, name: &str) -> bool {
        self.ignored.iter().any(|p| {
            if p.ends_with('.') {
                name.starts_with(p.as_str())
                    || self.prefixes.iter().any(|q| {
                        name.strip_prefix(q.as_str())
                            .is_some_and(|n| n.starts_with(p.as_str()))
                    })
            } else {
                name.ends_with(p.as_str())
            }
        })
    }

    /// The checkpoint names module parameter `name` may have, most likely first.
    fn candidates(&self, name: &str) -> Vec<String> {
        let renamed = self.renamed(name);
        let mut out = vec![renamed.clone()];
        for p in &self.prefixes {
            out.push(format!("{p}{renamed}"));
            if let Some(bare) = renamed.strip_prefix(p.as_str()) {
                out.push(bare.to_string());
            }
        }
        out
    }

    /// Loads `weights` into `module`'s parameters, all or nothing: every
    /// parameter must be in the checkpoint (but those the map makes
    /// optional) with its shape, and every checkpoint tensor must be used
    /// (but those the map ignores). Floats convert to each parameter's
    /// dtype. Errors are [`Error::TensorMismatch`] naming the file and the
    /// tensor; on error no parameter is changed.
    pub fn load(&self, module: &impl Module, weights: &Weights) -> Result<LoadReport> {
        let mut loader = self.loader(weights);
        let mut values: Vec<(Parameter, Tensor)> = Vec::new();
        for (name, p) in module.parameters() {
            if let Some(v) = loader.take(&name, &p.shape(), p.dtype())? {
                values.push((p, v));
            }
        }
        let report = loader.finish()?;
        for (p, v) in values {
            p.set(v)?;
        }
        Ok(report)
    }

    /// A loader that hands out `weights`' tensors by module name, for a
    /// model built straight from a checkpoint (no initial values to
    /// overwrite); [`Loader::finish`] then checks nothing was left over.
    pub fn loader<'a>(&'a self, weights: &'a Weights) -> Loader<'a> {
        Loader {
            map: self,
            weights,
            used: BTreeSet::new(),
            report: LoadReport::default(),
        }
    }

    /// The module's parameters under their checkpoint names (renamed,
    /// prefixed, transposed back where stored so), with `extra` tensors
    /// added: what [`save`](Self::save) writes.
    pub fn state_dict(&self, module: &impl Module) -> Result<StateDict> {
        let mut out = StateDict::new();
        for (name, p) in module.parameters() {
            let mut value = p.value();
            if self.is_transposed(&name) {
                value = value.transpose(0, 1)?.contiguous();
            }
            out.insert(self.checkpoint_name(&name), value.contiguous());
        }
        Ok(out)
    }

    /// Writes `module` as `dir/model.safetensors` (atomically) under its
    /// checkpoint names, plus `extra` tensors, with `{"format": "pt"}`
    /// metadata as `transformers` writes; creates `dir` if needed.
    pub fn save(&self, module: &impl Module, extra: StateDict, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| Error::Io {
            op: "save_pretrained",
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
        let mut tensors = self.state_dict(module)?;
        tensors.extend(extra);
        let metadata = BTreeMap::from([("format".to_string(), "pt".to_string())]);
        retrograd_engine::io::save_tensors(dir.join(crate::hub::WEIGHTS_FILE), &tensors, &metadata)
    }
}

/// Tensors of a checkpoint handed out by module parameter name
/// ([`NameMap::loader`]).
pub struct Loader<'a> {
    map: &'a NameMap,
    weights: &'a Weights,
    used: BTreeSet<String>,
    report: LoadReport,
}

impl Loader<'_> {
    fn context(file: &Path) -> String {
        format!("from_pretrained: {}", file.display())
    }

    /// The value of module parameter `name`, which must have `shape`,
    /// converted to `dtype`; `None` when the checkpoint lacks it and the
    /// map makes it optional (the caller initialises it). A missing or
    /// misshapen tensor is an [`Error::TensorMismatch`] naming the file.
    pub fn take(
        &mut self,
        name: &str,
        shape: &[usize],
        dtype: retrograd_engine::DType,
    ) -> Result<Option<Tensor>> {
        let map = self.map;
        let weights = self.weights;
        let Some(found) = map
            .candidates(name)
            .into_iter()
            .find(|c| weights.contains(c))
        else {
            if map.optional.iter().any(|o| name.starts_with(o.as_str())) {
                self.report.initialized.push(name.to_string());
                return Ok(None);
            }
            return Err(Error::TensorMismatch {
                context: Self::context(weights.source()),
                name: map.checkpoint_name(name),
                problem: TensorProblem::Missing,
            });
        };
        let file = weights
            .file_of(&found)
            .expect("a name the checkpoint holds");
        let transposed = map.is_transposed(name);
        let mut expected = shape.to_vec();
        if transposed {
            expected.reverse();
        }
        let stored = weights.shape(&found).expect("a name the checkpoint holds");
        if stored != expected {
            return Err(Error::TensorMismatch {
                context: Self::context(file),
                name: found,
                problem: TensorProblem::Shape {
                    expected,
                    found: stored,
                },
            });
        }
        let mut value = weights.tensor(&found, dtype)?;
        if value.dtype() != dtype {
            return Err(Error::TensorMismatch {
                context: Self::context(file),
                name: found,
                problem: TensorProblem::DType {
                    expected: dtype,
                    found: value.dtype(),
                },
            });
        }
        if transposed {
            value = value.transpose(0, 1)?.contiguous();
        }
        self.used.insert(found);
        self.report.loaded += 1;
        Ok(Some(value))
    }

    /// Checks that every checkpoint tensor was taken or is ignored by the
    /// map, and reports what was ignored and initialised.
    pub fn finish(mut self) -> Result<LoadReport> {
        for name in self.weights.names() {
            if self.used.contains(name) {
                continue;
            }
            if self.map.is_ignored(name) {
                self.report.ignored.push(name.to_string());
                continue;
            }
            return Err(Error::TensorMismatch {
                context: Self::context(self.weights.file_of(name).expect("a listed name")),
                name: name.to_string(),
                problem: TensorProblem::Unexpected,
            });
        }
        Ok(self.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use retrograd_engine::io::save_tensors;
    use retrograd_engine::nn::{Linear, Module};
    use retrograd_engine::DType;

    #[derive(Debug, Module)]
    struct Net {
        body: Linear,
        head: Linear,
    }

    fn net(seed: u64) -> Net {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        Net {
            body: Linear::builder(3, 2).build_with(&mut rng).unwrap(),
            head: Linear::builder(2, 4).build_with(&mut rng).unwrap(),
        }
    }

    fn write(dir: &Path, tensors: &StateDict) -> Weights {
        save_tensors(
            dir.join(crate::hub::WEIGHTS_FILE),
            tensors,
            &BTreeMap::new(),
        )
        .unwrap();
        Weights::open(dir).unwrap()
    }

    #[test]
    fn prefixes_renames_and_transposes_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let map = NameMap::new()
            .prefix("model.")
            .save_prefix("model.")
            .rename("head.", "classifier.")
            .transposed("body.weight");
        let a = net(0);
        map.save(&a, StateDict::new(), dir.path()).unwrap();
        let w = Weights::open(dir.path()).unwrap();
        assert_eq!(
            w.names(),
            [
                "model.body.bias",
                "model.body.weight",
                "model.classifier.bias",
                "model.classifier.weight"
            ]
        );
        assert_eq!(w.shape("model.body.weight"), Some(vec![3, 2]));
        let b = net(1);
        let report = map.load(&b, &w).unwrap();
        assert_eq!(report.loaded, 4);
        assert_eq!(a.state_dict(), b.state_dict());
    }

    #[test]
    fn missing_extra_and_misshapen_tensors_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = net(0).state_dict();
        state.insert(
            "position_ids".into(),
            Tensor::zeros(&[1, 4], DType::I64).unwrap(),
        );
        let w = write(dir.path(), &state);
        let strict = NameMap::new();
        let err = strict.load(&net(1), &w).unwrap_err().to_string();
        assert!(
            err.contains("position_ids") && err.contains("unexpected"),
            "{err}"
        );
        assert!(err.contains(crate::hub::WEIGHTS_FILE), "{err}");
        let lenient = NameMap::new().ignore("position_ids");
        assert_eq!(lenient.load(&net(1), &w).unwrap().ignored, ["position_ids"]);

        state.remove("head.bias");
        let dir = tempfile::tempdir().unwrap();
        let w = write(dir.path(), &state);
        let target = net(1);
        let before = target.state_dict();
        let err = lenient.load(&target, &w).unwrap_err().to_string();
        assert!(
            err.contains("head.bias") && err.contains("missing"),
            "{err}"
        );
        assert_eq!(target.state_dict(), before, "nothing loaded on error");
        let report = lenient.clone().optional("head.").load(&target, &w).unwrap();
        assert_eq!(report.initialized, ["head.bias"]);

        state.insert("head.bias".into(), Tensor::zeros(&[5], DType::F32).unwrap());
        let dir = tempfile::tempdir().unwrap();
        let w = write(dir.path(), &state);
        let err = lenient.load(&net(1), &w).unwrap_err().to_string();
        assert!(
            err.contains("head.bias") && err.contains("[4]") && err.contains("[5]"),
            "{err}"
        );
    }

    #[test]
    fn half_precision_checkpoints_convert_to_the_parameters_dtype() {
        let dir = tempfile::tempdir().unwrap();
        let a = net(0);
        let half: StateDict = a
            .state_dict()
            .into_iter()
            .map(|(k, v)| (k, v.to_dtype(DType::BF16)))
            .collect();
        let w = write(dir.path(), &half);
        let b = net(1);
        NameMap::new().load(&b, &w).unwrap();
        for ((_, pa), (_, pb)) in a.parameters().iter().zip(b.parameters()) {
            let (x, y) = (pa.value().to_f64_vec(), pb.value().to_f64_vec());
            assert_eq!(pb.dtype(), DType::F32);
            assert!(x
                .iter()
                .zip(&y)
                .all(|(x, y)| (x - y).abs() <= x.abs() / 128.0));
        }
    }
}
