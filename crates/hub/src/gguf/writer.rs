//! [`GgufWriter`]: builds a GGUF file (version 3) from metadata and
//! tensors, checked as they are added, and writes it atomically.

use std::collections::HashSet;
use std::path::Path;

use super::reader::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use super::value::{type_id, MetadataValue};
use retrograd_engine::base::error::{or_panic, Error, Result};
use retrograd_engine::quant::{try_quantize, GgmlType};
use retrograd_engine::tensor::{DType, Tensor};

/// The longest tensor name ggml reads (`GGML_MAX_NAME` less its NUL).
pub const MAX_TENSOR_NAME: usize = 63;

struct PendingTensor {
    name: String,
    ty: GgmlType,
    /// GGUF order: fastest-varying first.
    dims: Vec<usize>,
    bytes: Vec<u8>,
}

/// A GGUF file being built: metadata entries and tensors in the order
/// added, each checked when added (duplicate keys and names, array element
/// types, byte counts against shapes). [`try_write`](Self::try_write)
/// writes version 3, tensors aligned to `general.alignment` if it was set,
/// else 32, through a synced temporary file renamed into place. See
/// [`GgufFile`](super::GgufFile) for an example.
#[derive(Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetadataValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
    alignment: Option<usize>,
}

impl std::fmt::Debug for GgufWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufWriter")
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// `None` if every element of every array in `value` has its array's
/// first element's type, else the reason.
fn mixed_array(value: &MetadataValue) -> Option<String> {
    let items = value.as_array()?;
    let first = items.first()?.type_id();
    if let Some((i, v)) = items.iter().enumerate().find(|(_, v)| v.type_id() != first) {
        return Some(format!(
            "array elements must share one type: element 0 is {}, element {i} is {}",
            items[0].type_name(),
            v.type_name()
        ));
    }
    items.iter().find_map(mixed_array)
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds metadata `key` = `value`. An empty or repeated key, an array
    /// mixing element types, or a `general.alignment` that is not a u32
    /// power of two is [`Error::InvalidArgument`] naming the key.
    pub fn try_add_metadata(
        &mut self,
        key: impl Into<String>,
        value: impl Into<MetadataValue>,
    ) -> Result<()> {
        const OP: &str = "GgufWriter::add_metadata";
        let (key, value) = (key.into(), value.into());
        if key.is_empty() {
            return Err(Error::invalid(OP, "a metadata key may not be empty"));
        }
        if self.keys.contains(&key) {
            return Err(Error::invalid(
                OP,
                format!("metadata key `{key}` is already set"),
            ));
        }
        if let Some(reason) = mixed_array(&value) {
            return Err(Error::invalid(
                OP,
                format!("metadata key `{key}`: {reason}"),
            ));
        }
        if key == ALIGNMENT_KEY {
            match value {
                MetadataValue::U32(a) if a.is_power_of_two() => self.alignment = Some(a as usize),
                _ => {
                    return Err(Error::invalid(
                        OP,
                        format!(
                            "metadata key `{key}` must be a u32 power of two, not {} {value:?}",
                            value.type_name()
                        ),
                    ));
                }
            }
        }
        self.keys.insert(key.clone());
        self.metadata.push((key, value));
        Ok(())
    }

    /// Like [`try_add_metadata`](Self::try_add_metadata), but panics with its error.
    #[track_caller]
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<MetadataValue>) {
        or_panic(self.try_add_metadata(key, value))
    }

    /// Adds tensor `name` of element type `ty` and row-major `shape` (at
    /// most 4 dims; the last, a row, whole blocks of `ty`), whose data is
    /// `bytes`, which must be exactly its size. A repeated, empty or too
    /// long name (ggml reads 63 bytes) is an error too; every error is
    /// [`Error::InvalidArgument`] naming the tensor.
    pub fn try_add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        shape: &[usize],
        bytes: impl Into<Vec<u8>>,
    ) -> Result<()> {
        const OP: &str = "GgufWriter::add_tensor";
        let (name, bytes) = (name.into(), bytes.into());
        let bad = |reason: String| Error::invalid(OP, format!("tensor `{name}`: {reason}"));
        if name.is_empty() || name.len() > MAX_TENSOR_NAME {
            return Err(bad(format!(
                "a name takes 1 to {MAX_TENSOR_NAME} bytes, this has {}",
                name.len()
            )));
        }
        if self.names.contains(&name) {
            return Err(bad("a tensor of this name was already added".into()));
        }
        if shape.len() > MAX_DIMS {
            return Err(bad(format!(
                "shape {shape:?} has more than {MAX_DIMS} dims"
            )));
        }
        let row = shape.last().copied().unwrap_or(1);
        if !row.is_multiple_of(ty.block_len()) {
            return Err(bad(format!(
                "shape {shape:?}: rows of {row} are not whole {} blocks of {}",
                ty.name(),
                ty.block_len()
            )));
        }
        let need = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| ty.bytes_for(n));
        if need != Some(bytes.len()) {
            return Err(bad(format!(
                "shape {shape:?} of {} takes {} bytes, got {}",
                ty.name(),
                need.map_or_else(|| "more than usize::MAX".into(), |n| n.to_string()),
                bytes.len()
            )));
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor {
            name,
            ty,
            dims: shape.iter().rev().copied().collect(),
            bytes,
        });
        Ok(())
    }

    /// Like [`try_add_tensor`](Self::try_add_tensor), but panics with its error.
    #[track_caller]
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        shape: &[usize],
        bytes: impl Into<Vec<u8>>,
    ) {
        or_panic(self.try_add_tensor(name, ty, shape, bytes))
    }

    /// Adds float tensor `tensor` (f16, bf16, f32 or f64) as F32 under `name`.
    pub fn try_add_f32_tensor(&mut self, name: impl Into<String>, tensor: &Tensor) -> Result<()> {
        self.try_add_quantized_tensor(name, GgmlType::F32, tensor)
    }

    /// Like [`try_add_f32_tensor`](Self::try_add_f32_tensor), but panics with its error.
    #[track_caller]
    pub fn add_f32_tensor(&mut self, name: impl Into<String>, tensor: &Tensor) {
        or_panic(self.try_add_f32_tensor(name, tensor))
    }

    /// Adds float tensor `tensor` under `name` encoded as `ty`: converted to
    /// F32, F16 or BF16, or quantized by ggml's reference quantizer
    /// ([`try_quantize`]); its last dim must be whole blocks of `ty`.
    pub fn try_add_quantized_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        tensor: &Tensor,
    ) -> Result<()> {
        const OP: &str = "GgufWriter::add_quantized_tensor";
        let name = name.into();
        let dtype = tensor.dtype();
        if !matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
            return Err(Error::invalid(
                OP,
                format!("tensor `{name}` is {dtype}, not a float tensor"),
            ));
        }
        let row = tensor.shape().last().copied().unwrap_or(1);
        if !row.is_multiple_of(ty.block_len()) {
            return Err(Error::invalid(
                OP,
                format!(
                    "tensor `{name}`: shape {:?}: rows of {row} are not whole {} blocks of {}",
                    tensor.shape(),
                    ty.name(),
                    ty.block_len()
                ),
            ));
        }
        let values = tensor.to_dtype(DType::F32).contiguous();
        let bytes = try_quantize(ty, values.as_slice::<f32>()?)?;
        self.try_add_tensor(name, ty, tensor.shape(), bytes)
    }

    /// Like [`try_add_quantized_tensor`](Self::try_add_quantized_tensor),
    /// but panics with its error.
    #[track_caller]
    pub fn add_quantized_tensor(&mut self, name: impl Into<String>, ty: GgmlType, tensor: &Tensor) {
        or_panic(self.try_add_quantized_tensor(name, ty, tensor))
    }

    /// The alignment the file is written with.
    pub fn alignment(&self) -> usize {
        self.alignment.unwrap_or(DEFAULT_ALIGNMENT)
    }

    /// The bytes of the file: header, metadata, tensor infos, padding to
    /// the alignment, then each tensor's data padded to the alignment.
    pub fn to_bytes(&self) -> Vec<u8> {
        let align = self.alignment();
        let mut out = Vec::new();
        out.extend_from_slice(GGUF_MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            put_str(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            put_value(&mut out, value);
        }
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for &d in &t.dims {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&t.ty.id().to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset += t.bytes.len().next_multiple_of(align);
        }
        out.resize(out.len().next_multiple_of(align), 0);
        for t in &self.tensors {
            out.extend_from_slice(&t.bytes);
            out.resize(out.len().next_multiple_of(align), 0);
        }
        out
    }

    /// Writes the file to `path` atomically: a temporary file in the same
    /// folder, synced, then renamed over `path`.
    pub fn try_write(&self, path: impl AsRef<Path>) -> Result<()> {
        retrograd_engine::io::write_atomically("GgufWriter::write", path.as_ref(), &self.to_bytes())
    }

    /// Like [`try_write`](Self::try_write), but panics with its error.
    #[track_caller]
    pub fn write(&self, path: impl AsRef<Path>) {
        or_panic(self.try_write(path))
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// The value's bytes, without its type id.
fn put_value(out: &mut Vec<u8>, value: &MetadataValue) {
    match value {
        MetadataValue::U8(v) => out.push(*v),
        MetadataValue::I8(v) => out.push(*v as u8),
        MetadataValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::Bool(v) => out.push(*v as u8),
        MetadataValue::String(s) => put_str(out, s),
        MetadataValue::Array(items) => {
            let elem = items.first().map_or(type_id::U8, MetadataValue::type_id);
            out.extend_from_slice(&elem.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                put_value(out, item);
            }
        }
    }
}
