//! Tensors to and from ONNX's `TensorProto`: element types, and the data
//! as little-endian `raw_data` (written) or any of the typed fields
//! (read: `float_data`, `int64_data`, `int32_data`, `double_data`).

use std::path::Path;

use half::{bf16, f16};

use super::narrow::Narrow;
use super::proto::tensor_proto::{DataLocation, DataType as OnnxType};
use super::proto::TensorProto;
use retrograd_engine::base::error::{Error, OnnxProblem, Result};
use retrograd_engine::tensor::{DType, DataType, Tensor};

/// ONNX's element type code for a dtype.
pub(crate) fn onnx_type(dtype: DType) -> i32 {
    (match dtype {
        DType::F32 => OnnxType::Float,
        DType::F64 => OnnxType::Double,
        DType::I64 => OnnxType::Int64,
        DType::Bool => OnnxType::Bool,
        DType::F16 => OnnxType::Float16,
        DType::BF16 => OnnxType::Bfloat16,
    }) as i32
}

/// The dtype an ONNX element type is read as: integers of every width
/// widen to i64 (retrograd's one integer type), the 8-, 6- and 4-bit
/// floats to f32 (see [`Narrow`]); strings and complex numbers have no
/// dtype.
pub(crate) fn dtype_of(code: i32) -> Option<DType> {
    use OnnxType as T;
    if let Some(narrow) = Narrow::of(code) {
        return Some(if narrow.is_float() {
            DType::F32
        } else {
            DType::I64
        });
    }
    Some(match T::try_from(code).ok()? {
        T::Float => DType::F32,
        T::Double => DType::F64,
        T::Int64 | T::Int32 | T::Int16 | T::Int8 | T::Uint8 | T::Uint16 | T::Uint32 | T::Uint64 => {
            DType::I64
        }
        T::Bool => DType::Bool,
        T::Float16 => DType::F16,
        T::Bfloat16 => DType::BF16,
        _ => return None,
    })
}

/// The name of an ONNX element type code, for messages.
pub(crate) fn type_name(code: i32) -> String {
    match OnnxType::try_from(code) {
        Ok(t) => t.as_str_name().to_string(),
        Err(_) => format!("type code {code}"),
    }
}

/// A tensor as an ONNX initializer or attribute value named `name`.
pub(crate) fn to_proto(name: &str, t: &Tensor) -> Result<TensorProto> {
    let t = t.contiguous();
    let raw_data = match t.dtype() {
        DType::F32 => le_bytes(t.as_slice::<f32>()?, |v| v.to_le_bytes()),
        DType::F64 => le_bytes(t.as_slice::<f64>()?, |v| v.to_le_bytes()),
        DType::I64 => le_bytes(t.as_slice::<i64>()?, |v| v.to_le_bytes()),
        DType::Bool => t.as_slice::<bool>()?.iter().map(|&b| u8::from(b)).collect(),
        DType::F16 => le_bytes(t.as_slice::<f16>()?, |v| v.to_le_bytes()),
        DType::BF16 => le_bytes(t.as_slice::<bf16>()?, |v| v.to_le_bytes()),
    };
    Ok(TensorProto {
        dims: t.shape().iter().map(|&d| d as i64).collect(),
        data_type: Some(onnx_type(t.dtype())),
        name: Some(name.to_string()),
        raw_data: Some(raw_data),
        ..Default::default()
    })
}

fn le_bytes<T: Copy, const N: usize>(values: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    let mut out = Vec::with_capacity(values.len() * N);
    for &v in values {
        out.extend_from_slice(&f(v));
    }
    out
}

/// The tensor an ONNX `TensorProto` holds. Its data may be `raw_data`
/// (little-endian) or the typed field ONNX assigns to its element type;
/// a length that does not fit the dims, an unknown type, or data stored
/// outside the file is [`OnnxProblem::BadTensor`] naming the tensor.
pub(crate) fn from_proto(p: &TensorProto) -> Result<Tensor> {
    from_proto_in(p, None)
}

