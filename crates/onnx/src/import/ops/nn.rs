//! Neural-net ONNX ops: products, convolutions, pooling, normalisation,
//! softmax, on retrograd's fused ops.

use super::{one, pool, Ctx};
use crate::import::attrs::Attrs;
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::kernels::nn::conv_fused::ConvSummation;
use retrograd_engine::ops::nn::{
    AvgPool2dOptions, BatchNormArgs, Conv1dOptions, Conv2dOptions, MaxPool2dOptions,
};
use retrograd_engine::tensor::shape::Dims;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];
type Checked = std::result::Result<(), String>;

pub(super) fn matmul<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(c.input(ins, 0)?.try_matmul(c.input(ins, 1)?)?)
}

/// `op(a) @ op(b) + bias` as one product onto the bias rows
/// ([`kernels::matmul_bias`](retrograd_engine::kernels::matmul_bias)) where that is
/// the same function and nothing needs its nodes: a float bias of shape
/// `[n]`, a matrix `b`, no input requiring grad (on a graph that trains,
/// the nodes carry the backward) and no tracing (an export keeps the
/// model's own ops). `None`: compose the ops instead.
fn product_with_bias<'g>(
    c: &Ctx<'_, 'g>,
    [a, b, bias]: [&Var<'g>; 3],
    ta: bool,
    tb: bool,
) -> Result<Option<Var<'g>>> {
    let n = match b.shape() {
        [.., k, n] => {
            if tb {
                *k
            } else {
                *n
            }
        }
        _ => return Ok(None),
    };
    let plain = [a, b, bias]
        .iter()
        .all(|v| !v.requires_grad() && v.dtype().is_float());
    if !plain || c.graph.is_tracing() || bias.shape() != [n] {
        return Ok(None);
    }
    let y = retrograd_engine::kernels::matmul_bias(
        "onnx MatMul+Add",
        a.value(),
        b.value(),
        bias.value(),
        ta,
        tb,
    )?;
    Ok(Some(c.constant(y)))
}

/// `MatMul` then `Add` of a bias, fused at import (`fuse.rs`): inputs
/// `a`, `b`, `bias`. One product onto the bias rows where
/// [`product_with_bias`] allows, else the two ops.
pub(crate) fn fused_matmul_add<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b, bias) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    if let Some(y) = product_with_bias(c, [a, b, bias], false, false)? {
        return one(y);
    }
    one(a.try_matmul(b)?.try_add(bias)?)
}

/// `alpha · A' B' + beta · C`, the transposes read in place.
pub(super) fn gemm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let ta = c.attrs.int("transA", 0)? != 0;
    let tb = c.attrs.int("transB", 0)? != 0;
    let (alpha, beta) = (c.attrs.float("alpha", 1.0)?, c.attrs.float("beta", 1.0)?);
    if alpha == 1.0
        && beta == 1.0
        && let Some(bias) = c.opt(ins, 2)
        && a.shape().len() == 2
        && let Some(y) = product_with_bias(c, [a, b, bias], ta, tb)?
    {
        return one(y);
    }
    let mut y = a.try_matmul_transposed(b, ta, tb)?;
    if alpha != 1.0 {
        y = y.try_mul(&c.constant(Tensor::scalar_of(alpha, y.dtype())))?;
    }
    if let Some(bias) = c.opt(ins, 2) {
        let bias = if beta == 1.0 {
            bias.clone()
        } else {
            bias.try_mul(&c.constant(Tensor::scalar_of(beta, y.dtype())))?
        };
        y = y.try_add(&bias)?;
    }
    one(y)
}

/// `auto_pad`: NOTSET (the `pads`), VALID (none), SAME_UPPER and
/// SAME_LOWER (pads that keep `ceil(size / stride)` positions, the odd one
/// at the end or the start).
pub(super) fn check_conv(a: &Attrs, _: i64) -> Checked {
    match a.string("auto_pad", "NOTSET").as_deref() {
        Ok("NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER") => {}
        Ok(other) => return Err(format!("auto_pad = {other:?}")),
        Err(e) => return Err(e.to_string()),
    }
    match a.ints("kernel_shape") {
        Ok(Some(k)) if k.len() > 2 => Err(format!("{}-d convolution", k.len())),
        _ => Ok(()),
    }
}

/// `(strides, dilations, pads_begin, pads_end)` for `dims` spatial axes.
type Geometry = (Vec<usize>, Vec<usize>, Vec<usize>, Vec<usize>);

