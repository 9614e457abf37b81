//! GGUF, the single-file model format of llama.cpp and ggml: key-value
//! metadata (hyperparameters, the tokenizer) and named tensors in ggml's
//! element types, F32 to the K-quants ([`retrograd_engine::quant`]).
//!
//! A file (little endian, versions 2 and 3) is: the magic `GGUF`, a u32
//! version, u64 tensor and metadata counts; each metadata entry as a string
//! key, a u32 value type and the value; each tensor info as a string name,
//! a u32 dims count, the u64 dims (fastest-varying first: a row-major
//! `[rows, cols]` matrix has dims `[cols, rows]`), a u32 ggml type and a
//! u64 offset into the data section; then, from the next multiple of
//! `general.alignment` (default 32), the data section, each tensor's
//! offset aligned. A string is a u64 byte count and UTF-8 bytes.
//!
//! Where things are: the metadata value type (`value.rs`); [`GgufFile`],
//! which memory-maps a file and checks its header up front, handing out
//! typed metadata, tensor infos, zero-copy tensor bytes and dequantized f32
//! tensors (`reader.rs`); [`GgufWriter`], which builds a version 3 file and
//! writes it atomically (`writer.rs`). Every error names the file and the
//! metadata key or tensor concerned; a malformed file is an error, never a
//! panic.

mod reader;
#[cfg(test)]
mod tests;
mod value;
mod writer;

pub use reader::{
    GgufFile, GgufTensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS,
};
pub use value::MetadataValue;
pub use writer::{GgufWriter, MAX_TENSOR_NAME};
