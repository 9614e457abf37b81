//! Neural-net ops: matmul and its transposed forms, softmax, the norms,
//! convolutions, pooling, embedding; dropout only as an error (a random
//! mask has no ONNX form that gives the recorded value).

use super::emit::{attr_float, attr_int, attr_ints};
use super::{Emit, Mapper, NodeCtx};
use retrograd_engine::base::error::Result;
use retrograd_engine::tensor::{DType, Tensor};

pub(super) fn lookup(op: &str) -> Option<Mapper> {
    Some(match op {
        "matmul" => |e, n| matmul(e, n, false, false),
        "matmul_nt" => |e, n| matmul(e, n, false, true),
        "matmul_tn" => |e, n| matmul(e, n, true, false),
        "matmul_tt" => |e, n| matmul(e, n, true, true),
        "softmax" => |e, n| softmax(e, n, "Softmax"),
        "log_softmax" => |e, n| softmax(e, n, "LogSoftmax"),
        "layer_norm" => layer_norm,
        "batch_norm" => batch_norm,
        "group_norm" => group_norm,
        "rms_norm" => rms_norm,
        "conv1d" | "conv2d" => |e, n| conv(e, n, "Conv"),
        "conv_transpose1d" | "conv_transpose2d" => |e, n| conv(e, n, "ConvTranspose"),
        "max_pool2d" => max_pool,
        "avg_pool2d" => avg_pool,
        "adaptive_avg_pool2d" => adaptive_avg_pool,
        "embedding" => embedding,
        "dropout" => |_, n| {
            Err(n.unsupported(
                "dropout in training mode draws a random mask: put the model in eval mode \
                 (set_training(false)) before recording the graph to export",
            ))
        },
        _ => return None,
    })
}

/// The permutation swapping the last two of `rank` axes.
fn swap_last(rank: usize) -> Vec<i64> {
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    perm.swap(rank - 2, rank - 1);
    perm
}

/// `matmul(a, b)` with either operand's last two axes swapped first. Two
/// matrices are one `Gemm`; other ranks a `Transpose` and a `MatMul`.
fn matmul(e: &mut Emit, n: &NodeCtx<'_>, ta: bool, tb: bool) -> Result<()> {
    if (ta && n.rank(0) < 2) || (tb && n.rank(1) < 2) {
        return Err(n.unsupported("a transposed operand must have rank >= 2"));
    }
    if (ta || tb) && n.rank(0) == 2 && n.rank(1) == 2 {
        let attrs = vec![
            attr_int("transA", i64::from(ta)),
            attr_int("transB", i64::from(tb)),
        ];
        e.node("Gemm", &[n.input(0), n.input(1)], &[&n.out], attrs);
        return Ok(());
    }
    let operand = |i: usize, transposed: bool, e: &mut Emit| {
        if transposed {
            let perm = attr_ints("perm", &swap_last(n.rank(i)));
            e.op(
                "Transpose",
                &[n.input(i)],
                &format!("{}/t{i}", n.out),
                vec![perm],
            )
        } else {
            n.input(i).to_string()
        }
    };
    let a = operand(0, ta, e);
    let b = operand(1, tb, e);
    e.node("MatMul", &[&a, &b], &[&n.out], vec![]);
    Ok(())
}

fn softmax(e: &mut Emit, n: &NodeCtx<'_>, op_type: &str) -> Result<()> {
    let axis = n.axis(n.int("axis")?, n.rank(0))?;
    e.node(
        op_type,
        &[n.input(0)],
        &[&n.out],
        vec![attr_int("axis", axis)],
    );
    Ok(())
}

/// Which of weight and bias follow the `fixed` leading inputs: as the op
/// lists them, or by count (1: weight, 2: both) when it infers them.
fn affine(n: &NodeCtx<'_>, fixed: usize) -> (Option<usize>, Option<usize>) {
    let extra = n.inputs.len().saturating_sub(fixed);
    let (w, b) = match (n.attrs.get_bool("weight"), n.attrs.get_bool("bias")) {
        (Some(w), Some(b)) => (w, b),
        _ => (extra >= 1, extra >= 2),
    };
    (w.then_some(fixed), b.then_some(fixed + usize::from(w)))
}

