//! ggml's block formats: the quantized element types of GGUF files
//! (llama.cpp's models), decoded to f32 and encoded from it exactly as
//! ggml's reference quantizers do.
//!
//! A block format stores a fixed number of values (32, or 256 for the
//! K-quants) in a fixed number of bytes: one or two f16 scales and small
//! integer quants. [`GgmlType`] names every type with its block geometry;
//! [`try_dequantize`] and [`try_quantize`] dispatch on it.
//!
//! Where things are: the type ids, names and sizes (`ggml_type.rs`); one
//! file per format with its `#[repr(C)]` block as ggml lays it out and its
//! row functions (dequantize, and quantize as ggml's reference quantizers
//! do): `q4_0.rs`, `q4_1.rs`, `q5_0.rs`, `q5_1.rs`, `q8_0.rs`, `q4_k.rs`
//! (with the scale search Q5_K shares), `q5_k.rs`, `q6_k.rs`. Blocks are
//! read from byte slices with no alignment assumed.
//!
//! Results are bit for bit those of ggml's reference C code (built without
//! fused multiply-add, as ggml's base library is) and of gguf-py's
//! `gguf.quants` (tests/gguf_quant.rs checks against a fixture written with
//! both): the arithmetic is ggml's, in ggml's order, with no fused
//! multiply-add, and f16 scales are rounded to nearest even.
//!
//! ```
//! use retrograd::quant::{self, GgmlType};
//! let x: Vec<f32> = (0..64).map(|i| (i as f32 - 20.0) / 8.0).collect();
//! let bytes = quant::try_quantize(GgmlType::Q8_0, &x)?;
//! assert_eq!(bytes.len(), 2 * 34);
//! let mut y = vec![0.0f32; 64];
//! quant::try_dequantize(GgmlType::Q8_0, &bytes, &mut y)?;
//! // Within half a step (a block's largest magnitude / 127) of the input.
//! assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 5.375 / 127.0 / 2.0 + 1e-3));
//! assert!(quant::try_quantize(GgmlType::Q8_0, &x[..40]).is_err()); // not whole blocks
//! # Ok::<(), retrograd::Error>(())
//! ```

/// A format's row functions, the same pair in every format's file:
/// `dequantize_row` and `quantize_row` over its block `$block`, with the
/// format's `$name`, block `$sizes` and ggml's name `$ggml` (of its
/// reference quantizer) for their docs.
macro_rules! row_functions {
    ($block:ty, $name:literal, $sizes:literal, $ggml:literal) => {
        #[doc = concat!("Dequantizes ", $name, " `bytes` into `out` (", $sizes, ").")]
        ///
        /// # Panics
        ///
        /// If `out` is not whole blocks or `bytes` is not their size (the checked
        /// form is [`try_dequantize`](super::try_dequantize)).
        pub fn dequantize_row(bytes: &[u8], out: &mut [f32]) {
            super::dequantize_blocks::<$block>(bytes, out);
        }

        #[doc = concat!("Quantizes `values` into `out` as ggml's `quantize_row_", $ggml, "_ref` does.")]
        ///
        /// # Panics
        ///
        /// If `values` is not whole blocks or `out` is not their size (the checked
        /// form is [`try_quantize`](super::try_quantize)).
        pub fn quantize_row(values: &[f32], out: &mut [u8]) {
            super::quantize_blocks::<$block>(values, out);
        }
    };
}

mod ggml_type;
mod matrix;
pub mod q4_0;
pub mod q4_1;
pub mod q4_k;
pub mod q5_0;
pub mod q5_1;
pub mod q5_k;
pub mod q6_k;
pub mod q8_0;

use half::{bf16, f16};
use rayon::prelude::*;

use crate::base::error::{or_panic, Error, Result};

pub use ggml_type::{GgmlType, QK_K};
pub use matrix::{MappedBytes, QMatrix};
pub use q4_0::BlockQ4_0;
pub use q4_1::BlockQ4_1;
pub use q4_k::BlockQ4K;
pub use q5_0::BlockQ5_0;
pub use q5_1::BlockQ5_1;
pub use q5_k::BlockQ5K;
pub use q6_k::BlockQ6K;
pub use q8_0::BlockQ8_0;

