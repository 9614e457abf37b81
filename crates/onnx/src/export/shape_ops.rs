//! Views and layout: reshape, flatten, squeeze/unsqueeze, expand,
//! transposes, slices, select, cat/stack, index_select, gather, pad.

use super::emit::{attr_int, attr_ints};
use super::{Emit, Mapper, NodeCtx};
use retrograd_engine::base::error::Result;

pub(super) fn lookup(op: &str) -> Option<Mapper> {
    Some(match op {
        "reshape" => reshape,
        "flatten" => flatten,
        "squeeze" => squeeze,
        "unsqueeze" => unsqueeze,
        "expand" => expand,
        "transpose" => transpose,
        "permute" => permute,
        "t" => t,
        "slice" => slice,
        "select" => select,
        "cat" => cat,
        "stack" => stack,
        "index_select" => |e, n| along_dim(e, n, "Gather"),
        "gather" => |e, n| along_dim(e, n, "GatherElements"),
        "constant_pad_nd" => pad,
        _ => return None,
    })
}

/// The shape input of a reshape of node `n` from `from` to `to`. Static:
/// the sizes themselves. With free axes (a dynamic batch or sequence), the
/// leading sizes that stay put are copied (`0`); of the others, those equal
/// to a free axis's recorded size follow it: one is inferred (`-1`), more
/// are read off the inputs when run (`Shape` nodes concatenated with the
/// fixed sizes: `[B * T, E]` back to `[B, T, E]`); with none and the batch
/// axis merged or split, the first size is inferred. So the same graph
/// reshapes any batch and length.
fn reshape_shape(e: &mut Emit, n: &NodeCtx<'_>, from: &[usize], to: &[usize]) -> Result<String> {
    let base = format!("{}/shape", n.out);
    let mut spec: Vec<i64> = to.iter().map(|&d| d as i64).collect();
    if !e.is_dynamic() || from.is_empty() || to.is_empty() {
        return e.ints(&base, &spec);
    }
    let kept = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    for s in spec.iter_mut().take(kept) {
        *s = 0;
    }
    let mut follows = Vec::new();
    for (i, &d) in to.iter().enumerate().skip(kept) {
        if let Some(f) = e.free_axis_of_size(d).map_err(|r| n.unsupported(r))? {
            follows.push((i, f));
        }
    }
    match follows.as_slice() {
        [] => {
            if kept == 0 {
                spec[0] = -1;
            }
            e.ints(&base, &spec)
        }
        [(i, _)] => {
            spec[*i] = -1;
            e.ints(&base, &spec)
        }
        _ => {
            let mut parts = Vec::new();
            let mut fixed = Vec::new();
            for (i, &s) in spec.iter().enumerate() {
                match follows.iter().find(|(j, _)| *j == i) {
                    Some((_, f)) => {
                        if !fixed.is_empty() {
                            parts.push(e.ints(&base, &std::mem::take(&mut fixed))?);
                        }
                        parts.push(e.size_of(f));
                    }
                    None => fixed.push(s),
                }
            }
            if !fixed.is_empty() {
                parts.push(e.ints(&base, &fixed)?);
            }
            let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
            Ok(e.op("Concat", &parts, &base, vec![attr_int("axis", 0)]))
        }
    }
}

fn reshape_to(e: &mut Emit, n: &NodeCtx<'_>, to: &[usize]) -> Result<()> {
    let shape = reshape_shape(e, n, n.shape(0), to)?;
    e.node("Reshape", &[n.input(0), &shape], &[&n.out], vec![]);
    Ok(())
}

fn reshape(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let to = n.output.shape().to_vec();
    reshape_to(e, n, &to)
}

/// `flatten(1, -1)` is ONNX's `Flatten(axis = 1)`; any other range a reshape.
fn flatten(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let start = n.axis(n.int("start")?, rank)?;
    let end = n.axis(n.int("end")?, rank)?;
    if rank >= 2 && start == 1 && end == rank as i64 - 1 {
        e.node(
            "Flatten",
            &[n.input(0)],
            &[&n.out],
            vec![attr_int("axis", 1)],
        );
        return Ok(());
    }
    let to = n.output.shape().to_vec();
    reshape_to(e, n, &to)
}

fn squeeze(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let shape = n.shape(0);
    let axes: Vec<i64> = match n.attrs.get_int("dim") {
        Some(d) => {
            let d = n.axis(d, shape.len())?;
            // PyTorch's squeeze(d) leaves a dimension that is not 1 alone.
            if shape.get(d as usize) == Some(&1) {
                vec![d]
            } else {
                vec![]
            }
        }
        None => (0..shape.len())
            .filter(|&i| shape[i] == 1)
            .map(|i| i as i64)
            .collect(),
    };
    if axes.is_empty() {
        e.node("Identity", &[n.input(0)], &[&n.out], vec![]);
        return Ok(());
    }
    let axes = e.ints(&format!("{}/axes", n.out), &axes)?;
    e.node("Squeeze", &[n.input(0), &axes], &[&n.out], vec![]);
    Ok(())
}

fn unsqueeze(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let d = n.axis(n.int("dim")?, n.rank(0) + 1)?;
    let axes = e.ints(&format!("{}/axes", n.out), &[d])?;
    e.node("Unsqueeze", &[n.input(0), &axes], &[&n.out], vec![]);
    Ok(())
}

