//! [`GgufFile`]: a GGUF file, memory-mapped, its header read and checked
//! up front; [`GgufTensorInfo`]: one tensor's name, dims, type and place.
//!
//! Everything a later read relies on is validated by `open`: counts and
//! lengths against the bytes left, value and tensor types, UTF-8, unique
//! keys and tensor names, the alignment, each tensor's offset (aligned,
//! inside the file, not overlapping another) and its first dim (whole
//! blocks). A bad file is an [`Error::Format`] naming the path and the key
//! or tensor, never a panic.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;

use super::value::{fixed_size, type_id, type_id_name, MetadataValue};
use retrograd_engine::base::error::{format_error, io_error, Error, Result};
use retrograd_engine::base::fallible::fallible;
use retrograd_engine::quant::{try_dequantize, GgmlType};
use retrograd_engine::tensor::{Dims, Tensor};

/// The four bytes a GGUF file starts with.
pub const GGUF_MAGIC: &[u8; 4] = b"GGUF";
/// The metadata key of the data alignment (u32, a power of two).
pub const ALIGNMENT_KEY: &str = "general.alignment";
/// The alignment when the file does not set [`ALIGNMENT_KEY`].
pub const DEFAULT_ALIGNMENT: usize = 32;
/// ggml's limit on a tensor's dims (`GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// How deeply arrays may nest in the metadata (llama.cpp reads none nested).
const MAX_ARRAY_DEPTH: usize = 8;

const OP: &str = "GgufFile::open";

/// One tensor of a GGUF file: its name, dims in GGUF order (`dims[0]`
/// varies fastest, so a row-major `[rows, cols]` matrix has dims
/// `[cols, rows]`), element type, and offset from the start of the data
/// section. Infos of an opened [`GgufFile`] are checked: the element count
/// and byte size fit, `dims[0]` is whole blocks and the bytes lie in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GgufTensorInfo {
    /// The tensor's name (`blk.0.attn_q.weight`).
    pub name: String,
    /// Its dims, fastest-varying first (GGUF order).
    pub dims: Vec<usize>,
    /// Its element type.
    pub ty: GgmlType,
    /// Where its bytes start, relative to the data section
    /// ([`GgufFile::data_offset`]).
    pub offset: usize,
}

impl GgufTensorInfo {
    /// The row-major shape: the dims reversed (`[rows, cols]` for a matrix).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().copied().collect()
    }

    /// The number of elements (1 for no dims; saturating for an info not
    /// read from a file).
    pub fn n_elements(&self) -> usize {
        self.dims.iter().fold(1usize, |n, &d| n.saturating_mul(d))
    }

    /// The size of its data in bytes (`usize::MAX` when it is not whole
    /// blocks or overflows, which an info read from a file never is).
    pub fn n_bytes(&self) -> usize {
        self.ty.bytes_for(self.n_elements()).unwrap_or(usize::MAX)
    }
}

