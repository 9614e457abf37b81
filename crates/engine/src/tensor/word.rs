//! [`Word`]: a 0-d tensor's value as one 8-byte word.
//!
//! Every payload of `Repr` (an f32's bits, an f64's bits, an i64, a bool in
//! the low byte, the `Arc` of a
//! dense tensor) is one 8-byte word at the same offset, which makes a
//! `Tensor` a pair of scalars to the compiler: it is moved in two registers
//! and written with two 8-byte stores. With `F32(f32)` at offset 4 and
//! `F64(f64)` at offset 8 it was an opaque 16 bytes, built on the stack with
//! a 4-byte tag store and a 4-byte value store and then copied with one
//! 8- or 16-byte load. Such a load cannot be forwarded from the smaller
//! stores still in flight and waits until they reach the cache (about 15
//! cycles here, measured): several per recorded scalar op made recording a
//! scalar graph run at half the instructions per cycle of its backward.

/// The bits of a 0-d tensor's value: an `f32` in the low 32 bits, or an `f64`.
///
/// `repr(transparent)`: the in-place views below cast a `&Word` to the
/// `f64` or `f32` inside it, which relies on `Word` having exactly `u64`'s
/// size (8) and alignment (8 on every 64-bit target this crate supports;
/// checked at compile time below).
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(transparent)]
pub(crate) struct Word(u64);

// The casts to `f64` need `Word`'s alignment to be at least `f64`'s (a
// 32-bit target may align `u64` to 4 but `f64` to 8), and both need 8 bytes.
const _: () = assert!(
    std::mem::size_of::<Word>() == 8
        && std::mem::align_of::<Word>() >= std::mem::align_of::<f64>()
        && std::mem::align_of::<Word>() >= std::mem::align_of::<f32>()
);

/// The byte offset of an f32 stored in a `Word`: its low half.
const F32_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 4 };

/// The byte offset of a bool stored in a `Word`: its least significant byte.
const BOOL_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 7 };

/// The byte offset of a 16-bit float (f16, bf16) stored in a `Word`: its
/// low 16 bits.
const HALF_OFFSET: usize = if cfg!(target_endian = "little") { 0 } else { 6 };

/// The accessors of a 16-bit float (`half::f16` or `half::bf16`, each a
/// `repr(transparent)` `u16`) kept in a word's low 16 bits.
macro_rules! half_accessors {
    ($T:ty, $from:ident, $get:ident, $get_ref:ident, $get_mut:ident) => {
        #[inline(always)]
        pub(crate) fn $from(v: $T) -> Self {
            Word(u64::from(v.to_bits()))
        }

        #[inline(always)]
        pub(crate) fn $get(self) -> $T {
            <$T>::from_bits(self.0 as u16)
        }

        /// The stored value in place.
        #[inline(always)]
        pub(crate) fn $get_mut(&mut self) -> &mut $T {
            // SAFETY: the type is a transparent `u16` (2 bytes, 2-aligned,
            // every bit pattern valid). `Word` is a transparent `u64`, at
            // least 4-aligned and 8 bytes long (asserted above), so the 2
            // bytes at `HALF_OFFSET` (0 or 6) are in bounds, 2-aligned and
            // initialised; they are the low 16 bits, where the constructor
            // put the value's bits. The result reborrows `self` mutably.
            unsafe {
                &mut *(self as *mut Word)
                    .cast::<u8>()
                    .add(HALF_OFFSET)
                    .cast::<$T>()
            }
        }

        /// The stored value by reference.
        #[inline(always)]
        pub(crate) fn $get_ref(&self) -> &$T {
            // SAFETY: as in the `_mut` accessor, with a shared reborrow.
            unsafe {
                &*(self as *const Word)
                    .cast::<u8>()
                    .add(HALF_OFFSET)
                    .cast::<$T>()
            }
        }
    };
}

impl Word {
    half_accessors!(half::f16, from_f16, f16, f16_ref, f16_mut);
    half_accessors!(half::bf16, from_bf16, bf16, bf16_ref, bf16_mut);

    #[inline(always)]
    pub(crate) fn from_f32(v: f32) -> Self {
        Word(u64::from(v.to_bits()))
    }

    #[inline(always)]
    pub(crate) fn from_f64(v: f64) -> Self {
        Word(v.to_bits())
    }

    #[inline(always)]
    pub(crate) fn f32(self) -> f32 {
        f32::from_bits(self.0 as u32)
    }

    #[inline(always)]
    pub(crate) fn f64(self) -> f64 {
        f64::from_bits(self.0)
    }

    /// The stored f32 in place (for in-place accumulation and one-element slices).
    #[inline(always)]
    pub(crate) fn f32_mut(&mut self) -> &mut f32 {
        // SAFETY: `Word` is a transparent `u64`, at least 4-aligned and 8
        // bytes long (asserted above), so the 4 bytes at `F32_OFFSET` (0 or
        // 4) are in bounds and 4-aligned; they are initialised (a `u64` has
        // no padding) and every bit pattern is a valid f32; they are the low
        // 32 bits, where `from_f32` put the value's bits. The result
        // reborrows `self` mutably, so it is the only access while it lives.
        unsafe {
            &mut *(self as *mut Word)
                .cast::<u8>()
                .add(F32_OFFSET)
                .cast::<f32>()
        }
    }

    /// The stored f32 by reference (for one-element slices).
    #[inline(always)]
    pub(crate) fn f32_ref(&self) -> &f32 {
        // SAFETY: as in `f32_mut`, with a shared reborrow of `self`.
        unsafe {
            &*(self as *const Word)
                .cast::<u8>()
                .add(F32_OFFSET)
                .cast::<f32>()
        }
    }