/// [`from_proto`], reading data stored in an external file from `dir`
/// (the model file's directory) when given.
pub(crate) fn from_proto_in(p: &TensorProto, dir: Option<&Path>) -> Result<Tensor> {
    let name = p.name();
    let bad = |reason: String| Error::OnnxInvalid {
        problem: OnnxProblem::BadTensor,
        detail: format!("tensor `{name}`: {reason}"),
    };
    if p.data_location() == DataLocation::External || !p.external_data.is_empty() {
        let Some(dir) = dir else {
            return Err(bad(
                "its data is stored in an external file: load the model from its path (OnnxModel::load)".into(),
            ));
        };
        let raw = external_bytes(p, dir).map_err(bad)?;
        let mut inline = p.clone();
        inline.external_data.clear();
        inline.data_location = None;
        inline.raw_data = Some(raw);
        let location = p
            .external_data
            .iter()
            .find(|e| e.key() == "location")
            .map(|e| e.value().to_string());
        return from_proto_in(&inline, None).map_err(|e| match e {
            Error::OnnxInvalid { problem, detail } => Error::OnnxInvalid {
                problem,
                detail: format!(
                    "{detail} (read from external file {:?})",
                    location.unwrap_or_default()
                ),
            },
            other => other,
        });
    }
    if p.segment.is_some() {
        return Err(bad("segmented tensors are not supported".into()));
    }
    let mut shape = Vec::with_capacity(p.dims.len());
    for &d in &p.dims {
        shape.push(
            usize::try_from(d).map_err(|_| bad(format!("negative dimension in {:?}", p.dims)))?,
        );
    }
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad(format!("dims {:?} overflow", p.dims)))?;
    let code = p.data_type();
    let dtype = dtype_of(code)
        .ok_or_else(|| bad(format!("element type {} is not supported", type_name(code))))?;
    let count = |len: usize, what: &str| {
        if len == numel {
            Ok(())
        } else {
            Err(bad(format!(
                "{len} {what} for dims {:?} ({numel} elements)",
                p.dims
            )))
        }
    };
    if let Some(narrow) = Narrow::of(code) {
        let codes = narrow_codes(p, narrow, numel).map_err(bad)?;
        return if narrow.is_float() {
            Tensor::from_vec(
                codes.into_iter().map(|c| narrow.float_value(c)).collect(),
                &shape,
            )
        } else {
            Tensor::from_vec(
                codes.into_iter().map(|c| narrow.int_value(c)).collect(),
                &shape,
            )
        };
    }
    use OnnxType as T;
    let ty = T::try_from(code).map_err(|_| bad(format!("unknown element type {code}")))?;
    if let Some(raw) = p
        .raw_data
        .as_deref()
        .filter(|r| !r.is_empty() || numel == 0)
    {
        let width = element_width(ty);
        if raw.len()
            != numel
                .checked_mul(width)
                .ok_or_else(|| bad("too large".into()))?
        {
            return Err(bad(format!(
                "raw_data holds {} bytes; dims {:?} of {} need {}",
                raw.len(),
                p.dims,
                type_name(code),
                numel * width
            )));
        }
        return decode_raw(ty, raw, &shape);
    }
    // Which typed field holds the values (the 16-bit floats and the small
    // integers as int32s, as ONNX stores them).
    let (len, what) = match ty {
        T::Float => (p.float_data.len(), "floats"),
        T::Double => (p.double_data.len(), "doubles"),
        T::Int64 => (p.int64_data.len(), "int64 values"),
        T::Uint32 | T::Uint64 => (p.uint64_data.len(), "uint64 values"),
        _ => (p.int32_data.len(), "int32 values"),
    };
    count(len, what)?;
    let t = match ty {
        T::Float => Tensor::from_slice(&p.float_data, &shape),
        T::Double => Tensor::from_slice(&p.double_data, &shape),
        T::Int64 => Tensor::from_slice(&p.int64_data, &shape),
        T::Uint32 | T::Uint64 => converted(&p.uint64_data, &shape, |v| v as i64),
        T::Bool => converted(&p.int32_data, &shape, |v| v != 0),
        T::Float16 => converted(&p.int32_data, &shape, |v| f16::from_bits(v as u16)),
        T::Bfloat16 => converted(&p.int32_data, &shape, |v| bf16::from_bits(v as u16)),
        _ => converted(&p.int32_data, &shape, i64::from),
    };
    debug_assert!(t.as_ref().is_ok_and(|t| t.dtype() == dtype));
    t
}

/// The `numel` codes of a narrow-typed tensor, from `raw_data` or
/// `int32_data` (one packed byte an entry).
fn narrow_codes(
    p: &TensorProto,
    narrow: Narrow,
    numel: usize,
) -> std::result::Result<Vec<u8>, String> {
    let name = type_name(p.data_type());
    match p
        .raw_data
        .as_deref()
        .filter(|r| !r.is_empty() || numel == 0)
    {
        Some(raw) => narrow.unpack(raw, numel).ok_or_else(|| {
            format!(
                "raw_data holds {} bytes; dims {:?} of {name} ({} bits each) need {}",
                raw.len(),
                p.dims,
                narrow.bits(),
                narrow.int32_entries(numel)
            )
        }),
        None => {
            let want = narrow.int32_entries(numel);
            if p.int32_data.len() != want {
                return Err(format!(
                    "{} int32 values for dims {:?} of {name} (need {want})",
                    p.int32_data.len(),
                    p.dims
                ));
            }
            let bytes: Vec<u8> = p.int32_data.iter().map(|&v| v as u8).collect();
            Ok(narrow
                .unpack(&bytes, numel)
                .expect("one byte an entry was checked"))
        }
    }
}