/// The geometry of a window op over `x` (`[batch, channels, spatial...]`)
/// with a window of `kernel` (its spatial sizes).
fn geometry(c: &Ctx<'_, '_>, x: &[usize], kernel: &[usize]) -> Result<Geometry> {
    let dims = kernel.len();
    let list = |key: &str, default: i64| -> Result<Vec<usize>> {
        let v = c.attrs.ints(key)?.unwrap_or_else(|| vec![default; dims]);
        if v.len() != dims || v.iter().any(|&x| x < 0) {
            return Err(c.error(format!("{key} {v:?} for {dims} spatial dims")));
        }
        Ok(v.into_iter().map(|x| x as usize).collect())
    };
    let (strides, dilations) = (list("strides", 1)?, list("dilations", 1)?);
    let auto_pad = c.attrs.string("auto_pad", "NOTSET")?;
    let pads = match auto_pad.as_str() {
        "VALID" => vec![0; 2 * dims],
        "SAME_UPPER" | "SAME_LOWER" => {
            if x.len() != dims + 2 {
                return Err(c.error(format!("input shape {x:?} for {dims} spatial dims")));
            }
            let mut pads = vec![0i64; 2 * dims];
            for d in 0..dims {
                let size = x[d + 2];
                let stride = strides[d].max(1);
                let reach = (kernel[d].saturating_sub(1)) * dilations[d] + 1;
                let needed = (size.div_ceil(stride).saturating_sub(1) * stride + reach)
                    .saturating_sub(size) as i64;
                let small = needed / 2;
                let (begin, end) = if auto_pad == "SAME_UPPER" {
                    (small, needed - small)
                } else {
                    (needed - small, small)
                };
                pads[d] = begin;
                pads[d + dims] = end;
            }
            pads
        }
        _ => c.attrs.ints("pads")?.unwrap_or_else(|| vec![0; 2 * dims]),
    };
    if pads.len() != 2 * dims || pads.iter().any(|&p| p < 0) {
        return Err(c.error(format!("pads {pads:?} for {dims} spatial dims")));
    }
    let pads: Vec<usize> = pads.into_iter().map(|p| p as usize).collect();
    Ok((
        strides,
        dilations,
        pads[..dims].to_vec(),
        pads[dims..].to_vec(),
    ))
}

/// A convolution's spatial kernel sizes, from its weight `[out, in, k...]`.
fn conv_kernel(w: &Var<'_>) -> Vec<usize> {
    w.shape().get(2..).unwrap_or_default().to_vec()
}

/// Pads the spatial axes of `x` when the begin and end pads differ (a
/// retrograd convolution pads both sides alike); returns the input and the
/// symmetric padding left to the op.
fn asymmetric<'g>(
    x: &Var<'g>,
    begin: &[usize],
    end: &[usize],
    value: f64,
) -> Result<(Var<'g>, Vec<usize>)> {
    if begin == end {
        return Ok((x.clone(), begin.to_vec()));
    }
    let mut torch = Vec::new();
    for d in (0..begin.len()).rev() {
        torch.push(begin[d] as isize);
        torch.push(end[d] as isize);
    }
    Ok((x.try_pad(&torch, value)?, vec![0; begin.len()]))
}

pub(super) fn conv<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (x, w) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let b = c.opt(ins, 2);
    let dims = x.shape().len().saturating_sub(2);
    let groups = c.attrs.int("group", 1)?.max(1) as usize;
    let (strides, dilations, begin, end) = geometry(c, x.shape(), &conv_kernel(w))?;
    let (x, pad) = asymmetric(x, &begin, &end, 0.0)?;
    match dims {
        1 => {
            let o = Conv1dOptions::new()
                .stride(strides[0])
                .dilation(dilations[0])
                .padding(pad[0])
                .groups(groups);
            one(x.try_conv1d(w, b, &o)?)
        }
        2 => {
            let o = Conv2dOptions::new()
                .stride([strides[0], strides[1]])
                .dilation([dilations[0], dilations[1]])
                .padding([pad[0], pad[1]])
                .groups(groups);
            one(x.try_conv2d(w, b, &o)?)
        }
        _ => Err(c.error(format!(
            "a {dims}-d convolution (1-d and 2-d are supported)"
        ))),
    }
}