/// Input `i`, or a constant of `shape` filled with `fill` when absent.
fn param_or(
    e: &mut Emit,
    n: &NodeCtx<'_>,
    i: Option<usize>,
    shape: &[usize],
    fill: f64,
) -> Result<String> {
    match i {
        Some(i) => Ok(n.input(i).to_string()),
        None => e.constant(
            if fill == 0.0 { "zeros" } else { "ones" },
            &Tensor::full(shape, fill, n.dtype())?,
        ),
    }
}

/// The trailing normalised shape of a layer/RMS norm (the last dim when
/// the op lists none).
fn normalized(n: &NodeCtx<'_>) -> Vec<usize> {
    let x = n.shape(0);
    match n.attrs.get_ints("normalized_shape") {
        Some(s) if !s.is_empty() => s.iter().map(|&d| d as usize).collect(),
        _ => x[x.len().saturating_sub(1)..].to_vec(),
    }
}

fn layer_norm(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let shape = normalized(n);
    let (w, b) = affine(n, 1);
    let scale = param_or(e, n, w, &shape, 1.0)?;
    let mut inputs = vec![n.input(0).to_string(), scale];
    inputs.extend(b.map(|b| n.input(b).to_string()));
    let inputs: Vec<&str> = inputs.iter().map(String::as_str).collect();
    let attrs = vec![
        attr_int("axis", -(shape.len() as i64)),
        attr_float("epsilon", n.float("eps")?),
    ];
    e.node("LayerNormalization", &inputs, &[&n.out], attrs);
    Ok(())
}

/// `[C]` viewed as `[C, 1, ...]` to broadcast over an `[N, C, ...]` input.
fn per_channel(e: &mut Emit, n: &NodeCtx<'_>, v: &str, what: &str) -> Result<String> {
    let mut shape = vec![-1i64];
    shape.resize(n.rank(0) - 1, 1);
    let s = e.ints(&format!("{}/{what}_shape", n.out), &shape)?;
    Ok(e.op("Reshape", &[v, &s], &format!("{}/{what}", n.out), vec![]))
}

/// `(x - mean) / sqrt(var + eps)` then the per-channel affine, with the
/// statistics given as values broadcasting against `x`.
#[allow(clippy::too_many_arguments)]
fn normalise(
    e: &mut Emit,
    n: &NodeCtx<'_>,
    x: &str,
    mean: &str,
    var: &str,
    eps: f64,
    out: &str,
) -> Result<()> {
    let eps = e.scalar("eps", eps, n.dtype())?;
    let centered = e.op("Sub", &[x, mean], &format!("{}/centered", n.out), vec![]);
    let v = e.op("Add", &[var, &eps], &format!("{}/var_eps", n.out), vec![]);
    let std = e.op("Sqrt", &[&v], &format!("{}/std", n.out), vec![]);
    e.node("Div", &[&centered, &std], &[out], vec![]);
    Ok(())
}

/// Eval mode: ONNX's `BatchNormalization` with the running statistics.
/// Training mode (the batch's own statistics) is written out as its
/// formula, so the exported graph computes what was recorded.
fn batch_norm(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let eps = n.float("eps")?;
    let c = n.shape(0).get(1).copied().unwrap_or(1);
    if !n.flag("training")? {
        let (w, b) = affine(n, 3);
        let scale = param_or(e, n, w, &[c], 1.0)?;
        let bias = param_or(e, n, b, &[c], 0.0)?;
        let inputs = [n.input(0), &scale, &bias, n.input(1), n.input(2)];
        e.node(
            "BatchNormalization",
            &inputs,
            &[&n.out],
            vec![attr_float("epsilon", eps)],
        );
        return Ok(());
    }
    let (w, b) = affine(n, 1);
    let x = n.input(0);
    let axes: Vec<i64> = std::iter::once(0).chain(2..n.rank(0) as i64).collect();
    let keep = attr_int("keepdims", 1);
    let mean = e.op(
        "ReduceMean",
        &[x],
        &format!("{}/mean", n.out),
        vec![attr_ints("axes", &axes), keep.clone()],
    );
    let d = e.op("Sub", &[x, &mean], &format!("{}/d", n.out), vec![]);
    let sq = e.op("Mul", &[&d, &d], &format!("{}/sq", n.out), vec![]);
    let var = e.op(
        "ReduceMean",
        &[&sq],
        &format!("{}/var", n.out),
        vec![attr_ints("axes", &axes), keep],
    );
    affine_after(
        e,
        n,
        |e, out| normalise(e, n, x, &mean, &var, eps, out),
        w,
        b,
    )
}

