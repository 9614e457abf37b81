//! [`VMap`] and [`vmap`]: a function written for one example, run over a
//! batch as one batched computation.

use super::example_trace::ExampleTrace;
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::core::{BatchContext, Batched, Randomness};

/// How to vmap a function: which axis of each input is the batch
/// (`None`: the input is shared by every example), where each output's
/// batch axis goes, how many examples run at once, and what random ops do.
///
/// The function runs once, on the first example, in a scratch graph;
/// every op it recorded is then recorded again in the inputs' graph over
/// the whole batch, by the op's batching rule (a matmul becomes a batched
/// matmul, a reduction moves its axes past the batch, an elementwise op
/// broadcasts). So the result is an ordinary graph of batched values:
/// backward, traces, pictures and compiled steps read it as any other. An
/// op without a batching rule is an error naming it.
///
/// The function sees values, not symbols: Rust control flow that depends
/// on an input's values follows the first example for every example (as
/// under `jax.vmap`, such a function cannot be batched). Branches on
/// shapes are safe: every example has the same shapes.
///
/// ```
/// use retrograd::func::{example_fn, VMap};
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// // Three examples of 2 features, one shared weight vector.
/// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[3, 2])?);
/// let w = g.variable(Tensor::from_vec(vec![10.0, 1.0], &[2])?);
/// let dot = example_fn(|v| Ok(vec![(&v[0] * &v[1]).sum()]));
/// let y = VMap::new().in_axes(&[Some(0), None]).try_call(&dot, &[&x, &w])?.remove(0);
/// assert_eq!(y.value().to_f64_vec(), vec![12.0, 34.0, 56.0]);
/// // An ordinary graph: the gradient of the sum with respect to w.
/// assert_eq!(y.sum().backward()?.wrt(&w).to_f64_vec(), vec![9.0, 12.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct VMap {
    in_axes: Option<Vec<Option<usize>>>,
    out_axes: Option<Vec<Option<usize>>>,
    chunk_size: Option<usize>,
    randomness: Randomness,
}