/// A GGUF file (version 2 or 3), memory-mapped: the header (metadata and
/// tensor infos) is parsed and checked when opened; tensor data is read
/// from the mapping when asked for, either as bytes (no copy) or
/// dequantized to an f32 [`Tensor`].
///
/// ```
/// use retrograd::gguf::{GgufFile, GgufWriter, MetadataValue};
/// use retrograd::quant::GgmlType;
/// use retrograd::Tensor;
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("tiny.gguf");
/// let mut w = GgufWriter::new();
/// w.try_add_metadata("general.architecture", MetadataValue::from("llama"))?;
/// w.try_add_metadata("llama.block_count", MetadataValue::U32(2))?;
/// let weight = Tensor::from_vec((0..64).map(|i| i as f32 / 8.0).collect::<Vec<_>>(), &[2, 32])?;
/// w.try_add_quantized_tensor("w", GgmlType::Q8_0, &weight)?;
/// w.try_write(&path)?;
///
/// let f = GgufFile::try_open(&path)?;
/// assert_eq!(f.try_architecture()?, "llama");
/// assert_eq!(f.try_get_usize("llama.block_count")?, 2);
/// let info = f.try_tensor_info("w")?;
/// assert_eq!((info.ty, info.dims.clone(), info.shape()), (GgmlType::Q8_0, vec![32, 2], vec![2, 32]));
/// assert_eq!(f.tensor_bytes(info).len(), 2 * 34);
/// let w = f.try_tensor_f32("w")?;
/// assert_eq!(w.shape(), &[2, 32]);
/// assert!(f.try_get_str("llama.block_count").is_err()); // names the key and its type, u32
/// # Ok::<(), retrograd::Error>(())
/// ```
pub struct GgufFile {
    path: PathBuf,
    map: Arc<Mmap>,
    version: u32,
    alignment: usize,
    metadata: Vec<(String, MetadataValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<GgufTensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: usize,
    /// Whether `map` maps a file (its pages can be dropped and read back)
    /// rather than anonymous memory.
    file_backed: bool,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("metadata", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Reads little-endian values from the header; errors are the reason only
/// (the caller adds what was being read).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn take(&mut self, n: usize) -> std::result::Result<&'a [u8], String> {
        if n > self.remaining() {
            return Err(format!(
                "the file ends at byte {}, {} bytes short of it (truncated?)",
                self.bytes.len(),
                n as u128 - self.remaining() as u128
            ));
        }
        let s = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> std::result::Result<[u8; N], String> {
        Ok(self.take(N)?.try_into().unwrap())
    }

    fn u32(&mut self) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A length-prefixed UTF-8 string.
    fn string(&mut self) -> std::result::Result<String, String> {
        let len = self.u64()?;
        if len > self.remaining() as u64 {
            return Err(format!(
                "a string of {len} bytes at byte {} runs past the end of the file ({} bytes)",
                self.pos - 8,
                self.bytes.len()
            ));
        }
        let at = self.pos;
        let bytes = self.take(len as usize)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| format!("the string at byte {at} is not UTF-8: {e}"))
    }

    /// A value of GGUF type `ty`, arrays nested at most `depth` more levels.
    fn value(&mut self, ty: u32, depth: usize) -> std::result::Result<MetadataValue, String> {
        Ok(match ty {
            type_id::U8 => MetadataValue::U8(self.array::<1>()?[0]),
            type_id::I8 => MetadataValue::I8(self.array::<1>()?[0] as i8),
            type_id::U16 => MetadataValue::U16(u16::from_le_bytes(self.array()?)),
            type_id::I16 => MetadataValue::I16(i16::from_le_bytes(self.array()?)),
            type_id::U32 => MetadataValue::U32(self.u32()?),
            type_id::I32 => MetadataValue::I32(i32::from_le_bytes(self.array()?)),
            type_id::F32 => MetadataValue::F32(f32::from_le_bytes(self.array()?)),
            type_id::U64 => MetadataValue::U64(self.u64()?),
            type_id::I64 => MetadataValue::I64(i64::from_le_bytes(self.array()?)),
            type_id::F64 => MetadataValue::F64(f64::from_le_bytes(self.array()?)),
            type_id::BOOL => MetadataValue::Bool(self.array::<1>()?[0] != 0),
            type_id::STRING => MetadataValue::String(self.string()?),
            type_id::ARRAY => {
                if depth == 0 {
                    return Err(format!("arrays nested more than {MAX_ARRAY_DEPTH} deep"));
                }
                let elem = self.u32()?;
                let count = self.u64()?;
                // Strings take at least their 8-byte length, arrays their
                // type and count: a count the bytes left cannot hold is
                // refused before anything is allocated for it.
                let min = match elem {
                    type_id::STRING => 8,
                    type_id::ARRAY => 12,
                    t => fixed_size(t).ok_or_else(|| unknown_type(t, "array element"))?,
                };
                if count > (self.remaining() / min) as u64 {
                    return Err(format!(
                        "an array of {count} {} needs at least {} bytes, but {} remain in the file",
                        type_id_name(elem).unwrap_or("?"),
                        count as u128 * min as u128,
                        self.remaining()
                    ));
                }
                let mut items = Vec::with_capacity(count as usize);
                for i in 0..count {
                    items.push(
                        self.value(elem, depth - 1)
                            .map_err(|e| format!("element {i}: {e}"))?,
                    );
                }
                MetadataValue::Array(items)
            }
            t => return Err(unknown_type(t, "value")),
        })
    }
}

fn unknown_type(t: u32, what: &str) -> String {
    format!("unknown {what} type {t} (GGUF defines 0 to 12)")
}

impl GgufFile {
    fallible! {
        /// Opens and memory-maps the GGUF file at `path`, reading and
        /// checking its header (see the module docs for what is checked).
        /// Versions 2 and 3 are read; version 1 (32-bit counts) and any
        /// newer version are refused with an error saying so.
        pub fn try_open / open(path: impl AsRef<Path>) -> GgufFile {
            let path = path.as_ref();
            let file = File::open(path).map_err(|e| io_error(OP, path, e))?;
            // SAFETY: the mapping is read-only and owned (through the `Arc`)
            // by this `GgufFile` and the views it hands out; we only read
            // it. As with every memory map, another process truncating or
            // rewriting the file while it is mapped would change what we
            // read (or fault); model files are not written while being
            // loaded, the assumption llama.cpp's and safetensors' loaders make.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| io_error(OP, path, e))?;
            let len = map.len();
            let mut f = Self::parse(path, Arc::new(map), len)?;
            f.file_backed = true;
            Ok(f)
        }
    }

