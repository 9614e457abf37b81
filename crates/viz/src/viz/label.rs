//! The text in a picture's nodes: short numbers, small tensors, shapes.

use retrograd_engine::tensor::{Tensor, TensorSummary};

/// Significant digits shown for a number that is not an integer.
const SIGNIFICANT_DIGITS: usize = 4;

/// `12`, `0.4621`, `-1.5e-7`: integers exactly, others to four significant
/// digits with trailing zeros dropped, scientific notation far from 1.
pub(crate) fn number(v: f64) -> String {
    if !v.is_finite() {
        return if v.is_nan() {
            "nan".to_string()
        } else if v > 0.0 {
            "inf".to_string()
        } else {
            "-inf".to_string()
        };
    }
    if v == v.trunc() && v.abs() < 1e9 {
        // `-0` shows as `-0`: a sign that matters for some gradients.
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    if !(-4..9).contains(&magnitude) {
        let s = format!("{:.*e}", SIGNIFICANT_DIGITS - 1, v);
        let (mantissa, exponent) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{exponent}", trim_zeros(mantissa));
    }
    let decimals = (SIGNIFICANT_DIGITS as i32 - 1 - magnitude).max(0) as usize;
    trim_zeros(&format!("{v:.decimals$}")).to_string()
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// The whole tensor in nested brackets (`12`, `[1, 2.5]`, `[[1, 2], [3, 4]]`).
pub(crate) fn tensor(t: &Tensor) -> String {
    let values = t.to_f64_vec();
    let mut out = String::new();
    nested(&mut out, t.shape(), &values);
    out
}

fn nested(out: &mut String, shape: &[usize], values: &[f64]) {
    let Some((&n, inner_shape)) = shape.split_first() else {
        out.push_str(&number(values[0]));
        return;
    };
    let inner: usize = inner_shape.iter().product();
    out.push('[');
    for i in 0..n {
        if i > 0 {
            out.push_str(", ");
        }
        nested(out, inner_shape, &values[i * inner..(i + 1) * inner]);
    }
    out.push(']');
}

/// A summarised tensor in a few characters: its elements when listed
/// (`5`, `[1, 2]`), else its L2 norm (`‖·‖ 1.234`).
pub(crate) fn summary_short(s: &TensorSummary) -> String {
    match &s.values {
        Some(values) => {
            let mut out = String::new();
            nested(&mut out, &s.shape, values);
            out
        }
        None => format!("‖·‖ {}", number(s.norm)),
    }
}

/// A summarised tensor in one number: its value when it has one element,
/// else its L2 norm (`‖·‖ 0.5`): what fits beside a node or on an edge.
pub(crate) fn summary_tiny(s: &TensorSummary) -> String {
    match &s.values {
        Some(values) if values.len() == 1 => number(values[0]),
        _ => format!("‖·‖ {}", number(s.norm)),
    }
}

/// A summarised tensor with its dtype and shape, and for a tensor not
/// listed, norm, extremes and mean (`f32 [12, 64]: ‖·‖ 3.2, min -0.5, ...`).
pub(crate) fn summary_long(s: &TensorSummary) -> String {
    let head = format!("{} {:?}", s.dtype, s.shape);
    let mut out = match &s.values {
        Some(_) => format!("{head} = {}", summary_short(s)),
        None => format!(
            "{head}: ‖·‖ {}, min {}, max {}, mean {}",
            number(s.norm),
            number(s.min),
            number(s.max),
            number(s.mean)
        ),
    };
    if s.non_finite > 0 {
        out.push_str(&format!(" ({} not finite)", s.non_finite));
    }
    out
}

/// `f64 []`, `f32 [2, 3]`.
pub(crate) fn dtype_and_shape(t: &Tensor) -> String {
    format!("{} {:?}", t.dtype(), t.shape())
}

/// The L2 norm of a tensor, for gradients too large to show in full.
pub(crate) fn l2_norm(t: &Tensor) -> f64 {
    t.to_f64_vec().iter().map(|v| v * v).sum::<f64>().sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(number(12.0), "12");
        assert_eq!(number(-3.0), "-3");
        assert_eq!(number(0.46211715726000974), "0.4621");
        assert_eq!(number(1.0 / 3.0), "0.3333");
        assert_eq!(number(123.456), "123.5");
        assert_eq!(number(2.5), "2.5");
        assert_eq!(number(-1.5e-7), "-1.5e-7");
        assert_eq!(number(6.02e23), "6.02e23");
        assert_eq!(number(f64::NAN), "nan");
        assert_eq!(number(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn tensors_nest() {
        assert_eq!(tensor(&Tensor::scalar(15.0)), "15");
        let m = Tensor::from_vec(vec![1.0, 2.5, 3.0, 0.125], &[2, 2]).unwrap();
        assert_eq!(tensor(&m), "[[1, 2.5], [3, 0.125]]");
        assert_eq!(dtype_and_shape(&m), "f64 [2, 2]");
        assert_eq!(dtype_and_shape(&Tensor::scalar(1.0f32)), "f32 []");
        assert_eq!(l2_norm(&Tensor::vector(&[3.0, 4.0])), 5.0);
    }

    #[test]
    fn summaries_list_small_tensors_and_describe_large_ones() {
        let m = Tensor::from_vec(vec![1.0f32, 2.5, 3.0, -4.0], &[2, 2]).unwrap();
        assert_eq!(summary_short(&m.summary(4)), "[[1, 2.5], [3, -4]]");
        assert_eq!(
            summary_long(&m.summary(4)),
            "f32 [2, 2] = [[1, 2.5], [3, -4]]"
        );
        assert_eq!(summary_short(&m.summary(2)), "‖·‖ 5.679");
        assert_eq!(summary_tiny(&m.summary(4)), "‖·‖ 5.679");
        assert_eq!(summary_tiny(&Tensor::scalar(-0.5).summary(4)), "-0.5");
        assert_eq!(
            summary_long(&m.summary(2)),
            "f32 [2, 2]: ‖·‖ 5.679, min -4, max 3, mean 0.625"
        );
        let bad = Tensor::vector(&[f64::NAN, 1.0]).summary(0);
        assert!(summary_long(&bad).ends_with("(1 not finite)"));
    }
}
