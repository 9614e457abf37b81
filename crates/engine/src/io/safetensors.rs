//! Named tensors to and from files in the [safetensors] format (the format
//! of Hugging Face and `safetensors.torch`), through the `safetensors` crate.
//!
//! Writes are atomic: the file is written to a temporary file in the same
//! directory, flushed to disk (`fsync`), and renamed over the destination,
//! and the directory entry is synced. A crash at any point leaves either the
//! old file or the complete new one, never a half-written file.
//!
//! Reads never panic on bad input: an unreadable file is [`Error::Io`], a
//! truncated or corrupted one (or a dtype other than F32, F64, F16, BF16,
//! I64 and BOOL) is [`Error::Format`], both with the path. F16 and BF16
//! (most checkpoints from other tools are BF16) load as `DType::F16` and
//! `DType::BF16`, bit for bit: cast them with `Tensor::to_dtype`.
//!
//! [safetensors]: https://huggingface.co/docs/safetensors

use crate::base::error::{format_error, io_error};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors, View};

use crate::base::error::Result;
use crate::nn::StateDict;
use crate::tensor::{DType, Tensor};

/// The tensors and the free-form string metadata of a safetensors file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TensorFile {
    /// The tensors, by name.
    pub tensors: StateDict,
    /// The header's `__metadata__` entries.
    pub metadata: BTreeMap<String, String>,
}

/// Borrowed view of one tensor for the serializer.
struct TensorBytes<'a>(&'a Tensor);

impl View for TensorBytes<'_> {
    fn dtype(&self) -> Dtype {
        match self.0.dtype() {
            DType::F32 => Dtype::F32,
            DType::F64 => Dtype::F64,
            DType::I64 => Dtype::I64,
            DType::Bool => Dtype::BOOL,
            DType::F16 => Dtype::F16,
            DType::BF16 => Dtype::BF16,
        }
    }

    fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    fn data(&self) -> Cow<'_, [u8]> {
        tensor_bytes(self.0)
    }

    fn data_len(&self) -> usize {
        self.0.numel() * self.0.dtype().size_in_bytes()
    }
}

/// The little-endian bytes of a tensor's elements, as a file holds them
/// (borrowed on little-endian machines).
pub(crate) fn tensor_bytes(t: &Tensor) -> Cow<'_, [u8]> {
    crate::with_any_dtype!(t.dtype(), T => le_bytes(t.as_slice_of::<T>()))
}

/// The little-endian bytes of `values`: borrowed on little-endian machines.
fn le_bytes<T: LeBytes>(values: &[T]) -> Cow<'_, [u8]> {
    if cfg!(target_endian = "little") {
        // SAFETY: `T` is f32, f64, i64, bool, f16 or bf16 (`LeBytes` is
        // implemented for nothing else; a bool is one byte, 0 or 1; the
        // half types are transparent `u16`s): no padding, so all `size_of_val(values)` bytes behind the
        // pointer are initialised, and `u8` has alignment 1 and accepts any
        // byte. The byte slice borrows `values` for its lifetime, so the
        // memory stays valid and unmodified.
        Cow::Borrowed(unsafe {
            std::slice::from_raw_parts(values.as_ptr() as *const u8, std::mem::size_of_val(values))
        })
    } else {
        Cow::Owned(values.iter().flat_map(|v| v.to_le_vec()).collect())
    }
}

trait LeBytes: Copy {
    fn to_le_vec(self) -> Vec<u8>;
}