/// One block of a block format: read from and written to its bytes (little
/// endian, no alignment assumed) and decoded to its values.
pub trait Block: Sized {
    /// The format.
    const TYPE: GgmlType;
    /// Values per block.
    const LEN: usize = Self::TYPE.block_len();
    /// Bytes per block.
    const BYTES: usize = Self::TYPE.block_bytes();

    /// The block in `bytes`.
    ///
    /// # Panics
    ///
    /// If `bytes` is shorter than [`BYTES`](Self::BYTES).
    fn from_bytes(bytes: &[u8]) -> Self;

    /// Writes the block's [`BYTES`](Self::BYTES) bytes to the start of `out`.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`BYTES`](Self::BYTES).
    fn write_bytes(&self, out: &mut [u8]);

    /// Writes the block's [`LEN`](Self::LEN) values to the start of `out`.
    ///
    /// # Panics
    ///
    /// If `out` is shorter than [`LEN`](Self::LEN).
    fn dequantize(&self, out: &mut [f32]);
}

/// A block format with ggml's reference quantizer.
pub trait QuantizeBlock: Block {
    /// The block ggml's reference quantizer makes of `values`.
    ///
    /// # Panics
    ///
    /// If `values` is shorter than [`LEN`](Block::LEN).
    fn quantize(values: &[f32]) -> Self;
}

/// Values per parallel task when dequantizing (and quantizing) large inputs.
const PARALLEL_CHUNK: usize = 1 << 16;

/// Whether `n` values are worth splitting across rayon's pool.
fn parallel(n: usize) -> bool {
    n >= 2 * PARALLEL_CHUNK && rayon::current_num_threads() > 1
}

fn assert_sizes(ty: GgmlType, values: usize, bytes: usize) {
    assert!(
        ty.bytes_for(values) == Some(bytes),
        "{}: {values} values need {:?} bytes, found {bytes}",
        ty.name(),
        ty.bytes_for(values)
    );
}

/// The largest magnitude of `x` and the value that has it, with its sign
/// (the first, on a tie; zeros if `x` is empty or all zero or NaN), as
/// ggml's reference quantizers find a block's scale.
#[inline]
pub(crate) fn signed_absmax(x: &[f32]) -> (f32, f32) {
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    (amax, max)
}

/// The least and the largest value of `x` (`f32::MAX` and `-f32::MAX` if
/// it is empty), as ggml's reference quantizers with a minimum find them.
#[inline]
pub(crate) fn min_max(x: &[f32]) -> (f32, f32) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// Dequantizes whole blocks of `B` from `bytes` into `out`.
pub(crate) fn dequantize_blocks<B: Block>(bytes: &[u8], out: &mut [f32]) {
    assert_sizes(B::TYPE, out.len(), bytes.len());
    let run = |bytes: &[u8], out: &mut [f32]| {
        for (b, y) in bytes
            .chunks_exact(B::BYTES)
            .zip(out.chunks_exact_mut(B::LEN))
        {
            B::from_bytes(b).dequantize(y);
        }
    };
    if parallel(out.len()) {
        let blocks = PARALLEL_CHUNK / B::LEN;
        out.par_chunks_mut(blocks * B::LEN)
            .zip(bytes.par_chunks(blocks * B::BYTES))
            .for_each(|(y, b)| run(b, y));
    } else {
        run(bytes, out);
    }
}

/// Quantizes whole blocks of `values` into `out` as `B`.
pub(crate) fn quantize_blocks<B: QuantizeBlock>(values: &[f32], out: &mut [u8]) {
    assert_sizes(B::TYPE, values.len(), out.len());
    let run = |values: &[f32], out: &mut [u8]| {
        for (x, b) in values
            .chunks_exact(B::LEN)
            .zip(out.chunks_exact_mut(B::BYTES))
        {
            B::quantize(x).write_bytes(b);
        }
    };
    if parallel(values.len()) {
        let blocks = PARALLEL_CHUNK / B::LEN;
        values
            .par_chunks(blocks * B::LEN)
            .zip(out.par_chunks_mut(blocks * B::BYTES))
            .for_each(|(x, b)| run(x, b));
    } else {
        run(values, out);
    }
}