/// ONNX's `Expand` broadcasts its shape with the input's, so a size the
/// input already has can be given as 1: with a dynamic batch axis, that
/// keeps the batch free.
fn expand(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let from = n.shape(0);
    let to = n.output.shape();
    let offset = to.len() - from.len();
    let spec: Vec<i64> = to
        .iter()
        .enumerate()
        .map(|(i, &d)| {
            let kept = i >= offset && from[i - offset] == d;
            if e.is_dynamic() && kept {
                1
            } else {
                d as i64
            }
        })
        .collect();
    let shape = e.ints(&format!("{}/shape", n.out), &spec)?;
    e.node("Expand", &[n.input(0), &shape], &[&n.out], vec![]);
    Ok(())
}

fn transpose_with(e: &mut Emit, n: &NodeCtx<'_>, perm: Vec<i64>) -> Result<()> {
    e.node(
        "Transpose",
        &[n.input(0)],
        &[&n.out],
        vec![attr_ints("perm", &perm)],
    );
    Ok(())
}

fn transpose(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let (a, b) = (n.axis(n.int("dim0")?, rank)?, n.axis(n.int("dim1")?, rank)?);
    let mut perm: Vec<i64> = (0..rank as i64).collect();
    if rank > 0 {
        perm.swap(a as usize, b as usize);
    }
    transpose_with(e, n, perm)
}

fn permute(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let perm = n
        .ints("dims")?
        .into_iter()
        .map(|d| n.axis(d, rank))
        .collect::<Result<Vec<_>>>()?;
    transpose_with(e, n, perm)
}

fn t(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    if n.rank(0) < 2 {
        e.node("Identity", &[n.input(0)], &[&n.out], vec![]);
        return Ok(());
    }
    transpose_with(e, n, vec![1, 0])
}

/// `narrow`/stepped slices: the recorded output fixes the exact range.
fn slice(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let dim = n.axis(n.int("dim")?, rank)?;
    let size = n.shape(0)[dim as usize] as i64;
    let step = n.int("step")?.max(1);
    let mut start = n.int("start")?;
    if start < 0 {
        start += size;
    }
    let start = start.clamp(0, size);
    let len = n.output.shape()[dim as usize] as i64;
    // Past the end means "to the end", which keeps a free batch axis free.
    let end = if len == 0 {
        start
    } else {
        let last = start + (len - 1) * step + 1;
        if last >= size {
            i64::MAX
        } else {
            last
        }
    };
    let name = |what: &str| format!("{}/{what}", n.out);
    let starts = e.ints(&name("starts"), &[start])?;
    // A prefix as long as a free axis was recorded at (a position table cut
    // to the sequence length) ends at that axis's size when run.
    let follows = match (start, step, end) {
        (0, 1, end) if end != i64::MAX => e
            .free_axis_of_size(len as usize)
            .map_err(|reason| n.unsupported(reason))?,
        _ => None,
    };
    let ends = match follows {
        Some(free) => e.size_of(&free),
        None => e.ints(&name("ends"), &[end])?,
    };
    let axes = e.ints(&name("axes"), &[dim])?;
    let steps = e.ints(&name("steps"), &[step])?;
    e.node(
        "Slice",
        &[n.input(0), &starts, &ends, &axes, &steps],
        &[&n.out],
        vec![],
    );
    Ok(())
}

/// `select(dim, i)`: `Gather` with a 0-d index drops the axis.
fn select(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let dim = n.axis(n.int("dim")?, rank)?;
    let index = e.constant(
        &format!("{}/index", n.out),
        &retrograd_engine::Tensor::scalar(n.int("index")?),
    )?;
    e.node(
        "Gather",
        &[n.input(0), &index],
        &[&n.out],
        vec![attr_int("axis", dim)],
    );
    Ok(())
}

fn cat(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let axis = n.axis(n.int("dim")?, n.rank(0))?;
    let inputs: Vec<&str> = n.inputs.iter().map(String::as_str).collect();
    e.node("Concat", &inputs, &[&n.out], vec![attr_int("axis", axis)]);
    Ok(())
}

fn stack(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let axis = n.axis(n.int("dim")?, n.rank(0) + 1)?;
    let axes = e.ints(&format!("{}/axes", n.out), &[axis])?;
    let mut parts = Vec::new();
    for i in 0..n.inputs.len() {
        let name = format!("{}/part{i}", n.out);
        parts.push(e.op("Unsqueeze", &[n.input(i), &axes], &name, vec![]));
    }
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    e.node("Concat", &parts, &[&n.out], vec![attr_int("axis", axis)]);
    Ok(())
}

/// ONNX's `op` over the input and its indices along our setting `dim`.
fn along_dim(e: &mut Emit, n: &NodeCtx<'_>, op: &str) -> Result<()> {
    let axis = n.axis(n.int("dim")?, n.rank(0))?;
    let inputs = [n.input(0), n.input(1)];
    e.node(op, &inputs, &[&n.out], vec![attr_int("axis", axis)]);
    Ok(())
}

/// PyTorch's pads run from the last dimension back, `(begin, end)` each;
/// ONNX's list every begin, then every end, first dimension first.
fn pad(e: &mut Emit, n: &NodeCtx<'_>) -> Result<()> {
    let rank = n.rank(0);
    let torch = n.ints("pads")?;
    if torch.len() % 2 != 0 || torch.len() / 2 > rank {
        return Err(n.unsupported(format!("pads {torch:?} do not fit rank {rank}")));
    }
    let mut begins = vec![0i64; rank];
    let mut ends = vec![0i64; rank];
    for (k, pair) in torch.chunks(2).enumerate() {
        begins[rank - 1 - k] = pair[0];
        ends[rank - 1 - k] = pair[1];
    }
    begins.extend(ends);
    let pads = e.ints(&format!("{}/pads", n.out), &begins)?;
    let value = e.scalar("pad_value", n.float("value")?, n.dtype())?;
    e.node("Pad", &[n.input(0), &pads, &value], &[&n.out], vec![]);
    Ok(())
}