    /// Parses `bytes` as the file at `path` (for messages), copied into an
    /// anonymous mapping: tests that open thousands of variants skip the
    /// file system.
    #[cfg(test)]
    pub(crate) fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<GgufFile> {
        let mut map = memmap2::MmapMut::map_anon(bytes.len().max(1)).unwrap();
        map[..bytes.len()].copy_from_slice(bytes);
        let map = map.make_read_only().unwrap();
        // An empty input is mapped as one byte, of which none is read.
        Self::parse(path, Arc::new(map), bytes.len())
    }

    /// Parses the first `len` bytes of `map`, the file at `path`.
    fn parse(path: &Path, map: Arc<Mmap>, len: usize) -> Result<GgufFile> {
        let err = |reason: String| format_error(OP, path, reason);
        let mut cur = Cursor {
            bytes: &map[..len],
            pos: 0,
        };
        let magic = cur
            .take(4)
            .map_err(|_| err(format!("{len} bytes are too short for a GGUF file")))?;
        if magic != GGUF_MAGIC {
            return Err(err(format!(
                "not a GGUF file: it starts with {magic:?}, not {:?} (\"GGUF\")",
                GGUF_MAGIC
            )));
        }
        let header = |e: String| err(format!("header: {e}"));
        let version = cur.u32().map_err(header)?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(err(
                    "GGUF version 1 (32-bit counts) is not supported; convert the file with a \
                     current llama.cpp or gguf-py"
                        .into(),
                ));
            }
            v if v & 0xFFFF == 0 => {
                return Err(err(format!(
                    "GGUF version {v:#x}: a big-endian file? Only little-endian files are read"
                )));
            }
            v => {
                return Err(err(format!(
                    "GGUF version {v} is not supported (versions 2 and 3 are)"
                )));
            }
        }
        let n_tensors = cur.u64().map_err(header)?;
        let n_kv = cur.u64().map_err(header)?;
        // The smallest key-value pair: an 8-byte key length, a key byte, a
        // 4-byte type and a 1-byte value; the smallest tensor info: an 8-byte
        // name length, u32 dims count, u32 type and u64 offset.
        for (n, what, min) in [(n_kv, "metadata entries", 14), (n_tensors, "tensors", 24)] {
            if n > (cur.remaining() / min) as u64 {
                return Err(err(format!(
                    "the header claims {n} {what}, more than the file's {len} bytes can hold"
                )));
            }
        }

        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut key_index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv as usize {
            let key = cur
                .string()
                .map_err(|e| err(format!("metadata entry {i}: its key: {e}")))?;
            if key.is_empty() {
                return Err(err(format!("metadata entry {i} has an empty key")));
            }
            if key_index.contains_key(&key) {
                return Err(err(format!("metadata key `{key}` appears twice")));
            }
            let value = cur
                .u32()
                .and_then(|ty| cur.value(ty, MAX_ARRAY_DEPTH))
                .map_err(|e| err(format!("metadata key `{key}`: {e}")))?;
            key_index.insert(key.clone(), i);
            metadata.push((key, value));
        }

