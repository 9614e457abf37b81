//! Gradient clipping by global norm, with PyTorch's semantics
//! (`torch.nn.utils.clip_grad_norm_`).

use crate::base::error::{Error, Result};
use crate::kernels::UnaryFn;
use crate::tensor::Element;
use crate::Gradients;

/// The `norm_type`-norm of all parameter gradients in `grads` taken together
/// (as if concatenated into one vector); `f64::INFINITY` gives the largest
/// absolute value. Accumulates in f64, in a fixed order (by parameter id),
/// so the result does not depend on hash order.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::grad_norm};
/// let a = Parameter::new(Tensor::from_vec(vec![0.0, 0.0], &[2])?);
/// let b = Parameter::new(Tensor::scalar(0.0));
/// let g = Graph::new();
/// let loss = (g.param(&a) * 1.5).sum() + g.param(&b) * -2.0;  // grads [1.5, 1.5] and -2
/// let grads = loss.backward()?;
/// assert!((grad_norm(&grads, 2.0)? - (1.5f64 * 1.5 * 2.0 + 4.0).sqrt()).abs() < 1e-12);
/// assert_eq!(grad_norm(&grads, f64::INFINITY)?, 2.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn grad_norm(grads: &Gradients, norm_type: f64) -> Result<f64> {
    if norm_type.is_nan() || norm_type <= 0.0 {
        return Err(Error::invalid(
            "grad_norm",
            format!("norm_type must be > 0 (or infinity), got {norm_type}"),
        ));
    }
    let mut tensors: Vec<_> = grads.param_grads().collect();
    tensors.sort_unstable_by_key(|(id, _)| *id);
    let mut acc = 0.0f64;
    for (_, t) in tensors {
        let part = crate::with_dtype!("clip_grad_norm", t.dtype(), T => partial_norm::<T>(t.as_slice_of::<T>(), norm_type));
        acc = if norm_type.is_infinite() {
            // NaN must win, as in PyTorch (f64::max would drop it).
            if part.is_nan() || acc.is_nan() {
                f64::NAN
            } else {
                acc.max(part)
            }
        } else {
            acc + part
        };
    }
    Ok(if norm_type.is_infinite() || norm_type == 1.0 {
        acc
    } else if norm_type == 2.0 {
        acc.sqrt()
    } else {
        acc.powf(1.0 / norm_type)
    })
}

/// `sum x^2` over one slice, in f64 (the squared 2-norm).
pub(crate) fn squared_sum<T: Element>(x: &[T]) -> f64 {
    partial_norm(x, 2.0)
}

/// `sum |x|^p` (or `max |x|` for p = inf) over one tensor, in f64.
fn partial_norm<T: Element>(x: &[T], p: f64) -> f64 {
    if p.is_infinite() {
        return x.iter().fold(0.0f64, |m, v| {
            let a = Element::to_f64(*v).abs();
            if a.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(a)
            }
        });
    }
    // Four accumulators: independent chains vectorise and lose less precision.
    let mut lanes = [0.0f64; 4];
    let chunks = x.chunks_exact(4);
    let rest = chunks.remainder();
    let term = |v: T| -> f64 {
        let a = Element::to_f64(v).abs();
        if p == 2.0 {
            a * a
        } else if p == 1.0 {
            a
        } else {
            a.powf(p)
        }
    };
    for c in chunks {
        for (l, &v) in lanes.iter_mut().zip(c) {
            *l += term(v);
        }
    }
    lanes.iter().sum::<f64>() + rest.iter().map(|&v| term(v)).sum::<f64>()
}

/// Rescales the parameter gradients in `grads` so that their global
/// `norm_type`-norm is at most `max_norm`, and returns the norm before
/// clipping (PyTorch's `clip_grad_norm_`): every gradient is multiplied by
/// `min(1, max_norm / (total_norm + 1e-6))`.
///
/// As in PyTorch (with `error_if_nonfinite=False`), a non-finite total norm
/// is returned as is and propagates into the gradients; check the returned
/// value to skip such a step.
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::{clip_grad_norm, grad_norm}};
/// let w = Parameter::new(Tensor::from_vec(vec![0.0, 0.0], &[2])?);
/// let g = Graph::new();
/// let x = g.param(&w);
/// let loss = (&x * &g.constant(Tensor::from_vec(vec![3.0, 4.0], &[2])?)).sum();
/// let mut grads = loss.backward()?;            // gradient [3, 4], norm 5
/// let before = clip_grad_norm(&mut grads, 1.0, 2.0)?;
/// assert_eq!(before, 5.0);
/// assert!((grad_norm(&grads, 2.0)? - 1.0).abs() < 1e-6);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn clip_grad_norm(grads: &mut Gradients, max_norm: f64, norm_type: f64) -> Result<f64> {
    if max_norm.is_nan() || max_norm < 0.0 {
        return Err(Error::invalid(
            "clip_grad_norm",
            format!("max_norm must be >= 0, got {max_norm}"),
        ));
    }
    let total = grad_norm(grads, norm_type)?;
    let coef = max_norm / (total + 1e-6);
    // PyTorch clamps the coefficient at 1 and always multiplies; a factor of
    // exactly 1 changes nothing, so skip the pass. NaN still propagates.
    if coef < 1.0 || coef.is_nan() {
        grads.scale(coef);
    }
    Ok(total)
}

