//! ONNX's element types narrower than retrograd's: the 8-, 6- and 4-bit
//! floats (`FLOAT8E4M3FN`, `FLOAT8E4M3FNUZ`, `FLOAT8E5M2`,
//! `FLOAT8E5M2FNUZ`, `FLOAT8E8M0`, `FLOAT6E2M3`, `FLOAT6E3M2`,
//! `FLOAT4E2M1`) and the 4- and 2-bit integers (`INT4`, `UINT4`, `INT2`,
//! `UINT2`).
//!
//! retrograd has no dtype for them. They are storage formats (weights and
//! scales of quantized models), so, as for 8- to 32-bit integers, which
//! widen to i64, their values widen on reading: the floats to f32, which
//! holds every one of their values exactly, the integers to i64. A `Cast`
//! to one of them rounds the values to the ones the type holds, by the
//! rules of ONNX's `Cast` (round to nearest even, saturation by the
//! `saturate` attribute), and keeps them in the wide dtype.

use super::proto::tensor_proto::DataType as OnnxType;

/// One of ONNX's narrow element types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Narrow {
    /// A float with a sign, `exponent` and `mantissa` bits.
    Float(MiniFloat),
    /// `FLOAT8E8M0`: a power of two, 2^(code - 127); 255 is NaN.
    E8M0,
    /// An integer of `bits` bits, two's complement when `signed`.
    Int { bits: u32, signed: bool },
}

/// How a narrow float spends its codes on the special values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Specials {
    /// IEEE's: the top exponent is infinity (mantissa 0) or NaN.
    Ieee,
    /// No infinity; NaN is the code with every exponent and mantissa bit set.
    NanAllOnes,
    /// No infinity and no negative zero: NaN is the negative zero's code.
    NanNegativeZero,
    /// Neither infinity nor NaN: every code is a number.
    None,
}

/// A float of 1 sign bit, `exponent` and `mantissa` bits and `bias`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MiniFloat {
    exponent: u32,
    mantissa: u32,
    bias: i32,
    specials: Specials,
}

impl Narrow {
    /// The narrow type an ONNX element type code names, if it is one.
    pub(crate) fn of(code: i32) -> Option<Narrow> {
        use OnnxType as T;
        let float = |exponent, mantissa, bias, specials| {
            Narrow::Float(MiniFloat {
                exponent,
                mantissa,
                bias,
                specials,
            })
        };
        Some(match T::try_from(code).ok()? {
            T::Float8e4m3fn => float(4, 3, 7, Specials::NanAllOnes),
            T::Float8e4m3fnuz => float(4, 3, 8, Specials::NanNegativeZero),
            T::Float8e5m2 => float(5, 2, 15, Specials::Ieee),
            T::Float8e5m2fnuz => float(5, 2, 16, Specials::NanNegativeZero),
            T::Float6e2m3 => float(2, 3, 1, Specials::None),
            T::Float6e3m2 => float(3, 2, 3, Specials::None),
            T::Float4e2m1 => float(2, 1, 1, Specials::None),
            T::Float8e8m0 => Narrow::E8M0,
            T::Int4 => Narrow::Int {
                bits: 4,
                signed: true,
            },
            T::Uint4 => Narrow::Int {
                bits: 4,
                signed: false,
            },
            T::Int2 => Narrow::Int {
                bits: 2,
                signed: true,
            },
            T::Uint2 => Narrow::Int {
                bits: 2,
                signed: false,
            },
            _ => return None,
        })
    }

    /// Bits one element takes in `raw_data`.
    pub(crate) fn bits(self) -> u32 {
        match self {
            Narrow::Float(f) => 1 + f.exponent + f.mantissa,
            Narrow::E8M0 => 8,
            Narrow::Int { bits, .. } => bits,
        }
    }

    /// Whether the type's values widen to f32 (else to i64).
    pub(crate) fn is_float(self) -> bool {
        !matches!(self, Narrow::Int { .. })
    }

