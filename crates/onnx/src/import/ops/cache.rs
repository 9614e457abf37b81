//! `TensorScatter`: a key/value cache written at each batch row's write
//! index along the sequence axis, as one `gather` from the cache and the
//! update side by side (so both receive gradients).

use super::{one, Ctx};
use retrograd_engine::base::error::Result;
use retrograd_engine::core::graph::Var;
use retrograd_engine::tensor::Tensor;

type Ins<'g> = [Option<Var<'g>>];

/// `TensorScatter` with `mode` `linear` (the update must fit after the
/// index) or `circular` (positions wrap around the cache's length).
pub(super) fn tensor_scatter<'g>(c: &Ctx<'_, 'g>, ins: &Ins<'g>) -> Result<Vec<Var<'g>>> {
    let (past, update) = (c.input(ins, 0)?, c.input(ins, 1)?);
    let (ps, us) = (past.shape().to_vec(), update.shape().to_vec());
    let rank = ps.len();
    let axis = c.axis(c.attrs.int("axis", -2)?, rank)?;
    let circular = match c.attrs.string("mode", "linear")?.as_str() {
        "linear" => false,
        "circular" => true,
        other => return Err(c.error(format!("mode {other:?} (linear or circular)"))),
    };
    let fits = us.len() == rank
        && axis > 0
        && (0..rank).all(|d| {
            if d == axis {
                us[d] <= ps[d]
            } else {
                us[d] == ps[d]
            }
        });
    if !fits {
        return Err(c.error(format!(
            "past_cache of shape {ps:?} and update of shape {us:?} on axis {axis}"
        )));
    }
    let (max, len) = (ps[axis] as i64, us[axis] as i64);
    let writes = match c.opt(ins, 2) {
        Some(w) => c.ints(w)?,
        None => vec![0; ps[0]],
    };
    if writes.len() != ps[0] {
        return Err(c.error(format!(
            "{} write indices for a batch of {}",
            writes.len(),
            ps[0]
        )));
    }
    // Per batch row, each cache position's source: itself, or `max + j`
    // for the update's `j`-th entry.
    let mut source = vec![0i64; ps[0] * ps[axis]];
    for (b, &w) in writes.iter().enumerate() {
        let row = &mut source[b * ps[axis]..][..ps[axis]];
        for (s, v) in row.iter_mut().enumerate() {
            *v = s as i64;
        }
        if !circular && (w < 0 || w + len > max) {
            return Err(c.error(format!(
                "write index {w} and {len} updates overflow a cache of {max}"
            )));
        }
        for j in 0..len {
            row[(w + j).rem_euclid(max) as usize] = max + j;
        }
    }
    // The index spans the whole output shape, as `gather` takes it.
    let total: usize = ps.iter().product();
    c.check_size(&ps)?;
    let mut index = Vec::with_capacity(total);
    let inner: usize = ps[axis + 1..].iter().product();
    let per_batch: usize = ps[1..].iter().product();
    for flat in 0..total {
        let b = flat / per_batch;
        let s = (flat / inner) % ps[axis];
        index.push(source[b * ps[axis] + s]);
    }
    let both = Var::try_cat(&[past, update], axis as isize)?;
    one(both.try_gather(axis as isize, &Tensor::from_vec(index, &ps)?)?)
}