impl VMap {
    /// Batch axis 0 for every input and output, the whole batch at once,
    /// random ops refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// The batch axis of each input, `None` for an input shared by every
    /// example (default: axis 0 for every input).
    pub fn in_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.in_axes = Some(axes.to_vec());
        self
    }

    /// Where each output's batch axis goes; `None` returns the output
    /// without one, which it must not have (default: axis 0 for every
    /// output). An output that is the same for every example is expanded
    /// along its batch axis (a view).
    pub fn out_axes(mut self, axes: &[Option<usize>]) -> Self {
        self.out_axes = Some(axes.to_vec());
        self
    }

    /// Runs at most `size` examples at a time and joins the results, to
    /// bound the memory of one batched step (default: all at once). Zero
    /// is an error when called.
    pub fn chunk_size(mut self, size: usize) -> Self {
        self.chunk_size = Some(size);
        self
    }

    /// What random ops do ([`Randomness`]; default: refused).
    pub fn randomness(mut self, randomness: Randomness) -> Self {
        self.randomness = randomness;
        self
    }

    /// Runs `f`, written for one example, over the batch in `inputs` (all
    /// of one graph), returning its outputs with their batch axes.
    ///
    /// Errors: inputs of different graphs, an in or out axis count that
    /// does not match, an axis past an input's rank, batch axes of
    /// different sizes, no batched input, a chunk size of zero, an output
    /// with a batch axis where `None` was asked, and any op in `f` without
    /// a batching rule (or random, under [`Randomness::Error`]), each
    /// naming the input or op; `f`'s own errors come back as they are.
    pub fn try_call<'g, F>(&self, f: F, inputs: &[&Var<'g>]) -> Result<Vec<Var<'g>>>
    where
        F: for<'s> Fn(&[Var<'s>]) -> Result<Vec<Var<'s>>>,
    {
        let Some(first) = inputs.first() else {
            return Err(Error::invalid("vmap", "no inputs given"));
        };
        let graph: &'g Graph = first.graph();
        for x in inputs {
            graph.check_same("vmap", x)?;
        }
        let in_axes = self.input_axes(inputs)?;
        let size = batch_size(inputs, &in_axes)?;
        let chunk = match self.chunk_size {
            Some(0) => return Err(Error::invalid("vmap", "chunk_size must be at least 1")),
            Some(c) => c.min(size),
            None => size,
        };

        // The first example, recorded in a scratch graph that traces.
        let scratch = Graph::with_registry(graph.registry().clone());
        scratch.try_set_tracing(true)?;
        let examples = inputs
            .iter()
            .zip(&in_axes)
            .map(|(x, axis)| {
                let value = match axis {
                    Some(a) => x.value().select(*a as isize, 0)?.contiguous(),
                    None => x.value().clone(),
                };
                Ok(if value.is_float() {
                    scratch.variable(value)
                } else {
                    scratch.constant(value)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let ids: Vec<u32> = examples.iter().map(Var::slot).collect();
        let outputs = f(&examples)?;
        for out in &outputs {
            scratch.check_same("vmap", out)?;
        }
        let out_axes = self.output_axes(outputs.len())?;
        let trace = ExampleTrace::read(&scratch, &ids, &outputs)?;
        drop(outputs);

        // The batch, one chunk at a time, batch axes first.
        let leading: Vec<Option<Var<'g>>> = inputs
            .iter()
            .zip(&in_axes)
            .map(|(x, axis)| axis.map(|a| move_axis(x, a, 0)).transpose())
            .collect::<Result<_>>()?;
        let mut chunks: Vec<Vec<Var<'g>>> = Vec::new();
        for start in (0..size).step_by(chunk) {
            let len = chunk.min(size - start);
            let args = inputs
                .iter()
                .zip(&leading)
                .map(|(x, lead)| match lead {
                    Some(v) if len == size => Ok(Batched::along_batch(v.clone())),
                    Some(v) => Ok(Batched::along_batch(v.try_narrow(
                        0,
                        start as isize,
                        len,
                    )?)),
                    None => Ok(Batched::shared((*x).clone())),
                })
                .collect::<Result<Vec<_>>>()?;
            let ctx = BatchContext {
                size: len,
                randomness: self.randomness,
            };
            let outs = trace.replay(graph, &args, &ctx)?;
            let placed = outs
                .iter()
                .zip(&out_axes)
                .enumerate()
                .map(|(i, (out, axis))| place_output(i, out, *axis, &ctx))
                .collect::<Result<Vec<_>>>()?;
            chunks.push(placed);
        }
        join_chunks(chunks, &out_axes)
    }

    /// Like [`try_call`](Self::try_call), but panics with its error.
    #[track_caller]
    pub fn call<'g, F>(&self, f: F, inputs: &[&Var<'g>]) -> Vec<Var<'g>>
    where
        F: for<'s> Fn(&[Var<'s>]) -> Result<Vec<Var<'s>>>,
    {
        crate::base::error::or_panic(self.try_call(f, inputs))
    }

    /// Each input's batch axis, checked against its rank.
    fn input_axes(&self, inputs: &[&Var<'_>]) -> Result<Vec<Option<usize>>> {
        let axes = match &self.in_axes {
            None => vec![Some(0); inputs.len()],
            Some(a) if a.len() == inputs.len() => a.clone(),
            Some(a) => {
                return Err(Error::invalid(
                    "vmap",
                    format!("{} in_axes for {} inputs", a.len(), inputs.len()),
                ))
            }
        };
        for (i, (x, axis)) in inputs.iter().zip(&axes).enumerate() {
            if let Some(a) = axis
                && *a >= x.shape().len()
            {
                return Err(Error::invalid(
                    "vmap",
                    format!(
                        "in_axes[{i}] = {a} is past input {i}'s rank (shape {:?})",
                        x.shape()
                    ),
                ));
            }
        }
        Ok(axes)
    }

    /// Each output's batch axis.
    fn output_axes(&self, count: usize) -> Result<Vec<Option<usize>>> {
        match &self.out_axes {
            None => Ok(vec![Some(0); count]),
            Some(a) if a.len() == count => Ok(a.clone()),
            Some(a) => Err(Error::invalid(
                "vmap",
                format!("{} out_axes for {count} outputs", a.len()),
            )),
        }
    }
}

/// `f` itself, typed as a function of one example's inputs. A closure kept
/// in a variable before it is handed to [`VMap::try_call`] loses the
/// signature that works for every graph (`for<'s> Fn(&[Var<'s>]) -> ...`)
/// unless something asks for it where the closure is written: this does.
///
/// ```
/// use retrograd::func::{example_fn, VMap};
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3])?);
/// let square = example_fn(|v| Ok(vec![&v[0] * &v[0]]));
/// let once = VMap::new().try_call(&square, &[&x])?;
/// let twice = VMap::new().try_call(&square, &[&once[0]])?;
/// assert_eq!(twice[0].value().to_f64_vec(), vec![1.0, 16.0, 81.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn example_fn<F>(f: F) -> F
where
    F: for<'s> Fn(&[Var<'s>]) -> Result<Vec<Var<'s>>>,
{
    f
}

