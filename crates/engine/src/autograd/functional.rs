//! Function-level derivatives for small problems: Hessian-vector products,
//! Hessians and Jacobians (which picks forward or reverse mode by shape).

use super::forward::jvp;
use super::grad::{grad, GradOptions};
use crate::base::error::{check_dtypes, Error, Result};
use crate::core::graph::{Graph, Var};
use crate::tensor::{DType, Tensor};

/// `H v`: the Hessian of the scalar function `f` at `x`, times `v`, by
/// reverse-over-reverse (differentiate `<grad f(x), v>` once more); costs a
/// few backward passes, never forms `H`.
///
/// ```
/// use retrograd::{hessian_vector_product, Tensor};
/// // f(x) = sum(x^3): H = diag(6x).
/// let x = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
/// let v = Tensor::from_vec(vec![1.0, 1.0], &[2])?;
/// let hv = hessian_vector_product(|x| Ok((x * x * x).sum()), &x, &v)?;
/// assert_eq!(hv.to_f64_vec(), vec![6.0, 12.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn hessian_vector_product<F>(f: F, x: &Tensor, v: &Tensor) -> Result<Tensor>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    if x.shape() != v.shape() {
        return Err(Error::shape_mismatch(
            "hessian_vector_product",
            x.shape(),
            v.shape(),
        ));
    }
    check_dtypes("hessian_vector_product", x.dtype(), v.dtype())?;
    let graph = Graph::new();
    let xv = graph.variable(x.clone());
    let y = scalar_output("hessian_vector_product", f(&xv)?)?;
    let opts = GradOptions::new().create_graph(true).allow_unused(true);
    let g = grad(&[&y], &[&xv], &opts)?.remove(0);
    let gv = g.try_mul(&graph.constant(v.clone()))?.sum();
    if !gv.requires_grad() {
        // The gradient does not depend on x: f is at most linear, H = 0.
        return Ok(x.zeros_like());
    }
    Ok(grad(&[&gv], &[&xv], &opts)?.remove(0).value().clone())
}

/// The Hessian of the scalar function `f` at `x`, shape `x.shape() ++ x.shape()`,
/// one Hessian-vector product per element of `x` (for small problems).
///
/// ```
/// use retrograd::{hessian, Tensor};
/// // f(x, y) = x^2 y + y^3 at (1, 2): H = [[2y, 2x], [2x, 6y]] = [[4, 2], [2, 12]].
/// let p = Tensor::from_vec(vec![1.0, 2.0], &[2])?;
/// let h = hessian(|v| {
///     let x = v.select(0, 0);
///     let y = v.select(0, 1);
///     Ok(&x * &x * &y + &y * &y * &y)
/// }, &p)?;
/// assert_eq!(h.to_f64_vec(), vec![4.0, 2.0, 2.0, 12.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn hessian<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    let n = x.numel();
    let mut rows = Vec::with_capacity(n * n);
    for i in 0..n {
        let hv = hessian_vector_product(&f, x, &basis(x, i)?)?;
        rows.extend(hv.to_f64_vec());
    }
    let mut shape = x.shape().to_vec();
    shape.extend_from_slice(x.shape());
    Tensor::from_f64_slice(&rows, &shape, x.dtype())
}

/// How [`jacobian_with`] computes a Jacobian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum JacobianMode {
    /// Forward mode when the input has fewer elements than the output, reverse otherwise.
    #[default]
    Auto,
    /// One forward-mode pass (`jvp`) per input element: a column at a time.
    Forward,
    /// One reverse-mode pass per output element: a row at a time.
    Reverse,
}

/// The Jacobian of `f` at `x`, shape `f(x).shape() ++ x.shape()`. Uses forward
/// mode when `x` has fewer elements than `f(x)` (fewer passes), reverse
/// mode otherwise — the argument for reverse mode (one pass per output), applied both ways.
///
/// ```
/// use retrograd::{jacobian, Tensor};
/// // f(x) = x * x (elementwise): J = diag(2x).
/// let x = Tensor::from_vec(vec![1.0, 3.0], &[2])?;
/// let j = jacobian(|x| Ok(x * x), &x)?;
/// assert_eq!(j.shape(), &[2, 2]);
/// assert_eq!(j.to_f64_vec(), vec![2.0, 0.0, 0.0, 6.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn jacobian<F>(f: F, x: &Tensor) -> Result<Tensor>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    jacobian_with(f, x, JacobianMode::Auto)
}

