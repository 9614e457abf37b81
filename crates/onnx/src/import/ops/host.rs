//! Integer and bool values: shape arithmetic (`Shape` → `Gather` → `Mul`
//! → `Concat` → `Reshape` chains) and mask logic. retrograd's arithmetic
//! is for floats, so these run in f64 (exact for integers below 2^53) and
//! are converted back: constants, never differentiated.

use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::shape::broadcast_shapes;
use retrograd_engine::tensor::{DType, Tensor};

/// Whether `v` holds integers or bools rather than floats.
pub(crate) fn is_int(v: &Var<'_>) -> bool {
    matches!(v.dtype(), DType::I64 | DType::Bool)
}

/// `f(a, b)` on integers: computed in f64, truncated toward zero (ONNX's
/// integer division) and returned as i64.
pub(crate) fn int_binary<'g>(
    a: &Var<'g>,
    b: &Var<'g>,
    f: impl Fn(&Var<'g>, &Var<'g>) -> Result<Var<'g>>,
) -> Result<Var<'g>> {
    let r = f(&a.try_to_dtype(DType::F64)?, &b.try_to_dtype(DType::F64)?)?;
    let truncated = r.value().map_f64(f64::trunc);
    Ok(Var::constant_in(a.graph(), truncated.to_dtype(DType::I64)))
}

/// `f(a, b)` on two bool masks, through 0/1 values.
pub(crate) fn bool_binary<'g>(
    a: &Var<'g>,
    b: &Var<'g>,
    f: impl Fn(&Var<'g>, &Var<'g>) -> Result<Var<'g>>,
) -> Result<Var<'g>> {
    f(&a.try_to_dtype(DType::F64)?, &b.try_to_dtype(DType::F64)?)
}

/// `f` elementwise on two bool tensors, broadcast, on plain values: one
/// pass, where the 0/1 path of [`bool_binary`] makes four over f64 (a
/// BERT's `[batch, 1, L, L]` attention mask took 6 ms that way).
pub(crate) fn bool_binary_plain(
    a: &Tensor,
    b: &Tensor,
    f: fn(bool, bool) -> bool,
) -> Result<Tensor> {
    let shape = broadcast_shapes("onnx logical op", a.shape(), b.shape())?;
    let x = a.expand(&shape)?.contiguous().to_vec::<bool>()?;
    let y = b.expand(&shape)?.contiguous().to_vec::<bool>()?;
    Tensor::from_vec(x.into_iter().zip(y).map(|(p, q)| f(p, q)).collect(), &shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrograd_engine::Graph;

    #[test]
    fn plain_logical_ops_match_the_recorded_path() {
        let g = Graph::new();
        let a = Tensor::from_vec(vec![true, false, true], &[3, 1]).unwrap();
        let b = Tensor::from_vec(vec![true, true, false, false], &[1, 4]).unwrap();
        let and = bool_binary_plain(&a, &b, |p, q| p && q).unwrap();
        let recorded = bool_binary(&g.constant(a.clone()), &g.constant(b.clone()), |x, y| {
            x.try_mul(y)?.try_ne_scalar(0.0)
        })
        .unwrap();
        assert_eq!(and.shape(), &[3, 4]);
        assert_eq!(
            and.to_vec::<bool>().unwrap(),
            recorded.value().to_vec::<bool>().unwrap()
        );
        // [1, 4] against [2] does not broadcast.
        assert!(bool_binary_plain(
            &b,
            &Tensor::from_vec(vec![true; 2], &[2]).unwrap(),
            |p, q| p || q
        )
        .is_err());
    }

    #[test]
    fn integer_division_truncates_toward_zero() {
        let g = Graph::new();
        let a = g.constant(Tensor::from_vec(vec![7i64, -7, 9], &[3]).unwrap());
        let b = g.constant(Tensor::scalar(2i64));
        let q = int_binary(&a, &b, |x, y| x.try_div(y)).unwrap();
        assert_eq!(q.value().to_vec::<i64>().unwrap(), vec![3, -3, 4]);
        assert!(is_int(&q));
    }
}