        let alignment = match key_index.get(ALIGNMENT_KEY).map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(&MetadataValue::U32(a)) if a.is_power_of_two() => a as usize,
            Some(MetadataValue::U32(a)) => {
                return Err(err(format!(
                    "metadata key `{ALIGNMENT_KEY}` is {a}, not a power of two"
                )));
            }
            Some(v) => {
                return Err(err(format!(
                    "metadata key `{ALIGNMENT_KEY}` is {}, not u32",
                    v.type_name()
                )));
            }
        };

        let mut tensors = Vec::with_capacity(n_tensors as usize);
        let mut tensor_index = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors as usize {
            let name = cur
                .string()
                .map_err(|e| err(format!("tensor info {i}: its name: {e}")))?;
            if tensor_index.contains_key(&name) {
                return Err(err(format!("tensor `{name}` appears twice")));
            }
            let info = read_tensor_info(&mut cur, name.clone(), alignment)
                .map_err(|e| err(format!("tensor `{name}`: {e}")))?;
            tensor_index.insert(name, i);
            tensors.push(info);
        }

        let data_offset = cur
            .pos
            .checked_next_multiple_of(alignment)
            .ok_or_else(|| err("the data section's offset overflows".into()))?;
        check_tensor_data(&tensors, data_offset, len).map_err(err)?;
        Ok(GgufFile {
            path: path.to_path_buf(),
            map,
            version,
            alignment,
            metadata,
            key_index,
            tensors,
            tensor_index,
            data_offset,
            file_backed: false,
        })
    }
}

/// A tensor info after its name: dims, type and offset, checked.
fn read_tensor_info(
    cur: &mut Cursor,
    name: String,
    alignment: usize,
) -> std::result::Result<GgufTensorInfo, String> {
    let n_dims = cur.u32()?;
    if n_dims as usize > MAX_DIMS {
        return Err(format!("{n_dims} dims, more than ggml's {MAX_DIMS}"));
    }
    let mut dims = Vec::with_capacity(n_dims as usize);
    for _ in 0..n_dims {
        let d = cur.u64()?;
        dims.push(usize::try_from(d).map_err(|_| format!("dim {d} does not fit usize"))?);
    }
    let id = cur.u32()?;
    let ty = GgmlType::from_id(id).ok_or_else(|| match GgmlType::id_name(id) {
        Some(known) => format!("ggml type {id} ({known}) is not supported"),
        None => format!("unknown ggml type {id}"),
    })?;
    let offset = cur.u64()?;
    let n = dims
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("dims {dims:?} have more elements than fit usize"))?;
    let first = dims.first().copied().unwrap_or(1);
    if !first.is_multiple_of(ty.block_len()) {
        return Err(format!(
            "dims {dims:?}: the first ({first}) is not a whole number of {} blocks of {}",
            ty.name(),
            ty.block_len()
        ));
    }
    if ty.bytes_for(n).is_none() {
        return Err(format!(
            "dims {dims:?} of {} overflow usize in bytes",
            ty.name()
        ));
    }
    if !offset.is_multiple_of(alignment as u64) {
        return Err(format!(
            "data offset {offset} is not a multiple of the alignment {alignment}"
        ));
    }
    let offset = usize::try_from(offset).map_err(|_| format!("data offset {offset} overflows"))?;
    Ok(GgufTensorInfo {
        name,
        dims,
        ty,
        offset,
    })
}

/// Every tensor's bytes lie inside the file and no two overlap.
fn check_tensor_data(
    tensors: &[GgufTensorInfo],
    data_offset: usize,
    file_len: usize,
) -> std::result::Result<(), String> {
    let mut ranges = Vec::with_capacity(tensors.len());
    for t in tensors {
        let (start, len) = (t.offset as u128, t.n_bytes() as u128);
        let end = data_offset as u128 + start + len;
        if end > file_len as u128 {
            return Err(format!(
                "tensor `{}`: its {len} bytes at data offset {start} (file bytes {}..{end}) \
                 run past the end of the file ({file_len} bytes)",
                t.name,
                data_offset as u128 + start,
            ));
        }
        if len > 0 {
            ranges.push((start, start + len, &t.name));
        }
    }
    ranges.sort_unstable();
    for w in ranges.windows(2) {
        let ((_, end, a), (start, _, b)) = (w[0], w[1]);
        if start < end {
            return Err(format!(
                "tensors `{a}` and `{b}` overlap (data bytes {start}..{end} are in both)"
            ));
        }
    }
    Ok(())
}