/// The setting of a fused `Conv` + `Relu` step that says a 2x2, stride-2
/// `MaxPool` follows too (`fuse.rs`).
pub(crate) const FUSED_POOL: &str = "retrograd.fused_max_pool_2x2";

/// `Conv` then `Relu`, then a 2x2 stride-2 `MaxPool` if [`FUSED_POOL`] is
/// set, fused at import (`fuse.rs`): the convolution's inputs and
/// settings. One pass over the output
/// ([`conv2d_relu_values`](retrograd_engine::ops::nn::conv::conv2d_relu_values)) where
/// that is the same function and nothing needs the nodes: a 2-d
/// convolution with even pads, no input requiring grad and no tracing (as
/// [`product_with_bias`]); else the ops. That pass sums a deep 3x3 layer
/// by Winograd's F(2x2, 3x3) (`ConvSummation::Winograd`: 2.25x fewer
/// multiply-adds, not the ops' bits, as onnxruntime's kernels are not
/// PyTorch's).
pub(crate) fn fused_conv_relu<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let pool = c.attrs.int(FUSED_POOL, 0)? != 0;
    let (x, w, b) = (c.input(ins, 0)?, c.input(ins, 1)?, c.opt(ins, 2));
    let plain = [x, w]
        .into_iter()
        .chain(b)
        .all(|v| !v.requires_grad() && v.dtype().is_float());
    if plain && !c.graph.is_tracing() && x.shape().len() == 4 {
        let (strides, dilations, begin, end) = geometry(c, x.shape(), &conv_kernel(w))?;
        if begin == end {
            let o = Conv2dOptions::new()
                .stride([strides[0], strides[1]])
                .dilation([dilations[0], dilations[1]])
                .padding([begin[0], begin[1]])
                .groups(c.attrs.int("group", 1)?.max(1) as usize);
            let y = retrograd_engine::ops::nn::conv::conv2d_relu_values(
                x.value(),
                w.value(),
                b.map(|b| b.value()),
                &o,
                pool,
                ConvSummation::Winograd,
            )?;
            return one(c.constant(y));
        }
    }
    let y = conv(c, ins)?.swap_remove(0).try_relu()?;
    if pool {
        return one(y.try_max_pool2d(&MaxPool2dOptions::new([2, 2]).stride([2, 2]))?);
    }
    one(y)
}

pub(super) fn check_pool(a: &Attrs, _: i64) -> Checked {
    match a.string("auto_pad", "NOTSET").as_deref() {
        Ok("NOTSET" | "VALID" | "SAME_UPPER" | "SAME_LOWER") => {}
        Ok(other) => return Err(format!("auto_pad = {other:?}")),
        Err(e) => return Err(e.to_string()),
    }
    if !matches!(a.int("storage_order", 0), Ok(0 | 1)) {
        return Err("storage_order other than 0 or 1".into());
    }
    match a.ints("kernel_shape") {
        Ok(Some(k)) if !k.is_empty() => Ok(()),
        _ => Err("no kernel_shape".into()),
    }
}

/// The window's sizes (`kernel_shape`).
fn kernel(c: &Ctx<'_, '_>) -> Result<Vec<usize>> {
    let k = c.attrs.ints("kernel_shape")?.unwrap_or_default();
    if k.is_empty() || k.iter().any(|&v| v <= 0) {
        return Err(c.error(format!("kernel_shape {k:?}")));
    }
    Ok(k.into_iter().map(|v| v as usize).collect())
}

/// Whether a pad is past half the window (retrograd's 2-d pooling pads at
/// most half a window).
fn wide(k: &[usize], begin: &[usize], end: &[usize]) -> bool {
    begin
        .iter()
        .chain(end)
        .zip(k.iter().chain(k))
        .any(|(&p, &k)| 2 * p > k)
}

