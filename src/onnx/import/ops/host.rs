//! Integer and bool values: shape arithmetic (`Shape` → `Gather` → `Mul`
//! → `Concat` → `Reshape` chains) and mask logic. retrograd's arithmetic
//! is for floats, so these run in f64 (exact for integers below 2^53) and
//! are converted back: constants, never differentiated.

use crate::error::Result;
use crate::graph::Var;
use crate::tensor::DType;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Graph, Tensor};

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
