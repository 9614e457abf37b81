//! [`Weights`]: the safetensors weights of a model folder, memory-mapped
//! (one `model.safetensors`, or the shards a `model.safetensors.index.json`
//! lists), read one tensor at a time and converted to the model's dtype.

use retrograd_engine::base::error::{format_error, io_error};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::tensor::{Dtype, Metadata, SafeTensors};

use retrograd_engine::base::error::{Error, Result, TensorProblem};
use retrograd_engine::tensor::{DType, Dims, Tensor};

/// The weights file of a model folder.
pub const WEIGHTS_FILE: &str = "model.safetensors";
/// The index of a sharded checkpoint: `weight_map` from tensor name to shard file.
pub const WEIGHTS_INDEX_FILE: &str = "model.safetensors.index.json";

/// One memory-mapped safetensors file: its header, read and checked, and
/// the mapping its tensors are copied out of.
struct Shard {
    path: PathBuf,
    map: Mmap,
    /// Where the tensor data starts (8 + the header's length).
    data_start: usize,
    metadata: Metadata,
}

/// The tensors of a checkpoint (one safetensors file or several shards),
/// memory-mapped: nothing is read until a tensor is asked for, and each
/// tensor is then decoded straight from the mapping into its own storage
/// (no second copy of the file), converted to the dtype asked for (f16,
/// bf16, f32 and f64 are all floats). Every error names the file, and the
/// tensor where there is one.
///
/// ```
/// use std::collections::BTreeMap;
/// use retrograd::{DType, Tensor, hub::Weights, io::save_tensors, nn::StateDict};
/// let dir = tempfile::tempdir().unwrap();
/// let mut tensors = StateDict::new();
/// tensors.insert("w".into(), Tensor::from_vec(vec![1.5f32, -2.0], &[2])?.to_dtype(DType::BF16));
/// save_tensors(dir.path().join("model.safetensors"), &tensors, &BTreeMap::new())?;
/// let weights = Weights::open(dir.path())?;
/// assert_eq!(weights.names(), ["w"]);
/// let w = weights.tensor("w", DType::F32)?;               // bf16 converted on load
/// assert_eq!(w.to_vec::<f32>()?, vec![1.5, -2.0]);
/// assert!(weights.tensor("v", DType::F32).is_err());       // names the file and `v`
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct Weights {
    shards: Vec<Shard>,
    /// Tensor name to the shard holding it.
    location: BTreeMap<String, usize>,
    /// What was opened: the file, or the index of a sharded checkpoint.
    source: PathBuf,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Weights")
            .field("source", &self.source)
            .field("shards", &self.shards.len())
            .field("tensors", &self.location.len())
            .finish()
    }
}

const OP: &str = "Weights::open";

