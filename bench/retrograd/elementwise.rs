//! `elementwise`: memory bandwidth of `add` (f32) against a plain copy, and
//! the sweep that checks `kernels::parallel::PARALLEL_THRESHOLD`.
//!
//! Bytes counted: `add` reads two operands and writes one (12 bytes per f32
//! element); a copy reads one and writes one (8 bytes). The `copy` case goes
//! through the same allocation and chunking as every kernel (`kernels::map`
//! with the identity); `memcpy` is `copy_from_slice` into a buffer allocated
//! once, the machine's raw figure.

use std::mem::MaybeUninit;

use rayon::prelude::*;
use retrograd::{kernels, DType, Tensor};

use crate::report::{emit, time, time_pair, Stats};
use crate::Options;

retrograd::unary_fn!(Identity, |x| x);

fn gbs(bytes: f64, s: Stats) -> f64 {
    bytes / s.median / 1e9
}

pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick {
        &[1 << 16, 1 << 20]
    } else {
        &[1 << 20, 1 << 24]
    };
    for &n in sizes {
        let a = Tensor::randn(&[n], DType::F32, 1).expect("valid shape");
        let b = Tensor::randn(&[n], DType::F32, 2).expect("valid shape");
        let repeats = opts.repeats.max(if n <= 1 << 20 { 50 } else { 0 });
        let add = time(repeats, || {
            std::hint::black_box(kernels::zip("add", &a, &b, kernels::functors::Add).unwrap());
        });
        let copy = time(repeats, || {
            std::hint::black_box(kernels::map(&a, Identity).unwrap());
        });
        let src = a.as_slice::<f32>().unwrap();
        let mut dst = vec![0.0f32; n];
        let memcpy = time(repeats, || {
            dst.copy_from_slice(src);
            std::hint::black_box(&dst);
        });
        let f = n as f64 * 4.0;
        let (add_gbs, copy_gbs, memcpy_gbs) =
            (gbs(3.0 * f, add), gbs(2.0 * f, copy), gbs(2.0 * f, memcpy));
        for (case, s, rate) in [
            ("add", add, add_gbs),
            ("copy", copy, copy_gbs),
            ("memcpy", memcpy, memcpy_gbs),
        ] {
            emit(
                vec![
                    ("workload", "elementwise".into()),
                    ("case", case.into()),
                    ("dtype", "f32".into()),
                    ("n", n.into()),
                    ("gb_per_s", rate.into()),
                ],
                Some(s),
            );
        }
        emit(
            vec![
                ("workload", "elementwise".into()),
                ("case", "ratio".into()),
                ("n", n.into()),
                ("add_over_copy", (add_gbs / copy_gbs).into()),
                ("add_over_memcpy", (add_gbs / memcpy_gbs).into()),
            ],
            None,
        );
    }
    threshold(opts);
}

/// The kernels' add loop, on the calling thread or split into
/// `kernels::parallel::CHUNK`-element tasks, into a fresh allocation each
/// time (as a kernel's output is).
fn add_into_new(x: &[f32], y: &[f32], parallel: bool) -> Vec<f32> {
    let n = x.len();
    let mut out: Vec<f32> = Vec::with_capacity(n);
    let body = |off: usize, chunk: &mut [MaybeUninit<f32>]| {
        for ((o, &p), &q) in chunk.iter_mut().zip(&x[off..]).zip(&y[off..]) {
            o.write(p + q);
        }
    };
    let spare = &mut out.spare_capacity_mut()[..n];
    if parallel {
        let chunk = kernels::parallel::CHUNK;
        spare
            .par_chunks_mut(chunk)
            .enumerate()
            .for_each(|(i, c)| body(i * chunk, c));
    } else {
        body(0, spare);
    }
    // SAFETY: the chunks of `spare` cover its n slots, and `body` writes
    // each chunk in full (`x` and `y` hold n elements, so the zips end with
    // the chunk); `out` has capacity n.
    unsafe { out.set_len(n) };
    out
}

/// Serial vs parallel add from 16K to 1M elements.
fn threshold(opts: &Options) {
    let current = kernels::parallel::PARALLEL_THRESHOLD;
    let sizes: Vec<usize> = (14..=20).map(|p| 1usize << p).collect();
    for n in sizes {
        let a = Tensor::randn(&[n], DType::F32, 3).expect("valid shape");
        let b = Tensor::randn(&[n], DType::F32, 4).expect("valid shape");
        let (x, y) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
        let calls = ((1 << 22) / n).max(1);
        let reps = opts.repeats.max(20);
        let (serial, parallel) = time_pair(
            reps,
            || {
                for _ in 0..calls {
                    std::hint::black_box(add_into_new(x, y, false));
                }
            },
            || {
                for _ in 0..calls {
                    std::hint::black_box(add_into_new(x, y, true));
                }
            },
        );
        let library = time(reps, || {
            for _ in 0..calls {
                std::hint::black_box(kernels::zip("add", &a, &b, kernels::functors::Add).unwrap());
            }
        });
        let (serial, parallel, library) =
            (serial.per(calls), parallel.per(calls), library.per(calls));
        for (case, s) in [
            ("threshold_serial", serial),
            ("threshold_rayon", parallel),
            ("threshold_library", library),
        ] {
            emit(
                vec![
                    ("workload", "elementwise".into()),
                    ("case", case.into()),
                    ("dtype", "f32".into()),
                    ("n", n.into()),
                    (
                        "library_goes_parallel",
                        (if n >= current { "yes" } else { "no" }).into(),
                    ),
                    ("gb_per_s", gbs(12.0 * n as f64, s).into()),
                ],
                Some(s),
            );
        }
        emit(
            vec![
                ("workload", "elementwise".into()),
                ("case", "threshold_speedup".into()),
                ("n", n.into()),
                (
                    "rayon_over_serial",
                    (serial.median / parallel.median).into(),
                ),
                ("rayon_over_serial_min", (serial.min / parallel.min).into()),
            ],
            None,
        );
    }
}