/// ggml's f32 to bf16 (`ggml_compute_fp32_to_bf16`): round to nearest even,
/// a NaN kept a quiet NaN.
pub fn f32_to_bf16(x: f32) -> bf16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return bf16::from_bits(((u >> 16) | 64) as u16);
    }
    bf16::from_bits(((u as u64 + (0x7fff + ((u >> 16) & 1)) as u64) >> 16) as u16)
}

/// `Error::InvalidArgument` unless `values` values of `ty` are whole blocks
/// held in exactly `bytes` bytes.
fn check_sizes(op: &'static str, ty: GgmlType, values: usize, bytes: usize) -> Result<()> {
    if !values.is_multiple_of(ty.block_len()) {
        return Err(Error::invalid(
            op,
            format!(
                "{values} values are not a whole number of {} blocks of {}",
                ty.name(),
                ty.block_len()
            ),
        ));
    }
    match ty.bytes_for(values) {
        Some(n) if n == bytes => Ok(()),
        need => Err(Error::invalid(
            op,
            format!(
                "{values} {} values take {} bytes, but the buffer has {bytes}",
                ty.name(),
                need.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string()),
            ),
        )),
    }
}

/// Decodes `bytes` of type `ty` into `out`: `out.len()` values, which must
/// be whole blocks held in exactly `bytes.len()` bytes
/// ([`Error::InvalidArgument`] naming the type and both sizes otherwise).
/// Every type of [`GgmlType`] is supported; large inputs are decoded on
/// rayon's pool.
pub fn try_dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    check_sizes("dequantize", ty, out.len(), bytes.len())?;
    match ty {
        GgmlType::F32 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(4)) {
                *y = f32::from_le_bytes(b.try_into().unwrap());
            }
        }
        GgmlType::F16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = f16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::BF16 => {
            for (y, b) in out.iter_mut().zip(bytes.chunks_exact(2)) {
                *y = bf16::from_le_bytes([b[0], b[1]]).to_f32();
            }
        }
        GgmlType::Q4_0 => q4_0::dequantize_row(bytes, out),
        GgmlType::Q4_1 => q4_1::dequantize_row(bytes, out),
        GgmlType::Q5_0 => q5_0::dequantize_row(bytes, out),
        GgmlType::Q5_1 => q5_1::dequantize_row(bytes, out),
        GgmlType::Q8_0 => q8_0::dequantize_row(bytes, out),
        GgmlType::Q4K => q4_k::dequantize_row(bytes, out),
        GgmlType::Q5K => q5_k::dequantize_row(bytes, out),
        GgmlType::Q6K => q6_k::dequantize_row(bytes, out),
    }
    Ok(())
}

/// Like [`try_dequantize`], but panics with its error at the caller's line.
#[track_caller]
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    or_panic(try_dequantize(ty, bytes, out))
}

