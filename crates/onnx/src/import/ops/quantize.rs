//! Linear quantization: `QuantizeLinear`, `DequantizeLinear`,
//! `DynamicQuantizeLinear`, `MatMulInteger` and `QLinearMatMul`.
//!
//! A quantized value is `q = saturate(round(x / scale) + zero_point)` in
//! an integer type (or a narrow float, without the zero point), with one
//! scale for the tensor, one per slice along `axis`, or one per block of
//! `block_size` elements along `axis`. Quantized values are integers, so
//! quantizing runs on the host and gives a constant; dequantizing is
//! `(q - zero_point) · scale`, recorded, so a trainable scale gets its
//! gradient.

use super::Ctx;
use crate::narrow::{E8M0Rounding, Narrow};
use crate::proto::tensor_proto::DataType as OnnxType;
use crate::tensor::type_name;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// What a quantized value is stored as.
#[derive(Clone, Copy)]
enum Quantized {
    /// An integer type's range.
    Int { min: i64, max: i64 },
    /// A narrow float (the float8s, float6s, float4).
    Float(Narrow),
}

impl Quantized {
    fn of(c: &Ctx<'_, '_>, code: i32) -> Result<Quantized> {
        use OnnxType as T;
        let range = match T::try_from(code).ok() {
            Some(T::Uint8) => Some((0, 255)),
            Some(T::Int8) => Some((-128, 127)),
            Some(T::Uint16) => Some((0, 65535)),
            Some(T::Int16) => Some((-32768, 32767)),
            Some(T::Int32) => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
            Some(T::Uint4) => Some((0, 15)),
            Some(T::Int4) => Some((-8, 7)),
            Some(T::Uint2) => Some((0, 3)),
            Some(T::Int2) => Some((-2, 1)),
            _ => None,
        };
        if let Some((min, max)) = range {
            return Ok(Quantized::Int { min, max });
        }
        match Narrow::of(code) {
            Some(n) if n.is_float() && n != Narrow::E8M0 => Ok(Quantized::Float(n)),
            _ => Err(c.error(format!(
                "quantizing to {} is not supported",
                type_name(code)
            ))),
        }
    }
}

/// Where each element of a tensor of `shape` finds its scale and zero
/// point: one for all, one per index along `axis`, or one per block of
/// `block` indices along `axis`.
struct ParamLayout {
    len: usize,
    axis: usize,
    axis_len: usize,
    inner: usize,
    block: Option<(usize, usize)>,
}

impl ParamLayout {
    fn new(c: &Ctx<'_, '_>, param: &[usize], shape: &[usize], block_size: i64) -> Result<Self> {
        let axis = if param.iter().product::<usize>() == 1 && block_size == 0 {
            0
        } else {
            c.axis(c.attrs.int("axis", 1)?, shape.len())?
        };
        let axis_len = shape.get(axis).copied().unwrap_or(1);
        let inner = shape.get(axis + 1..).map_or(1, |s| s.iter().product());
        let len = param.iter().product::<usize>();
        let mismatch = |want: String| {
            c.error(format!(
                "a scale or zero point of shape {param:?} for an input of shape {shape:?} (axis {axis}): {want}"
            ))
        };
        if block_size > 0 {
            let block = block_size as usize;
            let blocks = axis_len.div_ceil(block);
            let mut want = shape.to_vec();
            want[axis] = blocks;
            if param != want.as_slice() {
                return Err(mismatch(format!("blocks of {block} need shape {want:?}")));
            }
            return Ok(ParamLayout {
                len,
                axis,
                axis_len,
                inner,
                block: Some((block, blocks)),
            });
        }
        if block_size < 0 {
            return Err(c.error(format!("block_size {block_size} is negative")));
        }
        if len != 1 && (param.len() != 1 || len != axis_len) {
            return Err(mismatch(format!(
                "want one value or {axis_len} along the axis"
            )));
        }
        Ok(ParamLayout {
            len,
            axis,
            axis_len,
            inner,
            block: None,
        })
    }

    /// The parameter index of element `i` (row-major).
    fn index(&self, i: usize) -> usize {
        if self.len == 1 {
            return 0;
        }
        let k = (i / self.inner) % self.axis_len;
        match self.block {
            None => k,
            Some((block, blocks)) => {
                let outer = i / (self.inner * self.axis_len);
                (outer * blocks + k / block) * self.inner + i % self.inner
            }
        }
    }
}

/// The element type the node declares for input `i`, if any.
fn declared(c: &Ctx<'_, '_>, i: usize) -> Option<i32> {
    c.input_type(i)
}

