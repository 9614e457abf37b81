//! Slice loops by [`Block`]s: 64 f32 elements at a time through a
//! function written over blocks, the tail element by element. A function
//! that is one long dependency chain per element (`erfc`, `exp`) keeps
//! four vectors' chains in flight this way (ARCHITECTURE.md, PERF: "Long
//! chains run in blocks"). Call it inside `simd::wide`, with the closures
//! marked `#[inline(always)]`: a closure left out of line is built for
//! the baseline CPU, where `mul_add` is a call to libm's `fmaf`.

use std::mem::MaybeUninit;

use crate::tensor::math::{Block, BLOCK};
use crate::tensor::{DType, Element};

/// `x` as f32 elements, if `T` is f32.
#[inline(always)]
fn as_f32<T: Element>(x: &[T]) -> Option<&[f32]> {
    // SAFETY: `T` is f32 (its dtype says so), so the layouts agree.
    (T::DTYPE == DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts(x.as_ptr().cast(), x.len()) })
}

/// `x` as f32 output slots, if `T` is f32.
#[inline(always)]
fn as_f32_out<T: Element>(x: &mut [MaybeUninit<T>]) -> Option<&mut [MaybeUninit<f32>]> {
    // SAFETY: as in `as_f32`.
    (T::DTYPE == DType::F32)
        .then(|| unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), x.len()) })
}

/// `x`'s elements as output slots (to overwrite them with [`by_blocks`]).
#[inline(always)]
pub(crate) fn as_slots<T>(x: &mut [T]) -> &mut [MaybeUninit<T>] {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and the slots are only
    // written with initialised values.
    unsafe { std::slice::from_raw_parts_mut(x.as_mut_ptr().cast(), x.len()) }
}

/// `out[i] = f(ins[0][i], ..)` with `f` given for blocks and for single
/// elements (the tail), when `T` is f32; `None` otherwise (the caller runs
/// its element loop). Each of `ins` is at least as long as `out`. Callers
/// ask only where the function's `BLOCKS` says it is a long chain, and
/// keep their element loop apart (in its own `wide` call), so that a short
/// function's loop compiles as if this did not exist.
#[inline(always)]
pub(crate) fn by_blocks<T: Element, const N: usize>(
    ins: [&[T]; N],
    out: &mut [MaybeUninit<T>],
    block: impl Fn([Block; N]) -> Block,
    one: impl Fn([f32; N]) -> f32,
) -> Option<()> {
    let out = as_f32_out(out)?;
    let n = out.len();
    let mut xs: [&[f32]; N] = [&[]; N];
    for (x, i) in xs.iter_mut().zip(ins) {
        *x = &as_f32(i)?[..n];
    }
    let full = n - n % BLOCK;
    for start in (0..full).step_by(BLOCK) {
        let args = xs.map(|x| {
            let mut b = [0.0; BLOCK];
            b.copy_from_slice(&x[start..start + BLOCK]);
            Block(b)
        });
        for (o, &v) in out[start..start + BLOCK].iter_mut().zip(&block(args).0) {
            o.write(v);
        }
    }
    for (i, o) in out.iter_mut().enumerate().skip(full) {
        o.write(one(xs.map(|x| x[i])));
    }
    Some(())
}
