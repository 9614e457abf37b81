//! GEMM bake-off (issue 19): f32 `C = op(A) op(B)` on retrograd's shapes,
//! timed side by side for the `gemm` crate (what `kernels::matmul` uses),
//! `faer`'s matmul, `matrixmultiply`'s sgemm and, with the `openblas`
//! feature, OpenBLAS's `cblas_sgemm`.
//!
//! ```text
//! cd bench/gemm-bakeoff
//! cargo run --release -- --threads 1 --reps 15
//! cargo run --release -- --threads 2 --reps 15
//! # with OpenBLAS (Debian: apt-get install libopenblas-dev):
//! cargo run --release --features openblas -- --threads 2
//! # Debian's OpenBLAS 0.3.21 does not know this CPU (family 6 model 207)
//! # and falls back to its Prescott kernels (~12 GFLOP/s); name the core:
//! OPENBLAS_CORETYPE=SkylakeX cargo run --release --features openblas -- --threads 2
//! # one group only (big, w2, gpt) or a shorter sample:
//! cargo run --release -- --threads 2 --only gpt --target-ms 10
//! ```
//!
//! One process runs one thread count: rayon's global pool (which `gemm` and
//! `faer` use) gets `--threads` threads, `matrixmultiply` reads
//! `MATMUL_NUM_THREADS` once (set here before its first call) and OpenBLAS
//! gets `openblas_set_num_threads`. With `--threads 2` the table also has
//! `gemm-seq` (`Parallelism::None`), which is what retrograd runs below its
//! `PARALLEL_FLOPS` (192^3 multiply-adds), and `gemm-rows` and `gemm-cols`:
//! the product cut into one part per thread along C's rows or columns, each
//! part a single-threaded gemm call. retrograd runs `gemm-rows` when
//! `m >= n` and `gemm-cols` otherwise (`kernels::matmul::gemm_split`).
//!
//! Each repetition runs every crate once, in an order rotated by one per
//! repetition (the machine is shared and noisy, so a burst of load hits all
//! crates alike), and a crate's sample is the mean of as many back-to-back
//! calls as fill `--target-ms`. The table reports the median GFLOP/s
//! (`2 m n k / t`) over `--reps` repetitions. Before timing, every crate's
//! result is checked against the `gemm` crate's (max |diff| / max |C|) and
//! against f64 dot products at sampled entries.
//!
//! Shapes: `AB` is row-major `[m, k] x [k, n]`; `AtB` reads A stored
//! `[k, m]` transposed (the backward's `dW = x^T g`); `ABt` reads B stored
//! `[n, k]` transposed (the backward's `dx = g W^T`). Transposes are
//! strides: nothing is copied outside the crates.

use std::time::{Duration, Instant};

#[cfg(feature = "openblas")]
mod openblas {
    #[link(name = "openblas")]
    unsafe extern "C" {
        pub fn openblas_set_num_threads(n: i32);
        pub fn openblas_get_corename() -> *const std::ffi::c_char;
        #[allow(clippy::too_many_arguments)]
        pub fn cblas_sgemm(
            layout: i32,
            transa: i32,
            transb: i32,
            m: i32,
            n: i32,
            k: i32,
            alpha: f32,
            a: *const f32,
            lda: i32,
            b: *const f32,
            ldb: i32,
            beta: f32,
            c: *mut f32,
            ldc: i32,
        );
    }
    pub const ROW_MAJOR: i32 = 101;
    pub const NO_TRANS: i32 = 111;
    pub const TRANS: i32 = 112;
}

#[derive(Clone, Copy)]
struct Case {
    group: &'static str,
    name: &'static str,
    m: usize,
    k: usize,
    n: usize,
    /// A is stored `[k, m]` and read transposed.
    ta: bool,
    /// B is stored `[n, k]` and read transposed.
    tb: bool,
}

impl Case {
    fn strides(&self) -> (isize, isize, isize, isize) {
        let (m, k) = (self.m as isize, self.k as isize);
        let (a_rs, a_cs) = if self.ta { (1, m) } else { (k, 1) };
        let n = self.n as isize;
        let (b_rs, b_cs) = if self.tb { (1, k) } else { (n, 1) };
        (a_rs, a_cs, b_rs, b_cs)
    }
    fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }
    fn op(&self) -> &'static str {
        match (self.ta, self.tb) {
            (false, false) => "AB",
            (true, false) => "AtB",
            (false, true) => "ABt",
            (true, true) => "AtBt",
        }
    }
}