/// A tensor of `shape` from a typed field's values, each converted by `f`.
fn converted<S: Copy, D: DataType>(
    data: &[S],
    shape: &[usize],
    f: impl Fn(S) -> D,
) -> Result<Tensor> {
    Tensor::from_vec(data.iter().map(|&v| f(v)).collect(), shape)
}

/// The bytes of an external tensor: `location` (a file beside the model,
/// never outside its directory), from `offset`, `length` bytes or to the end.
fn external_bytes(p: &TensorProto, dir: &Path) -> std::result::Result<Vec<u8>, String> {
    let entry = |key: &str| {
        p.external_data
            .iter()
            .find(|e| e.key() == key)
            .map(|e| e.value().to_string())
    };
    let location = entry("location").ok_or("external data without a location")?;
    let relative = Path::new(&location);
    let inside = relative.components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    });
    if !inside {
        return Err(format!(
            "external location {location:?} is not a path inside the model's directory"
        ));
    }
    let number = |key: &str| -> std::result::Result<Option<u64>, String> {
        entry(key)
            .map(|v| {
                v.parse::<u64>()
                    .map_err(|_| format!("external {key} {v:?} is not a number"))
            })
            .transpose()
    };
    let (offset, length) = (number("offset")?.unwrap_or(0), number("length")?);
    let path = dir.join(relative);
    let mut file = std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    use std::io::{Read, Seek, SeekFrom};
    let size = file.metadata().map_err(|e| e.to_string())?.len();
    let length = length.unwrap_or(size.saturating_sub(offset));
    if offset.checked_add(length).is_none_or(|end| end > size) {
        return Err(format!(
            "{}: bytes {offset}..+{length} lie past its end ({size} bytes)",
            path.display()
        ));
    }
    file.seek(SeekFrom::Start(offset))
        .map_err(|e| e.to_string())?;
    let mut bytes = vec![0u8; length as usize];
    file.read_exact(&mut bytes).map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// The little-endian bytes of `t`'s values stored as ONNX element type
/// `code` (an integer keeps its low bytes, as two's complement does), and
/// the bytes per element; `None` for types without a byte-sized element
/// (strings, the narrow types) or values of another kind.
pub(crate) fn stored_bytes(t: &Tensor, code: i32) -> Option<(Vec<u8>, usize)> {
    use OnnxType as T;
    let width = stored_width(code)?;
    let ty = T::try_from(code).ok()?;
    let t = t.contiguous();
    let bytes = match (t.dtype(), ty) {
        (DType::F32, T::Float) => le_bytes(t.as_slice::<f32>().ok()?, |v| v.to_le_bytes()),
        (DType::F64, T::Double) => le_bytes(t.as_slice::<f64>().ok()?, |v| v.to_le_bytes()),
        (DType::F16, T::Float16) => le_bytes(t.as_slice::<f16>().ok()?, |v| v.to_le_bytes()),
        (DType::BF16, T::Bfloat16) => le_bytes(t.as_slice::<bf16>().ok()?, |v| v.to_le_bytes()),
        (DType::Bool, T::Bool) => t
            .as_slice::<bool>()
            .ok()?
            .iter()
            .map(|&b| u8::from(b))
            .collect(),
        (DType::I64, _)
            if !matches!(
                ty,
                T::Float | T::Double | T::Float16 | T::Bfloat16 | T::Bool
            ) =>
        {
            t.as_slice::<i64>()
                .ok()?
                .iter()
                .flat_map(|v| v.to_le_bytes()[..width].to_vec())
                .collect()
        }
        _ => return None,
    };
    Some((bytes, width))
}

/// Bytes per element of ONNX element type `code` as `raw_data` stores
/// it; `None` for strings, complex numbers and the sub-byte types.
pub(crate) fn stored_width(code: i32) -> Option<usize> {
    use OnnxType as T;
    let ty = T::try_from(code).ok()?;
    let unsized_ = matches!(ty, T::String | T::Undefined | T::Complex64 | T::Complex128);
    (Narrow::of(code).is_none() && !unsized_).then(|| element_width(ty))
}

/// The tensor of `shape` that `raw` little-endian bytes hold as ONNX
/// element type `code`, read as any initializer is.
pub(crate) fn from_stored_bytes(raw: Vec<u8>, code: i32, shape: &[usize]) -> Result<Tensor> {
    from_proto(&TensorProto {
        dims: shape.iter().map(|&d| d as i64).collect(),
        data_type: Some(code),
        raw_data: Some(raw),
        ..Default::default()
    })
}