impl LeBytes for f32 {
    fn to_le_vec(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
}

impl LeBytes for f64 {
    fn to_le_vec(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
}

impl LeBytes for i64 {
    fn to_le_vec(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
}

impl LeBytes for half::f16 {
    fn to_le_vec(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
}

impl LeBytes for half::bf16 {
    fn to_le_vec(self) -> Vec<u8> {
        self.to_le_bytes().to_vec()
    }
}

impl LeBytes for bool {
    fn to_le_vec(self) -> Vec<u8> {
        vec![u8::from(self)]
    }
}

/// Writes `tensors` and `metadata` to `path` in the safetensors format,
/// atomically: written to a temporary file in the same directory, synced to
/// disk, then renamed over `path`, so a crash leaves the old file or the new
/// one, never a half-written file.
///
/// ```
/// use std::collections::BTreeMap;
/// use retrograd::{Tensor, io::{load_tensors, save_tensors}, nn::StateDict};
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("weights.safetensors");
/// let mut tensors = StateDict::new();
/// tensors.insert("w".into(), Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?);
/// save_tensors(&path, &tensors, &BTreeMap::new())?;
/// assert_eq!(load_tensors(&path)?.tensors, tensors);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn save_tensors(
    path: impl AsRef<Path>,
    tensors: &StateDict,
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    const OP: &str = "save_tensors";
    let path = path.as_ref();
    let info: HashMap<String, String> = metadata
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let views = tensors.iter().map(|(k, t)| (k.as_str(), TensorBytes(t)));
    let bytes = safetensors::serialize(views, (!info.is_empty()).then_some(info))
        .map_err(|e| format_error(OP, path, e.to_string()))?;
    write_atomically(OP, path, &bytes)
}

/// Writes `bytes` to `path` through a synced temporary file and a rename.
pub fn write_atomically(op: &'static str, path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io_error(op, path, "not a file path"))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{}.", name.to_string_lossy()))
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(|e| io_error(op, path, e))?;
    tmp.write_all(bytes).map_err(|e| io_error(op, path, e))?;
    tmp.as_file()
        .sync_all()
        .map_err(|e| io_error(op, path, e))?;
    // On failure the temporary file is removed when `tmp` drops.
    tmp.persist(path).map_err(|e| io_error(op, path, e.error))?;
    sync_dir(dir).map_err(|e| io_error(op, path, e))
}

/// Makes the rename itself durable (the directory entry) where the OS allows.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        std::fs::File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Reads a safetensors file: every tensor (F32, F64, F16, BF16, I64 or
/// BOOL, each as the same dtype) and the metadata.
pub fn load_tensors(path: impl AsRef<Path>) -> Result<TensorFile> {
    const OP: &str = "load_tensors";
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|e| io_error(OP, path, e))?;
    parse_tensors(OP, path, &bytes)
}

/// Parses the bytes of a safetensors file (`path` is for messages).
pub(crate) fn parse_tensors(op: &'static str, path: &Path, bytes: &[u8]) -> Result<TensorFile> {
    let (_, header) = SafeTensors::read_metadata(bytes)
        .map_err(|e| format_error(op, path, format!("not a valid safetensors file: {e}")))?;
    let metadata = header
        .metadata()
        .as_ref()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let file = SafeTensors::deserialize(bytes)
        .map_err(|e| format_error(op, path, format!("not a valid safetensors file: {e}")))?;
    let mut tensors = StateDict::new();
    for (name, view) in file.iter() {
        let data = view.data();
        let tensor = match view.dtype() {
            Dtype::F32 => Tensor::from_vec(decode(data, f32::from_le_bytes), view.shape()),
            Dtype::F64 => Tensor::from_vec(decode(data, f64::from_le_bytes), view.shape()),
            Dtype::I64 => Tensor::from_vec(decode(data, i64::from_le_bytes), view.shape()),
            Dtype::F16 => Tensor::from_vec(decode(data, half::f16::from_le_bytes), view.shape()),
            Dtype::BF16 => Tensor::from_vec(decode(data, half::bf16::from_le_bytes), view.shape()),
            Dtype::BOOL => match data
                .iter()
                .map(|&b| decode_bool(b))
                .collect::<Option<Vec<_>>>()
            {
                Some(v) => Tensor::from_vec(v, view.shape()),
                None => {
                    return Err(format_error(
                        op,
                        path,
                        format!("tensor `{name}` is BOOL but holds a byte other than 0 or 1"),
                    ))
                }
            },
            other => {
                return Err(format_error(
                    op,
                    path,
                    format!(
                        "tensor `{name}` has dtype {other}; retrograd reads F32, F64, F16, BF16, I64 and BOOL"
                    ),
                ))
            }
        }
        .map_err(|e| format_error(op, path, format!("tensor `{name}`: {e}")))?;
        tensors.insert(name.to_string(), tensor);
    }
    Ok(TensorFile { tensors, metadata })
}

/// A BOOL element: 0 or 1, anything else malformed.
fn decode_bool(b: u8) -> Option<bool> {
    match b {
        0 => Some(false),
        1 => Some(true),
        _ => None,
    }
}

/// Decodes little-endian elements (the data may be unaligned in the file).
fn decode<T, const N: usize>(data: &[u8], from_le: fn([u8; N]) -> T) -> Vec<T> {
    data.chunks_exact(N)
        .map(|c| from_le(c.try_into().expect("chunks_exact gives N bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    fn sample() -> StateDict {
        let mut t = StateDict::new();
        t.insert(
            "layer.weight".into(),
            Tensor::from_vec(vec![1.5f32, -0.0, f32::MIN_POSITIVE, 3e38], &[2, 2]).unwrap(),
        );
        t.insert(
            "layer.bias".into(),
            Tensor::from_vec(vec![std::f64::consts::PI, -1e-300], &[2]).unwrap(),
        );
        t.insert("step".into(), Tensor::scalar(7.0));
        t.insert("empty".into(), Tensor::zeros(&[0, 3], DType::F32).unwrap());
        t.insert(
            "tokens".into(),
            Tensor::from_vec(vec![i64::MIN, -1, 0, i64::MAX], &[2, 2]).unwrap(),
        );
        t.insert("count".into(), Tensor::scalar(42i64));
        t.insert(
            "mask".into(),
            Tensor::from_vec(vec![true, false, false, true, true, false], &[2, 3]).unwrap(),
        );
        t.insert("flag".into(), Tensor::scalar(true));
        t.insert(
            "half".into(),
            Tensor::from_vec(vec![1.5, -0.0, 65504.0, 6e-8], &[4])
                .unwrap()
                .to_dtype(DType::F16),
        );
        t.insert(
            "brain".into(),
            Tensor::from_vec(vec![3e38f32, -1e-38, 0.1, 7.0, 1.0, -2.0], &[3, 2])
                .unwrap()
                .to_dtype(DType::BF16),
        );
        t
    }

    #[test]
    fn round_trip_is_bit_exact_with_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        let mut meta = BTreeMap::new();
        meta.insert("format".to_string(), "test".to_string());
        save_tensors(&path, &sample(), &meta).unwrap();
        let back = load_tensors(&path).unwrap();
        assert_eq!(back.metadata, meta);
        assert_eq!(back.tensors.len(), 10);
        for (name, t) in sample() {
            let b = &back.tensors[&name];
            assert_eq!((b.shape(), b.dtype()), (t.shape(), t.dtype()), "{name}");
            if !t.is_float() {
                // i64 (beyond 2^53 too), bool, f16 and bf16 compare exactly.
                assert_eq!(b, &t, "{name}");
                continue;
            }
            let bits = |t: &Tensor| {
                t.to_f64_vec()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>()
            };
            assert_eq!(bits(b), bits(&t), "{name}");
        }
        // Only the checkpoint is left in the directory: no temporary files.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn bf16_and_f16_from_other_tools_load_bit_for_bit() {
        // What `safetensors.torch.save_file` writes for
        // `torch.tensor([[1.0, -2.5], [0.1, 3e38]], dtype=torch.bfloat16)`
        // and the f16 `[0.5, 65504]`: raw little-endian bits.
        let bf: Vec<u8> = [0x3f80u16, 0xc020, 0x3dcd, 0x7f62]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let h: Vec<u8> = [0x3800u16, 0x7bff]
            .iter()
            .flat_map(|b| b.to_le_bytes())
            .collect();
        let views = [
            (
                "w",
                safetensors::tensor::TensorView::new(Dtype::BF16, vec![2, 2], &bf).unwrap(),
            ),
            (
                "h",
                safetensors::tensor::TensorView::new(Dtype::F16, vec![2], &h).unwrap(),
            ),
        ];
        let bytes = safetensors::serialize(views, None).unwrap();
        let file = parse_tensors("load_tensors", Path::new("x"), &bytes).unwrap();
        let w = &file.tensors["w"];
        assert_eq!((w.dtype(), w.shape()), (DType::BF16, &[2usize, 2][..]));
        let bits: Vec<u16> = w
            .to_vec::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect();
        assert_eq!(bits, vec![0x3f80, 0xc020, 0x3dcd, 0x7f62]);
        assert_eq!(
            w.to_dtype(DType::F32).to_vec::<f32>().unwrap()[..2],
            [1.0, -2.5]
        );
        let h = &file.tensors["h"];
        assert_eq!(
            (h.dtype(), h.to_f64_vec()),
            (DType::F16, vec![0.5, 65504.0])
        );
        // And back out: the same bytes.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.safetensors");
        save_tensors(&path, &file.tensors, &BTreeMap::new()).unwrap();
        let again = SafeTensors::deserialize(&std::fs::read(&path).unwrap())
            .unwrap()
            .tensor("w")
            .unwrap()
            .data()
            .to_vec();
        assert_eq!(again, bf);
    }

    #[test]
    fn every_truncation_is_a_format_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        save_tensors(&path, &sample(), &BTreeMap::new()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        for len in 0..bytes.len() {
            let err = parse_tensors("load_tensors", &path, &bytes[..len]).unwrap_err();
            assert!(matches!(err, Error::Format { .. }), "length {len}: {err}");
        }
    }

    #[test]
    fn corrupted_header_and_foreign_dtypes_are_format_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        save_tensors(&path, &sample(), &BTreeMap::new()).unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[8] = b'#'; // the opening brace of the JSON header
        assert!(matches!(
            parse_tensors("load_tensors", &path, &bytes),
            Err(Error::Format { .. })
        ));
        // A huge declared header length.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(matches!(
            parse_tensors("load_tensors", &path, &bytes),
            Err(Error::Format { .. })
        ));
        // A BOOL tensor holding a byte other than 0 or 1.
        let raw = [1u8, 2];
        let view = safetensors::tensor::TensorView::new(Dtype::BOOL, vec![2], &raw).unwrap();
        let bytes = safetensors::serialize([("mask", view)], None).unwrap();
        let err = parse_tensors("load_tensors", &path, &bytes).unwrap_err();
        assert!(err.to_string().contains("other than 0 or 1"), "{err}");
        // An I32 tensor, written by another tool.
        let raw = [1u8, 0, 0, 0];
        let view = safetensors::tensor::TensorView::new(Dtype::I32, vec![1], &raw).unwrap();
        let bytes = safetensors::serialize([("ids", view)], None).unwrap();
        let err = parse_tensors("load_tensors", &path, &bytes).unwrap_err();
        assert!(err.to_string().contains("`ids` has dtype I32"), "{err}");
    }

    #[test]
    fn missing_file_is_an_io_error_with_the_path() {
        let err = load_tensors("/nonexistent/dir/x.safetensors").unwrap_err();
        assert!(matches!(err, Error::Io { ref path, .. } if path.contains("x.safetensors")));
        let err = save_tensors(
            "/nonexistent/dir/x.safetensors",
            &sample(),
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert!(matches!(err, Error::Io { .. }));
    }

    #[test]
    fn saving_over_an_existing_file_replaces_it_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.safetensors");
        save_tensors(&path, &sample(), &BTreeMap::new()).unwrap();
        let mut small = StateDict::new();
        small.insert("x".into(), Tensor::scalar(1.0f32));
        save_tensors(&path, &small, &BTreeMap::new()).unwrap();
        assert_eq!(load_tensors(&path).unwrap().tensors, small);
    }
}