/// 2-d windows on `[n, c, h, w]` run as retrograd's `max_pool2d` (pads
/// past half the window made explicit); other ranks, and the indices
/// output, as gathered windows (`pool.rs`).
pub(super) fn max_pool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if !x.dtype().is_float() {
        // Integers (8-bit images) pool exactly as f64 and come back.
        let wide = x.try_to_dtype(retrograd_engine::tensor::DType::F64)?;
        let mut outs = max_pool(c, &[Some(wide)])?;
        outs[0] = outs[0].try_to_dtype(x.dtype())?;
        return Ok(outs);
    }
    let k = kernel(c)?;
    let (strides, dilations, begin, end) = geometry(c, x.shape(), &k)?;
    let ceil = c.attrs.int("ceil_mode", 0)? != 0;
    let is_wide = wide(&k, &begin, &end);
    if c.n_outputs > 1 || k.len() != 2 || x.shape().len() != 4 || (is_wide && ceil) {
        let g = (&strides[..], &dilations[..], &begin[..], &end[..]);
        let (y, mut indices) = pool::pool(c, x, &k, g, pool::Kind::Max)?;
        if c.attrs.int("storage_order", 0)? == 1 {
            indices = indices.map(|i| column_major(x.shape(), &i)).transpose()?;
        }
        let mut outs = vec![y];
        outs.extend(indices.map(|i| c.constant(i)));
        return Ok(outs);
    }
    let (x, pad) = if is_wide {
        let mut torch = Vec::new();
        for d in (0..2).rev() {
            torch.extend([begin[d] as isize, end[d] as isize]);
        }
        (x.try_pad(&torch, f64::NEG_INFINITY)?, vec![0, 0])
    } else {
        asymmetric(x, &begin, &end, f64::NEG_INFINITY)?
    };
    let o = MaxPool2dOptions::new([k[0], k[1]])
        .stride([strides[0], strides[1]])
        .padding([pad[0], pad[1]])
        .dilation([dilations[0], dilations[1]])
        .ceil_mode(ceil);
    one(x.try_max_pool2d(&o)?)
}

/// Row-major flat indices into `shape` as `storage_order = 1` counts
/// them: each batch and channel's spatial axes column-major.
fn column_major(shape: &[usize], indices: &Tensor) -> Result<Tensor> {
    let spatial = &shape[2.min(shape.len())..];
    let plane: usize = spatial.iter().product();
    let v = indices.contiguous().to_vec::<i64>()?;
    let mut out = Vec::with_capacity(v.len());
    for &i in &v {
        let (outer, mut rest) = ((i as usize) / plane.max(1), (i as usize) % plane.max(1));
        let mut at = vec![0usize; spatial.len()];
        for d in (0..spatial.len()).rev() {
            at[d] = rest % spatial[d];
            rest /= spatial[d];
        }
        let flipped = (0..spatial.len())
            .rev()
            .fold(0, |acc, d| acc * spatial[d] + at[d]);
        out.push((outer * plane + flipped) as i64);
    }
    Tensor::from_vec(out, indices.shape())
}

/// 2-d, undilated, evenly padded windows as retrograd's `avg_pool2d`; the
/// rest as gathered windows (`pool.rs`).
pub(super) fn average_pool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let k = kernel(c)?;
    let (strides, dilations, begin, end) = geometry(c, x.shape(), &k)?;
    let count_pads = c.attrs.int("count_include_pad", 0)? != 0;
    let plain = k.len() == 2
        && x.shape().len() == 4
        && dilations.iter().all(|&d| d == 1)
        && begin == end
        && !wide(&k, &begin, &end);
    if !plain {
        let g = (&strides[..], &dilations[..], &begin[..], &end[..]);
        let kind = pool::Kind::Average { count_pads };
        return one(pool::pool(c, x, &k, g, kind)?.0);
    }
    let o = AvgPool2dOptions::new([k[0], k[1]])
        .stride([strides[0], strides[1]])
        .padding([begin[0], begin[1]])
        .ceil_mode(c.attrs.int("ceil_mode", 0)? != 0)
        .count_include_pad(count_pads);
    one(x.try_avg_pool2d(&o)?)
}

/// `(Σ |x|^p)^(1/p)` over each window (`p` default 2).
pub(super) fn lp_pool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let k = kernel(c)?;
    let (strides, dilations, begin, end) = geometry(c, x.shape(), &k)?;
    let p = c.attrs.int("p", 2)?;
    if p <= 0 {
        return Err(c.error(format!("p = {p}")));
    }
    let g = (&strides[..], &dilations[..], &begin[..], &end[..]);
    one(pool::pool(c, x, &k, g, pool::Kind::Lp(p as f64))?.0)
}

pub(super) fn global_average_pool<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    if x.shape().len() == 4 {
        return one(x.try_adaptive_avg_pool2d(1)?);
    }
    let axes: Vec<isize> = (2..x.shape().len() as isize).collect();
    one(x.try_mean_axes(&axes, true)?)
}