    /// The elements of `raw_data`, packed as ONNX packs them: 8-bit codes
    /// a byte each, 6-bit codes a byte each, 4-bit ones two to a byte and
    /// 2-bit ones four, the first element in the lowest bits. Gives
    /// `numel` codes, or `None` when `raw` is not the right length.
    pub(crate) fn unpack(self, raw: &[u8], numel: usize) -> Option<Vec<u8>> {
        let per_byte = match self.bits() {
            4 => 2,
            2 => 4,
            _ => 1,
        };
        if raw.len() != numel.div_ceil(per_byte) {
            return None;
        }
        let width = 8 / per_byte as u32;
        let mask = ((1u32 << width) - 1) as u8;
        Some(
            (0..numel)
                .map(|i| (raw[i / per_byte] >> ((i % per_byte) as u32 * width)) & mask)
                .collect(),
        )
    }

    /// How many entries of `int32_data` hold `numel` elements (each entry
    /// holds one byte of packed codes).
    pub(crate) fn int32_entries(self, numel: usize) -> usize {
        match self.bits() {
            4 => numel.div_ceil(2),
            2 => numel.div_ceil(4),
            _ => numel,
        }
    }

    /// The value of a float type's code.
    pub(crate) fn float_value(self, code: u8) -> f32 {
        match self {
            Narrow::Float(f) => f.value(code),
            Narrow::E8M0 => e8m0_value_or_nan(code),
            Narrow::Int { .. } => f32::NAN,
        }
    }

    /// The value of an integer type's code (sign-extended when signed).
    pub(crate) fn int_value(self, code: u8) -> i64 {
        match self {
            Narrow::Int { bits, signed: true } => {
                let shift = 8 - bits;
                i64::from(((code << shift) as i8) >> shift)
            }
            _ => i64::from(code),
        }
    }
}

/// 2^(code - 127) for a non-NaN `FLOAT8E8M0` code (2^-127 is an f32
/// subnormal: every one is exact).
fn e8m0_value(code: u8) -> f32 {
    if code == 0 {
        f32::from_bits(1 << 22)
    } else {
        f32::from_bits(u32::from(code) << 23)
    }
}

impl MiniFloat {
    /// The value of `code`.
    fn value(self, code: u8) -> f32 {
        let sign_bit = 1u8 << (self.exponent + self.mantissa);
        let negative = code & sign_bit != 0;
        let e = u32::from(code & (sign_bit - 1)) >> self.mantissa;
        let m = u32::from(code) & ((1 << self.mantissa) - 1);
        let top = (1 << self.exponent) - 1;
        let special = match self.specials {
            Specials::Ieee if e == top => Some(if m == 0 { f32::INFINITY } else { f32::NAN }),
            Specials::NanAllOnes if e == top && m == (1 << self.mantissa) - 1 => Some(f32::NAN),
            Specials::NanNegativeZero if code == sign_bit => Some(f32::NAN),
            _ => None,
        };
        let magnitude = special.unwrap_or_else(|| {
            let scale = self.mantissa as i32;
            if e == 0 {
                m as f32 * pow2(1 - self.bias - scale)
            } else {
                (m + (1 << self.mantissa)) as f32 * pow2(e as i32 - self.bias - scale)
            }
        });
        if negative && !magnitude.is_nan() {
            -magnitude
        } else {
            magnitude
        }
    }

    /// The largest finite value.
    fn max(self) -> f32 {
        let all = (1u32 << (self.exponent + self.mantissa)) - 1;
        (0..=all)
            .map(|c| self.value(c as u8))
            .filter(|v| v.is_finite())
            .fold(0.0, f32::max)
    }

    /// `x` rounded to the nearest value the type holds (ties to even).
    /// Past the largest value: that value when `saturate` (and for types
    /// without infinity or NaN), else infinity or NaN as the type has.
    fn round(self, x: f32, saturate: bool) -> f32 {
        let no_negative_zero = self.specials == Specials::NanNegativeZero;
        if x.is_nan() {
            // A type without NaN has nothing closer to give than zero.
            return if self.specials == Specials::None {
                0.0
            } else {
                f32::NAN
            };
        }
        let max = self.max();
        let overflow = || {
            if saturate || self.specials == Specials::None {
                max
            } else if self.specials == Specials::Ieee {
                f32::INFINITY
            } else {
                f32::NAN
            }
        };
        let a = x.abs();
        let rounded = if a.is_infinite() {
            overflow()
        } else {
            // The step between neighbours at a's exponent; below the
            // smallest normal exponent, the subnormals' step.
            let exponent = ((a.to_bits() >> 23) as i32 - 127).max(1 - self.bias);
            let step = pow2(exponent - self.mantissa as i32);
            let r = (a / step).round_ties_even() * step;
            if r > max {
                overflow()
            } else {
                r
            }
        };
        if rounded == 0.0 && no_negative_zero {
            0.0
        } else {
            rounded.copysign(x)
        }
    }
}

