//! [`GgmlType`]: the element types of ggml tensors as GGUF files number
//! them, with each type's block geometry (values per block, bytes per
//! block) and the size of a row.

use crate::base::error::{Error, Result};

/// The QK_K of ggml: values per block of the K-quants.
pub const QK_K: usize = 256;

/// An element type of a ggml tensor: a float type, or a block format that
/// stores a fixed number of values in a fixed number of bytes. The ids are
/// ggml's (`ggml_type` in `ggml.h`, `GGMLQuantizationType` in gguf-py),
/// which is what a GGUF file's tensor infos hold.
///
/// ```
/// use retrograd::quant::GgmlType;
/// let t = GgmlType::from_id(3).unwrap();
/// assert_eq!(t, GgmlType::Q4_1);
/// assert_eq!((t.name(), t.block_len(), t.block_bytes()), ("Q4_1", 32, 20));
/// assert_eq!(t.row_bytes(576)?, 18 * 20);
/// assert!(t.row_bytes(100).is_err()); // not whole blocks
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GgmlType {
    /// IEEE f32, one value per "block".
    F32,
    /// IEEE f16 (binary16).
    F16,
    /// bfloat16: the high half of an f32.
    BF16,
    /// 32 values: an f16 scale `d` and 4-bit quants, value = d * (q - 8).
    Q4_0,
    /// 32 values: f16 scale `d` and minimum `m`, 4-bit quants, value = d * q + m.
    Q4_1,
    /// 32 values: an f16 scale `d`, 5-bit quants (low nibbles and a 32-bit
    /// word of high bits), value = d * (q - 16).
    Q5_0,
    /// 32 values: f16 `d` and `m`, 5-bit quants, value = d * q + m.
    Q5_1,
    /// 32 values: an f16 scale `d` and i8 quants, value = d * q.
    Q8_0,
    /// 256 values in 8 sub-blocks of 32: f16 super-scales `d` and `dmin`,
    /// 6-bit scales and minimums per sub-block, 4-bit quants.
    Q4K,
    /// 256 values in 8 sub-blocks of 32, like Q4_K with a fifth bit per quant.
    Q5K,
    /// 256 values in 16 sub-blocks of 16: an f16 super-scale `d`, i8 scales
    /// per sub-block, 6-bit quants, value = d * scale * (q - 32).
    Q6K,
}

