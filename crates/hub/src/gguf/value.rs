//! [`MetadataValue`]: one value of a GGUF file's key-value metadata, with
//! the GGUF value-type ids and the typed accessors the reader's getters use.

/// A metadata value of a GGUF file. Arrays hold values of one type
/// (GGUF stores the element type once); an empty array does not keep its
/// element type and is written as an empty array of u8 (llama.cpp reads
/// empty arrays; gguf-py's writer refuses them).
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// GGUF type 0.
    U8(u8),
    /// GGUF type 1.
    I8(i8),
    /// GGUF type 2.
    U16(u16),
    /// GGUF type 3.
    I16(i16),
    /// GGUF type 4.
    U32(u32),
    /// GGUF type 5.
    I32(i32),
    /// GGUF type 10.
    U64(u64),
    /// GGUF type 11.
    I64(i64),
    /// GGUF type 6.
    F32(f32),
    /// GGUF type 12.
    F64(f64),
    /// GGUF type 7 (one byte, 0 or 1).
    Bool(bool),
    /// GGUF type 8 (UTF-8, a u64 byte count then the bytes).
    String(String),
    /// GGUF type 9: an element type, a u64 count, then the elements.
    Array(Vec<MetadataValue>),
}

/// The GGUF value-type ids.
pub(crate) mod type_id {
    pub const U8: u32 = 0;
    pub const I8: u32 = 1;
    pub const U16: u32 = 2;
    pub const I16: u32 = 3;
    pub const U32: u32 = 4;
    pub const I32: u32 = 5;
    pub const F32: u32 = 6;
    pub const BOOL: u32 = 7;
    pub const STRING: u32 = 8;
    pub const ARRAY: u32 = 9;
    pub const U64: u32 = 10;
    pub const I64: u32 = 11;
    pub const F64: u32 = 12;
}

/// The name of GGUF value-type id `id` (as llama.cpp's `gguf_type_name`).
pub(crate) fn type_id_name(id: u32) -> Option<&'static str> {
    const NAMES: [&str; 13] = [
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "str", "arr", "u64", "i64", "f64",
    ];
    NAMES.get(id as usize).copied()
}

/// The fixed size in bytes of a value of type `id`, or `None` for strings
/// and arrays.
pub(crate) fn fixed_size(id: u32) -> Option<usize> {
    Some(match id {
        type_id::U8 | type_id::I8 | type_id::BOOL => 1,
        type_id::U16 | type_id::I16 => 2,
        type_id::U32 | type_id::I32 | type_id::F32 => 4,
        type_id::U64 | type_id::I64 | type_id::F64 => 8,
        _ => return None,
    })
}

impl MetadataValue {
    /// The GGUF value-type id (0 u8 ... 12 f64; 9 for an array).
    pub fn type_id(&self) -> u32 {
        match self {
            MetadataValue::U8(_) => type_id::U8,
            MetadataValue::I8(_) => type_id::I8,
            MetadataValue::U16(_) => type_id::U16,
            MetadataValue::I16(_) => type_id::I16,
            MetadataValue::U32(_) => type_id::U32,
            MetadataValue::I32(_) => type_id::I32,
            MetadataValue::U64(_) => type_id::U64,
            MetadataValue::I64(_) => type_id::I64,
            MetadataValue::F32(_) => type_id::F32,
            MetadataValue::F64(_) => type_id::F64,
            MetadataValue::Bool(_) => type_id::BOOL,
            MetadataValue::String(_) => type_id::STRING,
            MetadataValue::Array(_) => type_id::ARRAY,
        }
    }

    /// The type's name for messages: `u32`, `str`, `array of str`, ...
    /// (an empty array is `array`).
    pub fn type_name(&self) -> String {
        match self {
            MetadataValue::Array(items) => match items.first() {
                Some(first) => format!("array of {}", first.type_name()),
                None => "array".to_string(),
            },
            v => type_id_name(v.type_id()).unwrap_or("?").to_string(),
        }
    }

    /// An unsigned integer, or a signed one that is not negative.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            MetadataValue::U8(v) => Some(v.into()),
            MetadataValue::U16(v) => Some(v.into()),
            MetadataValue::U32(v) => Some(v.into()),
            MetadataValue::U64(v) => Some(v),
            _ => self.as_i64().and_then(|v| u64::try_from(v).ok()),
        }
    }

    /// An integer of any width that fits i64.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            MetadataValue::I8(v) => Some(v.into()),
            MetadataValue::I16(v) => Some(v.into()),
            MetadataValue::I32(v) => Some(v.into()),
            MetadataValue::I64(v) => Some(v),
            MetadataValue::U8(v) => Some(v.into()),
            MetadataValue::U16(v) => Some(v.into()),
            MetadataValue::U32(v) => Some(v.into()),
            MetadataValue::U64(v) => i64::try_from(v).ok(),
            _ => None,
        }
    }

    /// A float (f32 widened), or an integer converted to the nearest f64.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            MetadataValue::F32(v) => Some(v.into()),
            MetadataValue::F64(v) => Some(v),
            MetadataValue::U64(v) => Some(v as f64),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// A bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            MetadataValue::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// A string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetadataValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// An array's elements.
    pub fn as_array(&self) -> Option<&[MetadataValue]> {
        match self {
            MetadataValue::Array(items) => Some(items),
            _ => None,
        }
    }
}

macro_rules! from_scalar {
    ($($t:ty => $v:ident),* $(,)?) => {$(
        impl From<$t> for MetadataValue {
            fn from(v: $t) -> Self {
                MetadataValue::$v(v)
            }
        }
    )*};
}

from_scalar!(
    u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, f32 => F32, f64 => F64, bool => Bool, String => String,
);

impl From<&str> for MetadataValue {
    fn from(v: &str) -> Self {
        MetadataValue::String(v.to_string())
    }
}

impl<T: Into<MetadataValue>> From<Vec<T>> for MetadataValue {
    fn from(v: Vec<T>) -> Self {
        MetadataValue::Array(v.into_iter().map(Into::into).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accessors_convert_what_fits() {
        assert_eq!(MetadataValue::U32(30).as_u64(), Some(30));
        assert_eq!(MetadataValue::I32(-1).as_u64(), None);
        assert_eq!(MetadataValue::I32(-1).as_i64(), Some(-1));
        assert_eq!(MetadataValue::U64(u64::MAX).as_i64(), None);
        assert_eq!(MetadataValue::F32(0.5).as_f64(), Some(0.5));
        assert_eq!(MetadataValue::U8(3).as_f64(), Some(3.0));
        assert_eq!(MetadataValue::from("llama").as_str(), Some("llama"));
        assert_eq!(MetadataValue::F32(1.0).as_str(), None);
        assert_eq!(MetadataValue::Bool(true).as_bool(), Some(true));
        let a = MetadataValue::from(vec!["a", "b"]);
        assert_eq!(a.as_array().map(<[_]>::len), Some(2));
        assert_eq!(a.type_name(), "array of str");
        assert_eq!(MetadataValue::Array(vec![]).type_name(), "array");
        assert_eq!(MetadataValue::F64(1.0).type_name(), "f64");
    }
}
