//! Elementwise ops: arithmetic, activations, comparisons, `where`, masks,
//! casts. Most are one ONNX op; the rest are short compositions of ONNX
//! ops with the same formula (GELU through `Erf`, `erfc` as `1 - Erf`).

use std::f64::consts::{FRAC_2_SQRT_PI, SQRT_2};

use super::emit::{attr_dtype, attr_float, attr_int};
use super::{Emit, Mapper, NodeCtx};
use retrograd_engine::base::error::Result;
use retrograd_engine::tensor::DType;

pub(super) fn lookup(op: &str) -> Option<Mapper> {
    Some(match op {
        "add" => |e, n| same(e, n, "Add"),
        "sub" => |e, n| same(e, n, "Sub"),
        "mul" => |e, n| same(e, n, "Mul"),
        "div" => |e, n| same(e, n, "Div"),
        "pow" => |e, n| same(e, n, "Pow"),
        "maximum" => |e, n| same(e, n, "Max"),
        "minimum" => |e, n| same(e, n, "Min"),
        "neg" => |e, n| same(e, n, "Neg"),
        "exp" => |e, n| same(e, n, "Exp"),
        "log" => |e, n| same(e, n, "Log"),
        "tanh" => |e, n| same(e, n, "Tanh"),
        "relu" => |e, n| same(e, n, "Relu"),
        "sigmoid" => |e, n| same(e, n, "Sigmoid"),
        "abs" => |e, n| same(e, n, "Abs"),
        "sin" => |e, n| same(e, n, "Sin"),
        "cos" => |e, n| same(e, n, "Cos"),
        "sqrt" => |e, n| same(e, n, "Sqrt"),
        "tan" => |e, n| same(e, n, "Tan"),
        "asin" => |e, n| same(e, n, "Asin"),
        "acos" => |e, n| same(e, n, "Acos"),
        "atan" => |e, n| same(e, n, "Atan"),
        "sinh" => |e, n| same(e, n, "Sinh"),
        "cosh" => |e, n| same(e, n, "Cosh"),
        "asinh" => |e, n| same(e, n, "Asinh"),
        "acosh" => |e, n| same(e, n, "Acosh"),
        "atanh" => |e, n| same(e, n, "Atanh"),
        "floor" => |e, n| same(e, n, "Floor"),
        "ceil" => |e, n| same(e, n, "Ceil"),
        "round" => |e, n| same(e, n, "Round"),
        "sign" => |e, n| same(e, n, "Sign"),
        "eq" => |e, n| same(e, n, "Equal"),
        "lt" => |e, n| same(e, n, "Less"),
        "le" => |e, n| same(e, n, "LessOrEqual"),
        "gt" => |e, n| same(e, n, "Greater"),
        "ge" => |e, n| same(e, n, "GreaterOrEqual"),
        "where" => select,
        "ne" => ne,
        "rsqrt" => rsqrt,
        "erfc" => erfc,
        "expm1" => expm1,
        "log1p" => log1p,
        "gelu" => gelu,
        "gelu_tanh" => gelu_tanh,
        "silu" => silu,
        "leaky_relu" => |e, n| with_float(e, n, "LeakyRelu", "negative_slope", "alpha"),
        "elu" => |e, n| with_float(e, n, "Elu", "alpha", "alpha"),
        "softplus" => softplus,
        "hardtanh" => hardtanh,
        "hard_swish" => |e, n| same(e, n, "HardSwish"),
        "hard_sigmoid" => hard_sigmoid,
        "clamp" => clamp,
        "masked_fill" => masked_fill,
        "tril" | "triu" => trilu,
        "to_dtype" => cast,
        _ => return None,
    })
}

/// One ONNX op on the same inputs.
fn same(e: &mut Emit, n: &NodeCtx<'_>, op_type: &str) -> Result<()> {
    let inputs: Vec<&str> = n.inputs.iter().map(String::as_str).collect();
    e.node(op_type, &inputs, &[&n.out], vec![]);
    Ok(())
}