impl GgmlType {
    /// Every type this crate reads, in id order.
    pub const ALL: [GgmlType; 11] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q4K,
        GgmlType::Q5K,
        GgmlType::Q6K,
        GgmlType::BF16,
    ];

    /// ggml's id of the type (what a GGUF tensor info stores).
    pub const fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4K => 12,
            GgmlType::Q5K => 13,
            GgmlType::Q6K => 14,
            GgmlType::BF16 => 30,
        }
    }

    /// The type with ggml's id `id`, if this crate reads it (see
    /// [`id_name`](Self::id_name) for the name of any id ggml defines).
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The name of the type as ggml and gguf-py spell it (`"Q4_1"`, `"Q6_K"`).
    pub const fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::BF16 => "BF16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q4K => "Q4_K",
            GgmlType::Q5K => "Q5_K",
            GgmlType::Q6K => "Q6_K",
        }
    }

    /// The name ggml gives type id `id`, whether or not this crate reads
    /// that type (for messages about a file holding one it does not).
    pub fn id_name(id: u32) -> Option<&'static str> {
        const NAMES: [&str; 41] = [
            "F32",
            "F16",
            "Q4_0",
            "Q4_1",
            "Q4_2",
            "Q4_3",
            "Q5_0",
            "Q5_1",
            "Q8_0",
            "Q8_1",
            "Q2_K",
            "Q3_K",
            "Q4_K",
            "Q5_K",
            "Q6_K",
            "Q8_K",
            "IQ2_XXS",
            "IQ2_XS",
            "IQ3_XXS",
            "IQ1_S",
            "IQ4_NL",
            "IQ3_S",
            "IQ2_S",
            "IQ4_XS",
            "I8",
            "I16",
            "I32",
            "I64",
            "F64",
            "IQ1_M",
            "BF16",
            "Q4_0_4_4",
            "Q4_0_4_8",
            "Q4_0_8_8",
            "TQ1_0",
            "TQ2_0",
            "IQ4_NL_4_4",
            "IQ4_NL_4_8",
            "IQ4_NL_8_8",
            "MXFP4",
            "NVFP4",
        ];
        NAMES.get(id as usize).copied()
    }

    /// Values per block: 1 for the float types, 32, or 256 ([`QK_K`]) for
    /// the K-quants.
    pub const fn block_len(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                32
            }
            GgmlType::Q4K | GgmlType::Q5K | GgmlType::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub const fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::BF16 => 2,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q4K => 144,
            GgmlType::Q5K => 176,
            GgmlType::Q6K => 210,
        }
    }

    /// Whether the type is a block format (not F32, F16 or BF16).
    pub const fn is_quantized(self) -> bool {
        !matches!(self, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16)
    }

    /// The bytes of `values` values of this type, or `None` when `values`
    /// is not a whole number of blocks or the count overflows `usize`.
    pub const fn bytes_for(self, values: usize) -> Option<usize> {
        if !values.is_multiple_of(self.block_len()) {
            return None;
        }
        (values / self.block_len()).checked_mul(self.block_bytes())
    }

    /// The bytes of a row of `cols` values: [`Error::InvalidArgument`]
    /// naming the type when `cols` is not a multiple of the block length.
    pub fn row_bytes(self, cols: usize) -> Result<usize> {
        self.bytes_for(cols).ok_or_else(|| {
            Error::invalid(
                "GgmlType::row_bytes",
                format!(
                    "{cols} values are not a whole number of {} blocks of {}",
                    self.name(),
                    self.block_len()
                ),
            )
        })
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_names_and_sizes_are_ggmls() {
        let expected = [
            (GgmlType::F32, 0, "F32", 1, 4),
            (GgmlType::F16, 1, "F16", 1, 2),
            (GgmlType::Q4_0, 2, "Q4_0", 32, 18),
            (GgmlType::Q4_1, 3, "Q4_1", 32, 20),
            (GgmlType::Q5_0, 6, "Q5_0", 32, 22),
            (GgmlType::Q5_1, 7, "Q5_1", 32, 24),
            (GgmlType::Q8_0, 8, "Q8_0", 32, 34),
            (GgmlType::Q4K, 12, "Q4_K", 256, 144),
            (GgmlType::Q5K, 13, "Q5_K", 256, 176),
            (GgmlType::Q6K, 14, "Q6_K", 256, 210),
            (GgmlType::BF16, 30, "BF16", 1, 2),
        ];
        for (t, id, name, len, bytes) in expected {
            assert_eq!(
                (t.id(), t.name(), t.block_len(), t.block_bytes()),
                (id, name, len, bytes)
            );
            assert_eq!(GgmlType::from_id(id), Some(t));
            assert_eq!(GgmlType::id_name(id), Some(name));
            assert_eq!(t.is_quantized(), len > 1);
        }
        assert_eq!(GgmlType::from_id(16), None);
        assert_eq!(GgmlType::id_name(16), Some("IQ2_XXS"));
        assert_eq!(GgmlType::id_name(1000), None);
    }

    #[test]
    fn row_bytes_needs_whole_blocks() {
        assert_eq!(GgmlType::Q6K.row_bytes(512).unwrap(), 420);
        assert_eq!(GgmlType::F32.row_bytes(3).unwrap(), 12);
        let e = GgmlType::Q4K.row_bytes(128).unwrap_err().to_string();
        assert!(
            e.contains("Q4_K") && e.contains("128") && e.contains("256"),
            "{e}"
        );
        assert_eq!(GgmlType::Q8_0.bytes_for(usize::MAX / 32 * 32), None);
    }
}
