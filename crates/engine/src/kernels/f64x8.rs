//! Eight f64 lanes, at the widest width the CPU has, with one fixed order
//! of additions: the row and plane reductions of the normalisations
//! (`kernels::nn::norm`, `rms_norm`, `batch_norm`) are written once over
//! [`F64x8`] and run on AVX-512 (one register), AVX (two) or plain arrays.
//!
//! Why not [`wide`](super::simd::wide)'s autovectorisation: a row sum that
//! widens f32 to f64 compiles to 128-bit vectors and scalar conversions
//! there, at about twice the cost of the same loop on AVX-512 registers
//! (ARCHITECTURE.md, PERF "Normalisation rows on f64 lanes").
//!
//! A row is read by [`for_octets`]: element `i` lands in lane `i % 8`, and a
//! last partial octet is padded with zeros (a term that would not vanish
//! on a zero, such as `(x - mean)²`, is multiplied by [`F64x8::mask`]).
//! Every operation is lane-wise IEEE arithmetic (no fused multiply-add),
//! and [`F64x8::sum`] adds the lanes in one fixed tree, so a row gives the
//! same bits at every width.

use std::mem::MaybeUninit;

use crate::tensor::{DType, Element};

/// Eight f64 lanes. Implemented by [`Lanes`] (arrays), and, inside
/// [`with_widest_f64x8!`] only, by `Avx512` and `Avx` registers.
pub(crate) trait F64x8: Copy {
    /// The first eight elements of `s`, widened to f64 (exactly).
    fn load<T: Element>(s: &[T]) -> Self;
    /// `v` in every lane.
    fn splat(v: f64) -> Self;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    /// The lanes, in order.
    fn to_array(self) -> [f64; 8];
    /// Rounds each lane to `T` into the first eight elements of `out`.
    fn write<T: Element>(self, out: &mut [MaybeUninit<T>]);

    /// The lanes added in the fixed order
    /// `(l0 + l4) + (l1 + l5) + ((l2 + l6) + (l3 + l7))`.
    #[inline(always)]
    fn sum(self) -> f64 {
        let l = self.to_array();
        (l[0] + l[4]) + (l[1] + l[5]) + ((l[2] + l[6]) + (l[3] + l[7]))
    }

    /// 1 in the first `n` lanes, 0 in the others.
    #[inline(always)]
    fn mask(n: usize) -> Self {
        Self::load(&std::array::from_fn::<f64, 8, _>(|j| {
            if j < n {
                1.0
            } else {
                0.0
            }
        }))
    }

    /// An octet of [`for_octets`]: the first eight elements of `s`, or all of a
    /// shorter `s` followed by zeros.
    #[inline(always)]
    fn load_part<T: Element>(s: &[T]) -> Self {
        if s.len() >= 8 {
            Self::load(s)
        } else {
            let mut padded = [T::zero(); 8];
            padded[..s.len()].copy_from_slice(s);
            Self::load(&padded)
        }
    }

    /// Writes the first `min(8, out.len())` lanes into `out`.
    #[inline(always)]
    fn write_part<T: Element>(self, out: &mut [MaybeUninit<T>]) {
        if out.len() >= 8 {
            self.write(out)
        } else {
            let mut all = [MaybeUninit::uninit(); 8];
            self.write(&mut all);
            out.copy_from_slice(&all[..out.len()]);
        }
    }

    /// [`write_part`](Self::write_part) into initialised elements.
    #[inline(always)]
    fn store_part<T: Element>(self, out: &mut [T]) {
        // SAFETY: `write_part` only writes initialised values, so `out`
        // stays initialised; `MaybeUninit<T>` has `T`'s layout.
        self.write_part(unsafe { &mut *(out as *mut [T] as *mut [MaybeUninit<T>]) })
    }
}

/// Calls `f(start, count)` for each octet of a row of `len` elements:
/// `count` is 8 but in a last partial octet. The whole octets get the
/// constant 8, so `load_part` and `write_part` compile to plain loads and
/// stores there; `f` should be an `#[inline(always)]` closure (one LLVM
/// declines to inline is compiled without the caller's `target_feature`).
#[inline(always)]
pub(crate) fn for_octets(len: usize, mut f: impl FnMut(usize, usize)) {
    let whole = len / 8 * 8;
    for c in (0..whole).step_by(8) {
        f(c, 8);
    }
    if whole < len {
        f(whole, len - whole);
    }
}

