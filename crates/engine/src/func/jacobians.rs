//! Jacobians and Hessians as one batched sweep: [`jacrev`] is `vmap` of a
//! vector-Jacobian product over the rows of the identity, [`jacfwd`] is
//! `vmap` of a Jacobian-vector product over its columns, and [`hessian`]
//! is `jacfwd` of `jacrev`. Each is recorded in the input's graph, so it
//! can be differentiated or vmapped again; the `try_*_at` forms take and
//! return plain tensors.

use crate::autograd::forward::push_tangents;
use crate::autograd::VMap;
use crate::base::error::Result;
use crate::core::graph::{Graph, Var};
use crate::tensor::shape::Dims;
use crate::tensor::{DType, Tensor};
use crate::{grad, GradOptions};

/// The Jacobian of `f` at `x` by reverse mode, shape `f(x).shape() ++
/// x.shape()`: one backward sweep batched over the rows of the identity
/// (`vmap` of a vector-Jacobian product), recorded in `x`'s graph.
///
/// ```
/// use retrograd::func::try_jacrev;
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::from_vec(vec![1.0, 3.0], &[2])?);
/// // f(x) = (x0 x1, x0 + x1): J = [[x1, x0], [1, 1]].
/// let j = try_jacrev(|x| {
///     let (a, b) = (x.select(0, 0), x.select(0, 1));
///     Ok(retrograd::Var::stack(&[&(&a * &b), &(&a + &b)], 0))
/// }, &x)?;
/// assert_eq!(j.value().to_f64_vec(), vec![3.0, 1.0, 1.0, 1.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_jacrev<'g, F>(f: F, x: &Var<'g>) -> Result<Var<'g>>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let out_shape = output_shape(&f, x)?;
    let rows = identity_rows(&out_shape, x.dtype())?;
    let rows = x.graph().constant(rows);
    let j = VMap::new()
        .in_axes(&[None, Some(0)])
        .try_call(|v| vjp_of_row(&f, v), &[x, &rows])?
        .remove(0);
    let mut shape = out_shape;
    shape.extend_from_slice(x.shape());
    j.reshape_dims(&shape)
}

/// Like [`try_jacrev`], but panics with its error.
#[track_caller]
pub fn jacrev<'g, F>(f: F, x: &Var<'g>) -> Var<'g>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    crate::base::error::or_panic(try_jacrev(f, x))
}

/// The Jacobian of `f` at `x` by forward mode, shape `f(x).shape() ++
/// x.shape()`: one tangent sweep batched over the columns of the identity
/// (`vmap` of a Jacobian-vector product), recorded in `x`'s graph.
///
/// ```
/// use retrograd::func::try_jacfwd;
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let x = g.variable(Tensor::from_vec(vec![1.0, 3.0], &[2])?);
/// let j = try_jacfwd(|x| Ok(x * x), &x)?;   // diag(2x)
/// assert_eq!(j.value().to_f64_vec(), vec![2.0, 0.0, 0.0, 6.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_jacfwd<'g, F>(f: F, x: &Var<'g>) -> Result<Var<'g>>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let columns = identity_rows(x.shape(), x.dtype())?;
    let columns = x.graph().constant(columns);
    // One column per row of `j`: the input's axes go last.
    let j = VMap::new()
        .in_axes(&[None, Some(0)])
        .try_call(|v| jvp_of_column(&f, v), &[x, &columns])?
        .remove(0);
    let out_rank = j.shape().len() - 1;
    let mut dims: Vec<isize> = (1..=out_rank as isize).collect();
    dims.push(0);
    let mut shape = j.shape()[1..].to_vec();
    shape.extend_from_slice(x.shape());
    j.try_permute(&dims)?.reshape_dims(&shape)
}

/// Like [`try_jacfwd`], but panics with its error.
#[track_caller]
pub fn jacfwd<'g, F>(f: F, x: &Var<'g>) -> Var<'g>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    crate::base::error::or_panic(try_jacfwd(f, x))
}

