//! `matmul`: f32 matrix products. For each size, the `gemm` call alone (into
//! a preallocated buffer), `kernels::matmul` (which allocates its output),
//! the recorded graph op, and forward + backward of `sum(a @ b)` (three
//! products). Then the crossover between one thread and rayon for square
//! products, which sets `kernels::matmul::PARALLEL_FLOPS`.

use gemm::Parallelism;
use retrograd::{kernels, DType, Graph, Tensor};

use crate::report::{emit, time, time_pair, Stats};
use crate::Options;

fn gflops(flops: f64, s: Stats) -> f64 {
    flops / s.median / 1e9
}

/// `c = a @ b` for row-major square f32 matrices, straight through gemm.
fn gemm_square(n: usize, a: &[f32], b: &[f32], c: &mut [f32], par: Parallelism) {
    assert!(a.len() >= n * n && b.len() >= n * n && c.len() >= n * n);
    // SAFETY: the views (n x n, row stride n, column stride 1) stay inside
    // a, b and c, which hold at least n * n elements each (checked above);
    // `c` is borrowed mutably, so gemm's writes alias nothing else.
    unsafe {
        gemm::gemm(
            n,
            n,
            n,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.as_ptr(),
            1,
            n as isize,
            b.as_ptr(),
            1,
            n as isize,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

pub fn run(opts: &Options) {
    let sizes: &[usize] = if opts.quick {
        &[256, 512]
    } else {
        &[1024, 2048]
    };
    for &n in sizes {
        let repeats = if n >= 2048 {
            opts.repeats.min(7)
        } else {
            opts.repeats
        };
        let a = Tensor::randn(&[n, n], DType::F32, 1).expect("valid shape");
        let b = Tensor::randn(&[n, n], DType::F32, 2).expect("valid shape");
        let flops = 2.0 * (n as f64).powi(3);
        let line = |case: &str, s: Stats, flops: f64| {
            emit(
                vec![
                    ("framework", "retrograd".into()),
                    ("workload", "matmul".into()),
                    ("case", case.into()),
                    ("dtype", "f32".into()),
                    ("n", n.into()),
                    ("gflops", gflops(flops, s).into()),
                ],
                Some(s),
            )
        };

        let (sa, sb) = (a.as_slice::<f32>().unwrap(), b.as_slice::<f32>().unwrap());
        let mut c = vec![0.0f32; n * n];
        let s = time(repeats, || {
            gemm_square(n, sa, sb, &mut c, Parallelism::Rayon(0))
        });
        line("gemm_call", s, flops);

        let s = time(repeats, || {
            std::hint::black_box(kernels::matmul("matmul", &a, &b, false, false).unwrap());
        });
        line("kernel", s, flops);

        // A fresh graph each time: a graph keeps every output it records.
        let s = time(repeats, || {
            let g = Graph::new();
            let (x, y) = (g.variable(a.clone()), g.variable(b.clone()));
            std::hint::black_box(x.matmul(&y));
        });
        line("graph_op", s, flops);

        let s = time(repeats, || {
            let g = Graph::new();
            let (x, y) = (g.variable(a.clone()), g.variable(b.clone()));
            let grads = x.matmul(&y).sum().backward().unwrap();
            std::hint::black_box(grads.wrt(&x));
        });
        line("graph_forward_backward", s, 3.0 * flops);
    }
    threshold(opts);
}

/// One thread vs the pool for square products of growing size.
fn threshold(opts: &Options) {
    let sizes: &[usize] = if opts.quick {
        &[32, 96]
    } else {
        &[16, 32, 48, 64, 80, 96, 128, 192, 256]
    };
    for &n in sizes {
        let a = Tensor::randn(&[n, n], DType::F32, 3).expect("valid shape");
        let sa = a.as_slice::<f32>().unwrap();
        let (mut c1, mut c2) = (vec![0.0f32; n * n], vec![0.0f32; n * n]);
        // Small products are fast: time batches of calls so the clock
        // resolves them, alternating the two variants.
        let calls = (2_000_000 / (n * n * n)).clamp(1, 1000);
        let (serial, pool) = time_pair(
            opts.repeats.max(20),
            || {
                for _ in 0..calls {
                    gemm_square(n, sa, sa, &mut c1, Parallelism::None);
                }
            },
            || {
                for _ in 0..calls {
                    gemm_square(n, sa, sa, &mut c2, Parallelism::Rayon(0));
                }
            },
        );
        let (serial, pool) = (serial.per(calls), pool.per(calls));
        for (case, s) in [("threshold_one_thread", serial), ("threshold_rayon", pool)] {
            emit(
                vec![
                    ("workload", "matmul".into()),
                    ("case", case.into()),
                    ("dtype", "f32".into()),
                    ("n", n.into()),
                    ("flops_mnk", (n * n * n).into()),
                    ("gflops", gflops(2.0 * (n as f64).powi(3), s).into()),
                ],
                Some(s),
            );
        }
        emit(
            vec![
                ("workload", "matmul".into()),
                ("case", "threshold_speedup".into()),
                ("n", n.into()),
                (
                    "rayon_over_one_thread",
                    (serial.median / pool.median).into(),
                ),
                ("rayon_over_one_thread_min", (serial.min / pool.min).into()),
            ],
            None,
        );
    }
}