fn cases() -> Vec<Case> {
    let c = |group, name, m, k, n, ta, tb| Case {
        group,
        name,
        m,
        k,
        n,
        ta,
        tb,
    };
    let mut v = vec![
        c("big", "1024^3", 1024, 1024, 1024, false, false),
        c("big", "1024^3", 1024, 1024, 1024, true, false),
        c("big", "1024^3", 1024, 1024, 1024, false, true),
        c("big", "2048^3", 2048, 2048, 2048, false, false),
    ];
    // W2: 784-512-512-10 MLP; forward x W, backward dW = x^T g, dx = g W^T.
    for (name, b) in [("w2 b128", 128), ("w2 b1024", 1024)] {
        for (i, o) in [(784, 512), (512, 512), (512, 10)] {
            v.push(c("w2", name, b, i, o, false, false));
            v.push(c("w2", name, i, b, o, true, false));
            v.push(c("w2", name, b, o, i, false, true));
        }
    }
    // W4 GPT: 768 rows (batch 12 x block 64), width 128, MLP 512, vocab 65.
    for (i, o) in [(128, 384), (128, 128), (128, 512), (512, 128), (128, 65)] {
        v.push(c("gpt", "gpt", 768, i, o, false, false));
        v.push(c("gpt", "gpt", i, 768, o, true, false));
        v.push(c("gpt", "gpt", 768, o, i, false, true));
    }
    v
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Crate {
    GemmSplit,
    GemmRows,
    Gemm,
    GemmSeq,
    Faer,
    MatrixMultiply,
    #[cfg(feature = "openblas")]
    OpenBlas,
}

impl Crate {
    fn label(self) -> &'static str {
        match self {
            Crate::GemmSplit => "gemm-cols",
            Crate::GemmRows => "gemm-rows",
            Crate::Gemm => "gemm",
            Crate::GemmSeq => "gemm-seq",
            Crate::Faer => "faer",
            Crate::MatrixMultiply => "mm",
            #[cfg(feature = "openblas")]
            Crate::OpenBlas => "openblas",
        }
    }
}

/// `c = op(a) op(b)` (`c` row-major `[m, n]`, overwritten).
fn run(which: Crate, case: &Case, threads: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    let (m, k, n) = (case.m, case.k, case.n);
    let (a_rs, a_cs, b_rs, b_cs) = case.strides();
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    match which {
        Crate::GemmRows => split_gemm(case, threads, a, b, c, true),
        Crate::GemmSplit => split_gemm(case, threads, a, b, c, false),
        Crate::Gemm | Crate::GemmSeq => {
            let par = if which == Crate::GemmSeq || threads == 1 {
                gemm::Parallelism::None
            } else {
                gemm::Parallelism::Rayon(threads)
            };
            // SAFETY: the strides describe `a`, `b` and `c` (lengths checked).
            unsafe {
                gemm::gemm(
                    m,
                    n,
                    k,
                    c.as_mut_ptr(),
                    1,
                    n as isize,
                    false,
                    a.as_ptr(),
                    a_cs,
                    a_rs,
                    b.as_ptr(),
                    b_cs,
                    b_rs,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    par,
                )
            }
        }
        Crate::Faer => {
            let par = if threads == 1 {
                faer::Par::Seq
            } else {
                faer::Par::rayon(threads)
            };
            // SAFETY: as above.
            let (am, bm, cm) = unsafe {
                (
                    faer::MatRef::from_raw_parts(a.as_ptr(), m, k, a_rs, a_cs),
                    faer::MatRef::from_raw_parts(b.as_ptr(), k, n, b_rs, b_cs),
                    faer::MatMut::from_raw_parts_mut(c.as_mut_ptr(), m, n, n as isize, 1),
                )
            };
            faer::linalg::matmul::matmul(cm, faer::Accum::Replace, am, bm, 1.0f32, par);
        }
        Crate::MatrixMultiply => {
            // SAFETY: as above.
            unsafe {
                matrixmultiply::sgemm(
                    m,
                    k,
                    n,
                    1.0,
                    a.as_ptr(),
                    a_rs,
                    a_cs,
                    b.as_ptr(),
                    b_rs,
                    b_cs,
                    0.0,
                    c.as_mut_ptr(),
                    n as isize,
                    1,
                )
            }
        }
        #[cfg(feature = "openblas")]
        Crate::OpenBlas => {
            use openblas::*;
            let (ta, lda) = if case.ta { (TRANS, m) } else { (NO_TRANS, k) };
            let (tb, ldb) = if case.tb { (TRANS, k) } else { (NO_TRANS, n) };
            // SAFETY: as above.
            unsafe {
                cblas_sgemm(
                    ROW_MAJOR,
                    ta,
                    tb,
                    m as i32,
                    n as i32,
                    k as i32,
                    1.0,
                    a.as_ptr(),
                    lda as i32,
                    b.as_ptr(),
                    ldb as i32,
                    0.0,
                    c.as_mut_ptr(),
                    n as i32,
                )
            }
        }
    }
}