/// Eight lanes as an array: every CPU, and the reference the registers
/// are tested against.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Lanes(pub [f64; 8]);

impl Lanes {
    #[inline(always)]
    fn zip(self, o: Self, f: impl Fn(f64, f64) -> f64) -> Self {
        Lanes(std::array::from_fn(|j| f(self.0[j], o.0[j])))
    }
}

impl F64x8 for Lanes {
    #[inline(always)]
    fn load<T: Element>(s: &[T]) -> Self {
        let s = &s[..8];
        Lanes(std::array::from_fn(|j| s[j].to_f64()))
    }
    #[inline(always)]
    fn splat(v: f64) -> Self {
        Lanes([v; 8])
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self.zip(o, |a, b| a + b)
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self.zip(o, |a, b| a - b)
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self.zip(o, |a, b| a * b)
    }
    #[inline(always)]
    fn to_array(self) -> [f64; 8] {
        self.0
    }
    #[inline(always)]
    fn write<T: Element>(self, out: &mut [MaybeUninit<T>]) {
        for (d, v) in out[..8].iter_mut().zip(self.0) {
            d.write(T::from_f64(v));
        }
    }
}

#[cfg(target_arch = "x86_64")]
pub(crate) use registers::{Avx, Avx512};

/// The register forms. A value of either type exists only inside the
/// matching branch of [`with_widest_f64x8!`], after the CPU was checked for
/// the extension, which is what makes their intrinsics sound to call.
#[cfg(target_arch = "x86_64")]
mod registers {
    use std::arch::x86_64::*;

    use std::mem::MaybeUninit;

    use super::{DType, Element, F64x8};

    /// One AVX-512 register (`with_widest_f64x8!` only).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx512(__m512d);

    impl F64x8 for Avx512 {
        #[inline(always)]
        fn load<T: Element>(s: &[T]) -> Self {
            let s = &s[..8];
            // SAFETY: eight elements are in bounds (sliced above); the CPU has
            // AVX-512F (the type's contract). T is f32 or f64 by its DTYPE.
            unsafe {
                if T::DTYPE == DType::F32 {
                    Avx512(_mm512_cvtps_pd(_mm256_loadu_ps(s.as_ptr().cast())))
                } else {
                    Avx512(_mm512_loadu_pd(s.as_ptr().cast()))
                }
            }
        }
        #[inline(always)]
        fn splat(v: f64) -> Self {
            // SAFETY: the CPU has AVX-512F (the type's contract).
            unsafe { Avx512(_mm512_set1_pd(v)) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx512(_mm512_add_pd(self.0, o.0)) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx512(_mm512_sub_pd(self.0, o.0)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx512(_mm512_mul_pd(self.0, o.0)) }
        }
        #[inline(always)]
        fn to_array(self) -> [f64; 8] {
            // SAFETY: a __m512d is eight f64s.
            unsafe { std::mem::transmute::<__m512d, [f64; 8]>(self.0) }
        }
        #[inline(always)]
        fn write<T: Element>(self, out: &mut [MaybeUninit<T>]) {
            let out = &mut out[..8];
            // SAFETY: as for `load`; `cvtpd_ps` rounds to nearest, as `as f32` does.
            unsafe {
                if T::DTYPE == DType::F32 {
                    _mm256_storeu_ps(out.as_mut_ptr().cast(), _mm512_cvtpd_ps(self.0))
                } else {
                    _mm512_storeu_pd(out.as_mut_ptr().cast(), self.0)
                }
            }
        }

        // A partial octet by masked loads and stores, which neither read nor
        // write (nor fault on) the lanes past the slice: no padded copy.
        #[inline(always)]
        fn load_part<T: Element>(s: &[T]) -> Self {
            if s.len() >= 8 {
                return Self::load(s);
            }
            let k = (1u16 << s.len()) - 1;
            // SAFETY: the mask reads the first `s.len()` elements only; the
            // CPU has AVX-512F (the type's contract).
            unsafe {
                if T::DTYPE == DType::F32 {
                    let v = _mm512_maskz_loadu_ps(k, s.as_ptr().cast());
                    Avx512(_mm512_cvtps_pd(_mm512_castps512_ps256(v)))
                } else {
                    Avx512(_mm512_maskz_loadu_pd(k as u8, s.as_ptr().cast()))
                }
            }
        }
        #[inline(always)]
        fn write_part<T: Element>(self, out: &mut [MaybeUninit<T>]) {
            if out.len() >= 8 {
                return self.write(out);
            }
            let k = (1u16 << out.len()) - 1;
            // SAFETY: the mask writes the first `out.len()` elements only.
            unsafe {
                if T::DTYPE == DType::F32 {
                    let v = _mm512_castps256_ps512(_mm512_cvtpd_ps(self.0));
                    _mm512_mask_storeu_ps(out.as_mut_ptr().cast(), k, v)
                } else {
                    _mm512_mask_storeu_pd(out.as_mut_ptr().cast(), k as u8, self.0)
                }
            }
        }
    }

