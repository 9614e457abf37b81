//! `Det`: the determinant of each trailing square matrix, by Gaussian
//! elimination on differentiable ops. The pivot rows (largest magnitude
//! in the column) are chosen on the host from the values and applied as a
//! `gather`; the determinant is the product of the pivots, its sign
//! flipped per row swap.

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

pub(super) fn det<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let x = c.input(ins, 0)?;
    let shape = x.shape().to_vec();
    let rank = shape.len();
    if rank < 2 || shape[rank - 1] != shape[rank - 2] || !x.dtype().is_float() {
        return Err(c.error(format!(
            "input of shape {shape:?} ({}): want float square matrices",
            x.dtype()
        )));
    }
    let n = shape[rank - 1];
    let batch: usize = shape[..rank - 2].iter().product();
    let out: Vec<isize> = shape[..rank - 2].iter().map(|&d| d as isize).collect();
    if n == 0 {
        return one(c.constant(Tensor::from_f64_slice(
            &vec![1.0; batch],
            &shape[..rank - 2],
            x.dtype(),
        )?));
    }
    let (b, ni) = (batch as isize, n as isize);
    let mut a = x.try_reshape(&[b, ni, ni])?;
    let mut sign = vec![1.0f64; batch];
    let mut pivots: Vec<Var<'g>> = Vec::with_capacity(n);
    for k in 0..n {
        let v = a.value().contiguous().to_f64_vec();
        let at = |m: usize, i: usize, j: usize| v[(m * n + i) * n + j];
        // Each matrix's row with the largest |value| in column k, from k on.
        let picks: Vec<usize> = (0..batch)
            .map(|m| {
                (k..n)
                    .max_by(|&i, &j| {
                        at(m, i, k)
                            .abs()
                            .total_cmp(&at(m, j, k).abs())
                            .then(j.cmp(&i))
                    })
                    .unwrap_or(k)
            })
            .collect();
        let zero: Vec<f64> = (0..batch)
            .map(|m| f64::from(u8::from(at(m, picks[m], k) == 0.0)))
            .collect();
        if picks.iter().any(|&p| p != k) {
            let mut index = Vec::with_capacity(batch * n * n);
            for (m, &p) in picks.iter().enumerate() {
                if p != k {
                    sign[m] = -sign[m];
                }
                for i in 0..n {
                    let src = if i == k {
                        p
                    } else if i == p {
                        k
                    } else {
                        i
                    };
                    index.extend(std::iter::repeat_n(src as i64, n));
                }
            }
            a = a.try_gather(1, &Tensor::from_vec(index, &[batch, n, n])?)?;
        }
        let row = a.try_narrow(1, k as isize, 1)?;
        let pivot = row.try_narrow(2, k as isize, 1)?;
        pivots.push(pivot.try_reshape(&[b])?);
        if k + 1 == n {
            break;
        }
        // A zero pivot (a singular matrix) divides by 1 instead: the
        // product is 0 either way.
        let safe = pivot.try_add(&c.constant(Tensor::from_f64_slice(
            &zero,
            &[batch, 1, 1],
            x.dtype(),
        )?))?;
        let below = a.try_narrow(1, (k + 1) as isize, n - k - 1)?;
        let factors = below.try_narrow(2, k as isize, 1)?.try_div(&safe)?;
        let below = below.try_sub(&factors.try_mul(&row)?)?;
        a = Var::try_cat(&[&a.try_narrow(1, 0, k + 1)?, &below], 1)?;
    }
    let mut d = c.constant(Tensor::from_f64_slice(&sign, &[batch], x.dtype())?);
    for p in &pivots {
        d = d.try_mul(p)?;
    }
    one(d.try_reshape(&out)?)
}