impl Weights {
    /// Opens a checkpoint: a `.safetensors` file, or a model folder holding
    /// `model.safetensors` or a sharded `model.safetensors.index.json`.
    /// Headers are read and checked now (offsets, sizes, dtypes against
    /// shapes, shards against the index); tensor data when asked for.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        if path.is_file() {
            return Self::single(path);
        }
        if !path.is_dir() {
            return Err(io_error(OP, path, "no such file or folder"));
        }
        let single = path.join(WEIGHTS_FILE);
        if single.is_file() {
            return Self::single(&single);
        }
        let index = path.join(WEIGHTS_INDEX_FILE);
        if index.is_file() {
            return Self::sharded(&index);
        }
        Err(io_error(
            OP,
            path,
            format!(
                "neither {WEIGHTS_FILE} nor {WEIGHTS_INDEX_FILE} is here (PyTorch's pickled \
                 pytorch_model.bin is not read: convert it to safetensors)"
            ),
        ))
    }

    fn single(path: &Path) -> Result<Self> {
        let shard = Shard::open(path)?;
        let location = shard
            .metadata
            .tensors()
            .into_keys()
            .map(|name| (name, 0))
            .collect();
        Ok(Weights {
            shards: vec![shard],
            location,
            source: path.to_path_buf(),
        })
    }

    fn sharded(index: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(index).map_err(|e| io_error(OP, index, e))?;
        let json: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| format_error(OP, index, format!("not valid JSON: {e}")))?;
        let Some(map) = json.get("weight_map").and_then(|m| m.as_object()) else {
            return Err(format_error(OP, index, "no `weight_map` object"));
        };
        let dir = index.parent().unwrap_or(Path::new("."));
        let mut files: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (name, file) in map {
            let Some(file) = file.as_str() else {
                return Err(format_error(
                    OP,
                    index,
                    format!("`weight_map` entry `{name}` is not a file name"),
                ));
            };
            if Path::new(file).components().count() != 1 {
                return Err(format_error(
                    OP,
                    index,
                    format!(
                        "`weight_map` entry `{name}`: shard `{file}` is not a file in the folder"
                    ),
                ));
            }
            files.entry(file).or_default().push(name);
        }
        let mut shards = Vec::new();
        let mut location = BTreeMap::new();
        for (file, names) in files {
            let shard = Shard::open(&dir.join(file))?;
            let held = shard.metadata.tensors();
            // The index and the shard must agree, both ways.
            for &name in &names {
                if !held.contains_key(name) {
                    return Err(Error::TensorMismatch {
                        context: format!(
                            "{OP}: {} (listed in {})",
                            shard.path.display(),
                            index.display()
                        ),
                        name: name.to_string(),
                        problem: TensorProblem::Missing,
                    });
                }
                location.insert(name.to_string(), shards.len());
            }
            if let Some(extra) = held.keys().find(|k| !map.contains_key(k.as_str())) {
                return Err(Error::TensorMismatch {
                    context: format!("{OP}: {}", shard.path.display()),
                    name: extra.clone(),
                    problem: TensorProblem::Value(format!(
                        "in the shard but not in {}'s weight_map",
                        index.display()
                    )),
                });
            }
            shards.push(shard);
        }
        Ok(Weights {
            shards,
            location,
            source: index.to_path_buf(),
        })
    }

    /// The file or index that was opened.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.location.keys().map(String::as_str).collect()
    }

    /// Whether the checkpoint holds `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.location.contains_key(name)
    }

    /// The file holding `name`.
    pub fn file_of(&self, name: &str) -> Option<&Path> {
        self.location
            .get(name)
            .map(|&i| self.shards[i].path.as_path())
    }

    /// The shape of `name`, without reading it.
    pub fn shape(&self, name: &str) -> Option<Vec<usize>> {
        let &i = self.location.get(name)?;
        self.shards[i].metadata.info(name).map(|t| t.shape.clone())
    }

    /// Tensor `name`: a float tensor (f16, bf16, f32, f64) converted to
    /// `float_dtype` (f32 or f64), an i64 or bool tensor as it is. A
    /// missing name is [`Error::TensorMismatch`] naming the checkpoint; a
    /// dtype retrograd does not store is [`Error::Format`] naming the file
    /// and the tensor.
    pub fn tensor(&self, name: &str, float_dtype: DType) -> Result<Tensor> {
        let Some(&i) = self.location.get(name) else {
            return Err(Error::TensorMismatch {
                context: format!("Weights::tensor: {}", self.source.display()),
                name: name.to_string(),
                problem: TensorProblem::Missing,
            });
        };
        self.shards[i].tensor(name, float_dtype)
    }

    /// Every tensor, floats converted to `float_dtype`.
    pub fn load_all(&self, float_dtype: DType) -> Result<retrograd_engine::nn::StateDict> {
        self.location
            .keys()
            .map(|name| Ok((name.clone(), self.tensor(name, float_dtype)?)))
            .collect()
    }
}

impl Shard {
    fn open(path: &Path) -> Result<Shard> {
        let file = File::open(path).map_err(|e| io_error(OP, path, e))?;
        // SAFETY: the mapping is read-only and private to this `Shard`; we
        // only read it, copying each tensor out. As with every memory map,
        // another process truncating or rewriting the file while it is
        // mapped would change what we read (or fault); model files are not
        // written while being loaded, the same assumption the safetensors
        // and candle loaders make.
        let map = unsafe { Mmap::map(&file) }.map_err(|e| io_error(OP, path, e))?;
        let (header_len, metadata) = SafeTensors::read_metadata(&map[..])
            .map_err(|e| format_error(OP, path, describe_bad_header(&map[..], e)))?;
        Ok(Shard {
            path: path.to_path_buf(),
            map,
            data_start: 8 + header_len,
            metadata,
        })
    }