/// `v` rounded through the 16-bit float type `code` names (the precision
/// ONNX's reference computes in for 16-bit inputs); other types as is.
fn through(code: Option<i32>, v: f32) -> f32 {
    match code.and_then(|c| OnnxType::try_from(c).ok()) {
        Some(OnnxType::Float16) => half::f16::from_f32(v).to_f32(),
        Some(OnnxType::Bfloat16) => half::bf16::from_f32(v).to_f32(),
        _ => v,
    }
}

fn f32_values(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32).contiguous().to_vec::<f32>()
}

pub(super) fn quantize_linear<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, scale) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let zero = c.opt(ins, 2);
    let output_dtype = c.attrs.int("output_dtype", 0)? as i32;
    let code = match zero {
        Some(_) => declared(c, 2)
            .or((output_dtype != 0).then_some(output_dtype))
            .ok_or_else(|| c.error("the zero point's element type is not declared"))?,
        None if output_dtype != 0 => output_dtype,
        None => OnnxType::Uint8 as i32,
    };
    if zero.is_some() && output_dtype != 0 && declared(c, 2).is_some_and(|z| z != output_dtype) {
        return Err(c.error(format!(
            "output_dtype {} differs from the zero point's type {}",
            type_name(output_dtype),
            type_name(declared(c, 2).unwrap_or_default())
        )));
    }
    let target = Quantized::of(c, code)?;
    let block_size = c.attrs.int("block_size", 0)?;
    let layout = ParamLayout::new(c, scale.shape(), x.shape(), block_size)?;
    // A one-value zero point may be shaped [] or [1] whatever the scale's.
    let zero_layout = zero
        .map(|z| ParamLayout::new(c, z.shape(), x.shape(), block_size))
        .transpose()?;
    let precision = c.attrs.int("precision", 0)? as i32;
    let precision = (precision != 0).then_some(precision).or(declared(c, 0));
    let xs = f32_values(x.value())?;
    let scales = f32_values(scale.value())?;
    let zeros = zero.map(|z| f32_values(z.value())).transpose()?;
    let quotient = |i: usize| through(precision, xs[i] / scales[layout.index(i)]);
    let zero_at = |i: usize| match (&zeros, &zero_layout) {
        (Some(z), Some(l)) => z[l.index(i)],
        _ => 0.0,
    };
    let out = match target {
        Quantized::Int { min, max } => {
            let q = (0..xs.len()).map(|i| {
                let v = quotient(i).round_ties_even() as f64 + f64::from(zero_at(i));
                v.clamp(min as f64, max as f64) as i64
            });
            Tensor::from_vec(q.collect(), x.shape())?
        }
        Quantized::Float(n) => {
            let saturate = c.attrs.int("saturate", 1)? != 0;
            let q = (0..xs.len()).map(|i| {
                // The float8s take no zero point; the smaller floats add it.
                let v = match n.bits() {
                    8 => quotient(i),
                    _ => quotient(i) + zero_at(i),
                };
                n.round_float(v, saturate, E8M0Rounding::Up)
            });
            Tensor::from_vec(q.collect(), x.shape())?
        }
    };
    Ok(vec![c.constant(out)])
}

pub(super) fn dequantize_linear<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, scale) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let block_size = c.attrs.int("block_size", 0)?;
    let layout = ParamLayout::new(c, scale.shape(), x.shape(), block_size)?;
    // The float8s' zero point must be zero and is not subtracted.
    let float8 = declared(c, 0)
        .and_then(Narrow::of)
        .is_some_and(|n| n.is_float() && n.bits() == 8);
    let xs = f32_values(x.value())?;
    let shifted = match c.opt(ins, 2).filter(|_| !float8) {
        None => xs,
        Some(z) => {
            let zero_layout = ParamLayout::new(c, z.shape(), x.shape(), block_size)?;
            let zeros = f32_values(z.value())?;
            xs.iter()
                .enumerate()
                .map(|(i, &v)| v - zeros[zero_layout.index(i)])
                .collect()
        }
    };
    let shifted = c.constant(Tensor::from_vec(shifted, x.shape())?);
    let scale = spread(c, scale, &layout, x.shape())?;
    let scale = if scale.dtype() == DType::F32 {
        scale
    } else {
        scale.try_to_dtype(DType::F32)?
    };
    let y = shifted.try_mul(&scale)?;
    let output_dtype = c.attrs.int("output_dtype", 0)? as i32;
    match (output_dtype != 0)
        .then(|| crate::tensor::dtype_of(output_dtype))
        .flatten()
    {
        Some(d) if d != DType::F32 => Ok(vec![y.try_to_dtype(d)?]),
        _ => Ok(vec![y]),
    }
}

