//! A matrix stored column by column, copied row by row into a reused
//! per-thread buffer: the right operand of `x Wᵀ` before it goes to `gemm`.
//!
//! `gemm` packs its operands into panels, and a column-major right operand
//! (a transposed weight) is gathered one element at a time, each part of a
//! split product gathering the whole of it again; with rows 2 KiB apart the
//! gather also thrashes a few L1 sets (ARCHITECTURE.md, PERF, "A transposed
//! weight is copied once"). Copying it row-major first, in tiles and split
//! across the pool, leaves `gemm` a contiguous operand it packs with whole
//! vectors. Values are only moved, so the product has the same bits.

use std::cell::Cell;
use std::mem::MaybeUninit;

/// Rows and columns of one tile: a source column's slice of a tile is one
/// cache line of f32, and the tile's destination rows stay in L1.
const TILE: usize = 16;

/// Buffers up to this many bytes stay with their thread for the next
/// product; a larger one is given back to the allocator after use.
const KEEP_BYTES: usize = 16 << 20;

/// Words of a 64-byte cache line.
const LINE_WORDS: usize = 8;

thread_local! {
    /// This thread's copy buffer (taken out while in use, so a product run
    /// on the same thread inside another's parts gets a fresh one).
    static SCRATCH: Cell<Vec<u64>> = const { Cell::new(Vec::new()) };
}

/// A column-major source: element `(r, c)` at `ptr + r + c * ld`.
#[derive(Clone, Copy)]
pub(crate) struct ColumnMajor<T> {
    pub ptr: *const T,
    pub ld: usize,
}

// SAFETY: only read, under `row_major_copy`'s contract.
unsafe impl<T> Send for ColumnMajor<T> {}
// SAFETY: as for `Send`.
unsafe impl<T> Sync for ColumnMajor<T> {}

/// Calls `f` with the `[rows, cols]` matrix `src` copied row-major into
/// this thread's buffer (rows `cols` apart). One thread copies: with whole
/// AVX-512 tiles a W4 weight takes a few microseconds, less than handing
/// half of it to another thread.
///
/// # Safety
/// Every `(r, c)` with `r < rows`, `c < cols` of `src` must be readable.
pub(crate) unsafe fn row_major_copy<T: Copy + 'static, R>(
    src: ColumnMajor<T>,
    rows: usize,
    cols: usize,
    f: impl FnOnce(&[T]) -> R,
) -> R {
    assert!(
        std::mem::align_of::<T>() <= std::mem::align_of::<u64>(),
        "the buffer's words align any float"
    );
    let len = rows * cols;
    let words = (len * std::mem::size_of::<T>()).div_ceil(std::mem::size_of::<u64>());
    let mut buf = SCRATCH.take();
    if buf.len() < words + LINE_WORDS {
        buf.resize(words + LINE_WORDS, 0);
    }
    // Rows start on a cache line, as `gemm`'s own packed panels do.
    let skip = buf
        .as_ptr()
        .align_offset(LINE_WORDS * std::mem::size_of::<u64>());
    // SAFETY: `buf` holds at least `len` `T`s' bytes past `skip` words
    // (fewer than `LINE_WORDS`), aligned for `T`.
    let dst = unsafe {
        std::slice::from_raw_parts_mut(buf.as_mut_ptr().add(skip) as *mut MaybeUninit<T>, len)
    };
    // SAFETY: the caller's bounds.
    unsafe { copy_rows(src, rows, cols, dst) };
    // SAFETY: `copy_rows` wrote every element of `dst`.
    let out = unsafe { std::slice::from_raw_parts(dst.as_ptr() as *const T, len) };
    let result = f(out);
    if buf.len() * std::mem::size_of::<u64>() <= KEEP_BYTES {
        SCRATCH.set(buf);
    }
    result
}

