//! `Cast` and `CastLike`. The target is an ONNX element type; retrograd
//! holds it in the dtype it widens to (integers of every width as i64,
//! the 8-, 6- and 4-bit floats as f32), so a cast also gives the values
//! the target holds: a narrow float's rounding, an integer's wrap to its
//! width. Such a rounded result is a constant (no gradient), as a cast to
//! a 16-bit storage float is.

use super::{one, Ctx};
use crate::import::attrs::Attrs;
use crate::narrow::{wrap_int, E8M0Rounding, Narrow};
use crate::proto::tensor_proto::DataType as OnnxType;
use crate::tensor::{dtype_of, type_name};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn check_cast(a: &Attrs, _: i64) -> std::result::Result<(), String> {
    let to = a.int("to", 0).map_err(|e| e.to_string())? as i32;
    if dtype_of(to).is_none() {
        return Err(format!("cast to {}", type_name(to)));
    }
    check_round_mode(a)
}

pub(super) fn check_cast_like(a: &Attrs, _: i64) -> std::result::Result<(), String> {
    check_round_mode(a)
}

fn check_round_mode(a: &Attrs) -> std::result::Result<(), String> {
    let mode = a.string("round_mode", "up").map_err(|e| e.to_string())?;
    match E8M0Rounding::parse(&mode) {
        Some(_) => Ok(()),
        None => Err(format!("round_mode {mode:?}")),
    }
}

pub(super) fn cast<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let to = c.attrs.int("to", 0)? as i32;
    one(cast_to(c, c.input(ins, 0)?, to)?)
}

/// To the element type the second input declares; where the model does
/// not declare it, to that input's dtype.
pub(super) fn cast_like<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, like) = (c.input(ins, 0)?, c.input(ins, 1)?);
    match c.input_type(1) {
        Some(code) => one(cast_to(c, x, code)?),
        None if x.dtype() == like.dtype() => one(x.clone()),
        None => one(x.try_to_dtype(like.dtype())?),
    }
}

/// `x` as ONNX element type `to`.
fn cast_to<'g>(c: &Ctx<'_, 'g>, x: &Var<'g>, to: i32) -> Result<Var<'g>> {
    let dtype = dtype_of(to).ok_or_else(|| c.error(format!("cast to {}", type_name(to))))?;
    if let Some(narrow) = Narrow::of(to) {
        return Ok(c.constant(to_narrow(c, x.value(), narrow)?));
    }
    let wide = if x.dtype() == dtype {
        x.clone()
    } else {
        x.try_to_dtype(dtype)?
    };
    match integer_width(to) {
        // An integer to a narrower integer keeps its low bits.
        Some((bits, signed)) if matches!(x.dtype(), DType::I64) => {
            let values = wide.value().to_vec::<i64>()?;
            let wrapped = values.into_iter().map(|v| wrap_int(v, bits, signed));
            Ok(c.constant(Tensor::from_vec(wrapped.collect(), wide.shape())?))
        }
        _ => Ok(wide),
    }
}

/// The values of `x` as the narrow type holds them, in its wide dtype.
fn to_narrow(c: &Ctx<'_, '_>, x: &Tensor, narrow: Narrow) -> Result<Tensor> {
    let shape = x.shape().to_vec();
    if !narrow.is_float() && matches!(x.dtype(), DType::I64 | DType::Bool) {
        let values = x.to_dtype(DType::I64).to_vec::<i64>()?;
        let wrapped = values.into_iter().map(|v| narrow.int_from_int(v));
        return Tensor::from_vec(wrapped.collect(), &shape);
    }
    let values = x.to_dtype(DType::F32).to_vec::<f32>()?;
    if !narrow.is_float() {
        let ints = values.into_iter().map(|v| narrow.int_from_float(v));
        return Tensor::from_vec(ints.collect(), &shape);
    }
    let saturate = c.attrs.int("saturate", 1)? != 0;
    let mode = c.attrs.string("round_mode", "up")?;
    let mode = E8M0Rounding::parse(&mode).ok_or_else(|| {
        c.error(format!(
            "round_mode {mode:?} is not one of up, down, nearest"
        ))
    })?;
    let rounded = values
        .into_iter()
        .map(|v| narrow.round_float(v, saturate, mode));
    Tensor::from_vec(rounded.collect(), &shape)
}

/// Bits and signedness of the integer types narrower than i64.
fn integer_width(code: i32) -> Option<(u32, bool)> {
    use OnnxType as T;
    Some(match T::try_from(code).ok()? {
        T::Int8 => (8, true),
        T::Uint8 => (8, false),
        T::Int16 => (16, true),
        T::Uint16 => (16, false),
        T::Int32 => (32, true),
        T::Uint32 => (32, false),
        _ => return None,
    })
}
