//! Elementwise ONNX ops as retrograd's elementwise ops. Stateless ones go
//! through the op registry by name (`graph.apply("relu", ...)`); those
//! with settings through the `Var` methods that build them.

use super::host::{bool_binary, bool_binary_plain, int_binary, is_int};
use super::{one, Ctx};
use crate::import::attrs::Attrs;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::ops::activation::LeakyRelu;
use retrograd_engine::ops::rule::Unary;
use retrograd_engine::tensor::{DType, Tensor};

type Ins<'g> = [Option<Var<'g>>];

/// Converters that hand the node on to one of this file's helpers with
/// their own arguments (the registry's op name): `abs => apply("abs", 1);`
/// is `fn abs(c, ins) { apply(c, ins, "abs", 1) }`.
macro_rules! converters {
    ($($f:ident => $helper:ident($($arg:expr),*);)*) => {
        $(
            pub(super) fn $f<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
                $helper(c, ins, $($arg),*)
            }
        )*
    };
}

converters! {
    add => arith("add");
    sub => arith("sub");
    mul => arith("mul");
    div => arith("div");
    abs => apply("abs", 1);
    exp => apply("exp", 1);
    log => apply("log", 1);
    sqrt => apply("sqrt", 1);
    tanh => apply("tanh", 1);
    sigmoid => apply("sigmoid", 1);
    relu => apply("relu", 1);
    sin => apply("sin", 1);
    cos => apply("cos", 1);
    tan => apply("tan", 1);
    asin => apply("asin", 1);
    acos => apply("acos", 1);
    atan => apply("atan", 1);
    sinh => apply("sinh", 1);
    cosh => apply("cosh", 1);
    asinh => apply("asinh", 1);
    acosh => apply("acosh", 1);
    atanh => apply("atanh", 1);
    floor => apply("floor", 1);
    ceil => apply("ceil", 1);
    round => apply("round", 1);
    max => fold("maximum");
    min => fold("minimum");
    sum => fold("add");
    equal => compare("eq");
    less => compare("lt");
    less_or_equal => compare("le");
    greater => compare("gt");
    greater_or_equal => compare("ge");
    and => logical(|x, y| x.try_mul(y)?.try_ne_scalar(0.0), |p, q| p && q);
    or => logical(|x, y| x.try_add(y)?.try_ne_scalar(0.0), |p, q| p || q);
    xor => logical(|x, y| x.try_ne(y), |p, q| p != q);
}

/// A logical op on two bool inputs, computed on the host: by `plain` on
/// the values where nothing traces, else by `f` (recorded, so an export
/// keeps the op).
fn logical<'g>(
    c: &Ctx<'_, 'g>,
    ins: &Ins<'g>,
    f: impl Fn(&Var<'g>, &Var<'g>) -> Result<Var<'g>>,
    plain: fn(bool, bool) -> bool,
) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    if !c.graph.is_tracing() && a.dtype() == DType::Bool && b.dtype() == DType::Bool {
        return one(c.constant(bool_binary_plain(a.value(), b.value(), plain)?));
    }
    one(bool_binary(a, b, f)?)
}

/// The op registered as `name` on inputs 0..n.
fn apply<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, name: &str, n: usize) -> Result<Vec<Var<'g>>> {
    let args = (0..n)
        .map(|i| c.input(ins, i))
        .collect::<Result<Vec<_>>>()?;
    one(c.graph.apply(name, &args)?)
}

/// A binary registry op on floats, or on integers through the host.
fn arith<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, name: &str) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    if is_int(a) && is_int(b) {
        return one(int_binary(a, b, |x, y| x.graph().apply(name, &[x, y]))?);
    }
    one(c.graph.apply(name, &[a, b])?)
}

pub(super) fn pow<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    if is_int(a) {
        // The result has the base's type, whatever the exponent's.
        return one(int_binary(a, b, |x, y| x.try_pow(y))?);
    }
    // ONNX lets the exponent have its own type; retrograd's pow takes the base's.
    let b = if b.dtype() == a.dtype() {
        b.clone()
    } else {
        b.try_to_dtype(a.dtype())?
    };
    one(a.try_pow(&b)?)
}
pub(super) fn neg<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if is_int(x) {
        let zero = c.constant(Tensor::scalar(0i64));
        return one(int_binary(&zero, x, |a, b| a.try_sub(b))?);
    }
    apply(c, ins, "neg", 1)
}