    fn tensor(&self, name: &str, float_dtype: DType) -> Result<Tensor> {
        let info = self
            .metadata
            .info(name)
            .expect("the location map holds only names the header has");
        let (start, end) = info.data_offsets;
        let bytes = &self.map[self.data_start + start..self.data_start + end];
        let dims = Dims::from_slice(&info.shape);
        let bad_dtype = || {
            format_error(
                "Weights::tensor",
                &self.path,
                format!(
                    "tensor `{name}` has dtype {}; retrograd reads F16, BF16, F32, F64, I64 and BOOL",
                    info.dtype
                ),
            )
        };
        if !float_dtype.is_float() {
            return Err(Error::NotFloat {
                op: "Weights::tensor",
                found: float_dtype,
            });
        }
        let tensor = match (info.dtype, float_dtype) {
            (Dtype::F32, DType::F32) => decode(dims, bytes, f32::from_le_bytes),
            (Dtype::F16, DType::F32) => {
                decode(dims, bytes, |b| half::f16::from_le_bytes(b).to_f32())
            }
            (Dtype::BF16, DType::F32) => {
                decode(dims, bytes, |b| half::bf16::from_le_bytes(b).to_f32())
            }
            (Dtype::F64, DType::F32) => decode(dims, bytes, |b| f64::from_le_bytes(b) as f32),
            (Dtype::F64, _) => decode(dims, bytes, f64::from_le_bytes),
            (Dtype::F32, _) => decode(dims, bytes, |b| f64::from(f32::from_le_bytes(b))),
            (Dtype::F16, _) => decode(dims, bytes, |b| half::f16::from_le_bytes(b).to_f64()),
            (Dtype::BF16, _) => decode(dims, bytes, |b| half::bf16::from_le_bytes(b).to_f64()),
            (Dtype::I64, _) => decode(dims, bytes, i64::from_le_bytes),
            (Dtype::BOOL, _) => {
                if let Some(pos) = bytes.iter().position(|&b| b > 1) {
                    return Err(format_error(
                        "Weights::tensor",
                        &self.path,
                        format!("tensor `{name}` is BOOL but its byte {pos} is neither 0 nor 1"),
                    ));
                }
                Tensor::from_exact_iter(dims, bytes.iter().map(|&b| b == 1))
            }
            _ => return Err(bad_dtype()),
        };
        self.release(start, end);
        Ok(tensor)
    }

    /// Hands the pages of a tensor just copied back to the page cache, so
    /// loading a model never holds the file's pages and the model's
    /// tensors at once (peak memory: the model, not twice the model).
    fn release(&self, start: usize, end: usize) {
        #[cfg(unix)]
        {
            let (offset, len) = (self.data_start + start, end - start);
            if len > 0 {
                // SAFETY: `MADV_DONTNEED` on a read-only shared file mapping
                // drops the pages; a later read faults them back in from the
                // file with the same contents, so no slice into the map can
                // observe a change. We hold no reference into the range.
                let _ = unsafe {
                    self.map
                        .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len)
                };
            }
        }
        #[cfg(not(unix))]
        let _ = (start, end);
    }
}

/// Little-endian elements of `N` bytes, decoded straight into a tensor's
/// storage (the data may be unaligned in the file).
fn decode<T: retrograd_engine::tensor::DataType, const N: usize>(
    dims: Dims,
    bytes: &[u8],
    from_le: impl Fn([u8; N]) -> T,
) -> Tensor {
    Tensor::from_exact_iter(
        dims,
        bytes
            .chunks_exact(N)
            .map(|c| from_le(c.try_into().expect("chunks_exact gives N bytes"))),
    )
}

