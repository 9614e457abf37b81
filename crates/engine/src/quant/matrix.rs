//! [`QMatrix`]: a frozen matrix in one of ggml's formats, kept in its
//! blocks, as the weight of a quantized linear layer.
//!
//! A row of the matrix is `cols` values in whole blocks, rows one after
//! another (a GGUF tensor of dims `[cols, rows]`). The bytes are either
//! owned or a range of a memory-mapped file, so a model loaded from GGUF
//! reads its weights straight from the page cache, as llama.cpp does,
//! without a second copy. Nothing here dequantizes the whole matrix:
//! products read rows (`kernels::quant`) or tiles of rows
//! ([`dequantize_rows`](QMatrix::dequantize_rows)).

use std::fmt;
use std::sync::Arc;

use super::{try_dequantize, try_quantize, GgmlType};
use crate::base::error::{or_panic, Error, Result};
use crate::tensor::{DType, Tensor};

/// Bytes that a matrix reads in place and shares: a memory-mapped file
/// (`memmap2::Mmap` in `Arc`, as the GGUF reader maps one), or any other
/// owner of a byte slice. The engine needs only the slice, not the mapping.
pub type MappedBytes = Arc<dyn AsRef<[u8]> + Send + Sync>;

#[derive(Clone)]
enum Bytes {
    Owned {
        buf: Arc<[u8]>,
        start: usize,
        len: usize,
    },
    Mapped {
        map: MappedBytes,
        start: usize,
        len: usize,
    },
}

/// A `rows × cols` matrix in a ggml block format (see the module docs).
#[derive(Clone)]
pub struct QMatrix {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    bytes: Bytes,
}

impl fmt::Debug for QMatrix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "QMatrix({} [{}, {}])",
            self.ty.name(),
            self.rows,
            self.cols
        )
    }
}

const OP: &str = "QMatrix";

fn check_len(ty: GgmlType, rows: usize, cols: usize, len: usize) -> Result<()> {
    let row = ty.row_bytes(cols)?;
    let want = row
        .checked_mul(rows)
        .ok_or_else(|| Error::invalid(OP, format!("{rows} rows of {row} bytes overflow")))?;
    if len != want {
        return Err(Error::invalid(
            OP,
            format!(
                "a {} matrix [{rows}, {cols}] takes {want} bytes, got {len}",
                ty.name()
            ),
        ));
    }
    Ok(())
}