    /// The stored f64 in place.
    #[inline(always)]
    pub(crate) fn f64_mut(&mut self) -> &mut f64 {
        // SAFETY: `Word` is a transparent `u64` with `f64`'s size and at least
        // its alignment (asserted above); its 8 bytes are initialised and
        // every bit pattern is a valid f64. The result reborrows `self`
        // mutably, so it is the only access while it lives.
        unsafe { &mut *(self as *mut Word).cast::<f64>() }
    }

    /// The stored f64 by reference.
    #[inline(always)]
    pub(crate) fn f64_ref(&self) -> &f64 {
        // SAFETY: as in `f64_mut`, with a shared reborrow of `self`.
        unsafe { &*(self as *const Word).cast::<f64>() }
    }

    #[inline(always)]
    pub(crate) fn from_i64(v: i64) -> Self {
        Word(v as u64)
    }

    #[inline(always)]
    pub(crate) fn i64(self) -> i64 {
        self.0 as i64
    }

    /// The stored i64 in place.
    #[inline(always)]
    pub(crate) fn i64_mut(&mut self) -> &mut i64 {
        // SAFETY: `Word` is a transparent `u64`, and `i64` has the same size
        // and alignment and accepts every bit pattern. The result reborrows
        // `self` mutably, so it is the only access while it lives.
        unsafe { &mut *(self as *mut Word).cast::<i64>() }
    }

    /// The stored i64 by reference.
    #[inline(always)]
    pub(crate) fn i64_ref(&self) -> &i64 {
        // SAFETY: as in `i64_mut`, with a shared reborrow of `self`.
        unsafe { &*(self as *const Word).cast::<i64>() }
    }

    /// A bool in the low byte (0 or 1), every other byte zero.
    #[inline(always)]
    pub(crate) fn from_bool(v: bool) -> Self {
        Word(u64::from(v))
    }

    #[inline(always)]
    pub(crate) fn bool(self) -> bool {
        self.0 != 0
    }

    /// The stored bool in place.
    #[inline(always)]
    pub(crate) fn bool_mut(&mut self) -> &mut bool {
        // SAFETY: a bool `Word` is only made by `from_bool`, which leaves 0 or
        // 1 in the byte at `BOOL_OFFSET` (the least significant one) and
        // zeros elsewhere; every write through this reference is a valid
        // `bool`, so the byte stays 0 or 1. The byte is in bounds and any
        // address is 1-aligned. The result reborrows `self` mutably.
        unsafe {
            &mut *(self as *mut Word)
                .cast::<u8>()
                .add(BOOL_OFFSET)
                .cast::<bool>()
        }
    }

    /// The stored bool by reference.
    #[inline(always)]
    pub(crate) fn bool_ref(&self) -> &bool {
        // SAFETY: as in `bool_mut`, with a shared reborrow of `self`.
        unsafe {
            &*(self as *const Word)
                .cast::<u8>()
                .add(BOOL_OFFSET)
                .cast::<bool>()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Word;

    #[test]
    fn values_round_trip_by_value_and_in_place() {
        for v in [
            0.0f32,
            -0.0,
            1.5,
            -3.25e-20,
            f32::INFINITY,
            f32::MIN_POSITIVE,
        ] {
            let mut w = Word::from_f32(v);
            assert_eq!(w.f32().to_bits(), v.to_bits());
            assert_eq!(w.f32_ref().to_bits(), v.to_bits());
            *w.f32_mut() += 1.0;
            assert_eq!(w.f32().to_bits(), (v + 1.0).to_bits());
        }
        for v in [0.0f64, -0.0, 1.5, -3.25e-200, f64::NEG_INFINITY] {
            let mut w = Word::from_f64(v);
            assert_eq!(w.f64().to_bits(), v.to_bits());
            assert_eq!(w.f64_ref().to_bits(), v.to_bits());
            *w.f64_mut() *= 2.0;
            assert_eq!(w.f64().to_bits(), (v * 2.0).to_bits());
        }
        assert!(Word::from_f32(f32::NAN).f32().is_nan());
        for v in [0i64, -1, i64::MIN, i64::MAX, 42] {
            let mut w = Word::from_i64(v);
            assert_eq!((w.i64(), *w.i64_ref()), (v, v));
            *w.i64_mut() = v.wrapping_add(1);
            assert_eq!(w.i64(), v.wrapping_add(1));
        }
        for v in [false, true] {
            let mut w = Word::from_bool(v);
            assert_eq!((w.bool(), *w.bool_ref()), (v, v));
            *w.bool_mut() = !v;
            assert_eq!(w.bool(), !v);
            assert!(w == Word::from_bool(!v));
        }
    }

    #[test]
    fn half_floats_round_trip_by_value_and_in_place() {
        use half::{bf16, f16};
        for v in [0.0f32, -0.0, 1.5, -65504.0, 6.1e-5, f32::INFINITY] {
            let (h, b) = (f16::from_f32(v), bf16::from_f32(v));
            let (mut wh, mut wb) = (Word::from_f16(h), Word::from_bf16(b));
            assert_eq!(
                (wh.f16().to_bits(), wh.f16_ref().to_bits()),
                (h.to_bits(), h.to_bits())
            );
            assert_eq!(
                (wb.bf16().to_bits(), wb.bf16_ref().to_bits()),
                (b.to_bits(), b.to_bits())
            );
            *wh.f16_mut() = f16::from_f32(2.0);
            *wb.bf16_mut() = bf16::from_f32(-3.0);
            assert_eq!((wh.f16().to_f32(), wb.bf16().to_f32()), (2.0, -3.0));
        }
    }

    #[test]
    fn a_tensor_stays_two_words() {
        use crate::tensor::Tensor;
        assert_eq!(std::mem::size_of::<Tensor>(), 16);
        assert_eq!(std::mem::size_of::<Option<Tensor>>(), 16);
    }
}