/// The register tiles a copy can use, widest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tiles {
    /// 16 x 16 f32 in AVX-512 registers.
    Avx512,
    /// 8 x 8 f32 in AVX registers (also what valgrind's emulated CPU runs).
    Avx2,
    /// Element by element.
    Scalar,
}

/// The widest tiles this CPU runs for `T` (registers only for f32).
fn widest<T: 'static>() -> Tiles {
    #[cfg(target_arch = "x86_64")]
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        if crate::kernels::simd::has_avx512() {
            return Tiles::Avx512;
        }
        if crate::kernels::simd::has_avx2_fma() {
            return Tiles::Avx2;
        }
    }
    Tiles::Scalar
}

/// Writes the row-major `[rows, cols]` copy of `src` into `out` with the
/// widest tiles the CPU has.
///
/// # Safety
/// Every `(r, c)` of `src` inside `[rows, cols]` must be readable.
unsafe fn copy_rows<T: Copy + 'static>(
    src: ColumnMajor<T>,
    rows: usize,
    cols: usize,
    out: &mut [MaybeUninit<T>],
) {
    // SAFETY: forwarded; `widest` checked the CPU and the type.
    unsafe { copy_rows_with(widest::<T>(), src, rows, cols, out) }
}

/// [`copy_rows`] with the given tiles: whole register tiles of f32, then
/// the ragged edges (and all of f64) element by element, tile by tile:
/// down a tile's columns in the source, across its rows in `out`.
///
/// # Safety
/// As for [`copy_rows`]; `tiles` other than `Scalar` need `T = f32` and
/// the CPU's support.
unsafe fn copy_rows_with<T: Copy + 'static>(
    tiles: Tiles,
    src: ColumnMajor<T>,
    rows: usize,
    cols: usize,
    out: &mut [MaybeUninit<T>],
) {
    assert_eq!(out.len(), rows * cols, "an output of the copy's shape");
    let (mut whole_rows, mut whole_cols) = (0, 0);
    #[cfg(target_arch = "x86_64")]
    if tiles != Tiles::Scalar {
        let side = if tiles == Tiles::Avx512 {
            TILE
        } else {
            TILE / 2
        };
        (whole_rows, whole_cols) = (rows / side * side, cols / side * side);
        let src = ColumnMajor {
            ptr: src.ptr as *const f32,
            ld: src.ld,
        };
        let out = out.as_mut_ptr() as *mut f32;
        // SAFETY: the caller vouches for the CPU and that `T` is f32; the
        // tiles lie inside the caller's bounds and `out` (`rows * cols`).
        unsafe {
            if tiles == Tiles::Avx512 {
                whole_tiles_avx512(src, whole_rows, whole_cols, cols, out)
            } else {
                whole_tiles_avx(src, whole_rows, whole_cols, cols, out)
            }
        };
    }
    let mut scalar = |rs: std::ops::Range<usize>, cs: std::ops::Range<usize>| {
        for rb in rs.clone().step_by(TILE) {
            let re = (rb + TILE).min(rs.end);
            for cb in cs.clone().step_by(TILE) {
                for c in cb..(cb + TILE).min(cs.end) {
                    // SAFETY: column `c`, rows `rb..re`, inside the caller's bounds.
                    let column = unsafe { src.ptr.add(c * src.ld) };
                    for r in rb..re {
                        // SAFETY: row `r < rows` of that column.
                        let v = unsafe { *column.add(r) };
                        out[r * cols + c].write(v);
                    }
                }
            }
        }
    };
    // What whole tiles left: the columns past them in their rows, then the rows below.
    scalar(0..whole_rows, whole_cols..cols);
    scalar(whole_rows..rows, 0..cols);
}