impl QMatrix {
    /// A matrix owning `bytes`; their length must be exactly `rows` rows of
    /// `cols` values of `ty` (an error names the type, shape and sizes).
    pub fn try_new(ty: GgmlType, rows: usize, cols: usize, bytes: Vec<u8>) -> Result<Self> {
        check_len(ty, rows, cols, bytes.len())?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            bytes: Bytes::Owned {
                len: bytes.len(),
                buf: bytes.into(),
                start: 0,
            },
        })
    }

    /// [`try_new`](Self::try_new), panicking on bad sizes.
    #[track_caller]
    pub fn new(ty: GgmlType, rows: usize, cols: usize, bytes: Vec<u8>) -> Self {
        or_panic(Self::try_new(ty, rows, cols, bytes))
    }

    /// A matrix reading `map[start..]`, no copy.
    pub fn try_mapped(
        ty: GgmlType,
        rows: usize,
        cols: usize,
        map: MappedBytes,
        start: usize,
    ) -> Result<Self> {
        let len = ty.row_bytes(cols)?.saturating_mul(rows);
        if start
            .checked_add(len)
            .is_none_or(|end| end > (*map).as_ref().len())
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "{len} bytes at offset {start} run past the mapping's {} bytes",
                    (*map).as_ref().len()
                ),
            ));
        }
        check_len(ty, rows, cols, len)?;
        Ok(QMatrix {
            ty,
            rows,
            cols,
            bytes: Bytes::Mapped { map, start, len },
        })
    }

    /// [`try_mapped`](Self::try_mapped), panicking on bad sizes.
    #[track_caller]
    pub fn mapped(ty: GgmlType, rows: usize, cols: usize, map: MappedBytes, start: usize) -> Self {
        or_panic(Self::try_mapped(ty, rows, cols, map, start))
    }

    /// A 2-d float tensor quantized row by row to `ty` (ggml's reference
    /// quantizer: see [`try_quantize`]).
    pub fn try_quantize(weight: &Tensor, ty: GgmlType) -> Result<Self> {
        let &[rows, cols] = weight.shape() else {
            return Err(Error::invalid(
                OP,
                format!("quantizes a 2-d tensor, got shape {:?}", weight.shape()),
            ));
        };
        ty.row_bytes(cols)?;
        let values = weight.to_dtype(DType::F32).to_vec::<f32>()?;
        Self::try_new(ty, rows, cols, try_quantize(ty, &values)?)
    }

    /// [`try_quantize`](Self::try_quantize), panicking on errors.
    #[track_caller]
    pub fn quantize(weight: &Tensor, ty: GgmlType) -> Self {
        or_panic(Self::try_quantize(weight, ty))
    }

    /// The block format.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// `[rows, cols]`.
    pub fn shape(&self) -> [usize; 2] {
        [self.rows, self.cols]
    }

    /// Bytes of one row.
    pub fn row_bytes(&self) -> usize {
        // The column count was checked against the format on construction.
        self.ty.row_bytes(self.cols).unwrap_or(0)
    }

    /// All the blocks, row after row.
    pub fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Owned { buf, start, len } => &buf[*start..*start + *len],
            Bytes::Mapped { map, start, len } => &(**map).as_ref()[*start..*start + *len],
        }
    }

    /// Rows `first..first + count` as a matrix of their own, sharing these
    /// bytes (no copy).
    pub fn try_rows(&self, first: usize, count: usize) -> Result<Self> {
        if first.checked_add(count).is_none_or(|end| end > self.rows) {
            return Err(Error::invalid(
                OP,
                format!(
                    "rows {first}..{} of a matrix of {} rows",
                    first.saturating_add(count),
                    self.rows
                ),
            ));
        }
        let row = self.row_bytes();
        let bytes = match &self.bytes {
            Bytes::Owned { buf, start, .. } => Bytes::Owned {
                buf: buf.clone(),
                start: start + first * row,
                len: count * row,
            },
            Bytes::Mapped { map, start, .. } => Bytes::Mapped {
                map: map.clone(),
                start: start + first * row,
                len: count * row,
            },
        };
        Ok(QMatrix {
            ty: self.ty,
            rows: count,
            cols: self.cols,
            bytes,
        })
    }

    /// The rows of `parts` one after another in one matrix (one copy):
    /// products that read the same input then run as one.  The parts must
    /// share the format and the column count.
    pub fn try_stack_rows(parts: &[&QMatrix]) -> Result<Self> {
        let first = parts
            .first()
            .ok_or_else(|| Error::invalid(OP, "no matrices to stack"))?;
        if let Some(p) = parts
            .iter()
            .find(|p| p.ty != first.ty || p.cols != first.cols)
        {
            return Err(Error::invalid(
                OP,
                format!(
                    "cannot stack a {} [{}, {}] under a {} [{}, {}]",
                    p.ty.name(),
                    p.rows,
                    p.cols,
                    first.ty.name(),
                    first.rows,
                    first.cols
                ),
            ));
        }
        let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.bytes().len()).sum());
        for p in parts {
            bytes.extend_from_slice(p.bytes());
        }
        Self::try_new(
            first.ty,
            parts.iter().map(|p| p.rows).sum(),
            first.cols,
            bytes,
        )
    }

    /// Rows `first..first + out.len() / cols` dequantized into `out`.
    pub fn try_dequantize_rows(&self, first: usize, out: &mut [f32]) -> Result<()> {
        let count = out.len() / self.cols.max(1);
        if out.len() != count * self.cols || first + count > self.rows {
            return Err(Error::invalid(
                OP,
                format!(
                    "rows {first}..{} of a [{}, {}] matrix into {} values",
                    first + count,
                    self.rows,
                    self.cols,
                    out.len()
                ),
            ));
        }
        let row = self.row_bytes();
        try_dequantize(
            self.ty,
            &self.bytes()[first * row..(first + count) * row],
            out,
        )
    }

    /// [`try_dequantize_rows`](Self::try_dequantize_rows), panicking on a
    /// range outside the matrix.
    #[track_caller]
    pub fn dequantize_rows(&self, first: usize, out: &mut [f32]) {
        or_panic(self.try_dequantize_rows(first, out))
    }

    /// The whole matrix as an f32 tensor (for tests, export and the f32
    /// path: the one place a full copy is made, on request).
    pub fn try_dequantize(&self) -> Result<Tensor> {
        let mut out = vec![0.0f32; self.rows * self.cols];
        self.try_dequantize_rows(0, &mut out)?;
        Tensor::from_vec(out, &[self.rows, self.cols])
    }

    /// [`try_dequantize`](Self::try_dequantize), panicking on errors.
    #[track_caller]
    pub fn dequantize(&self) -> Tensor {
        or_panic(self.try_dequantize())
    }

    /// The matrix with its rows reordered: row `i` of the result is row
    /// `order[i]` of this one (blocks are moved, not decoded). The GGUF
    /// loader undoes the query/key row permutation of llama.cpp's
    /// converter with it.
    pub fn try_permute_rows(&self, order: &[usize]) -> Result<Self> {
        if order.len() != self.rows || order.iter().any(|&r| r >= self.rows) {
            return Err(Error::invalid(
                OP,
                format!(
                    "a row order of {} entries for {} rows",
                    order.len(),
                    self.rows
                ),
            ));
        }
        let row = self.row_bytes();
        let src = self.bytes();
        let mut bytes = Vec::with_capacity(src.len());
        for &r in order {
            bytes.extend_from_slice(&src[r * row..(r + 1) * row]);
        }
        Self::try_new(self.ty, self.rows, self.cols, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantizes_reads_rows_and_permutes() {
        let data: Vec<f32> = (0..3 * 64).map(|i| (i as f32 * 0.1).sin()).collect();
        let t = Tensor::from_vec(data.clone(), &[3, 64]).unwrap();
        let q = QMatrix::quantize(&t, GgmlType::Q8_0);
        assert_eq!((q.shape(), q.row_bytes()), ([3, 64], 68));
        let full = q.dequantize().to_vec::<f32>().unwrap();
        assert!(full.iter().zip(&data).all(|(a, b)| (a - b).abs() < 0.01));
        let mut row2 = vec![0.0; 64];
        q.dequantize_rows(2, &mut row2);
        assert_eq!(&row2[..], &full[128..]);
        let p = q
            .try_permute_rows(&[2, 0, 1])
            .unwrap()
            .dequantize()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(&p[..64], &full[128..]);
        assert!(q.try_dequantize_rows(2, &mut vec![0.0; 128]).is_err());
        let stacked = QMatrix::try_stack_rows(&[&q, &q.try_rows(1, 1).unwrap()]).unwrap();
        assert_eq!(stacked.shape(), [4, 64]);
        let tail = stacked
            .try_rows(3, 1)
            .unwrap()
            .dequantize()
            .to_vec::<f32>()
            .unwrap();
        assert_eq!(&tail[..], &full[64..128]);
        assert!(stacked.try_rows(3, 2).is_err());
        assert!(QMatrix::try_new(GgmlType::Q8_0, 3, 64, vec![0; 10]).is_err());
        assert!(QMatrix::try_quantize(
            &Tensor::from_vec(vec![0.0f32; 40], &[1, 40]).unwrap(),
            GgmlType::Q8_0
        )
        .is_err());
    }
}