fn ne(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let eq = e.op(
        "Equal",
        &[n.input(0), n.input(1)],
        &format!("{}/eq", n.out),
        vec![],
    );
    e.node("Not", &[&eq], &[&n.out], vec![]);
    Ok(())
}

fn rsqrt(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let s = e.op("Sqrt", &[n.input(0)], &format!("{}/sqrt", n.out), vec![]);
    e.node("Reciprocal", &[&s], &[&n.out], vec![]);
    Ok(())
}

fn erfc(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let one = e.scalar("one", 1.0, n.dtype())?;
    let erf = e.op("Erf", &[n.input(0)], &format!("{}/erf", n.out), vec![]);
    e.node("Sub", &[&one, &erf], &[&n.out], vec![]);
    Ok(())
}

fn expm1(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let one = e.scalar("one", 1.0, n.dtype())?;
    let exp = e.op("Exp", &[n.input(0)], &format!("{}/exp", n.out), vec![]);
    e.node("Sub", &[&exp, &one], &[&n.out], vec![]);
    Ok(())
}

fn log1p(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let one = e.scalar("one", 1.0, n.dtype())?;
    let sum = e.op(
        "Add",
        &[n.input(0), &one],
        &format!("{}/plus1", n.out),
        vec![],
    );
    e.node("Log", &[&sum], &[&n.out], vec![]);
    Ok(())
}

/// `x · (1 + erf(x / √2)) / 2`.
fn gelu(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let x = n.input(0);
    let dt = n.dtype();
    let sqrt2 = e.scalar("sqrt2", SQRT_2, dt)?;
    let one = e.scalar("one", 1.0, dt)?;
    let half = e.scalar("half", 0.5, dt)?;
    let t = n.tmp(e, "scaled");
    e.node("Div", &[x, &sqrt2], &[&t], vec![]);
    let erf = e.op("Erf", &[&t], &format!("{}/erf", n.out), vec![]);
    let p = e.op("Add", &[&erf, &one], &format!("{}/plus1", n.out), vec![]);
    let xp = e.op("Mul", &[x, &p], &format!("{}/xmul", n.out), vec![]);
    e.node("Mul", &[&xp, &half], &[&n.out], vec![]);
    Ok(())
}

/// `x · (1 + tanh(√(2/π) · (x + 0.044715 x³))) / 2`.
fn gelu_tanh(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let x = n.input(0);
    let dt = n.dtype();
    let k = e.scalar("sqrt_2_over_pi", FRAC_2_SQRT_PI / SQRT_2, dt)?;
    let c = e.scalar("gelu_c", 0.044715, dt)?;
    let one = e.scalar("one", 1.0, dt)?;
    let half = e.scalar("half", 0.5, dt)?;
    let x2 = e.op("Mul", &[x, x], &format!("{}/x2", n.out), vec![]);
    let x3 = e.op("Mul", &[&x2, x], &format!("{}/x3", n.out), vec![]);
    let cx3 = e.op("Mul", &[&x3, &c], &format!("{}/cx3", n.out), vec![]);
    let inner = e.op("Add", &[x, &cx3], &format!("{}/inner", n.out), vec![]);
    let scaled = e.op("Mul", &[&inner, &k], &format!("{}/scaled", n.out), vec![]);
    let t = e.op("Tanh", &[&scaled], &format!("{}/tanh", n.out), vec![]);
    let p = e.op("Add", &[&t, &one], &format!("{}/plus1", n.out), vec![]);
    let xp = e.op("Mul", &[x, &p], &format!("{}/xmul", n.out), vec![]);
    e.node("Mul", &[&xp, &half], &[&n.out], vec![]);
    Ok(())
}

fn silu(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let s = e.op(
        "Sigmoid",
        &[n.input(0)],
        &format!("{}/sigmoid", n.out),
        vec![],
    );
    e.node("Mul", &[n.input(0), &s], &[&n.out], vec![]);
    Ok(())
}

