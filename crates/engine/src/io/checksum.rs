//! The checksum a checkpoint carries: CRC-32 of its content (every tensor's
//! name, dtype, shape and bytes, in name order, and every metadata entry but
//! the checksum itself), stored in the header's metadata as
//! `checksum = "crc32:xxxxxxxx"`.
//!
//! The content, not the file's bytes, is summed, so the sum can live in the
//! file it covers and the file stays a plain safetensors file any tool
//! reads. A byte flipped in the data or the metadata changes the sum; one
//! flipped in the header's layout makes it unparseable or changes a name,
//! shape or offset, which loading reports on its own.

use std::collections::BTreeMap;
use std::path::Path;

use super::safetensors::{tensor_bytes, TensorFile};
use crate::{Error, Result};

/// The metadata key of the checksum.
pub(crate) const CHECKSUM_KEY: &str = "checksum";
const PREFIX: &str = "crc32:";

/// Adds a length-prefixed field, so that no two different contents hash
/// the same bytes.
fn field(hasher: &mut crc32fast::Hasher, bytes: &[u8]) {
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// The checksum of `file`'s tensors and of its metadata other than the checksum.
fn content_crc(tensors: &crate::nn::StateDict, metadata: &BTreeMap<String, String>) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for (name, t) in tensors {
        field(&mut hasher, name.as_bytes());
        field(&mut hasher, t.dtype().to_string().as_bytes());
        let dims: Vec<u8> = t
            .shape()
            .iter()
            .flat_map(|&d| (d as u64).to_le_bytes())
            .collect();
        field(&mut hasher, &dims);
        field(&mut hasher, &tensor_bytes(t));
    }
    for (key, value) in metadata.iter().filter(|(k, _)| *k != CHECKSUM_KEY) {
        field(&mut hasher, key.as_bytes());
        field(&mut hasher, value.as_bytes());
    }
    hasher.finalize()
}

/// The metadata entry holding `file`'s checksum.
pub(crate) fn checksum_entry(file: &TensorFile) -> (String, String) {
    let crc = content_crc(&file.tensors, &file.metadata);
    (CHECKSUM_KEY.to_string(), format!("{PREFIX}{crc:08x}"))
}

/// Checks `file` against the checksum in its metadata, if it has one; a
/// mismatch or a malformed entry is an [`Error::Format`] naming `path`.
pub(crate) fn verify_checksum(op: &'static str, path: &Path, file: &TensorFile) -> Result<()> {
    let Some(saved) = file.metadata.get(CHECKSUM_KEY) else {
        return Ok(());
    };
    let format_error = |reason: String| Error::Format {
        op,
        path: path.display().to_string(),
        reason,
    };
    let expected = saved
        .strip_prefix(PREFIX)
        .filter(|hex| hex.len() == 8)
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or_else(|| {
            format_error(format!(
                "malformed checksum {saved:?} (expected crc32: and 8 hex digits)"
            ))
        })?;
    let found = content_crc(&file.tensors, &file.metadata);
    if found != expected {
        return Err(format_error(format!(
            "checksum mismatch: the file says {PREFIX}{expected:08x}, its content sums to {PREFIX}{found:08x} (the file is corrupted)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::StateDict;
    use crate::Tensor;

    fn file() -> TensorFile {
        let mut tensors = StateDict::new();
        tensors.insert(
            "w".into(),
            Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap(),
        );
        tensors.insert("b".into(), Tensor::scalar(0.5));
        let metadata = BTreeMap::from([("format".to_string(), "x".to_string())]);
        TensorFile { tensors, metadata }
    }

    #[test]
    fn any_change_of_content_changes_the_sum() {
        let path = Path::new("f.safetensors");
        let mut f = file();
        let (k, v) = checksum_entry(&f);
        f.metadata.insert(k, v);
        verify_checksum("t", path, &f).unwrap();
        type Damage = Box<dyn Fn(&mut TensorFile)>;
        let variants: Vec<Damage> = vec![
            Box::new(|f| {
                f.tensors.insert(
                    "w".into(),
                    Tensor::from_vec(vec![1.0f32, 2.0, 3.5], &[3]).unwrap(),
                );
            }),
            Box::new(|f| {
                f.tensors.insert(
                    "w".into(),
                    Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3, 1]).unwrap(),
                );
            }),
            Box::new(|f| {
                let t = f.tensors.remove("b").unwrap();
                f.tensors.insert("c".into(), t);
            }),
            Box::new(|f| {
                f.metadata.insert("format".into(), "y".into());
            }),
            Box::new(|f| {
                f.metadata.insert("extra".into(), String::new());
            }),
        ];
        for (i, change) in variants.iter().enumerate() {
            let mut g = f.clone();
            change(&mut g);
            let e = verify_checksum("t", path, &g).unwrap_err();
            assert!(e.to_string().contains("checksum mismatch"), "{i}: {e}");
        }
        let mut bad = f.clone();
        bad.metadata.insert(CHECKSUM_KEY.into(), "crc32:xyz".into());
        assert!(verify_checksum("t", path, &bad)
            .unwrap_err()
            .to_string()
            .contains("malformed"));
        // No checksum: older files load as they did.
        let mut none = f.clone();
        none.metadata.remove(CHECKSUM_KEY);
        verify_checksum("t", path, &none).unwrap();
    }
}