    /// Two AVX registers, lanes 0-3 and 4-7 (`with_widest_f64x8!` only).
    #[derive(Clone, Copy)]
    pub(crate) struct Avx(__m256d, __m256d);

    impl F64x8 for Avx {
        #[inline(always)]
        fn load<T: Element>(s: &[T]) -> Self {
            let s = &s[..8];
            // SAFETY: eight elements are in bounds; the CPU has AVX (the
            // type's contract). T is f32 or f64 by its DTYPE.
            unsafe {
                if T::DTYPE == DType::F32 {
                    let p = s.as_ptr().cast::<f32>();
                    Avx(
                        _mm256_cvtps_pd(_mm_loadu_ps(p)),
                        _mm256_cvtps_pd(_mm_loadu_ps(p.add(4))),
                    )
                } else {
                    let p = s.as_ptr().cast::<f64>();
                    Avx(_mm256_loadu_pd(p), _mm256_loadu_pd(p.add(4)))
                }
            }
        }
        #[inline(always)]
        fn splat(v: f64) -> Self {
            // SAFETY: the CPU has AVX (the type's contract).
            unsafe { Avx(_mm256_set1_pd(v), _mm256_set1_pd(v)) }
        }
        #[inline(always)]
        fn add(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx(_mm256_add_pd(self.0, o.0), _mm256_add_pd(self.1, o.1)) }
        }
        #[inline(always)]
        fn sub(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx(_mm256_sub_pd(self.0, o.0), _mm256_sub_pd(self.1, o.1)) }
        }
        #[inline(always)]
        fn mul(self, o: Self) -> Self {
            // SAFETY: as for `splat`.
            unsafe { Avx(_mm256_mul_pd(self.0, o.0), _mm256_mul_pd(self.1, o.1)) }
        }
        #[inline(always)]
        fn to_array(self) -> [f64; 8] {
            // SAFETY: two __m256d are eight f64s, low lanes first.
            unsafe { std::mem::transmute::<[__m256d; 2], [f64; 8]>([self.0, self.1]) }
        }
        #[inline(always)]
        fn write<T: Element>(self, out: &mut [MaybeUninit<T>]) {
            let out = &mut out[..8];
            // SAFETY: as for `load`.
            unsafe {
                if T::DTYPE == DType::F32 {
                    let p = out.as_mut_ptr().cast::<f32>();
                    _mm_storeu_ps(p, _mm256_cvtpd_ps(self.0));
                    _mm_storeu_ps(p.add(4), _mm256_cvtpd_ps(self.1));
                } else {
                    let p = out.as_mut_ptr().cast::<f64>();
                    _mm256_storeu_pd(p, self.0);
                    _mm256_storeu_pd(p.add(4), self.1);
                }
            }
        }
    }
}

/// `with_widest_f64x8!(L => body)` runs `body` with the type `L` bound to
/// the widest [`F64x8`] the CPU has, compiled with that extension enabled
/// (so the register forms' intrinsics inline): AVX-512, else AVX (on CPUs
/// with AVX2 and FMA, as `wide` decides), else [`Lanes`]. The body is
/// compiled once per branch.
macro_rules! with_widest_f64x8 {
    ($L:ident => $body:expr) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if $crate::kernels::simd::has_avx512() {
                // SAFETY: the CPU has AVX-512F (checked just above).
                unsafe {
                    $crate::kernels::simd::with_avx512(
                        #[inline(always)]
                        || {
                            type $L = $crate::kernels::f64x8::Avx512;
                            $body
                        },
                    )
                }
            } else if $crate::kernels::simd::has_avx2_fma() {
                // SAFETY: the CPU has AVX2 and FMA (checked just above).
                unsafe {
                    $crate::kernels::simd::with_avx2(
                        #[inline(always)]
                        || {
                            type $L = $crate::kernels::f64x8::Avx;
                            $body
                        },
                    )
                }
            } else {
                type $L = $crate::kernels::f64x8::Lanes;
                $body
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            type $L = $crate::kernels::f64x8::Lanes;
            $body
        }
    }};
}
pub(crate) use with_widest_f64x8;