/// 2^e as f32, for the exponents narrow floats use (-149 to 127).
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

/// How a `Cast` to `FLOAT8E8M0` rounds a value that is not a power of two.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum E8M0Rounding {
    /// To the power of two above (ONNX's default).
    Up,
    /// To the power of two below (the exponent is kept).
    Down,
    /// To the nearest power of two, ties to the one above.
    Nearest,
}

impl E8M0Rounding {
    /// The mode ONNX's `round_mode` attribute names, if known.
    pub(crate) fn parse(name: &str) -> Option<E8M0Rounding> {
        Some(match name {
            "up" => E8M0Rounding::Up,
            "down" => E8M0Rounding::Down,
            "nearest" => E8M0Rounding::Nearest,
            _ => return None,
        })
    }
}

impl Narrow {
    /// `x` as the nearest value of this float type (see [`MiniFloat`]'s
    /// rounding and [`E8M0Rounding`]), in f32.
    pub(crate) fn round_float(self, x: f32, saturate: bool, mode: E8M0Rounding) -> f32 {
        match self {
            Narrow::Float(f) => f.round(x, saturate),
            Narrow::E8M0 => e8m0_value_or_nan(e8m0_code(x, saturate, mode)),
            Narrow::Int { .. } => self.int_from_float(x) as f32,
        }
    }

    /// A float as this integer type: truncated toward zero, and 0 where it
    /// lies outside the type's range (ONNX leaves that undefined; ONNX's
    /// reference gives 0 there).
    pub(crate) fn int_from_float(self, x: f32) -> i64 {
        let (lo, hi) = self.int_range();
        let t = x.trunc();
        if t.is_nan() || t < lo as f32 || t > hi as f32 {
            0
        } else {
            t as i64
        }
    }

    /// An integer as this integer type: ONNX's rule for integers, the
    /// higher bits dropped and the rest read in two's complement.
    pub(crate) fn int_from_int(self, v: i64) -> i64 {
        match self {
            Narrow::Int { bits, signed } => wrap_int(v, bits, signed),
            _ => v,
        }
    }

    fn int_range(self) -> (i64, i64) {
        match self {
            Narrow::Int { bits, signed: true } => (-(1 << (bits - 1)), (1 << (bits - 1)) - 1),
            Narrow::Int {
                bits,
                signed: false,
            } => (0, (1 << bits) - 1),
            _ => (i64::MIN, i64::MAX),
        }
    }
}

/// `v` as an integer of `bits` bits (below 64): the higher bits dropped,
/// the rest read in two's complement when `signed`.
pub(crate) fn wrap_int(v: i64, bits: u32, signed: bool) -> i64 {
    let low = v & ((1 << bits) - 1);
    if signed && low >= 1 << (bits - 1) {
        low - (1 << bits)
    } else {
        low
    }
}

fn e8m0_value_or_nan(code: u8) -> f32 {
    if code == 0xFF {
        f32::NAN
    } else {
        e8m0_value(code)
    }
}

