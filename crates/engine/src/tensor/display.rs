//! A readable `Display` for tensors: scalars print as plain numbers (`12`),
//! larger tensors as nested brackets, eliding the middle of long dimensions.

use std::fmt;

use super::Tensor;

/// Dimensions longer than this print their first and last few elements only.
const EDGE_ITEMS: usize = 3;
const ELIDE_ABOVE: usize = 2 * EDGE_ITEMS;

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype() {
            super::DType::I64 => write_all(f, self.shape(), self.as_slice_of::<i64>(), &|f, v| {
                write!(f, "{v}")
            }),
            super::DType::Bool => {
                write_all(f, self.shape(), self.as_slice_of::<bool>(), &|f, v| {
                    write!(f, "{v}")
                })
            }
            // A half value prints as the f32 it widens to exactly: its
            // shortest form, not the f64 digits of its binary expansion.
            super::DType::F16 | super::DType::BF16 => {
                let v: Vec<f64> = self.to_f64_vec();
                write_all(f, self.shape(), &v, &|f, x| write_number_f32(f, x as f32))
            }
            _ => write_all(f, self.shape(), &self.to_f64_vec(), &write_number),
        }
    }
}

/// Writer of one element.
type WriteOne<'w, T> = &'w dyn Fn(&mut fmt::Formatter<'_>, T) -> fmt::Result;

fn write_all<T: Copy>(
    f: &mut fmt::Formatter<'_>,
    shape: &[usize],
    values: &[T],
    one: WriteOne<'_, T>,
) -> fmt::Result {
    if shape.is_empty() {
        return one(f, values[0]);
    }
    write_nested(f, shape, values, one)
}

fn write_number(f: &mut fmt::Formatter<'_>, v: f64) -> fmt::Result {
    match f.precision() {
        Some(p) => write!(f, "{v:.p$}"),
        None => write!(f, "{v}"),
    }
}

fn write_number_f32(f: &mut fmt::Formatter<'_>, v: f32) -> fmt::Result {
    match f.precision() {
        Some(p) => write!(f, "{v:.p$}"),
        None => write!(f, "{v}"),
    }
}

fn write_nested<T: Copy>(
    f: &mut fmt::Formatter<'_>,
    shape: &[usize],
    values: &[T],
    one: WriteOne<'_, T>,
) -> fmt::Result {
    let n = shape[0];
    // A zero-sized shape's other dimensions may be huge: their product alone could overflow.
    let inner: usize = if shape[1..].contains(&0) {
        0
    } else {
        shape[1..].iter().product()
    };
    // Visit only the rows that are printed: a long dimension costs nothing.
    let rows: Vec<usize> = if n > ELIDE_ABOVE {
        (0..EDGE_ITEMS).chain(n - EDGE_ITEMS..n).collect()
    } else {
        (0..n).collect()
    };
    f.write_str("[")?;
    for (k, &i) in rows.iter().enumerate() {
        if k > 0 {
            f.write_str(", ")?;
        }
        if n > ELIDE_ABOVE && k == EDGE_ITEMS {
            f.write_str("..., ")?;
        }
        let chunk = &values[i * inner..(i + 1) * inner];
        if shape.len() == 1 {
            one(f, chunk[0])?;
        } else {
            write_nested(f, &shape[1..], chunk, one)?;
        }
    }
    f.write_str("]")
}

#[cfg(test)]
mod tests {
    use crate::Tensor;

    #[test]
    fn formats() {
        assert_eq!(Tensor::scalar(12.0).to_string(), "12");
        let t = Tensor::from_vec(vec![1.0, 2.5, 3.0, 4.0], &[2, 2]).unwrap();
        assert_eq!(t.to_string(), "[[1, 2.5], [3, 4]]");
        let long = Tensor::from_vec((0..10).map(f64::from).collect(), &[10]).unwrap();
        assert_eq!(long.to_string(), "[0, 1, 2, ..., 7, 8, 9]");
        assert_eq!(format!("{:.2}", Tensor::scalar(1.0f32 / 3.0)), "0.33");
        // Half floats print their value's shortest f32 form.
        let h = Tensor::from_vec(vec![0.1, -2.5, 65504.0], &[3]).unwrap();
        assert_eq!(
            h.to_dtype(crate::DType::F16).to_string(),
            "[0.099975586, -2.5, 65504]"
        );
        assert_eq!(
            h.to_dtype(crate::DType::BF16).to_string(),
            "[0.100097656, -2.5, 65536]"
        );
        assert_eq!(
            format!("{:.2}", Tensor::scalar(half::bf16::from_f32(1.0 / 3.0))),
            "0.33"
        );
        // A huge zero-sized shape prints its edges at once (no walk over every row).
        let empty = Tensor::zeros(&[usize::MAX, 2, usize::MAX, 0], crate::DType::F32).unwrap();
        let lane = "[[], [], [], ..., [], [], []]";
        let pair = format!("[{lane}, {lane}]");
        assert_eq!(
            empty.to_string(),
            format!("[{pair}, {pair}, {pair}, ..., {pair}, {pair}, {pair}]")
        );
    }
}
