//! Tensors as bytes for a broadcast: values only, little-endian, in the
//! order both sides already agree on (the replicas were checked to hold the
//! same names, shapes and dtypes).

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::tensor::{DType, Tensor};

/// Appends `t`'s elements to `out`.
pub(crate) fn put(out: &mut Vec<u8>, t: &Tensor) -> Result<()> {
    fn each<T: retrograd_engine::tensor::DataType, const W: usize>(
        out: &mut Vec<u8>,
        t: &Tensor,
        bytes: fn(&T) -> [u8; W],
    ) -> Result<()> {
        t.as_slice::<T>()?.iter().for_each(|v| out.extend(bytes(v)));
        Ok(())
    }
    match t.dtype() {
        DType::F32 => each(out, t, |v: &f32| v.to_le_bytes()),
        DType::F64 => each(out, t, |v: &f64| v.to_le_bytes()),
        DType::I64 => each(out, t, |v: &i64| v.to_le_bytes()),
        DType::Bool => each(out, t, |v: &bool| [*v as u8]),
        DType::F16 => each(out, t, |v: &half::f16| v.to_le_bytes()),
        DType::BF16 => each(out, t, |v: &half::bf16| v.to_le_bytes()),
    }
}

/// Reads a tensor shaped like `like` from `bytes` at `*pos`, advancing it.
pub(crate) fn take(bytes: &[u8], pos: &mut usize, like: &Tensor) -> Result<Tensor> {
    let end = *pos + like.numel() * like.dtype().size_in_bytes();
    let Some(chunk) = bytes.get(*pos..end) else {
        return Err(Error::Communication {
            op: "broadcast",
            detail: format!("{} bytes received, {end} needed", bytes.len()),
        });
    };
    *pos = end;
    fn read<T: retrograd_engine::tensor::DataType, const W: usize>(
        chunk: &[u8],
        shape: &[usize],
        from: fn([u8; W]) -> T,
    ) -> Result<Tensor> {
        let values = chunk
            .chunks_exact(W)
            .map(|c| from(c.try_into().expect("chunks of W bytes")))
            .collect();
        Tensor::from_vec(values, shape)
    }
    let shape = like.shape();
    match like.dtype() {
        DType::F32 => read(chunk, shape, f32::from_le_bytes),
        DType::F64 => read(chunk, shape, f64::from_le_bytes),
        DType::I64 => read(chunk, shape, i64::from_le_bytes),
        DType::Bool => read(chunk, shape, |[b]: [u8; 1]| b != 0),
        DType::F16 => read(chunk, shape, half::f16::from_le_bytes),
        DType::BF16 => read(chunk, shape, half::bf16::from_le_bytes),
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
            Tensor::from_vec(vec![half::f16::from_f32(0.5)], &[1]).unwrap(),
            Tensor::from_vec(vec![half::bf16::from_f32(-3.0)], &[1]).unwrap(),
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