/// Encodes `values` as type `ty` into `out`, which must hold exactly their
/// bytes; `values` must be whole blocks ([`Error::InvalidArgument`] naming
/// the type and the sizes otherwise). F32, F16 and BF16 are converted (f16
/// and bf16 rounded to nearest even, as ggml does); the block formats are
/// quantized by ggml's reference quantizers (`quantize_row_q4_0_ref` to
/// `quantize_row_q6_K_ref`, without importance weights).
pub fn try_quantize_into(ty: GgmlType, values: &[f32], out: &mut [u8]) -> Result<()> {
    check_sizes("quantize", ty, values.len(), out.len())?;
    match ty {
        GgmlType::F32 => {
            for (b, v) in out.chunks_exact_mut(4).zip(values) {
                b.copy_from_slice(&v.to_le_bytes());
            }
        }
        GgmlType::F16 => {
            for (b, &v) in out.chunks_exact_mut(2).zip(values) {
                b.copy_from_slice(&f16::from_f32(v).to_le_bytes());
            }
        }
        GgmlType::BF16 => {
            for (b, &v) in out.chunks_exact_mut(2).zip(values) {
                b.copy_from_slice(&f32_to_bf16(v).to_le_bytes());
            }
        }
        GgmlType::Q4_0 => q4_0::quantize_row(values, out),
        GgmlType::Q4_1 => q4_1::quantize_row(values, out),
        GgmlType::Q5_0 => q5_0::quantize_row(values, out),
        GgmlType::Q5_1 => q5_1::quantize_row(values, out),
        GgmlType::Q8_0 => q8_0::quantize_row(values, out),
        GgmlType::Q4K => q4_k::quantize_row(values, out),
        GgmlType::Q5K => q5_k::quantize_row(values, out),
        GgmlType::Q6K => q6_k::quantize_row(values, out),
    }
    Ok(())
}

/// Like [`try_quantize_into`], but panics with its error at the caller's line.
#[track_caller]
pub fn quantize_into(ty: GgmlType, values: &[f32], out: &mut [u8]) {
    or_panic(try_quantize_into(ty, values, out))
}

/// The bytes of `values` encoded as type `ty` (see [`try_quantize_into`]).
pub fn try_quantize(ty: GgmlType, values: &[f32]) -> Result<Vec<u8>> {
    let n = ty.bytes_for(values.len()).unwrap_or(0);
    let mut out = vec![0u8; n];
    try_quantize_into(ty, values, &mut out)?;
    Ok(out)
}