/// A kernel to run at every width in tests: `run::<L>(name)` once per form.
#[cfg(test)]
pub(crate) trait AtEveryWidth {
    fn run<L: F64x8>(&mut self, name: &'static str);
}

/// Runs `k` with [`Lanes`] and with every register form this CPU has,
/// each compiled with its extension enabled as in [`with_widest_f64x8!`].
#[cfg(test)]
pub(crate) fn at_every_width(k: &mut impl AtEveryWidth) {
    k.run::<Lanes>("lanes");
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::simd::has_avx512() {
            // SAFETY: the CPU has AVX-512F (checked just above).
            unsafe { crate::kernels::simd::with_avx512(|| k.run::<Avx512>("avx512")) }
        }
        if crate::kernels::simd::has_avx2_fma() {
            // SAFETY: the CPU has AVX2 and FMA (checked just above).
            unsafe { crate::kernels::simd::with_avx2(|| k.run::<Avx>("avx")) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three sums over the octets of `x` (one masked), and the first lanes
    /// of the first sum written out rounded to f32.
    fn sums<L: F64x8>(x: &[f32]) -> [f64; 6] {
        let (mut s, mut q, mut d) = (L::splat(0.0), L::splat(0.0), L::splat(0.0));
        for_octets(
            x.len(),
            #[inline(always)]
            |c, n| {
                let v = L::load_part(&x[c..c + n]);
                s = s.add(v);
                q = q.add(v.sub(L::splat(0.5)).mul(v));
                let dev = v.sub(L::splat(0.25)).mul(L::mask(n));
                d = d.add(dev.mul(dev));
            },
        );
        let mut out = [0.0f32; 3];
        s.store_part(&mut out);
        [s.sum(), q.sum(), d.sum()]
            .into_iter()
            .chain(out.map(f64::from))
            .collect::<Vec<_>>()
            .try_into()
            .unwrap()
    }

    /// The order the module documents, written out element by element.
    fn sums_reference(x: &[f32]) -> [f64; 6] {
        let (mut s, mut q, mut d) = ([0.0f64; 8], [0.0f64; 8], [0.0f64; 8]);
        for (i, &v) in x.iter().enumerate() {
            let v = f64::from(v);
            s[i % 8] += v;
            q[i % 8] += (v - 0.5) * v;
            d[i % 8] += (v - 0.25) * (v - 0.25);
        }
        let tree = |l: [f64; 8]| (l[0] + l[4]) + (l[1] + l[5]) + ((l[2] + l[6]) + (l[3] + l[7]));
        [
            tree(s),
            tree(q),
            tree(d),
            s[0] as f32 as f64,
            s[1] as f32 as f64,
            s[2] as f32 as f64,
        ]
    }

    struct Sums {
        x: Vec<f32>,
        forms: Vec<&'static str>,
    }

    impl AtEveryWidth for Sums {
        fn run<L: F64x8>(&mut self, name: &'static str) {
            for len in [3, 8, 16, 29, 203] {
                let (got, want) = (sums::<L>(&self.x[..len]), sums_reference(&self.x[..len]));
                assert_eq!(
                    got.map(f64::to_bits),
                    want.map(f64::to_bits),
                    "{name}, {len}"
                );
            }
            self.forms.push(name);
        }
    }

    /// Every form sums, masks, multiplies and rounds to the bits of the
    /// documented order, whole octets and partial ones.
    #[test]
    fn every_width_gives_the_bits_of_the_documented_order() {
        // Magnitudes 1e-9 to 1e9: their f64 sums round, so the order shows.
        let x = (0..203)
            .map(|i| (i as f32 * 0.731).sin() * 1e3f32.powi(i % 7 - 3))
            .collect();
        let mut k = Sums { x, forms: vec![] };
        at_every_width(&mut k);
        assert_eq!(k.forms[0], "lanes");
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            k.forms.contains(&"avx512"),
            crate::kernels::simd::has_avx512()
        );
    }
}
