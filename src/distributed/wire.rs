//! Tensors as bytes for a broadcast: values only, little-endian, in the
//! order both sides already agree on (the replicas were checked to hold the
//! same names, shapes and dtypes).

use crate::error::{Error, Result};
use crate::tensor::{DType, Tensor};

/// Appends `t`'s elements to `out`.
pub(crate) fn put(out: &mut Vec<u8>, t: &Tensor) -> Result<()> {
    match t.dtype() {
        DType::F32 => t
            .as_slice::<f32>()?
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::F64 => t
            .as_slice::<f64>()?
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::I64 => t
            .as_slice::<i64>()?
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DType::Bool => t
            .as_slice::<bool>()?
            .iter()
            .for_each(|&v| out.push(v as u8)),
    }
    Ok(())
}

/// Reads a tensor shaped like `like` from `bytes` at `*pos`, advancing it.
pub(crate) fn take(bytes: &[u8], pos: &mut usize, like: &Tensor) -> Result<Tensor> {
    let n = like.numel();
    let width = match like.dtype() {
        DType::F32 => 4,
        DType::F64 | DType::I64 => 8,
        DType::Bool => 1,
    };
    let end = *pos + n * width;
    let Some(chunk) = bytes.get(*pos..end) else {
        return Err(Error::Communication {
            op: "broadcast",
            detail: format!("{} bytes received, {end} needed", bytes.len()),
        });
    };
    *pos = end;
    let shape = like.shape();
    fn words<const W: usize>(chunk: &[u8]) -> impl Iterator<Item = [u8; W]> + '_ {
        chunk
            .chunks_exact(W)
            .map(|c| c.try_into().expect("chunks of W bytes"))
    }
    match like.dtype() {
        DType::F32 => Tensor::from_vec(words::<4>(chunk).map(f32::from_le_bytes).collect(), shape),
        DType::F64 => Tensor::from_vec(words::<8>(chunk).map(f64::from_le_bytes).collect(), shape),
        DType::I64 => Tensor::from_vec(words::<8>(chunk).map(i64::from_le_bytes).collect(), shape),
        DType::Bool => {
            Tensor::from_vec(chunk.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_every_dtype() {
        let ts = [
            Tensor::from_vec(vec![1.5f32, -2.0], &[2]).unwrap(),
            Tensor::from_vec(vec![1e-300f64, 3.0, 4.0], &[3, 1]).unwrap(),
            Tensor::scalar(7i64),
            Tensor::from_vec(vec![true, false], &[2]).unwrap(),
        ];
        let mut bytes = Vec::new();
        ts.iter().for_each(|t| put(&mut bytes, t).unwrap());
        let mut pos = 0;
        for t in &ts {
            let back = take(&bytes, &mut pos, t).unwrap();
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(&back, t);
        }
        assert_eq!(pos, bytes.len());
        assert!(take(&bytes, &mut pos, &ts[0]).is_err());
    }
}