/// Like [`try_quantize`], but panics with its error at the caller's line.
#[track_caller]
pub fn quantize(ty: GgmlType, values: &[f32]) -> Vec<u8> {
    or_panic(try_quantize(ty, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded values in [-scale, scale) (a small LCG; no dependency on rand's streams).
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn round_trips_stay_within_half_a_step() {
        let x = values(32 * 40, 7, 3.0);
        for (ty, steps) in [
            (GgmlType::Q4_0, 8.0),
            (GgmlType::Q4_1, 15.0),
            (GgmlType::Q5_0, 16.0),
            (GgmlType::Q5_1, 31.0),
            (GgmlType::Q8_0, 127.0),
        ] {
            let bytes = quantize(ty, &x);
            assert_eq!(bytes.len(), 40 * ty.block_bytes());
            let mut y = vec![0.0f32; x.len()];
            dequantize(ty, &bytes, &mut y);
            for (bx, by) in x.chunks(32).zip(y.chunks(32)) {
                let lo = bx.iter().cloned().fold(f32::MAX, f32::min);
                let hi = bx.iter().cloned().fold(f32::MIN, f32::max);
                // One quant step (the range over the steps), plus f16's rounding of the scales.
                let step = (hi - lo).max(hi.abs().max(lo.abs())) / steps;
                for (a, b) in bx.iter().zip(by) {
                    assert!((a - b).abs() <= step * 0.51 + 0.01, "{ty}: {a} vs {b}");
                }
            }
        }
    }

    #[test]
    fn k_quants_round_trip_within_their_precision() {
        // Sub-blocks of different scales and signs: the RMS error of each
        // super-block after a round trip, relative to its values' RMS (a
        // sub-block far smaller than the largest of its super-block may
        // round to nothing, as in ggml).
        let x: Vec<f32> = values(256 * 12, 3, 1.0)
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v * 10f32.powi((i / 32 % 4) as i32 - 2) + if i % 512 < 256 { 0.0 } else { 0.3 }
            })
            .collect();
        for (ty, limit) in [
            (GgmlType::Q4K, 0.08),
            (GgmlType::Q5K, 0.04),
            (GgmlType::Q6K, 0.02),
        ] {
            let bytes = quantize(ty, &x);
            assert_eq!(bytes.len(), 12 * ty.block_bytes());
            let mut y = vec![0.0f32; x.len()];
            dequantize(ty, &bytes, &mut y);
            let rms = |v: &[f32]| (v.iter().map(|e| e * e).sum::<f32>() / v.len() as f32).sqrt();
            for (bx, by) in x.chunks(256).zip(y.chunks(256)) {
                let diff: Vec<f32> = bx.iter().zip(by).map(|(a, b)| a - b).collect();
                let (err, scale) = (rms(&diff), rms(bx));
                assert!(
                    err <= limit * scale,
                    "{ty}: error {err} for values of RMS {scale}"
                );
            }
        }
        // All zeros and all equal blocks.
        for ty in [GgmlType::Q4K, GgmlType::Q5K, GgmlType::Q6K] {
            for v in [0.0f32, 0.75, -2.0] {
                let mut y = vec![1.0f32; 256];
                dequantize(ty, &quantize(ty, &[v; 256]), &mut y);
                assert!(
                    y.iter().all(|&y| (y - v).abs() <= v.abs() * 0.02),
                    "{ty} of {v}: {y:?}"
                );
            }
        }
    }

    #[test]
    fn floats_convert_as_ggml() {
        let x = [1.0f32, -2.5, 1.0 + 1.0 / 256.0, 65504.0, 1e-8, f32::NAN];
        for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
            let bytes = quantize(ty, &x);
            let mut y = [0.0f32; 6];
            dequantize(ty, &bytes, &mut y);
            assert_eq!(&y[..2], &[1.0, -2.5], "{ty}");
            assert!(y[5].is_nan(), "{ty}");
        }
        let mut y = [0.0f32; 6];
        dequantize(GgmlType::BF16, &quantize(GgmlType::BF16, &x), &mut y);
        assert_eq!(y[2], 1.0); // a tie rounds to even
        assert_eq!(f32_to_bf16(f32::from_bits(0x7f80_0001)).to_bits(), 0x7fc0);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0).to_f32(), 1.0 + 1.0 / 64.0);
    }

    #[test]
    fn bad_sizes_are_errors_naming_the_type() {
        let e = try_quantize(GgmlType::Q4_1, &[0.0; 33])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("33") && e.contains("Q4_1") && e.contains("32"),
            "{e}"
        );
        let mut out = [0.0f32; 256];
        let e = try_dequantize(GgmlType::Q6K, &[0; 209], &mut out)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Q6_K") && e.contains("210") && e.contains("209"),
            "{e}"
        );
        let e = try_dequantize(GgmlType::Q4K, &[0; 144], &mut out[..100])
            .unwrap_err()
            .to_string();
        assert!(e.contains("100") && e.contains("Q4_K"), "{e}");
        let e = try_quantize(GgmlType::Q6K, &[0.0; 255])
            .unwrap_err()
            .to_string();
        assert!(e.contains("Q6_K") && e.contains("256"), "{e}");
        let e = std::panic::catch_unwind(|| quantize(GgmlType::Q8_0, &[1.0; 3]));
        assert!(e.is_err());
    }

    #[test]
    fn large_inputs_decode_the_same_in_parallel() {
        // Enough blocks for the parallel path, decoded again block by block.
        let x = values(3 * PARALLEL_CHUNK + 32 * 5, 11, 2.0);
        for ty in [GgmlType::Q4_1, GgmlType::Q8_0] {
            let bytes = quantize(ty, &x);
            let mut all = vec![0.0f32; x.len()];
            dequantize(ty, &bytes, &mut all);
            let mut one = vec![0.0f32; 32];
            for (b, y) in bytes.chunks(ty.block_bytes()).zip(all.chunks(32)) {
                dequantize(ty, b, &mut one);
                assert_eq!(one, y);
            }
            let mut again = vec![0u8; bytes.len()];
            for (x, b) in x.chunks(32).zip(again.chunks_mut(ty.block_bytes())) {
                quantize_into(ty, x, b);
            }
            assert_eq!(again, bytes);
        }
    }
}