/// Writes the normalised value, then `* weight + bias` per channel when present.
fn affine_after(
    e: &mut Emit,
    n: &NodeCtx<'_>,
    normalised: impl FnOnce(&mut Emit, &str) -> Result<()>,
    w: Option<usize>,
    b: Option<usize>,
) -> Result<()> {
    if w.is_none() && b.is_none() {
        return normalised(e, &n.out);
    }
    let y = n.tmp(e, "normalised");
    normalised(e, &y)?;
    let y = match w {
        Some(w) => {
            let wc = per_channel(e, n, n.input(w), "weight")?;
            if b.is_none() {
                e.node("Mul", &[&y, &wc], &[&n.out], vec![]);
                return Ok(());
            }
            e.op("Mul", &[&y, &wc], &format!("{}/scaled", n.out), vec![])
        }
        None => y,
    };
    if let Some(b) = b {
        let bc = per_channel(e, n, n.input(b), "bias")?;
        e.node("Add", &[&y, &bc], &[&n.out], vec![]);
    }
    Ok(())
}

/// Statistics per sample and group over an `[N, G, -1]` view, then the
/// per-channel affine.
fn group_norm(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let groups = n.int("num_groups")?;
    let eps = n.float("eps")?;
    let (w, b) = affine(n, 1);
    let x = n.input(0);
    let grouped_shape = e.ints(&format!("{}/grouped_shape", n.out), &[0, groups, -1])?;
    let grouped = e.op(
        "Reshape",
        &[x, &grouped_shape],
        &format!("{}/grouped", n.out),
        vec![],
    );
    let attrs = || vec![attr_ints("axes", &[2]), attr_int("keepdims", 1)];
    let mean = e.op(
        "ReduceMean",
        &[&grouped],
        &format!("{}/mean", n.out),
        attrs(),
    );
    let d = e.op("Sub", &[&grouped, &mean], &format!("{}/d", n.out), vec![]);
    let sq = e.op("Mul", &[&d, &d], &format!("{}/sq", n.out), vec![]);
    let var = e.op("ReduceMean", &[&sq], &format!("{}/var", n.out), attrs());
    let normed = n.tmp(e, "grouped_normalised");
    normalise(e, n, &grouped, &mean, &var, eps, &normed)?;
    let shape = e.op("Shape", &[x], &format!("{}/shape", n.out), vec![]);
    affine_after(
        e,
        n,
        |e, out| {
            e.node("Reshape", &[&normed, &shape], &[out], vec![]);
            Ok(())
        },
        w,
        b,
    )
}

/// `x / sqrt(mean(x²) + eps) * weight` over the trailing normalised dims.
fn rms_norm(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let k = normalized(n).len() as i64;
    let rank = n.rank(0) as i64;
    let eps = n.attrs.get_float("eps").unwrap_or(match n.dtype() {
        DType::F32 => f64::from(f32::EPSILON),
        _ => f64::EPSILON,
    });
    let x = n.input(0);
    let axes: Vec<i64> = (rank - k..rank).collect();
    let sq = e.op("Mul", &[x, x], &format!("{}/sq", n.out), vec![]);
    let attrs = vec![attr_ints("axes", &axes), attr_int("keepdims", 1)];
    let ms = e.op("ReduceMean", &[&sq], &format!("{}/mean_sq", n.out), attrs);
    let eps = e.scalar("eps", eps, n.dtype())?;
    let v = e.op("Add", &[&ms, &eps], &format!("{}/plus_eps", n.out), vec![]);
    let r = e.op("Sqrt", &[&v], &format!("{}/rms", n.out), vec![]);
    if n.inputs.len() > 1 {
        let y = e.op("Div", &[x, &r], &format!("{}/normalised", n.out), vec![]);
        e.node("Mul", &[&y, n.input(1)], &[&n.out], vec![]);
    } else {
        e.node("Div", &[x, &r], &[&n.out], vec![]);
    }
    Ok(())
}

/// The spatial entries of a `[height, width]` setting: one for a 1-d op.
fn spatial(values: &[i64], dims: i64) -> Vec<i64> {
    values[values.len() - dims as usize..].to_vec()
}