pub(super) fn check_batch_norm(a: &Attrs, opset: i64) -> Checked {
    match a.int("training_mode", 0) {
        Ok(0) => Ok(()),
        Ok(1) if opset >= 14 => Ok(()),
        _ => Err("training_mode = 1 before opset 14".into()),
    }
}

/// Inference batch norm with the running statistics (buffers); training
/// mode (the batch's statistics) in `norms.rs`.
pub(super) fn batch_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    if c.attrs.int("training_mode", 0)? != 0 {
        return super::norms::batch_norm_training(c, ins);
    }
    if c.n_outputs > 1 {
        return Err(c.error("BatchNormalization's training outputs are not supported"));
    }
    let x = c.input(ins, 0)?;
    let (scale, bias) = (c.input(ins, 1)?, c.input(ins, 2)?);
    let (mean, var) = (c.input(ins, 3)?.value(), c.input(ins, 4)?.value());
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let mut args = BatchNormArgs::new()
        .eps(eps)
        .running(mean, var)
        .training(false);
    args.weight = Some(scale);
    args.bias = Some(bias);
    one(x.try_batch_norm(&args)?.output)
}

/// Normalises over the axes from `axis` on. The optional second and third
/// outputs are the mean and `1 / sqrt(variance + epsilon)` over those
/// axes, kept as size-1 axes (composed from the same differentiable ops).
pub(super) fn layer_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let axis = c.axis(c.attrs.int("axis", -1)?, x.shape().len())?;
    let shape = x.shape()[axis..].to_vec();
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let y = x.try_layer_norm(&shape, Some(c.input(ins, 1)?), c.opt(ins, 2), eps)?;
    if c.n_outputs == 1 {
        return one(y);
    }
    let axes: Vec<isize> = (axis as isize..x.shape().len() as isize).collect();
    let mean = x.try_mean_axes(&axes, true)?;
    let centred = x.try_sub(&mean)?;
    let var = centred.try_mul(&centred)?.try_mean_axes(&axes, true)?;
    let eps = c.constant(Tensor::scalar_of(eps, x.dtype()));
    let inv_std = var.try_add(&eps)?.try_rsqrt()?;
    Ok(vec![y, mean, inv_std])
}

/// `Add` then `LayerNormalization` over the last axis, fused at import
/// (`fuse.rs`): inputs `a`, `b`, the scale and the optional bias, the
/// norm's settings. One pass per row (`kernels::nn::norm::add_layer_norm`)
/// where nothing requires grad or traces and `a`, `b` have one shape, else
/// the two ops.
pub(crate) fn fused_add_layer_norm<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (a, b, w) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let bias = c.opt(ins, 3);
    let eps = c.attrs.float("epsilon", 1e-5)?;
    let rank = a.shape().len();
    let m = a.shape().last().copied().unwrap_or(0);
    let plain = [a, b, w]
        .into_iter()
        .chain(bias)
        .all(|v| !v.requires_grad() && v.dtype() == a.dtype() && v.dtype().is_float());
    let last_axis = c.axis(c.attrs.int("axis", -1)?, rank.max(1))? + 1 == rank;
    let fits = plain
        && !c.graph.is_tracing()
        && rank >= 1
        && m > 0
        && last_axis
        && a.shape() == b.shape()
        && w.shape() == [m]
        && bias.is_none_or(|t| t.shape() == [m])
        && eps.is_finite()
        && eps >= 0.0;
    if fits {
        let (xa, xb, xw) = (
            a.value().contiguous(),
            b.value().contiguous(),
            w.value().contiguous(),
        );
        let xbias = bias.map(|t| t.value().contiguous());
        let y = retrograd_engine::with_dtype!("onnx Add+LayerNormalization", a.dtype(), T => {
            Tensor::build::<T>(Dims::from_slice(a.shape()), |out| {
                retrograd_engine::kernels::nn::norm::add_layer_norm(
                    xa.as_slice_of::<T>(),
                    xb.as_slice_of::<T>(),
                    m,
                    Some(xw.as_slice_of::<T>()),
                    xbias.as_ref().map(|t| t.as_slice_of::<T>()),
                    eps,
                    out,
                )
            })
        });
        return one(c.constant(y));
    }
    let mut inputs = vec![Some(a.try_add(b)?), Some(w.clone())];
    inputs.extend(bias.map(|t| Some(t.clone())));
    layer_norm(c, &inputs)
}

