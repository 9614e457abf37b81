//! Remainders and bit operations: `Mod` (on floats through differentiable
//! ops, on integers on the host), `BitShift`, `BitwiseAnd`/`Or`/`Xor`/`Not`.

use super::host::is_int;
use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::shape::broadcast_shapes;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// `f` elementwise on two integer tensors, broadcast, on the host; `f`
/// returns `None` where the result is undefined (a remainder by zero),
/// which is an error naming the node.
pub(super) fn int_elementwise(
    c: &Ctx<'_, '_>,
    a: &Tensor,
    b: &Tensor,
    f: impl Fn(i64, i64) -> Option<i64>,
) -> Result<Tensor> {
    let shape = broadcast_shapes("onnx integer op", a.shape(), b.shape())?;
    let x = a.to_dtype(DType::I64).expand(&shape)?.contiguous();
    let y = b.to_dtype(DType::I64).expand(&shape)?.contiguous();
    let (x, y) = (x.to_vec::<i64>()?, y.to_vec::<i64>()?);
    let mut out = Vec::with_capacity(x.len());
    for (&p, &q) in x.iter().zip(&y) {
        out.push(f(p, q).ok_or_else(|| c.error(format!("undefined for {p} and {q}")))?);
    }
    Tensor::from_vec(out, &shape)
}

/// ONNX's `Mod`: with `fmod = 0` the remainder takes the divisor's sign
/// (Python's `%`), with `fmod = 1` the dividend's (C's `fmod`). On floats
/// it is `a - b · q` with the quotient `q = trunc(a / b)` (or `floor`) a
/// constant: `q` is piecewise constant, so the gradient is exact (1 for
/// `a`, `-q` for `b`). 16-bit floats compute in f32.
pub(super) fn modulo<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let fmod = c.attrs.int("fmod", 0)? != 0;
    if is_int(a) && is_int(b) {
        let r = int_elementwise(c, a.value(), b.value(), |p, q| {
            if q == 0 {
                return None;
            }
            let r = p.checked_rem(q).unwrap_or(0);
            Some(if !fmod && r != 0 && (r < 0) != (q < 0) {
                r + q
            } else {
                r
            })
        })?;
        return one(c.constant(r));
    }
    if a.dtype() != b.dtype() {
        return Err(c.error(format!("operands of types {} and {}", a.dtype(), b.dtype())));
    }
    let dtype = a.dtype();
    let narrow = matches!(dtype, DType::F16 | DType::BF16);
    let (a, b) = if narrow {
        (a.try_to_dtype(DType::F32)?, b.try_to_dtype(DType::F32)?)
    } else {
        (a.clone(), b.clone())
    };
    let shape = broadcast_shapes("onnx Mod", a.shape(), b.shape())?;
    let x = a.value().expand(&shape)?.contiguous().to_f64_vec();
    let y = b.value().expand(&shape)?.contiguous().to_f64_vec();
    let round = if fmod { f64::trunc } else { f64::floor };
    let q: Vec<f64> = x.iter().zip(&y).map(|(p, q)| round(p / q)).collect();
    let q = Tensor::from_f64_slice(&q, &shape, a.dtype())?;
    let mut r = a.try_sub(&b.try_mul(&c.constant(q))?)?;
    // A finite value over an infinite divisor: `b · q` is inf · 0 there,
    // so the remainder (the value, or with `fmod = 0` and opposite signs
    // the divisor) is taken as it is.
    let odd: Vec<bool> = x
        .iter()
        .zip(&y)
        .map(|(p, q)| p.is_finite() && q.is_infinite())
        .collect();
    if odd.contains(&true) {
        let exact: Vec<f64> = x
            .iter()
            .zip(&y)
            .map(|(&p, &q)| {
                let opposite = p != 0.0 && (p < 0.0) != (q < 0.0);
                if !fmod && opposite && q.is_infinite() {
                    q
                } else if q.is_infinite() {
                    p
                } else {
                    0.0
                }
            })
            .collect();
        let exact = c.constant(Tensor::from_f64_slice(&exact, &shape, a.dtype())?);
        let odd = Tensor::from_vec(odd, &shape)?;
        r = exact.try_where(&odd, &r)?;
    }
    if narrow {
        return one(r.try_to_dtype(dtype)?);
    }
    one(r)
}