/// [`whole_tiles_avx512`] with 8 x 8 tiles in AVX registers: pairs of
/// columns interleaved, then pairs of pairs, then the 128-bit halves swapped.
///
/// # Safety
/// AVX; `rows` and `cols` multiples of 8, inside `src`'s readable block
/// and `out`'s rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn whole_tiles_avx(
    src: ColumnMajor<f32>,
    rows: usize,
    cols: usize,
    ld_out: usize,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    const SIDE: usize = TILE / 2;
    for rb in (0..rows).step_by(SIDE) {
        for cb in (0..cols).step_by(SIDE) {
            // SAFETY: 8 floats of column `cb + i` from row `rb`: inside the block.
            let v: [__m256; SIDE] = std::array::from_fn(|i| unsafe {
                _mm256_loadu_ps(src.ptr.add(rb + (cb + i) * src.ld))
            });
            let t: [__m256; SIDE] = std::array::from_fn(|i| {
                let (a, b) = (v[i & !1], v[i | 1]);
                if i % 2 == 0 {
                    _mm256_unpacklo_ps(a, b)
                } else {
                    _mm256_unpackhi_ps(a, b)
                }
            });
            let u: [__m256; SIDE] = std::array::from_fn(|i| {
                let base = i / 4 * 4;
                let (a, b) = (t[base + (i % 4) / 2], t[base + (i % 4) / 2 + 2]);
                if i % 2 == 0 {
                    _mm256_shuffle_ps::<0x44>(a, b)
                } else {
                    _mm256_shuffle_ps::<0xee>(a, b)
                }
            });
            for r in 0..SIDE {
                let (a, b) = (u[r % 4], u[r % 4 + 4]);
                let row = if r < 4 {
                    _mm256_permute2f128_ps::<0x20>(a, b)
                } else {
                    _mm256_permute2f128_ps::<0x31>(a, b)
                };
                // SAFETY: row `rb + r`, columns `cb..cb + 8` of `out`.
                unsafe { _mm256_storeu_ps(out.add((rb + r) * ld_out + cb), row) };
            }
        }
    }
}