/// [`jacobian`] with an explicit mode.
pub fn jacobian_with<F>(f: F, x: &Tensor, mode: JacobianMode) -> Result<Tensor>
where
    F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>,
{
    let out_shape = {
        let g = Graph::new();
        let xv = g.constant(x.clone());
        g.no_grad(|| f(&xv))?.shape().to_vec()
    };
    let (n_in, n_out) = (x.numel(), out_shape.iter().product::<usize>());
    let forward = match mode {
        JacobianMode::Auto => n_in < n_out,
        JacobianMode::Forward => true,
        JacobianMode::Reverse => false,
    };
    let mut j = vec![0.0f64; n_out * n_in];
    if forward {
        for i in 0..n_in {
            let (_, column) = jvp(|v| f(&v[0]), std::slice::from_ref(x), &[basis(x, i)?])?;
            for (o, v) in column.to_f64_vec().into_iter().enumerate() {
                j[o * n_in + i] = v;
            }
        }
    } else {
        let graph = Graph::new();
        let xv = graph.variable(x.clone());
        let y = f(&xv)?;
        let opts = GradOptions::new().allow_unused(true);
        for o in 0..n_out {
            let seed = basis_shaped(&out_shape, y.dtype(), o)?;
            let row = if y.requires_grad() {
                grad(&[&y], &[&xv], &opts.clone().grad_outputs(vec![seed]))?.remove(0)
            } else {
                Var::constant_in(&graph, x.zeros_like())
            };
            j[o * n_in..(o + 1) * n_in].copy_from_slice(&row.value().to_f64_vec());
        }
    }
    let mut shape = out_shape;
    shape.extend_from_slice(x.shape());
    Tensor::from_f64_slice(&j, &shape, x.dtype())
}

fn scalar_output<'g>(op: &'static str, y: Var<'g>) -> Result<Var<'g>> {
    if y.value().numel() != 1 {
        return Err(Error::NotAScalar {
            op,
            shape: y.shape().to_vec(),
        });
    }
    Ok(y)
}

/// The `i`-th unit vector shaped like `x`.
fn basis(x: &Tensor, i: usize) -> Result<Tensor> {
    basis_shaped(x.shape(), x.dtype(), i)
}

fn basis_shaped(shape: &[usize], dtype: DType, i: usize) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    let mut e = vec![0.0; n];
    e[i] = 1.0;
    Tensor::from_f64_slice(&e, shape, dtype)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rosenbrock<'g>(v: &Var<'g>) -> Result<Var<'g>> {
        // f(x, y) = (1 - x)^2 + 100 (y - x^2)^2
        let x = v.select(0, 0);
        let y = v.select(0, 1);
        let a = x.rsub_scalar(1.0);
        let b = &y - &(&x * &x);
        Ok(&a * &a + &b * &b * 100.0)
    }

    #[test]
    fn rosenbrock_hessian_matches_the_closed_form() {
        for (x, y) in [(1.0, 1.0), (-1.2, 1.0), (0.5, -0.3)] {
            let h = hessian(rosenbrock, &Tensor::from_vec(vec![x, y], &[2]).unwrap())
                .unwrap()
                .to_f64_vec();
            // d2f/dx2 = 2 - 400 (y - 3x^2), d2f/dxdy = -400 x, d2f/dy2 = 200.
            let expect = [
                2.0 - 400.0 * (y - 3.0 * x * x),
                -400.0 * x,
                -400.0 * x,
                200.0,
            ];
            for (a, b) in h.iter().zip(expect) {
                assert!(
                    (a - b).abs() < 1e-9 * (1.0 + b.abs()),
                    "{h:?} vs {expect:?}"
                );
            }
        }
    }

    #[test]
    fn forward_and_reverse_jacobians_agree() {
        let x = Tensor::from_vec(vec![0.3, -0.7, 1.1], &[3]).unwrap();
        fn f<'g>(v: &Var<'g>) -> Result<Var<'g>> {
            let s = v.sum();
            Ok((v * &s).tanh() + v.exp())
        }
        let fw = jacobian_with(f, &x, JacobianMode::Forward).unwrap();
        let rv = jacobian_with(f, &x, JacobianMode::Reverse).unwrap();
        assert_eq!(fw.shape(), &[3, 3]);
        assert!(fw.allclose(&rv, 1e-12, 1e-12), "{fw} vs {rv}");
        let scalar = jacobian(|v| Ok(v.sum()), &x).unwrap();
        assert_eq!(scalar.shape(), &[3]);
        assert_eq!(scalar.to_f64_vec(), vec![1.0; 3]);
    }

    #[test]
    fn hvp_of_a_linear_function_is_zero_and_errors_are_typed() {
        let x = Tensor::from_vec(vec![1.0, 2.0], &[2]).unwrap();
        let v = Tensor::from_vec(vec![1.0, 1.0], &[2]).unwrap();
        let hv = hessian_vector_product(|x| Ok((x * 3.0).sum()), &x, &v).unwrap();
        assert_eq!(hv.to_f64_vec(), vec![0.0, 0.0]);
        assert!(hessian_vector_product(|x| Ok(x * 3.0), &x, &v).is_err());
        let bad = Tensor::from_vec(vec![1.0], &[1]).unwrap();
        assert!(hessian_vector_product(|x| Ok(x.sum()), &x, &bad).is_err());
    }
}