/// `f` along one axis (opset 13 and later, default the last); before
/// opset 13, over everything from `axis` on (default 1) as one row, the
/// input read as a matrix `[prod(dims[..axis]), prod(dims[axis..])]`.
pub(super) fn along_axis<'g>(
    c: &Ctx<'_, 'g>,
    ins: &Ins<'g>,
    f: impl Fn(&Var<'g>, isize) -> Result<Var<'g>>,
) -> Result<Var<'g>> {
    let x = c.input(ins, 0)?;
    if c.opset >= 13 {
        return f(x, c.attrs.int("axis", -1)? as isize);
    }
    let rank = x.shape().len();
    let axis = if c.attrs.int("axis", 1)? == rank as i64 {
        rank
    } else {
        c.axis(c.attrs.int("axis", 1)?, rank)?
    };
    let lead: usize = x.shape()[..axis].iter().product();
    let rows = x.try_reshape(&[lead as isize, -1])?;
    let shape: Vec<isize> = x.shape().iter().map(|&d| d as isize).collect();
    f(&rows, 1)?.try_reshape(&shape)
}

pub(super) fn softmax<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(along_axis(c, ins, |x, a| x.try_softmax(a))?)
}

pub(super) fn log_softmax<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    one(along_axis(c, ins, |x, a| x.try_log_softmax(a))?)
}

/// The attention `fuse.rs` matched: inputs `q`, `k` (or `kᵀ` when
/// `k_transposed`), `v` and an optional additive mask; settings `scale`,
/// `causal` and the softmax's `axis`. Runs retrograd's fused
/// `scaled_dot_product_attention` where its contract holds (softmax over
/// the last axis, `q`, `k`, `v` of one rank with equal leading dims);
/// otherwise the nodes' own composition, so the result never changes.
pub(crate) fn fused_attention<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    use retrograd_engine::ops::nn::{AttnMask, SdpaOptions};
    let (q, k, v) = (c.input(ins, 0)?, c.input(ins, 1)?, c.input(ins, 2)?);
    let k = if c.attrs.int("k_transposed", 0)? != 0 {
        k.try_transpose(-2, -1)?
    } else {
        k.clone()
    };
    let scale = c.attrs.float("scale", 1.0)?;
    let causal = c.attrs.int("causal", 0)? != 0;
    let mask = c.opt(ins, 3);
    let rank = q.shape().len();
    let axis = c.attrs.int("axis", -1)?;
    let lead =
        |x: &Var<'g>| x.shape().len() == rank && x.shape()[..rank - 2] == q.shape()[..rank - 2];
    let fits = rank >= 2
        && (axis == -1 || axis == rank as i64 - 1)
        && lead(&k)
        && lead(v)
        && k.shape()[rank - 1] == q.shape()[rank - 1]
        && v.shape()[rank - 2] == k.shape()[rank - 2]
        && mask.is_none_or(|m| m.dtype() == q.dtype())
        && !(causal && q.shape()[rank - 2] != k.shape()[rank - 2]);
    let plain = [q, &k, v]
        .into_iter()
        .chain(mask)
        .all(|x| !x.requires_grad());
    if fits && plain && !c.graph.is_tracing() {
        let (m, kv) = (mask.map(Var::value), k.value());
        let y = retrograd_engine::ops::nn::attention_inference(
            q.value(),
            kv,
            v.value(),
            m,
            Some(scale),
            causal,
        )?;
        return one(c.constant(y));
    }
    if fits {
        let mut options = SdpaOptions::new().scale(Some(scale)).is_causal(causal);
        if let Some(m) = mask {
            options = options.attn_mask(AttnMask::Additive(m));
        }
        return one(q.try_scaled_dot_product_attention(&k, v, &options)?);
    }
    let scale = c.constant(Tensor::scalar_of(scale, q.dtype()));
    let mut scores = q.try_matmul(&k.try_transpose(-2, -1)?)?.try_mul(&scale)?;
    if causal {
        let n = q.shape()[rank - 2];
        let mut m = vec![0.0; n * n];
        for i in 0..n {
            for j in i + 1..n {
                m[i * n + j] = f64::NEG_INFINITY;
            }
        }
        scores = scores.try_add(&c.constant(Tensor::from_f64_slice(&m, &[n, n], q.dtype())?))?;
    }
    if let Some(m) = mask {
        scores = scores.try_add(m)?;
    }
    one(scores.try_softmax(axis as isize)?.try_matmul(v)?)
}