/// The `[rows, cols]` top-left block of whole 16 x 16 tiles: each tile's
/// 16 source columns loaded as vectors, transposed in registers (three
/// rounds of shuffles within 128-bit lanes and between them), and stored
/// as 16 row pieces of `out` (rows `ld_out` apart).
///
/// # Safety
/// AVX-512F; `rows` and `cols` multiples of 16, inside `src`'s readable
/// block and `out`'s rows.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn whole_tiles_avx512(
    src: ColumnMajor<f32>,
    rows: usize,
    cols: usize,
    ld_out: usize,
    out: *mut f32,
) {
    use std::arch::x86_64::*;
    for rb in (0..rows).step_by(TILE) {
        for cb in (0..cols).step_by(TILE) {
            // SAFETY: 16 floats of column `cb + i` from row `rb`: inside the block.
            let v: [__m512; TILE] = std::array::from_fn(|i| unsafe {
                _mm512_loadu_ps(src.ptr.add(rb + (cb + i) * src.ld))
            });
            // Pairs of columns interleaved by element, then by element pair.
            let t: [__m512; TILE] = std::array::from_fn(|i| {
                let (a, b) = (v[i & !1], v[i | 1]);
                if i % 2 == 0 {
                    _mm512_unpacklo_ps(a, b)
                } else {
                    _mm512_unpackhi_ps(a, b)
                }
            });
            let u: [__m512; TILE] = std::array::from_fn(|i| {
                let base = i / 4 * 4;
                let (a, b) = (
                    _mm512_castps_pd(t[base + (i % 4) / 2]),
                    _mm512_castps_pd(t[base + (i % 4) / 2 + 2]),
                );
                _mm512_castpd_ps(if i % 2 == 0 {
                    _mm512_unpacklo_pd(a, b)
                } else {
                    _mm512_unpackhi_pd(a, b)
                })
            });
            // 128-bit lanes: within each half of the tile, then across the halves.
            let w: [__m512; TILE] = std::array::from_fn(|i| {
                let base = i / 8 * 8;
                let (a, b) = (u[base + i % 4], u[base + i % 4 + 4]);
                if i % 8 < 4 {
                    _mm512_shuffle_f32x4::<0x88>(a, b)
                } else {
                    _mm512_shuffle_f32x4::<0xdd>(a, b)
                }
            });
            for r in 0..TILE {
                let (a, b) = (w[r % 8], w[r % 8 + 8]);
                let row = if r < 8 {
                    _mm512_shuffle_f32x4::<0x88>(a, b)
                } else {
                    _mm512_shuffle_f32x4::<0xdd>(a, b)
                };
                // SAFETY: row `rb + r`, columns `cb..cb + 16` of `out`.
                unsafe { _mm512_storeu_ps(out.add((rb + r) * ld_out + cb), row) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_element_to_its_row_major_place() {
        // Whole tiles, ragged edges on either side, and tiles alone.
        for (rows, cols, ld) in [
            (1, 1, 1),
            (17, 5, 20),
            (33, 40, 33),
            (64, 3, 70),
            (0, 4, 1),
            (32, 48, 35),
            (50, 37, 64),
        ] {
            let src: Vec<f32> = (0..ld * cols.max(1)).map(|v| v as f32).collect();
            let view = ColumnMajor {
                ptr: src.as_ptr(),
                ld,
            };
            // SAFETY: every (r, c) lies at r + c * ld < ld * cols.
            let copy = unsafe { row_major_copy(view, rows, cols, |s| s.to_vec()) };
            assert_eq!(copy.len(), rows * cols);
            for r in 0..rows {
                for c in 0..cols {
                    assert_eq!(
                        copy[r * cols + c],
                        src[r + c * ld],
                        "({r}, {c}) of {rows}x{cols}"
                    );
                }
            }
        }
    }

    /// Each register tile the CPU runs, against the element-by-element copy.
    #[test]
    fn every_tile_width_copies_as_the_scalar_one() {
        let mut kinds = vec![Tiles::Scalar];
        #[cfg(target_arch = "x86_64")]
        {
            if crate::kernels::simd::Isa::detected() >= crate::kernels::simd::Isa::Avx2 {
                kinds.push(Tiles::Avx2);
            }
            if crate::kernels::simd::Isa::detected() >= crate::kernels::simd::Isa::Avx512 {
                kinds.push(Tiles::Avx512);
            }
        }
        for (rows, cols, ld) in [
            (8, 8, 8),
            (16, 16, 16),
            (40, 24, 41),
            (19, 33, 19),
            (7, 9, 7),
        ] {
            let src: Vec<f32> = (0..ld * cols).map(|v| v as f32).collect();
            let view = ColumnMajor {
                ptr: src.as_ptr(),
                ld,
            };
            for &kind in &kinds {
                let mut out = vec![MaybeUninit::<f32>::uninit(); rows * cols];
                // SAFETY: every (r, c) lies inside `src`; `kind` was detected.
                unsafe { copy_rows_with(kind, view, rows, cols, &mut out) };
                for r in 0..rows {
                    for c in 0..cols {
                        // SAFETY: `copy_rows_with` wrote every element.
                        let got = unsafe { out[r * cols + c].assume_init() };
                        assert_eq!(got, src[r + c * ld], "{kind:?} ({r}, {c}) of {rows}x{cols}");
                    }
                }
            }
        }
    }

    #[test]
    fn a_nested_copy_gets_its_own_buffer() {
        let outer: Vec<f64> = (0..12).map(f64::from).collect();
        let inner: Vec<f64> = (100..112).map(f64::from).collect();
        let view = |v: &Vec<f64>| ColumnMajor {
            ptr: v.as_ptr(),
            ld: 3,
        };
        // SAFETY: 3 x 4 column-major sources of 12 elements.
        unsafe {
            row_major_copy(view(&outer), 3, 4, |o| {
                let i = row_major_copy(view(&inner), 3, 4, |i| i.to_vec());
                assert_eq!(o[1], 3.0);
                assert_eq!(i[1], 103.0);
            });
        }
    }
}