/// The scale as a tensor that broadcasts against `shape`, recorded: one
/// value as is, one per index along the axis reshaped onto it, blocks
/// gathered to the full shape.
fn spread<'g>(
    c: &Ctx<'_, 'g>,
    scale: &Var<'g>,
    layout: &ParamLayout,
    shape: &[usize],
) -> Result<Var<'g>> {
    if layout.len == 1 {
        return scale.try_reshape(&[]);
    }
    if layout.block.is_none() {
        let mut dims = vec![1isize; shape.len()];
        dims[layout.axis] = layout.axis_len as isize;
        return scale.try_reshape(&dims);
    }
    c.check_size(shape)?;
    let numel: usize = shape.iter().product();
    let index: Vec<i64> = (0..numel).map(|i| layout.index(i) as i64).collect();
    let dims: Vec<isize> = shape.iter().map(|&d| d as isize).collect();
    scale
        .try_reshape(&[-1])?
        .try_index_select(0, &Tensor::from_vec(index, &[numel])?)?
        .try_reshape(&dims)
}

/// `(y, y_scale, y_zero_point)`: `x` quantized to uint8 over its own
/// range (widened to hold 0), as ONNX defines it.
pub(super) fn dynamic_quantize_linear<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let xs = f32_values(x.value())?;
    let max = xs.iter().copied().fold(0.0f32, f32::max);
    let min = xs.iter().copied().fold(0.0f32, f32::min);
    let scale = if max == min { 1.0 } else { max - min } / 255.0;
    let zero = (-min / scale).clamp(0.0, 255.0).round_ties_even();
    let q: Vec<i64> = xs
        .iter()
        .map(|&v| ((v / scale).round_ties_even() + zero).clamp(0.0, 255.0) as i64)
        .collect();
    Ok(vec![
        c.constant(Tensor::from_vec(q, x.shape())?),
        c.constant(Tensor::scalar(scale)),
        c.constant(Tensor::scalar(zero as i64)),
    ])
}

/// `(a - a_zero) @ (b - b_zero)` on integers, exact: computed in f64, whose
/// 53 bits hold every sum of 8-bit products below 2^37 terms.
fn integer_product<'g>(
    c: &Ctx<'_, 'g>,
    a: &Tensor,
    a_zero: Option<&Tensor>,
    b: &Tensor,
    b_zero: Option<&Tensor>,
) -> Result<Tensor> {
    let shift = |t: &Tensor, zero: Option<&Tensor>, per_row: bool| -> Result<Var<'g>> {
        let t = c.constant(t.to_dtype(DType::F64));
        let Some(z) = zero else { return Ok(t) };
        let z = z.to_dtype(DType::F64);
        // A per-row zero point of `a` lines up with its rows.
        let z = if z.numel() > 1 && per_row {
            z.reshape(&[z.numel(), 1])?
        } else {
            z
        };
        t.try_sub(&c.constant(z))
    };
    let p = shift(a, a_zero, true)?.try_matmul(&shift(b, b_zero, false)?)?;
    Ok(p.value().clone())
}

pub(super) fn matmul_integer<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let zero = |i| c.opt(ins, i).map(|v: &Var<'g>| v.value());
    let p = integer_product(c, a.value(), zero(2), b.value(), zero(3))?;
    Ok(vec![c.constant(p.to_dtype(DType::I64))])
}

/// `saturate(round((a - a_zero) @ (b - b_zero) · a_scale · b_scale /
/// y_scale) + y_zero)` in the output zero point's type.
pub(super) fn qlinear_matmul<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let value = |i| c.input(ins, i).map(|v: &Var<'g>| v.value());
    let p = integer_product(c, value(0)?, Some(value(2)?), value(3)?, Some(value(5)?))?;
    let scalar = |i| -> Result<f32> {
        let v = f32_values(value(i)?)?;
        match v.as_slice() {
            [s] => Ok(*s),
            _ => Err(c.error(format!("input {i} must hold one value, has {}", v.len()))),
        }
    };
    // The scales combine in their own type (f16 stays f16).
    let ty = declared(c, 1);
    let factor = through(ty, through(ty, scalar(1)? * scalar(4)?) / scalar(6)?);
    let zero = scalar(7)?;
    let code = declared(c, 7)
        .or(declared(c, 0))
        .unwrap_or(OnnxType::Uint8 as i32);
    let Quantized::Int { min, max } = Quantized::of(c, code)? else {
        return Err(c.error(format!("a {} output is not supported", type_name(code))));
    };
    let q: Vec<i64> = p
        .to_vec::<f64>()?
        .into_iter()
        .map(|v| {
            let v = (v * f64::from(factor)).round_ties_even() + f64::from(zero);
            v.clamp(min as f64, max as f64) as i64
        })
        .collect();
    Ok(vec![c.constant(Tensor::from_vec(q, p.shape())?)])
}