/// ONNX's unary `op` with one float attribute `theirs`, our setting `ours`.
fn with_float(e: &mut Emit, n: &NodeCtx<'_>, op: &str, ours: &str, theirs: &str) -> Result<()> {
    let value = n.float(ours)?;
    e.node(
        op,
        &[n.input(0)],
        &[&n.out],
        vec![attr_float(theirs, value)],
    );
    Ok(())
}

/// PyTorch's softplus: `x` where `beta · x > threshold`, else
/// `log(1 + exp(beta · x)) / beta` (ONNX's `Softplus` has beta 1 and no threshold).
fn softplus(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let (beta, threshold) = (n.float("beta")?, n.float("threshold")?);
    let x = n.input(0);
    let dt = n.dtype();
    let b = e.scalar("beta", beta, dt)?;
    let th = e.scalar("threshold", threshold, dt)?;
    let bx = e.op("Mul", &[x, &b], &format!("{}/bx", n.out), vec![]);
    let sp = e.op("Softplus", &[&bx], &format!("{}/softplus", n.out), vec![]);
    let smooth = e.op("Div", &[&sp, &b], &format!("{}/smooth", n.out), vec![]);
    let linear = e.op("Greater", &[&bx, &th], &format!("{}/linear", n.out), vec![]);
    e.node("Where", &[&linear, x, &smooth], &[&n.out], vec![]);
    Ok(())
}

fn clip(e: &mut Emit, n: &NodeCtx<'_>, min: Option<f64>, max: Option<f64>) -> Result<()> {
    let dt = n.dtype();
    let lo = min
        .map(|v| e.scalar("min", v, dt))
        .transpose()?
        .unwrap_or_default();
    let hi = max
        .map(|v| e.scalar("max", v, dt))
        .transpose()?
        .unwrap_or_default();
    e.node("Clip", &[n.input(0), &lo, &hi], &[&n.out], vec![]);
    Ok(())
}

fn hardtanh(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    clip(e, n, Some(n.float("min_val")?), Some(n.float("max_val")?))
}

fn hard_sigmoid(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let attrs = vec![
        attr_float("alpha", n.float("alpha")?),
        attr_float("beta", n.float("beta")?),
    ];
    let inputs: Vec<&str> = n.inputs.iter().map(String::as_str).collect();
    e.node("HardSigmoid", &inputs, &[&n.out], attrs);
    Ok(())
}

fn clamp(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    clip(e, n, n.attrs.get_float("min"), n.attrs.get_float("max"))
}

/// Input `i` as a bool condition (retrograd reads any nonzero as true).
fn condition(e: &mut Emit, n: &NodeCtx<'_>, i: usize) -> String {
    if n.values[i].dtype() == DType::Bool {
        n.input(i).to_string()
    } else {
        let name = format!("{}/cond", n.out);
        e.op(
            "Cast",
            &[n.input(i)],
            &name,
            vec![attr_dtype("to", DType::Bool)],
        )
    }
}

fn select(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let c = condition(e, n, 0);
    e.node("Where", &[&c, n.input(1), n.input(2)], &[&n.out], vec![]);
    Ok(())
}

/// `where(mask, value, x)`.
fn masked_fill(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let value = e.scalar("fill", n.float("value")?, n.dtype())?;
    let mask = condition(e, n, 1);
    e.node("Where", &[&mask, &value, n.input(0)], &[&n.out], vec![]);
    Ok(())
}

fn trilu(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let k = e.constant(
        "diagonal",
        &retrograd_engine::Tensor::scalar(n.int("diagonal")?),
    )?;
    let upper = i64::from(n.flag("upper")?);
    e.node(
        "Trilu",
        &[n.input(0), &k],
        &[&n.out],
        vec![attr_int("upper", upper)],
    );
    Ok(())
}

fn cast(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let to = n.attrs.get_dtype("to").unwrap_or(n.dtype());
    e.node("Cast", &[n.input(0)], &[&n.out], vec![attr_dtype("to", to)]);
    Ok(())
}