fn conv(e: &mut Emit, n: &NodeCtx<'_>, op_type: &str) -> Result<()> {
    let dims = n.int("spatial")?;
    let before = spatial(&n.ints("pad_before")?, dims);
    let after = spatial(&n.ints("pad_after")?, dims);
    let kernel: Vec<i64> = n.shape(1)[2..].iter().map(|&k| k as i64).collect();
    let mut attrs = vec![
        attr_ints("kernel_shape", &kernel),
        attr_ints("strides", &spatial(&n.ints("stride")?, dims)),
        attr_ints("dilations", &spatial(&n.ints("dilation")?, dims)),
        attr_int("group", n.int("groups")?),
    ];
    if op_type == "Conv" {
        if after.iter().any(|&p| p < 0) {
            return Err(n.unsupported(format!("negative padding {after:?}")));
        }
        attrs.push(attr_ints("pads", &[before, after].concat()));
    } else {
        // ConvTranspose: `pad_after` is the padding less the output padding.
        let extra: Vec<i64> = before.iter().zip(&after).map(|(b, a)| b - a).collect();
        if extra.iter().any(|&p| p < 0) {
            return Err(n.unsupported(format!("padding {before:?} / {after:?}")));
        }
        attrs.push(attr_ints("pads", &[before.clone(), before].concat()));
        attrs.push(attr_ints("output_padding", &extra));
    }
    let inputs: Vec<&str> = n.inputs.iter().map(String::as_str).collect();
    e.node(op_type, &inputs, &[&n.out], attrs);
    Ok(())
}

/// `kernel_shape`, `strides` and symmetric `pads` of a 2-d pooling op.
fn pool_attrs(n: &NodeCtx<'_>) -> Result<Vec<crate::proto::AttributeProto>> {
    let pad = n.ints("padding")?;
    Ok(vec![
        attr_ints("kernel_shape", &n.ints("kernel")?),
        attr_ints("strides", &n.ints("stride")?),
        attr_ints("pads", &[pad.clone(), pad].concat()),
        attr_int("ceil_mode", i64::from(n.flag("ceil_mode")?)),
    ])
}

fn max_pool(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let mut attrs = pool_attrs(n)?;
    attrs.push(attr_ints("dilations", &n.ints("dilation")?));
    e.node("MaxPool", &[n.input(0)], &[&n.out], attrs);
    Ok(())
}

fn avg_pool(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    if let Some(d) = n.attrs.get_int("divisor_override") {
        return Err(n.unsupported(format!("divisor_override = {d} has no ONNX form")));
    }
    let mut attrs = pool_attrs(n)?;
    attrs.push(attr_int(
        "count_include_pad",
        i64::from(n.flag("count_include_pad")?),
    ));
    e.node("AveragePool", &[n.input(0)], &[&n.out], attrs);
    Ok(())
}

/// A 1x1 output is `GlobalAveragePool`; equal windows (input size a
/// multiple of the output size) an `AveragePool`. PyTorch's unequal
/// adaptive windows have no ONNX op.
fn adaptive_avg_pool(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let out = n.ints("output_size")?;
    let x = n.shape(0);
    let hw = [x[x.len() - 2] as i64, x[x.len() - 1] as i64];
    if out == [1, 1] {
        e.node("GlobalAveragePool", &[n.input(0)], &[&n.out], vec![]);
        return Ok(());
    }
    if out.iter().zip(&hw).any(|(&o, &i)| o == 0 || i % o != 0) {
        return Err(n.unsupported(format!(
            "adaptive windows from {hw:?} to {out:?} are of unequal sizes, which no ONNX op computes"
        )));
    }
    let k: Vec<i64> = out.iter().zip(&hw).map(|(&o, &i)| i / o).collect();
    let attrs = vec![attr_ints("kernel_shape", &k), attr_ints("strides", &k)];
    e.node("AveragePool", &[n.input(0)], &[&n.out], attrs);
    Ok(())
}

/// `Gather` of rows: the indices are the op's second input, or the index
/// list it holds (then a constant).
fn embedding(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let indices = match n.inputs.get(1) {
        Some(i) => {
            if n.values[1].dtype() == DType::I64 {
                i.clone()
            } else {
                let name = format!("{}/indices", n.out);
                e.op(
                    "Cast",
                    &[i],
                    &name,
                    vec![super::emit::attr_dtype("to", DType::I64)],
                )
            }
        }
        None => {
            let values = n.ints("indices")?;
            let shape: Vec<usize> = n.ints("index_shape")?.iter().map(|&d| d as usize).collect();
            e.constant(
                &format!("{}/indices", n.out),
                &Tensor::from_vec(values, &shape)?,
            )?
        }
    };
    e.node(
        "Gather",
        &[n.input(0), &indices],
        &[&n.out],
        vec![attr_int("axis", 0)],
    );
    Ok(())
}