/// The `FLOAT8E8M0` code of `x`: its f32 exponent, moved up or not by
/// `mode` (the sign is ignored: ONNX leaves negative values undefined).
fn e8m0_code(x: f32, saturate: bool, mode: E8M0Rounding) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xFF;
    if exponent == 0xFF {
        return 0xFF;
    }
    let round_up = match mode {
        E8M0Rounding::Down => false,
        E8M0Rounding::Up => bits & 0x7F_FFFF != 0,
        E8M0Rounding::Nearest => {
            let guard = bits & 0x40_0000 != 0;
            let rest = bits & 0x3F_FFFF != 0;
            guard && (rest || exponent > 0)
        }
    };
    if round_up && !(saturate && exponent == 0xFE) {
        (exponent + 1) as u8
    } else {
        exponent as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty(t: OnnxType) -> Narrow {
        Narrow::of(t as i32).unwrap()
    }

    #[test]
    fn codes_decode_to_the_formats_values() {
        let e4m3 = ty(OnnxType::Float8e4m3fn);
        assert_eq!(e4m3.float_value(0x7E), 448.0);
        assert!(e4m3.float_value(0x7F).is_nan());
        assert_eq!(e4m3.float_value(0x01), 2f32.powi(-9));
        assert_eq!(e4m3.float_value(0xB8), -1.0);
        let e5m2 = ty(OnnxType::Float8e5m2);
        assert_eq!(e5m2.float_value(0x7B), 57344.0);
        assert_eq!(e5m2.float_value(0x7C), f32::INFINITY);
        let fnuz = ty(OnnxType::Float8e4m3fnuz);
        assert!(fnuz.float_value(0x80).is_nan());
        assert_eq!(fnuz.float_value(0x7F), 240.0);
        let e2m1 = ty(OnnxType::Float4e2m1);
        let values: Vec<f32> = (0..8).map(|c| e2m1.float_value(c)).collect();
        assert_eq!(values, [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]);
        assert_eq!(ty(OnnxType::Float8e8m0).float_value(127), 1.0);
        assert_eq!(ty(OnnxType::Int4).int_value(0xF), -1);
        assert_eq!(ty(OnnxType::Uint4).int_value(0xF), 15);
        assert_eq!(ty(OnnxType::Int2).int_value(0b10), -2);
    }

    #[test]
    fn rounding_follows_onnx_cast() {
        let e4m3 = ty(OnnxType::Float8e4m3fn);
        let up = E8M0Rounding::Up;
        // 460 lies below the midpoint of 448 and 480 (480 is past the max).
        assert_eq!(e4m3.round_float(460.0, false, up), 448.0);
        assert!(e4m3.round_float(470.0, false, up).is_nan());
        assert_eq!(e4m3.round_float(470.0, true, up), 448.0);
        assert_eq!(e4m3.round_float(f32::INFINITY, true, up), 448.0);
        let e5m2 = ty(OnnxType::Float8e5m2);
        assert_eq!(e5m2.round_float(1e6, false, up), f32::INFINITY);
        let fnuz = ty(OnnxType::Float8e5m2fnuz);
        assert!(fnuz.round_float(-1e-9, true, up).is_sign_positive());
        let e2m1 = ty(OnnxType::Float4e2m1);
        // Ties to even: 0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 5 -> 4.
        for (x, want) in [(0.25, 0.0), (0.75, 1.0), (2.5, 2.0), (5.0, 4.0), (1e6, 6.0)] {
            assert_eq!(e2m1.round_float(x, false, up), want, "{x}");
        }
        let e8m0 = ty(OnnxType::Float8e8m0);
        assert_eq!(e8m0.round_float(3.0, true, up), 4.0);
        assert_eq!(e8m0.round_float(3.0, true, E8M0Rounding::Down), 2.0);
        assert_eq!(e8m0.round_float(2.9, true, E8M0Rounding::Nearest), 2.0);
        assert_eq!(e8m0.round_float(3.1, true, E8M0Rounding::Nearest), 4.0);
    }

    #[test]
    fn integers_truncate_or_wrap() {
        let int4 = ty(OnnxType::Int4);
        assert_eq!(int4.int_from_float(-7.9), -7);
        assert_eq!(int4.int_from_float(8.0), 0);
        assert_eq!(int4.int_from_int(8), -8);
        assert_eq!(int4.int_from_int(200), -8);
        assert_eq!(ty(OnnxType::Uint2).int_from_int(7), 3);
    }

    #[test]
    fn packed_codes_unpack_low_bits_first() {
        let int4 = ty(OnnxType::Int4);
        assert_eq!(int4.unpack(&[0x21, 0x03], 3), Some(vec![1, 2, 3]));
        assert_eq!(int4.unpack(&[0x21], 3), None);
        let u2 = ty(OnnxType::Uint2);
        assert_eq!(u2.unpack(&[0b1110_0100], 4), Some(vec![0, 1, 2, 3]));
    }
}
