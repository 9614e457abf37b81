//! Runs a slice loop compiled for the widest SIMD the CPU has.
//!
//! The crate is built for the baseline x86-64 target (SSE2, four f32 lanes)
//! so that one binary runs everywhere. [`wide`] runs a closure inside a
//! function compiled with AVX-512F (or AVX2) enabled when the CPU reports it
//! at run time; the closure and the element functors it calls are
//! `#[inline(always)]`, so LLVM inlines them there and vectorises the loop at
//! that width. The code is the same scalar code in every version (Rust never
//! contracts `a * b + c` into an FMA), so results are bit-identical whichever
//! version runs. The few fused multiply-adds written out (`f32::mul_add`, in
//! `tensor::math::erfc_f32`) round once in every version: an FMA
//! instruction in both wide ones (AVX-512F implies FMA; the AVX2 version
//! asks for FMA too, which every Intel and AMD CPU with AVX2 has), a call
//! to libm's `fmaf` in the baseline one, slow but exact.

use std::sync::atomic::{AtomicU8, Ordering};

/// An instruction-set level the kernels may use, from narrowest to widest.
/// [`isa`] is the level they use: the widest the CPU has, lowered by a cap
/// ([`set_isa_cap`], or the `RETROGRAD_ISA` environment variable) so that
/// the AVX2 and portable paths can run, and be tested and timed, on a
/// machine that has AVX-512.
///
/// The cap reaches every dispatch in this crate. Matrix products run on the
/// `gemm` crate, which picks its own kernels when first called and takes no
/// cap; its AVX-512 kernels are compiled in by the cargo feature
/// `avx512-gemm` (on by default), so a build without that feature runs
/// AVX2 products on any machine.
///
/// Results: elementwise kernels run the same scalar code at every level
/// (see [`wide`]) and give the same bits under every cap. Kernels with a
/// hand-written AVX-512 form (the direct and Winograd convolutions, the
/// attention tiles) may pick another algorithm under a lower cap, and then
/// agree to rounding, not bit for bit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Baseline x86-64 (SSE2) or the target's plain Rust code.
    Portable,
    /// AVX2 with FMA (and F16C where a kernel needs it).
    Avx2,
    /// AVX-512F.
    Avx512,
}

impl Isa {
    /// Every level, narrowest first.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512];

    /// The level's name as `RETROGRAD_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The level named `name` (`portable`, `avx2` or `avx512`, any case).
    pub fn try_from_name(name: &str) -> crate::base::error::Result<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
            .ok_or_else(|| {
                crate::base::error::Error::invalid(
                    "isa",
                    format!("unknown instruction set `{name}`: expected portable, avx2 or avx512"),
                )
            })
    }

    /// Like [`Isa::try_from_name`], but panics with its error.
    #[track_caller]
    pub fn from_name(name: &str) -> Isa {
        crate::base::error::or_panic(Isa::try_from_name(name))
    }

    /// The widest level this CPU has.
    pub fn detected() -> Isa {
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx512f") {
                return Isa::Avx512;
            }
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Isa::Avx2;
            }
        }
        Isa::Portable
    }
}

/// The environment variable read once, at the first dispatch, for a cap.
pub const ISA_ENV: &str = "RETROGRAD_ISA";

/// What kernels may use, as bits (one load and one test per question, in
/// kernels that ask once per row); 0 until the first dispatch or
/// [`set_isa_cap`].
static FLAGS: AtomicU8 = AtomicU8::new(0);
const READY: u8 = 1;
const AVX2_FMA: u8 = 2;
const AVX512F: u8 = 4;
const F16C: u8 = 8;

fn flags_for(level: Isa) -> u8 {
    let mut flags = READY;
    if level >= Isa::Avx2 {
        flags |= AVX2_FMA;
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("f16c") {
            flags |= F16C;
        }
    }
    if level >= Isa::Avx512 {
        flags |= AVX512F;
    }
    flags
}

#[inline(always)]
fn flags() -> u8 {
    match FLAGS.load(Ordering::Relaxed) {
        0 => first_flags(),
        flags => flags,
    }
}

/// The flags of the CPU's level under the `RETROGRAD_ISA` cap, set once.
#[cold]
fn first_flags() -> u8 {
    let flags = flags_for(Isa::detected().min(cap_from_env()));
    // A cap set by another thread meanwhile wins.
    let _ = FLAGS.compare_exchange(0, flags, Ordering::Relaxed, Ordering::Relaxed);
    FLAGS.load(Ordering::Relaxed)
}

/// The cap named by `RETROGRAD_ISA`, if set. A value that names no level
/// is reported on stderr once and ignored, since kernels that dispatch
/// have no error to return.
fn cap_from_env() -> Isa {
    match std::env::var(ISA_ENV) {
        Ok(name) => Isa::try_from_name(&name).unwrap_or_else(|e| {
            eprintln!("retrograd: {ISA_ENV} ignored: {e}");
            Isa::Avx512
        }),
        Err(_) => Isa::Avx512,
    }
}

/// The level kernels use: the widest the CPU has, at most the cap.
pub fn isa() -> Isa {
    let flags = flags();
    if flags & AVX512F != 0 {
        Isa::Avx512
    } else if flags & AVX2_FMA != 0 {
        Isa::Avx2
    } else {
        Isa::Portable
    }
}

/// Caps the level every later dispatch uses at `cap` (above what the CPU
/// has, the CPU's level), overriding `RETROGRAD_ISA`; returns the level now
/// in force. Kernels already running finish at their level. Meant for
/// tests and benchmarks: set it before the work it should govern.
pub fn set_isa_cap(cap: Isa) -> Isa {
    let level = Isa::detected().min(cap);
    FLAGS.store(flags_for(level), Ordering::Relaxed);
    level
}

/// Whether kernels may use AVX-512F: [`wide`]'s widest version, and the
/// condition of every hand-written AVX-512 kernel.
#[inline(always)]
pub fn has_avx512() -> bool {
    flags() & AVX512F != 0
}

/// Whether kernels may use AVX2 and FMA: [`wide`]'s middle version.
#[inline(always)]
pub fn has_avx2_fma() -> bool {
    flags() & AVX2_FMA != 0
}

/// Whether kernels may use F16C (half-precision conversions) beside AVX2:
/// at the AVX2 level or above, on a CPU that has it.
#[inline(always)]
pub fn has_f16c() -> bool {
    flags() & F16C != 0
}

/// Runs `body`, compiled with the widest vector extension the CPU supports.
#[inline(always)]
pub fn wide<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if has_avx512() {
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { with_avx512(body) };
        }
        if has_avx2_fma() {
            // SAFETY: the CPU supports AVX2 and FMA (checked just above).
            return unsafe { with_avx2(body) };
        }
    }
    body()
}

/// Runs `body` compiled with AVX-512F enabled (for `wide`, and for
/// `f64x8::with_widest_f64x8!`, which picks its lane type first).
///
/// # Safety
/// The CPU must support AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
pub(crate) unsafe fn with_avx512<R>(body: impl FnOnce() -> R) -> R {
    body()
}

/// Runs `body` compiled with AVX2 and FMA enabled.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn with_avx2<R>(body: impl FnOnce() -> R) -> R {
    body()
}

#[cfg(test)]
mod tests {
    #[test]
    fn runs_the_body_once_and_returns_its_value() {
        let mut calls = 0;
        let v = super::wide(|| {
            calls += 1;
            (0..100).map(|i| i as f32 * 0.5).sum::<f32>()
        });
        assert_eq!(calls, 1);
        assert_eq!(v, 2475.0);
    }
}