/// Why a header failed the crate's checks, naming the tensor where the
/// crate's error does not (a size that does not match the shape, data past
/// the end of the file).
fn describe_bad_header(bytes: &[u8], e: safetensors::SafeTensorError) -> String {
    let generic = format!("not a valid safetensors file: {e}");
    let Some(n) = bytes
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
    else {
        return generic;
    };
    let Some(header) = bytes.get(8..8usize.saturating_add(n)) else {
        return format!(
            "{generic} (the header claims {n} bytes, the file has {})",
            bytes.len()
        );
    };
    let Ok(serde_json::Value::Object(entries)) = serde_json::from_slice(header) else {
        return generic;
    };
    let data_len = bytes.len() - 8 - n;
    let sizes: HashMap<&str, usize> = [
        ("F64", 8),
        ("I64", 8),
        ("U64", 8),
        ("F32", 4),
        ("I32", 4),
        ("U32", 4),
        ("F16", 2),
        ("BF16", 2),
        ("I16", 2),
        ("U16", 2),
        ("I8", 1),
        ("U8", 1),
        ("BOOL", 1),
    ]
    .into_iter()
    .collect();
    for (name, entry) in entries.iter().filter(|(k, _)| *k != "__metadata__") {
        let shape: Option<Vec<usize>> = entry
            .get("shape")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let offsets: Option<(usize, usize)> = entry
            .get("data_offsets")
            .and_then(|s| serde_json::from_value(s.clone()).ok());
        let size = entry
            .get("dtype")
            .and_then(|d| d.as_str())
            .and_then(|d| sizes.get(d));
        if let (Some(shape), Some((s, e)), Some(size)) = (shape, offsets, size) {
            let want = shape.iter().product::<usize>() * size;
            if e < s || e - s != want {
                return format!(
                    "tensor `{name}`: shape {shape:?} needs {want} bytes, its offsets span {}",
                    e as i128 - s as i128
                );
            }
            if e > data_len {
                return format!(
                    "tensor `{name}`: its data ends at byte {e} of the data section, which holds \
                     {data_len} bytes (a truncated file?)"
                );
            }
        }
    }
    generic
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrograd_engine::io::save_tensors;
    use retrograd_engine::nn::StateDict;

    fn sample() -> StateDict {
        let mut t = StateDict::new();
        t.insert(
            "a.weight".into(),
            Tensor::from_vec(vec![1.0f32, -2.5, 3.25, 0.1], &[2, 2]).unwrap(),
        );
        t.insert(
            "a.half".into(),
            Tensor::from_vec(vec![0.5f32, 65504.0], &[2])
                .unwrap()
                .to_dtype(DType::F16),
        );
        t.insert(
            "a.brain".into(),
            Tensor::from_vec(vec![1.0f32, -2.0, 0.1], &[3])
                .unwrap()
                .to_dtype(DType::BF16),
        );
        t.insert(
            "ids".into(),
            Tensor::from_vec(vec![0i64, 1, 2], &[1, 3]).unwrap(),
        );
        t
    }

    #[test]
    fn single_file_loads_and_converts() {
        let dir = tempfile::tempdir().unwrap();
        save_tensors(dir.path().join(WEIGHTS_FILE), &sample(), &BTreeMap::new()).unwrap();
        let w = Weights::open(dir.path()).unwrap();
        assert_eq!(w.names(), ["a.brain", "a.half", "a.weight", "ids"]);
        assert_eq!(
            w.tensor("a.weight", DType::F32).unwrap(),
            sample()["a.weight"]
        );
        assert_eq!(
            w.tensor("a.half", DType::F32)
                .unwrap()
                .to_vec::<f32>()
                .unwrap(),
            vec![0.5, 65504.0]
        );
        // bf16 of 0.1 is 0.10009765625 exactly.
        assert_eq!(
            w.tensor("a.brain", DType::F64)
                .unwrap()
                .to_vec::<f64>()
                .unwrap(),
            vec![1.0, -2.0, 0.10009765625]
        );
        assert_eq!(w.tensor("ids", DType::F32).unwrap(), sample()["ids"]);
        assert_eq!(w.shape("a.weight"), Some(vec![2, 2]));
        let err = w.tensor("nope", DType::F32).unwrap_err().to_string();
        assert!(err.contains("nope") && err.contains(WEIGHTS_FILE), "{err}");
        assert!(w.tensor("ids", DType::I64).is_err());
    }

    #[test]
    fn sharded_checkpoints_follow_their_index() {
        let dir = tempfile::tempdir().unwrap();
        let all = sample();
        let (first, second): (StateDict, StateDict) = all
            .clone()
            .into_iter()
            .partition(|(k, _)| k.starts_with("a.w") || k == "ids");
        save_tensors(
            dir.path().join("model-00001-of-00002.safetensors"),
            &first,
            &BTreeMap::new(),
        )
        .unwrap();
        save_tensors(
            dir.path().join("model-00002-of-00002.safetensors"),
            &second,
            &BTreeMap::new(),
        )
        .unwrap();
        let map: serde_json::Map<String, serde_json::Value> = all
            .keys()
            .map(|k| {
                let file = if first.contains_key(k) {
                    "model-00001-of-00002.safetensors"
                } else {
                    "model-00002-of-00002.safetensors"
                };
                (k.clone(), serde_json::Value::from(file))
            })
            .collect();
        let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
        std::fs::write(dir.path().join(WEIGHTS_INDEX_FILE), index.to_string()).unwrap();
        let w = Weights::open(dir.path()).unwrap();
        assert_eq!(w.load_all(DType::F32).unwrap().len(), 4);
        assert!(w
            .file_of("a.half")
            .unwrap()
            .ends_with("model-00002-of-00002.safetensors"));
        // An index entry its shard lacks names the shard and the tensor.
        let mut bad = index.clone();
        bad["weight_map"]["ghost"] = "model-00001-of-00002.safetensors".into();
        std::fs::write(dir.path().join(WEIGHTS_INDEX_FILE), bad.to_string()).unwrap();
        let err = Weights::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("ghost") && err.contains("00001"), "{err}");
        // A shard tensor the index does not list.
        let mut bad = index.clone();
        bad["weight_map"].as_object_mut().unwrap().remove("ids");
        std::fs::write(dir.path().join(WEIGHTS_INDEX_FILE), bad.to_string()).unwrap();
        let err = Weights::open(dir.path()).unwrap_err().to_string();
        assert!(err.contains("`ids`"), "{err}");
        // A shard outside the folder is refused.
        let mut bad = index;
        bad["weight_map"]["ids"] = "../elsewhere.safetensors".into();
        std::fs::write(dir.path().join(WEIGHTS_INDEX_FILE), bad.to_string()).unwrap();
        assert!(Weights::open(dir.path()).is_err());
    }

    #[test]
    fn corrupted_files_name_the_file_and_the_tensor() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(WEIGHTS_FILE);
        save_tensors(&path, &sample(), &BTreeMap::new()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        // Every truncation is a typed error, never a panic.
        for len in (0..bytes.len()).step_by(7) {
            std::fs::write(&path, &bytes[..len]).unwrap();
            let err = Weights::open(&path).unwrap_err();
            assert!(matches!(err, Error::Format { .. }), "{len}: {err}");
        }
        // Cut inside the last tensor's data: the message names it (the
        // writer orders tensors by alignment, so the header says which).
        let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
        let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
        let last = header
            .as_object()
            .unwrap()
            .iter()
            .filter_map(|(k, v)| Some((v.get("data_offsets")?[1].as_u64()?, k)))
            .max()
            .unwrap()
            .1;
        std::fs::write(&path, &bytes[..bytes.len() - 2]).unwrap();
        let err = Weights::open(&path).unwrap_err().to_string();
        assert!(
            err.contains(WEIGHTS_FILE) && err.contains(&format!("`{last}`")),
            "{err}"
        );
        let missing = Weights::open(dir.path().join("absent")).unwrap_err();
        assert!(matches!(missing, Error::Io { .. }));
        let empty = tempfile::tempdir().unwrap();
        let err = Weights::open(empty.path()).unwrap_err().to_string();
        assert!(err.contains(WEIGHTS_FILE), "{err}");
    }
}