/// Bytes per element in `raw_data`.
fn element_width(ty: OnnxType) -> usize {
    use OnnxType as T;
    match ty {
        T::Double | T::Int64 | T::Uint64 => 8,
        T::Float | T::Int32 | T::Uint32 => 4,
        T::Int16 | T::Uint16 | T::Float16 | T::Bfloat16 => 2,
        _ => 1,
    }
}

fn decode_raw(ty: OnnxType, raw: &[u8], shape: &[usize]) -> Result<Tensor> {
    use OnnxType as T;
    fn words<const N: usize, V>(raw: &[u8], f: impl Fn([u8; N]) -> V) -> Vec<V> {
        raw.chunks_exact(N)
            .map(|c| f(c.try_into().expect("chunks_exact gives N bytes")))
            .collect()
    }
    match ty {
        T::Float => Tensor::from_vec(words(raw, f32::from_le_bytes), shape),
        T::Double => Tensor::from_vec(words(raw, f64::from_le_bytes), shape),
        T::Int64 => Tensor::from_vec(words(raw, i64::from_le_bytes), shape),
        T::Uint64 => Tensor::from_vec(words(raw, |b| u64::from_le_bytes(b) as i64), shape),
        T::Int32 => Tensor::from_vec(words(raw, |b| i64::from(i32::from_le_bytes(b))), shape),
        T::Uint32 => Tensor::from_vec(words(raw, |b| i64::from(u32::from_le_bytes(b))), shape),
        T::Int16 => Tensor::from_vec(words(raw, |b| i64::from(i16::from_le_bytes(b))), shape),
        T::Uint16 => Tensor::from_vec(words(raw, |b| i64::from(u16::from_le_bytes(b))), shape),
        T::Int8 => Tensor::from_vec(raw.iter().map(|&b| i64::from(b as i8)).collect(), shape),
        T::Uint8 => Tensor::from_vec(raw.iter().map(|&b| i64::from(b)).collect(), shape),
        T::Bool => Tensor::from_vec(raw.iter().map(|&b| b != 0).collect::<Vec<bool>>(), shape),
        T::Float16 => Tensor::from_vec(words(raw, f16::from_le_bytes), shape),
        T::Bfloat16 => Tensor::from_vec(words(raw, bf16::from_le_bytes), shape),
        _ => unreachable!("dtype_of accepted only the types above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dtype_round_trips_through_raw_data() {
        let tensors = [
            Tensor::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 7.0, -0.5], &[2, 3]).unwrap(),
            Tensor::from_vec(vec![1.5f64, -2.0], &[2]).unwrap(),
            Tensor::from_vec(vec![-3i64, 9, 1 << 40], &[3, 1]).unwrap(),
            Tensor::from_vec(vec![true, false, true], &[3]).unwrap(),
            Tensor::scalar(2.5f32),
            Tensor::from_vec(vec![f16::from_f32(0.5), f16::from_f32(-8.0)], &[2]).unwrap(),
        ];
        for t in tensors {
            let back = from_proto(&to_proto("t", &t).unwrap()).unwrap();
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.dtype(), t.dtype());
            assert_eq!(back.to_f64_vec(), t.to_f64_vec());
        }
    }

    #[test]
    fn typed_fields_and_narrow_integers_are_read() {
        let p = TensorProto {
            dims: vec![2],
            data_type: Some(OnnxType::Int32 as i32),
            int32_data: vec![-4, 5],
            ..Default::default()
        };
        let t = from_proto(&p).unwrap();
        assert_eq!((t.dtype(), t.to_f64_vec()), (DType::I64, vec![-4.0, 5.0]));
        let p = TensorProto {
            dims: vec![1, 2],
            data_type: Some(OnnxType::Float as i32),
            float_data: vec![0.25, 4.0],
            ..Default::default()
        };
        assert_eq!(from_proto(&p).unwrap().to_f64_vec(), vec![0.25, 4.0]);
    }

    #[test]
    fn data_that_does_not_fit_the_dims_is_a_bad_tensor() {
        let mut p = to_proto("w", &Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap()).unwrap();
        p.dims = vec![4, 3];
        let err = from_proto(&p).unwrap_err();
        assert!(
            matches!(&err, Error::OnnxInvalid { problem: OnnxProblem::BadTensor, detail } if detail.contains("`w`")),
            "{err}"
        );
        p.dims = vec![-1, 3];
        assert!(from_proto(&p).is_err());
        let p = TensorProto {
            name: Some("s".into()),
            data_type: Some(OnnxType::String as i32),
            ..Default::default()
        };
        assert!(from_proto(&p).unwrap_err().to_string().contains("STRING"));
    }
}