/// A one-output function of inputs batched along axis 0, run over the
/// batch: [`VMap`] with its defaults.
///
/// ```
/// use retrograd::func::try_vmap;
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
/// // The squared norm of each row.
/// let y = try_vmap(|v| Ok((&v[0] * &v[0]).sum()), &[&x])?;
/// assert_eq!(y.value().to_f64_vec(), vec![5.0, 25.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_vmap<'g, F>(f: F, inputs: &[&Var<'g>]) -> Result<Var<'g>>
where
    F: for<'s> Fn(&[Var<'s>]) -> Result<Var<'s>>,
{
    let mut outs = VMap::new().try_call(|v| Ok(vec![f(v)?]), inputs)?;
    Ok(outs.remove(0))
}

/// Like [`try_vmap`], but panics with its error.
#[track_caller]
pub fn vmap<'g, F>(f: F, inputs: &[&Var<'g>]) -> Var<'g>
where
    F: for<'s> Fn(&[Var<'s>]) -> Result<Var<'s>>,
{
    crate::base::error::or_panic(try_vmap(f, inputs))
}

/// The batch size: the one size of every batched input's batch axis.
fn batch_size(inputs: &[&Var<'_>], axes: &[Option<usize>]) -> Result<usize> {
    let mut size: Option<(usize, usize)> = None;
    for (i, (x, axis)) in inputs.iter().zip(axes).enumerate() {
        let Some(a) = axis else { continue };
        let n = x.shape()[*a];
        match size {
            None => size = Some((i, n)),
            Some((j, m)) if m != n => {
                return Err(Error::invalid(
                    "vmap",
                    format!(
                        "input {j} has {m} examples along its batch axis but input {i} has {n} \
                         (shapes {:?} and {:?})",
                        inputs[j].shape(),
                        x.shape()
                    ),
                ))
            }
            Some(_) => {}
        }
    }
    match size {
        Some((_, 0)) => Err(Error::invalid("vmap", "the batch is empty")),
        Some((_, n)) => Ok(n),
        None => Err(Error::invalid(
            "vmap",
            "no input has a batch axis (every in_axes entry is None)",
        )),
    }
}

/// `x` with axis `from` moved to position `to` (the others in order).
fn move_axis<'g>(x: &Var<'g>, from: usize, to: usize) -> Result<Var<'g>> {
    if from == to {
        return Ok(x.clone());
    }
    let mut dims: Vec<isize> = (0..x.shape().len() as isize)
        .filter(|&d| d != from as isize)
        .collect();
    dims.insert(to, from as isize);
    x.try_permute(&dims)
}

/// Output `i` with its batch axis at `axis`, or without one (`None`).
fn place_output<'g>(
    i: usize,
    out: &Batched<'g>,
    axis: Option<usize>,
    ctx: &BatchContext,
) -> Result<Var<'g>> {
    let Some(axis) = axis else {
        if out.batched {
            return Err(Error::invalid(
                "vmap",
                format!("out_axes[{i}] is None but output {i} differs between examples"),
            ));
        }
        return Ok(out.value.clone());
    };
    let rank = out.example_rank();
    if axis > rank {
        return Err(Error::invalid(
            "vmap",
            format!("out_axes[{i}] = {axis} is past output {i}'s rank {rank} plus its batch axis"),
        ));
    }
    let batched = if out.batched {
        out.value.clone()
    } else {
        let mut shape = vec![ctx.size];
        shape.extend_from_slice(out.value.shape());
        out.value.try_unsqueeze(0)?.try_expand(&shape)?
    };
    move_axis(&batched, 0, axis)
}

/// The chunks' outputs joined along each output's batch axis.
fn join_chunks<'g>(mut chunks: Vec<Vec<Var<'g>>>, axes: &[Option<usize>]) -> Result<Vec<Var<'g>>> {
    if chunks.len() == 1 {
        return Ok(chunks.remove(0));
    }
    (0..axes.len())
        .map(|i| match axes[i] {
            None => Ok(chunks[0][i].clone()),
            Some(axis) => {
                let parts: Vec<&Var<'g>> = chunks.iter().map(|c| &c[i]).collect();
                Var::try_cat(&parts, axis as isize)
            }
        })
        .collect()
}