/// `sign` on floats through the registry; on integers on the host.
pub(super) fn sign<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if is_int(x) {
        return one(c.constant(
            x.value()
                .map_f64(|v| if v == 0.0 { 0.0 } else { v.signum() })
                .to_dtype(x.dtype()),
        ));
    }
    apply(c, ins, "sign", 1)
}

pub(super) fn reciprocal<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let one_ = c.constant(Tensor::scalar_of(1.0, x.dtype()));
    one(one_.try_div(x)?)
}

pub(super) fn leaky_relu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let slope = c.attrs.float("alpha", 0.01)?;
    let x = c.input(ins, 0)?;
    one(c.graph.record(
        Unary(LeakyRelu {
            negative_slope: slope,
        }),
        &[x],
    )?)
}

pub(super) fn elu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let alpha = c.attrs.float("alpha", 1.0)?;
    one(c.input(ins, 0)?.try_elu_with(alpha)?)
}

/// ONNX's `log(1 + exp(x))`: PyTorch's softplus with beta 1 and a
/// threshold past which `exp` overflows f64 (so it changes nothing).
pub(super) fn softplus<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.input(ins, 0)?.try_softplus_with(1.0, 700.0)?)
}

/// `erf(x) = 1 - erfc(x)`.
pub(super) fn erf<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let one_ = c.constant(Tensor::scalar_of(1.0, x.dtype()));
    one(one_.try_sub(&c.graph.apply("erfc", &[x])?)?)
}

pub(super) fn check_gelu(a: &Attrs, _: i64) -> std::result::Result<(), String> {
    match a
        .string("approximate", "none")
        .map_err(|e| e.to_string())?
        .as_str()
    {
        "none" | "tanh" => Ok(()),
        other => Err(format!("approximate = {other:?}")),
    }
}

pub(super) fn gelu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let name = match c.attrs.string("approximate", "none")?.as_str() {
        "tanh" => "gelu_tanh",
        _ => "gelu",
    };
    apply(c, ins, name, 1)
}

/// Bounds given as optional scalar inputs (opset 11 and later) or as the
/// `min` and `max` attributes (before).
pub(super) fn clip<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (lo, hi) = if c.opset < 11 {
        let bound = |key: &str| -> Result<Option<f64>> {
            Ok(if c.attrs.has(key) {
                Some(c.attrs.float(key, 0.0)?)
            } else {
                None
            })
        };
        (bound("min")?, bound("max")?)
    } else {
        (
            c.opt(ins, 1).map(|v| c.scalar(v)).transpose()?,
            c.opt(ins, 2).map(|v| c.scalar(v)).transpose()?,
        )
    };
    let x = c.input(ins, 0)?;
    if lo.is_none() && hi.is_none() {
        return one(x.clone());
    }
    if is_int(x) {
        // Integers clamp on the host (retrograd's clamp is for floats).
        let (lo, hi) = (lo.unwrap_or(f64::NEG_INFINITY), hi.unwrap_or(f64::INFINITY));
        let clamped = x
            .value()
            .to_dtype(DType::F64)
            .map_f64(|v| v.max(lo).min(hi));
        return one(c.constant(clamped.to_dtype(x.dtype())));
    }
    one(x.try_clamp(lo, hi)?)
}

/// A variadic op folded pairwise.
fn fold<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, name: &str) -> Result<Vec<Var<'g>>> {
    let mut acc = c.input(ins, 0)?.clone();
    for i in 1..ins.len() {
        let next = c.input(ins, i)?;
        acc = if is_int(&acc) && is_int(next) {
            int_binary(&acc, next, |x, y| x.graph().apply(name, &[x, y]))?
        } else {
            c.graph.apply(name, &[&acc, next])?
        };
    }
    one(acc)
}

/// A comparison (a bool constant), with the operands' dtypes made one
/// if they differ only in width (an i64 shape against an f32 value).
fn compare<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>, name: &str) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    one(c.graph.apply(name, &[a, b])?)
}

pub(super) fn not<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.input(ins, 0)?.try_eq_scalar(0.0)?)
}

pub(super) fn is_nan<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    one(x.try_ne(x)?)
}

/// `where(cond, x, y)`; integer branches through the host.
pub(super) fn select<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (cond, x, y) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    if is_int(x) && is_int(y) {
        let dtype = x.dtype();
        let r = x
            .try_to_dtype(DType::F64)?
            .try_where(cond, &y.try_to_dtype(DType::F64)?)?;
        return one(c.constant(r.value().to_dtype(dtype)));
    }
    one(x.try_where(cond, y)?)
}