/// retrograd's split (`kernels::matmul::gemm_split`): C cut into `threads`
/// parts of whole 16-row (`by_rows`) or 32-column panels, each part one
/// single-threaded gemm call on a rayon thread.
fn split_gemm(case: &Case, threads: usize, a: &[f32], b: &[f32], c: &mut [f32], by_rows: bool) {
    use rayon::prelude::*;
    let (m, k, n) = (case.m, case.k, case.n);
    let (a_rs, a_cs, b_rs, b_cs) = case.strides();
    let (extent, panel) = if by_rows { (m, 16) } else { (n, 32) };
    let parts = threads.min(extent.div_ceil(panel)).max(1);
    let per = extent.div_ceil(panel).div_ceil(parts) * panel;
    let (ap, bp, cp) = (
        a.as_ptr() as usize,
        b.as_ptr() as usize,
        c.as_mut_ptr() as usize,
    );
    (0..parts).into_par_iter().for_each(|t| {
        let start = (t * per).min(extent);
        let len = per.min(extent - start);
        if len == 0 {
            return;
        }
        // Part t: rows start..start + len of C and A, or those columns of C and B.
        let (rows, cols, c_off, a_off, b_off) = if by_rows {
            (len, n, start * n, start as isize * a_rs, 0)
        } else {
            (m, len, start, 0, start as isize * b_cs)
        };
        // SAFETY: each part reads inside `a` and `b` and writes its own
        // block of `c` (lengths checked by `run`).
        unsafe {
            gemm::gemm(
                rows,
                cols,
                k,
                (cp as *mut f32).add(c_off),
                1,
                n as isize,
                false,
                (ap as *const f32).offset(a_off),
                a_cs,
                a_rs,
                (bp as *const f32).offset(b_off),
                b_cs,
                b_rs,
                0.0,
                1.0,
                false,
                false,
                false,
                gemm::Parallelism::None,
            )
        }
    });
}