/// Dequantizes a tensor's bytes in chunks straight into a tensor's storage.
struct Dequantized<'a> {
    ty: GgmlType,
    bytes: &'a [u8],
    buf: Vec<f32>,
    at: usize,
}

impl Iterator for Dequantized<'_> {
    type Item = f32;

    #[inline]
    fn next(&mut self) -> Option<f32> {
        if self.at == self.buf.len() {
            if self.bytes.is_empty() {
                return None;
            }
            // Whole blocks, enough values for the parallel path.
            let blocks = ((1 << 18) / self.ty.block_len()).max(1);
            let take = (blocks * self.ty.block_bytes()).min(self.bytes.len());
            let (chunk, rest) = self.bytes.split_at(take);
            self.buf
                .resize(take / self.ty.block_bytes() * self.ty.block_len(), 0.0);
            try_dequantize(self.ty, chunk, &mut self.buf).ok()?;
            self.bytes = rest;
            self.at = 0;
        }
        self.at += 1;
        Some(self.buf[self.at - 1])
    }
}

impl GgufFile {
    /// The file that was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The data alignment: `general.alignment`, or 32.
    pub fn alignment(&self) -> usize {
        self.alignment
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, MetadataValue)] {
        &self.metadata
    }

    /// The value of metadata `key`, if the file has it.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.key_index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// Every tensor info, in file order.
    pub fn tensors(&self) -> &[GgufTensorInfo] {
        &self.tensors
    }

    /// The memory map of the whole file: with [`data_offset`](Self::data_offset)
    /// and a tensor's [`offset`](GgufTensorInfo::offset) a caller can keep a
    /// zero-copy view of a tensor's bytes alive without the `GgufFile`.
    pub fn mapping(&self) -> &Arc<Mmap> {
        &self.map
    }

    /// Hands the resident pages of the tensor data back to the page cache:
    /// a loader calls it once it has copied what it copies (stacked or
    /// permuted matrices, norms), so the process does not hold those bytes
    /// twice, in its copies and in the mapped file. Views of the map stay
    /// valid and read the same bytes: a page touched again is read back
    /// from the file. Does nothing for a map of anonymous memory.
    pub fn release_resident_pages(&self) {
        #[cfg(unix)]
        if self.file_backed {
            let len = self.map.len().saturating_sub(self.data_offset);
            if len > 0 {
                // SAFETY: `MADV_DONTNEED` on a read-only shared file mapping
                // drops the pages; a later read faults them back in from the
                // file with the same contents, so no slice into the map can
                // observe a change (the anonymous maps of tests, whose pages
                // it would zero, are excluded above).
                let _ = unsafe {
                    self.map.unchecked_advise_range(
                        memmap2::UncheckedAdvice::DontNeed,
                        self.data_offset,
                        len,
                    )
                };
            }
        }
    }

    /// Where the data section starts in the file (a multiple of the alignment).
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    fn missing_key(&self, op: &'static str, key: &str) -> Error {
        format_error(op, &self.path, format!("no metadata key `{key}`"))
    }

    /// The value of `key` as `T` through `get`, or `None` without the key;
    /// a value `get` refuses is an error naming the key, its type and `expected`.
    fn typed<'a, T>(
        &'a self,
        op: &'static str,
        key: &str,
        expected: &str,
        get: impl FnOnce(&'a MetadataValue) -> Option<T>,
    ) -> Result<Option<T>> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        get(value).map(Some).ok_or_else(|| {
            let shown = match value {
                MetadataValue::Array(items) => format!("{} elements", items.len()),
                MetadataValue::String(s) if s.chars().count() > 40 => {
                    format!("{:?}...", s.chars().take(40).collect::<String>())
                }
                v => format!("{v:?}"),
            };
            format_error(
                op,
                &self.path,
                format!(
                    "metadata key `{key}` is {} ({shown}), expected {expected}",
                    value.type_name()
                ),
            )
        })
    }

    fn array_of<'a, T>(
        &'a self,
        op: &'static str,
        key: &str,
        expected: &str,
        get: impl Fn(&'a MetadataValue) -> Option<T>,
    ) -> Result<Option<Vec<T>>> {
        self.typed(op, key, expected, |v| {
            v.as_array()?.iter().map(&get).collect::<Option<Vec<T>>>()
        })
    }

    fallible! {
        /// An unsigned integer (any width, or a signed one that is not
        /// negative) under `key`, or `None` without the key; another type
        /// is an error naming the key and the type found.
        pub fn try_get_opt_u64 / get_opt_u64(&self, key: &str) -> Option<u64> {
            self.typed("GgufFile::get_u64", key, "an unsigned integer", MetadataValue::as_u64)
        }
    }

    fallible! {
        /// An unsigned integer under `key`: an error without the key, or
        /// for another type (naming the key and the type found).
        pub fn try_get_u64 / get_u64(&self, key: &str) -> u64 {
            self.try_get_opt_u64(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_u64", key))
        }
    }

    fallible! {
        /// As [`try_get_opt_u64`](Self::try_get_opt_u64), as a `usize`.
        pub fn try_get_opt_usize / get_opt_usize(&self, key: &str) -> Option<usize> {
            self.typed("GgufFile::get_usize", key, "an unsigned integer fitting usize", |v| {
                v.as_u64().and_then(|v| usize::try_from(v).ok())
            })
        }
    }

    fallible! {
        /// As [`try_get_u64`](Self::try_get_u64), as a `usize`.
        pub fn try_get_usize / get_usize(&self, key: &str) -> usize {
            self.try_get_opt_usize(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_usize", key))
        }
    }

    fallible! {
        /// An integer of any width that fits i64 under `key`, or `None`
        /// without the key.
        pub fn try_get_opt_i64 / get_opt_i64(&self, key: &str) -> Option<i64> {
            self.typed("GgufFile::get_i64", key, "an integer", MetadataValue::as_i64)
        }
    }

    fallible! {
        /// An integer under `key` (see [`try_get_opt_i64`](Self::try_get_opt_i64)).
        pub fn try_get_i64 / get_i64(&self, key: &str) -> i64 {
            self.try_get_opt_i64(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_i64", key))
        }
    }

    fallible! {
        /// A number under `key` as f32 (an f32 as it is, an f64 or an
        /// integer rounded to the nearest f32), or `None` without the key.
        pub fn try_get_opt_f32 / get_opt_f32(&self, key: &str) -> Option<f32> {
            self.typed("GgufFile::get_f32", key, "a number", |v| match *v {
                MetadataValue::F32(x) => Some(x),
                _ => v.as_f64().map(|x| x as f32),
            })
        }
    }

    fallible! {
        /// A number under `key` as f32 (see [`try_get_opt_f32`](Self::try_get_opt_f32)).
        pub fn try_get_f32 / get_f32(&self, key: &str) -> f32 {
            self.try_get_opt_f32(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_f32", key))
        }
    }

    fallible! {
        /// A bool under `key`, or `None` without the key.
        pub fn try_get_opt_bool / get_opt_bool(&self, key: &str) -> Option<bool> {
            self.typed("GgufFile::get_bool", key, "bool", MetadataValue::as_bool)
        }
    }

    fallible! {
        /// A bool under `key`.
        pub fn try_get_bool / get_bool(&self, key: &str) -> bool {
            self.try_get_opt_bool(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_bool", key))
        }
    }

    fallible! {
        /// A string under `key`, or `None` without the key.
        pub fn try_get_opt_str / get_opt_str(&self, key: &str) -> Option<&str> {
            self.typed("GgufFile::get_str", key, "str", MetadataValue::as_str)
        }
    }

    fallible! {
        /// A string under `key`.
        pub fn try_get_str / get_str(&self, key: &str) -> &str {
            self.try_get_opt_str(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_str", key))
        }
    }

    fallible! {
        /// An array of strings under `key` (a tokenizer's tokens or merges),
        /// or `None` without the key.
        pub fn try_get_opt_str_array / get_opt_str_array(&self, key: &str) -> Option<Vec<&str>> {
            self.array_of("GgufFile::get_str_array", key, "an array of str", MetadataValue::as_str)
        }
    }

    fallible! {
        /// An array of strings under `key`.
        pub fn try_get_str_array / get_str_array(&self, key: &str) -> Vec<&str> {
            self.try_get_opt_str_array(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_str_array", key))
        }
    }

    fallible! {
        /// An array of integers that fit i32 under `key` (a tokenizer's
        /// token types), or `None` without the key.
        pub fn try_get_opt_i32_array / get_opt_i32_array(&self, key: &str) -> Option<Vec<i32>> {
            self.array_of("GgufFile::get_i32_array", key, "an array of i32", |v| {
                v.as_i64().and_then(|x| i32::try_from(x).ok())
            })
        }
    }

    fallible! {
        /// An array of integers that fit i32 under `key`.
        pub fn try_get_i32_array / get_i32_array(&self, key: &str) -> Vec<i32> {
            self.try_get_opt_i32_array(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_i32_array", key))
        }
    }

    fallible! {
        /// An array of numbers under `key` as f32 (a tokenizer's scores),
        /// or `None` without the key.
        pub fn try_get_opt_f32_array / get_opt_f32_array(&self, key: &str) -> Option<Vec<f32>> {
            self.array_of("GgufFile::get_f32_array", key, "an array of f32", |v| match *v {
                MetadataValue::F32(x) => Some(x),
                _ => v.as_f64().map(|x| x as f32),
            })
        }
    }

    fallible! {
        /// An array of numbers under `key` as f32.
        pub fn try_get_f32_array / get_f32_array(&self, key: &str) -> Vec<f32> {
            self.try_get_opt_f32_array(key)?
                .ok_or_else(|| self.missing_key("GgufFile::get_f32_array", key))
        }
    }

    fallible! {
        /// The model's architecture, `general.architecture` (`llama`): the
        /// prefix of its hyperparameters' keys (`llama.block_count`).
        pub fn try_architecture / architecture(&self) -> &str {
            self.try_get_str("general.architecture")
        }
    }

    fallible! {
        /// The info of tensor `name`: an error naming the file and the
        /// tensor if there is none.
        pub fn try_tensor_info / tensor_info(&self, name: &str) -> &GgufTensorInfo {
            match self.tensor_index.get(name) {
                Some(&i) => Ok(&self.tensors[i]),
                None => Err(Error::TensorMismatch {
                    context: format!("GgufFile::tensor_info: {}", self.path.display()),
                    name: name.to_string(),
                    problem: retrograd_engine::base::error::TensorProblem::Missing,
                }),
            }
        }
    }

    fallible! {
        /// The bytes of the tensor `info` describes, a slice of the mapping
        /// (no copy). An info that is not this file's, with bytes outside
        /// the file, is an error naming the tensor.
        pub fn try_tensor_bytes / tensor_bytes(&self, info: &GgufTensorInfo) -> &[u8] {
            let range = self
                .data_offset
                .checked_add(info.offset)
                .and_then(|start| Some(start..start.checked_add(info.n_bytes())?));
            range.and_then(|r| self.map.get(r)).ok_or_else(|| {
                format_error(
                    "GgufFile::tensor_bytes",
                    &self.path,
                    format!(
                        "tensor `{}`: {} bytes at data offset {} are not in the file",
                        info.name,
                        info.n_bytes(),
                        info.offset
                    ),
                )
            })
        }
    }

    fallible! {
        /// Tensor `name` as an f32 [`Tensor`] of its row-major
        /// [`shape`](GgufTensorInfo::shape), dequantized from any type
        /// [`GgmlType`] names (straight into the tensor's storage).
        pub fn try_tensor_f32 / tensor_f32(&self, name: &str) -> Tensor {
            let info = self.try_tensor_info(name)?;
            let bytes = self.try_tensor_bytes(info)?;
            let values = Dequantized {
                ty: info.ty,
                bytes,
                buf: Vec::new(),
                at: 0,
            };
            Ok(Tensor::from_exact_iter(Dims::from_slice(&info.shape()), values))
        }
    }
}