/// Clamps every parameter gradient elementwise into `[-clip_value,
/// clip_value]`, as PyTorch's `clip_grad_value_`; NaN stays NaN. A negative
/// or NaN `clip_value` is an error (PyTorch would silently set every element
/// to it).
///
/// ```
/// use retrograd::{Graph, Tensor, nn::Parameter, optim::clip_grad_value};
/// let w = Parameter::new(Tensor::from_vec(vec![0.0, 0.0, 0.0], &[3])?);
/// let g = Graph::new();
/// let x = g.param(&w);
/// let loss = (&x * &g.constant(Tensor::from_vec(vec![3.0, -0.5, -4.0], &[3])?)).sum();
/// let mut grads = loss.backward()?;
/// clip_grad_value(&mut grads, 1.0)?;
/// assert_eq!(grads.of(&w).to_f64_vec(), vec![1.0, -0.5, -1.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn clip_grad_value(grads: &mut Gradients, clip_value: f64) -> Result<()> {
    if clip_value.is_nan() || clip_value < 0.0 {
        return Err(Error::invalid(
            "clip_grad_value",
            format!("clip_value must be >= 0, got {clip_value}"),
        ));
    }
    grads.map_params(ClampSymmetric(clip_value));
    Ok(())
}

/// `x` clamped into `[-c, c]`; comparisons with NaN are false, so NaN stays.
#[derive(Clone, Copy, Debug)]
struct ClampSymmetric(f64);

impl UnaryFn for ClampSymmetric {
    #[inline(always)]
    fn call<T: Element>(self, x: T) -> T {
        let c = T::from_f64(self.0);
        if x > c {
            c
        } else if x < -c {
            -c
        } else {
            x
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::Parameter;
    use crate::{Graph, Tensor};

    fn grads_with(values: &[(Vec<f64>, &Parameter)]) -> Gradients {
        let g = Graph::new();
        let mut loss = None;
        for (v, p) in values {
            let c = g.constant(Tensor::from_f64_slice(v, &[v.len()], p.dtype()).unwrap());
            let term = (&g.param(p) * &c).sum();
            loss = Some(match loss {
                None => term,
                Some(l) => l + term,
            });
        }
        loss.unwrap().backward().unwrap()
    }

    #[test]
    fn clipping_matches_pytorch_formula() {
        let a = Parameter::new(Tensor::zeros(&[2], crate::DType::F64).unwrap());
        let b = Parameter::new(Tensor::zeros(&[1], crate::DType::F64).unwrap());
        let mut grads = grads_with(&[(vec![3.0, 4.0], &a), (vec![12.0], &b)]);
        let total = clip_grad_norm(&mut grads, 6.5, 2.0).unwrap();
        assert_eq!(total, 13.0);
        let coef = 6.5 / (13.0 + 1e-6);
        assert_eq!(grads.of(&a).to_f64_vec(), vec![3.0 * coef, 4.0 * coef]);
        assert_eq!(grads.of(&b).to_f64_vec(), vec![12.0 * coef]);
    }

    #[test]
    fn small_gradients_are_untouched() {
        let a = Parameter::new(Tensor::zeros(&[2], crate::DType::F32).unwrap());
        let mut grads = grads_with(&[(vec![0.3, 0.4], &a)]);
        let before = grads.of(&a);
        let total = clip_grad_norm(&mut grads, 1.0, 2.0).unwrap();
        assert!((total - 0.5).abs() < 1e-7);
        assert_eq!(grads.of(&a), before);
    }

    #[test]
    fn other_norms() {
        let a = Parameter::new(Tensor::zeros(&[3], crate::DType::F64).unwrap());
        let mut grads = grads_with(&[(vec![1.0, -2.0, 2.0], &a)]);
        assert_eq!(grad_norm(&grads, 1.0).unwrap(), 5.0);
        assert_eq!(grad_norm(&grads, f64::INFINITY).unwrap(), 2.0);
        assert!((grad_norm(&grads, 3.0).unwrap() - 17f64.cbrt()).abs() < 1e-12);
        let total = clip_grad_norm(&mut grads, 1.0, f64::INFINITY).unwrap();
        assert_eq!(total, 2.0);
        assert!((grad_norm(&grads, f64::INFINITY).unwrap() - 1.0).abs() < 1e-6);
        assert!(grad_norm(&grads, 0.0).is_err());
        assert!(clip_grad_norm(&mut grads, -1.0, 2.0).is_err());
    }

    #[test]
    fn non_finite_norm_propagates() {
        let a = Parameter::new(Tensor::zeros(&[2], crate::DType::F64).unwrap());
        let mut grads = grads_with(&[(vec![f64::NAN, 1.0], &a)]);
        assert!(clip_grad_norm(&mut grads, 1.0, 2.0).unwrap().is_nan());
        assert!(grads.of(&a).to_f64_vec().iter().all(|v| v.is_nan()));
        let mut grads = grads_with(&[(vec![f64::NAN, 1.0], &a)]);
        assert!(grad_norm(&grads, f64::INFINITY).unwrap().is_nan());
        assert!(clip_grad_norm(&mut grads, 1.0, f64::INFINITY)
            .unwrap()
            .is_nan());
    }

    #[test]
    fn clip_grad_value_clamps_each_element_keeps_nan_and_checks_its_argument() {
        let p = Parameter::new(Tensor::from_vec(vec![0.0f32; 4], &[4]).unwrap());
        let mut grads = grads_with(&[(vec![2.5, -7.0, 0.25, f64::NAN], &p)]);
        clip_grad_value(&mut grads, 0.5).unwrap();
        let got = grads.of(&p).to_f64_vec();
        assert_eq!(&got[..3], &[0.5, -0.5, 0.25]);
        assert!(got[3].is_nan());
        assert_eq!(grads.of(&p).dtype(), crate::DType::F32);
        for bad in [-1.0, f64::NAN] {
            let err = clip_grad_value(&mut grads, bad).unwrap_err();
            assert!(err.to_string().contains("clip_grad_value"), "{err}");
        }
    }
}