/// Uniform values in [-1, 1) from a 64-bit LCG.
fn fill(len: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

fn main() {
    let mut threads = 1usize;
    let mut reps = 15usize;
    let mut target_ms = 20.0f64;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("a value after the flag");
        match a.as_str() {
            "--threads" => threads = val().parse().expect("a thread count"),
            "--reps" => reps = val().parse().expect("a repetition count"),
            "--target-ms" => target_ms = val().parse().expect("milliseconds"),
            "--only" => only = Some(val()),
            _ => panic!("unknown flag {a} (--threads N, --reps N, --target-ms X, --only GROUP)"),
        }
    }
    // SAFETY: no other thread exists yet.
    unsafe { std::env::set_var("MATMUL_NUM_THREADS", threads.to_string()) };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build_global()
        .expect("rayon pool");
    #[cfg(feature = "openblas")]
    {
        // SAFETY: a plain setter of OpenBLAS's thread count, and a getter of
        // a static NUL-terminated name.
        let core = unsafe {
            openblas::openblas_set_num_threads(threads as i32);
            std::ffi::CStr::from_ptr(openblas::openblas_get_corename())
        };
        println!("OpenBLAS core: {}", core.to_string_lossy());
    }

    let mut crates = vec![Crate::Gemm, Crate::Faer, Crate::MatrixMultiply];
    #[cfg(feature = "openblas")]
    crates.push(Crate::OpenBlas);
    if threads > 1 {
        crates.extend([Crate::GemmSeq, Crate::GemmRows, Crate::GemmSplit]);
    }
    let labels: Vec<&str> = crates.iter().map(|c| c.label()).collect();
    println!("threads {threads}, reps {reps}, ~{target_ms} ms per sample; median GFLOP/s");
    println!(
        "| shape | op | m k n | {} | best | best/gemm |",
        labels.join(" | ")
    );
    println!("|{}", "---|".repeat(3 + labels.len() + 2));

    for case in cases() {
        if only.as_deref().is_some_and(|g| g != case.group) {
            continue;
        }
        let (m, k, n) = (case.m, case.k, case.n);
        let a = fill(m * k, 1 + m as u64 * 31 + k as u64);
        let b = fill(k * n, 2 + n as u64 * 17 + k as u64);
        let mut outs: Vec<Vec<f32>> = crates.iter().map(|_| vec![f32::NAN; m * n]).collect();
        // Warm up and check.
        for (i, &cr) in crates.iter().enumerate() {
            run(cr, &case, threads, &a, &b, &mut outs[i]);
        }
        let (a_rs, a_cs, b_rs, b_cs) = case.strides();
        let reference = &outs[0];
        let scale = reference
            .iter()
            .fold(0f32, |s, x| s.max(x.abs()))
            .max(f32::MIN_POSITIVE);
        let mut worst = 0f64;
        for (i, out) in outs.iter().enumerate() {
            let d = out
                .iter()
                .zip(reference)
                .fold(0f32, |s, (x, y)| s.max((x - y).abs()));
            let rel = (d / scale) as f64;
            assert!(
                rel < 1e-4,
                "{} disagrees with gemm on {:?}x{:?}: {rel:e}",
                crates[i].label(),
                (m, k),
                (k, n)
            );
            // f64 dot products at 16 sampled entries.
            for s in 0..16usize {
                let (r, col) = ((s * 7919 + 13) % m, (s * 104729 + 7) % n);
                let exact: f64 = (0..k)
                    .map(|p| {
                        a[(r as isize * a_rs + p as isize * a_cs) as usize] as f64
                            * b[(p as isize * b_rs + col as isize * b_cs) as usize] as f64
                    })
                    .sum();
                let e = (out[r * n + col] as f64 - exact).abs() / scale as f64;
                assert!(
                    e < 1e-4,
                    "{} is off against f64 at ({r}, {col}): {e:e}",
                    crates[i].label()
                );
                worst = worst.max(e).max(rel);
            }
        }
        // Calibrate the number of calls per sample on the gemm crate.
        let t0 = Instant::now();
        run(Crate::Gemm, &case, threads, &a, &b, &mut outs[0]);
        let once = t0.elapsed().as_secs_f64().max(1e-7);
        let iters = ((target_ms * 1e-3 / once).ceil() as usize).max(1);

        let mut samples: Vec<Vec<f64>> = crates.iter().map(|_| Vec::with_capacity(reps)).collect();
        for rep in 0..reps {
            for j in 0..crates.len() {
                let i = (j + rep) % crates.len();
                let t = Instant::now();
                for _ in 0..iters {
                    run(crates[i], &case, threads, &a, &b, &mut outs[i]);
                }
                let secs = t.elapsed().as_secs_f64() / iters as f64;
                samples[i].push(case.flops() / secs * 1e-9);
                // OpenBLAS's workers spin for a while after a call; let them
                // sleep before another crate wants both cores.
                #[cfg(feature = "openblas")]
                if crates[i] == Crate::OpenBlas && threads > 1 {
                    std::thread::sleep(Duration::from_millis(150));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let med: Vec<f64> = samples.iter_mut().map(|s| median(s)).collect();
        let (bi, &best) = med
            .iter()
            .enumerate()
            .max_by(|x, y| x.1.partial_cmp(y.1).unwrap())
            .unwrap();
        println!(
            "| {} | {} | {m} {k} {n} | {} | {} | {:.2} |",
            case.name,
            case.op(),
            med.iter()
                .map(|g| format!("{g:.1}"))
                .collect::<Vec<_>>()
                .join(" | "),
            crates[bi].label(),
            best / med[0],
        );
        eprintln!("  ({} calls per sample, worst rel err {worst:.1e})", iters);
    }
}
