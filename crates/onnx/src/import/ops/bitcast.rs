//! `BitCast`: the same bits read as another element type of the same
//! width. The input's ONNX type is the one the model declares (an `INT32`
//! and an `INT64` are both i64 here), else the one its dtype stores.

use super::{one, Ctx};
use crate::tensor::{from_stored_bytes, onnx_type, stored_bytes, stored_width, type_name};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn bitcast<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let to = c.attrs.int("to", 0)? as i32;
    let from = c.input_type(0).unwrap_or_else(|| onnx_type(x.dtype()));
    let (bytes, width) = stored_bytes(x.value(), from)
        .ok_or_else(|| c.error(format!("bit-casting {} values", type_name(from))))?;
    let to_width =
        stored_width(to).ok_or_else(|| c.error(format!("bit-casting to {}", type_name(to))))?;
    if width != to_width {
        return Err(c.error(format!(
            "{} ({} bits) and {} ({} bits) differ in width",
            type_name(from),
            width * 8,
            type_name(to),
            to_width * 8
        )));
    }
    one(c.constant(from_stored_bytes(bytes, to, x.shape())?))
}