/// The Hessian of the scalar function `f` at `x`, shape `x.shape() ++
/// x.shape()`: [`try_jacfwd`] of [`try_jacrev`] (forward over reverse,
/// the cheapest composition), recorded in `x`'s graph.
///
/// ```
/// use retrograd::func::try_hessian;
/// use retrograd::{Graph, Tensor};
/// let g = Graph::new();
/// let p = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
/// // f(x, y) = x^2 y + y^3 at (1, 2): H = [[2y, 2x], [2x, 6y]].
/// let h = try_hessian(|v| {
///     let (x, y) = (v.select(0, 0), v.select(0, 1));
///     Ok(&x * &x * &y + &y * &y * &y)
/// }, &p)?;
/// assert_eq!(h.value().to_f64_vec(), vec![4.0, 2.0, 2.0, 12.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_hessian<'g, F>(f: F, x: &Var<'g>) -> Result<Var<'g>>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    try_jacfwd(|x| try_jacrev(&f, x), x)
}

/// Like [`try_hessian`], but panics with its error.
#[track_caller]
pub fn hessian<'g, F>(f: F, x: &Var<'g>) -> Var<'g>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    crate::base::error::or_panic(try_hessian(f, x))
}

/// [`try_jacrev`] on a plain tensor: the Jacobian's value.
pub fn try_jacrev_at<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let g = Graph::new();
    Ok(try_jacrev(f, &g.variable(x.clone()))?.into_value())
}

/// [`try_jacfwd`] on a plain tensor: the Jacobian's value.
pub fn try_jacfwd_at<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let g = Graph::new();
    Ok(try_jacfwd(f, &g.variable(x.clone()))?.into_value())
}

/// [`try_hessian`] on a plain tensor: the Hessian's value.
pub fn try_hessian_at<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let g = Graph::new();
    Ok(try_hessian(f, &g.variable(x.clone()))?.into_value())
}

/// `row · J_f(x)` for `v = [x, row]`: a backward sweep seeded with `row`,
/// recorded so that it can be batched.
fn vjp_of_row<'s, F>(f: &F, v: &[Var<'s>]) -> Result<Vec<Var<'s>>>
where
    F: for<'t> Fn(&Var<'t>) -> Result<Var<'t>>,
{
    let (x, row) = (&v[0], &v[1]);
    let pulled = (&f(x)? * row).try_sum()?;
    let opts = GradOptions::new().create_graph(true).allow_unused(true);
    grad(&[&pulled], &[x], &opts)
}

/// `J_f(x) · column` for `v = [x, column]`: a tangent sweep, recorded so
/// that it can be batched.
fn jvp_of_column<'s, F>(f: &F, v: &[Var<'s>]) -> Result<Vec<Var<'s>>>
where
    F: for<'t> Fn(&Var<'t>) -> Result<Var<'t>>,
{
    let (x, column) = (&v[0], &v[1]);
    let y = f(x)?;
    let t = push_tangents(x.graph(), &[(x.slot(), column.clone())], &y)?;
    Ok(vec![match t {
        Some(t) => t,
        None => x.graph().constant(y.value().zeros_like()),
    }])
}

/// The shape of `f(x)`, from a run that records nothing.
fn output_shape<F>(f: &F, x: &Var<'_>) -> Result<Vec<usize>>
where
    F: for<'s> Fn(&Var<'s>) -> Result<Var<'s>>,
{
    let probe = Graph::inference().constant(x.value().clone());
    Ok(f(&probe)?.shape().to_vec())
}

/// The rows of the identity over a value of `shape`: `[numel, ...shape]`,
/// row `i` one at element `i` and zero elsewhere.
fn identity_rows(shape: &[usize], dtype: DType) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let mut rows_shape = Dims::from_slice(&[n]);
    rows_shape.extend_from_slice(shape);
    let mut rows = Tensor::zeros(&rows_shape, dtype)?;
    crate::with_dtype!("jacobian", dtype, T => {
        let values = rows.make_mut::<T>()?;
        for i in 0..n {
            values[i * n + i] = 1.0 as T;
        }
    });
    Ok(rows)
}