/// The bits and signedness of an ONNX integer element type code.
fn int_width(code: i32) -> Option<(u32, bool)> {
    Some(match code {
        2 => (8, false),
        3 => (8, true),
        4 => (16, false),
        5 => (16, true),
        6 => (32, true),
        7 => (64, true),
        12 => (32, false),
        13 => (64, false),
        _ => return None,
    })
}

/// `v` wrapped to `bits` bits, read back as that type reads them.
fn wrap(v: i64, bits: u32, signed: bool) -> i64 {
    if bits >= 64 {
        return v;
    }
    let low = (v as u64) & ((1u64 << bits) - 1);
    if signed && low >> (bits - 1) == 1 {
        (low | !((1u64 << bits) - 1)) as i64
    } else {
        low as i64
    }
}

/// `BitShift` with `direction` LEFT or RIGHT, in the element type the
/// model declares (integers flow widened to i64, so a left shift wraps to
/// that width; i64 when undeclared). A shift below 0 or at least the
/// width gives 0 (-1 for a negative value shifted right); unsigned values
/// shift right logically.
pub(super) fn bit_shift<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let left = match c.attrs.string("direction", "")?.as_str() {
        "LEFT" => true,
        "RIGHT" => false,
        other => return Err(c.error(format!("direction {other:?} (LEFT or RIGHT)"))),
    };
    if !(is_int(a) && is_int(b)) {
        return Err(c.error("BitShift takes integers"));
    }
    let (bits, signed) = c.input_type(0).and_then(int_width).unwrap_or((64, true));
    let r = int_elementwise(c, a.value(), b.value(), |p, q| {
        if q < 0 || q >= i64::from(bits) {
            return Some(if !left && signed && p < 0 { -1 } else { 0 });
        }
        let s = q as u32;
        Some(match (left, signed) {
            (true, _) => wrap(((p as u64) << s) as i64, bits, signed),
            (false, true) => p >> s,
            // The value's bits as the unsigned type holds them.
            (false, false) => wrap(((wrap(p, bits, false) as u64) >> s) as i64, bits, false),
        })
    })?;
    one(c.constant(r))
}

/// `BitwiseNot` in the declared element type: `!x` for signed types,
/// `max - x` for unsigned ones (i64 when undeclared).
pub(super) fn bitwise_not<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if !is_int(x) {
        return Err(c.error(format!("BitwiseNot takes integers, got {}", x.dtype())));
    }
    let (bits, signed) = c.input_type(0).and_then(int_width).unwrap_or((64, true));
    let v = x.value().contiguous().to_vec::<i64>()?;
    let out: Vec<i64> = v.iter().map(|&p| wrap(!p, bits, signed)).collect();
    one(c.constant(Tensor::from_vec(out, x.shape())?))
}

fn bitwise<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, f: fn(i64, i64) -> i64) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    if a.dtype() != DType::I64 || b.dtype() != DType::I64 {
        return Err(c.error(format!(
            "bitwise operands must be integers, got {} and {}",
            a.dtype(),
            b.dtype()
        )));
    }
    one(c.constant(int_elementwise(c, a.value(), b.value(), |p, q| {
        Some(f(p, q))
    })?))
}

pub(super) fn bitwise_and<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    bitwise(c, ins, |p, q| p & q)
}
pub(super) fn bitwise_or<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    bitwise(c, ins, |p, q| p | q)
}
pub(super) fn bitwise_xor<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    bitwise(c, ins, |p, q| p ^ q)
}
