//! `lp_pool2d`, power-average pooling (PyTorch's `F.lp_pool2d`,
//! `nn.LPPool2d`): each window's `(Σ x^p)^(1/p)`, computed as PyTorch
//! does, `(avg_pool2d(x^p) · kh · kw)^(1/p)` with no padding, so a partial
//! `ceil_mode` window is scaled to the full kernel like PyTorch's. `p = 1`
//! is sum pooling; large `p` approaches max pooling.
//!
//! The forward is one [`WindowReduction`]; the derivative, written once,
//! goes through `avg_pool2d`'s recorded adjoint, so gradients of gradients
//! come with it: with `s = avg(x^p)` and `y = (K s)^(1/p)`,
//! `∂y/∂x_i = K/c · x_i^(p-1) · y^(1-p)` for a window of divisor `c`.

use crate::ops::declare_op;
use std::sync::Arc;

use super::avg_pool::{avg_pool2d_adjoint, AvgPool2dOptions};
use super::geometry::{batch_planes, facts, sliding_window_setters, smooth, Sliding, SAMPLE_SHAPE};
use super::Pooling2d;
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};
use crate::kernels::nn::pool::{self as kernel, Taps, WindowReduction};
use crate::ops::nn::Spatial;
use crate::ops::rule::OpFacts;
use crate::ops::{Node, OpAttributes, OpRegistry, StructuredOp};
use crate::tensor::{Element, Tensor};

/// Options of [`Var::lp_pool2d`], PyTorch's `F.lp_pool2d(x, norm_type,
/// kernel_size, stride, ceil_mode)`: the power `p` (finite, > 0), the
/// kernel, the stride (default: the kernel size) and `ceil_mode`. No
/// padding, no dilation (PyTorch has neither).
///
/// ```
/// use retrograd::LpPool2dOptions;
/// let o = LpPool2dOptions::new(2.0, [3, 2]).stride(1).ceil_mode(true);
/// assert_eq!((o.norm_type(), o.kernel_size(), o.stride_size()), (2.0, [3, 2], [1, 1]));
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct LpPool2dOptions {
    norm_type: f64,
    window: Sliding,
}

impl LpPool2dOptions {
    /// Power `norm_type` over `kernel` windows, with PyTorch's defaults for
    /// the rest.
    pub fn new(norm_type: f64, kernel: impl Spatial<2>) -> Self {
        LpPool2dOptions {
            norm_type,
            window: Sliding::new(kernel),
        }
    }
    sliding_window_setters!();
    /// The power `p`.
    pub fn norm_type(&self) -> f64 {
        self.norm_type
    }
    /// The settings by name: `norm_type`, `kernel`, `stride`, `padding`
    /// (always 0), `ceil_mode`.
    pub fn attributes(&self) -> OpAttributes {
        self.window
            .attributes()
            .float("norm_type", self.norm_type)
            .bool("ceil_mode", self.window.ceil_mode)
    }
    /// The average pooling PyTorch builds it on (no padding; a partial
    /// window's divisor is its clipped size).
    fn avg(&self) -> AvgPool2dOptions {
        AvgPool2dOptions::new(self.window.kernel)
            .stride(self.stride_size())
            .ceil_mode(self.window.ceil_mode)
    }
    /// The kernel's area, `kh · kw`, as PyTorch scales the average.
    fn area(&self) -> f64 {
        (self.window.kernel[0] * self.window.kernel[1]) as f64
    }
    fn check(&self) -> Result<()> {
        let p = self.norm_type;
        if !(p.is_finite() && p > 0.0) {
            return Err(Error::invalid(
                LpPool2d::NAME,
                format!("norm_type must be finite and > 0, got {p}"),
            ));
        }
        Ok(())
    }
}

impl Pooling2d for LpPool2dOptions {
    const NAME: &'static str = "lp_pool2d";
    fn pool<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_lp_pool2d(self)
    }
}

/// A window's `(K/c · Σ x^p)^(1/p)`, summed from zero in row-major order.
struct PowerMean {
    p: f64,
    area: f64,
}

impl WindowReduction for PowerMean {
    fn reduce<T: Element>(&self, values: impl Iterator<Item = T>, rows: &Taps, cols: &Taps) -> T {
        let p = T::from_f64(self.p);
        let sum = values.fold(T::zero(), |s, v| s + v.powf(p));
        let avg = sum / T::from_f64((rows.count * cols.count) as f64);
        (avg * T::from_f64(self.area)).powf(T::from_f64(1.0 / self.p))
    }
}

/// Power-average pooling: see the [module docs](self). Input: `x`,
/// `[N, C, H, W]` or `[C, H, W]`. The registry holds it with `p = 2` and a
/// 2x2 kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct LpPool2d {
    opts: LpPool2dOptions,
}

impl StructuredOp for LpPool2d {
    declare_op!("lp_pool2d"(input));
    fn attributes(&self) -> OpAttributes {
        self.opts.attributes()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let x = inputs[0];
        self.opts.check()?;
        let geo = self.opts.avg().geometry(Self::NAME, x)?;
        let reduction = PowerMean {
            p: self.opts.norm_type,
            area: self.opts.area(),
        };
        Ok(crate::with_dtype!(Self::NAME, x.dtype(), T => {
            let xs = x.as_slice_of::<T>();
            Tensor::build::<T>(geo.out_shape.clone(), |out| kernel::reduce_windows(xs, geo.planes, &geo.plan, &reduction, out))
        }))
    }
    /// `x^(p-1) · adjoint(g · K · y^(1-p))`.
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, y, p) = (n.x(0), n.output, self.opts.norm_type);
        let scaled = g.try_mul(&(y.powf(1.0 - p) * self.opts.area()))?;
        avg_pool2d_adjoint(&scaled, x, &self.opts.avg())?.try_mul(&x.powf(p - 1.0))
    }
    /// `K · y^(1-p) · avg_pool2d(x^(p-1) · t)`.
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, y, p) = (n.x(0), n.output, self.opts.norm_type);
        let pooled = t
            .try_mul(&x.powf(p - 1.0))?
            .try_avg_pool2d(&self.opts.avg())?;
        pooled.try_mul(&(y.powf(1.0 - p) * self.opts.area()))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_planes(self.clone(), x, ctx)
    }
    fn facts(&self) -> OpFacts {
        let example = LpPool2d {
            opts: LpPool2dOptions::new(2.0, [3, 2]).stride(2).ceil_mode(true),
        };
        facts(Arc::new(example), 1, |seed| {
            vec![smooth(&SAMPLE_SHAPE, seed)]
        })
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(LpPool2d {
        opts: LpPool2dOptions::new(2.0, 2),
    });
}

impl<'g> Var<'g> {
    fallible! {
        /// 2-d power-average pooling of an `[N, C, H, W]` (or `[C, H, W]`)
        /// value: PyTorch's `F.lp_pool2d(x, norm_type, kernel_size, stride,
        /// ceil_mode)`, with the options of [`LpPool2dOptions`]: each
        /// window's `(Σ x^p)^(1/p)`. As in PyTorch, `x^p` of a negative
        /// `x` with a fractional `p` is NaN, and so is the gradient of a
        /// window whose sum is 0 (for `p > 1`).
        ///
        /// Errors (`Error::InvalidArgument`, naming `lp_pool2d` and the
        /// input shape): a `norm_type` that is not finite and > 0, an input
        /// that is not 3-d or 4-d, a zero kernel or stride, a window larger
        /// than the input.
        ///
        /// ```
        /// use retrograd::{Graph, LpPool2dOptions, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![3.0, 4.0, 0.0, 12.0], &[1, 1, 2, 2])?);
        /// let y = x.try_lp_pool2d(&LpPool2dOptions::new(2.0, [1, 2]))?;
        /// assert_eq!(y.value().to_f64_vec(), vec![5.0, 12.0]);
        /// // d/dx (x² + y²)^½ = x / 5, y / 5; the second window is |x|.
        /// let dx = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// let want = [0.6, 0.8, 0.0, 1.0];
        /// assert!(dx.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12));
        /// // p = 1 is sum pooling.
        /// let s = x.try_lp_pool2d(&LpPool2dOptions::new(1.0, 2))?;
        /// assert_eq!(s.value().to_f64_vec(), vec![19.0]);
        /// assert!(x.try_lp_pool2d(&LpPool2dOptions::new(0.0, 2)).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_lp_pool2d / lp_pool2d(&self, options: &LpPool2dOptions) -> Var<'g> {
            self.graph().record(LpPool2d { opts: options.clone() }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{gradcheck, hessian_vector_product, jvpcheck, DType, Graph};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn values_against_the_definition_and_ceil_mode_scaling() {
        let g = Graph::new();
        let v: Vec<f64> = (0..25)
            .map(|i| 0.5 + (i as f64 * 0.7).sin().abs())
            .collect();
        let x = g.variable(Tensor::from_vec(v.clone(), &[1, 5, 5]).unwrap());
        let y = x.lp_pool2d(&LpPool2dOptions::new(3.0, 2).ceil_mode(true));
        assert_eq!(y.shape(), &[1, 3, 3]);
        let y = y.value().to_f64_vec();
        let full = (v[0].powi(3) + v[1].powi(3) + v[5].powi(3) + v[6].powi(3)).cbrt();
        assert!((y[0] - full).abs() < 1e-12);
        // A partial window (the last column): its sum scaled by 4 / 2.
        let part = (2.0 * (v[4].powi(3) + v[9].powi(3))).cbrt();
        assert!((y[2] - part).abs() < 1e-12, "{} vs {part}", y[2]);
        // The registry's instance: p = 2, kernel 2; f32 agrees.
        let x32 = g.variable(x.value().to_dtype(DType::F32));
        let via = g.apply("lp_pool2d", &[&x32]).unwrap();
        let direct = x.lp_pool2d(&LpPool2dOptions::new(2.0, 2));
        for (a, b) in via
            .value()
            .to_f64_vec()
            .iter()
            .zip(direct.value().to_f64_vec())
        {
            assert!((a - b).abs() < 1e-5 * b.abs().max(1.0));
        }
    }

    #[test]
    fn gradients_tangents_and_second_derivatives_over_random_configurations() {
        let mut rng = ChaCha8Rng::seed_from_u64(23);
        let mut done = 0;
        while done < 10 {
            let k = [rng.random_range(1..4), rng.random_range(1..4)];
            let p = [1.0, 1.5, 2.0, 3.0][rng.random_range(0..4)];
            let opts = LpPool2dOptions::new(p, k)
                .stride([rng.random_range(1..4), rng.random_range(1..4)])
                .ceil_mode(rng.random_bool(0.5));
            let shape = [
                rng.random_range(1..3),
                rng.random_range(1..3),
                rng.random_range(3..7),
                rng.random_range(3..7),
            ];
            // Positive inputs: x^p is real for a fractional p.
            let x = smooth(&shape, rng.random()).map_f64(|v| v.abs() + 0.3);
            if opts.avg().geometry("lp_pool2d", &x).is_err() {
                continue;
            }
            done += 1;
            gradcheck(|v| v[0].try_lp_pool2d(&opts), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            jvpcheck(|v| Ok(v[0].try_lp_pool2d(&opts)?.sin()), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            // H v by reverse-over-reverse against differences of gradients.
            fn f<'g>(v: &Var<'g>, opts: &LpPool2dOptions) -> Result<Var<'g>> {
                Ok(v.try_lp_pool2d(opts)?.tanh().sum())
            }
            let dir = smooth(x.shape(), 5);
            let hv = hessian_vector_product(|v| f(v, &opts), &x, &dir)
                .unwrap()
                .to_f64_vec();
            let grad_at = |s: f64| {
                let g = Graph::new();
                let shifted = x
                    .to_f64_vec()
                    .iter()
                    .zip(dir.to_f64_vec())
                    .map(|(a, d)| a + s * d)
                    .collect();
                let xv = g.variable(Tensor::from_vec(shifted, x.shape()).unwrap());
                f(&xv, &opts)
                    .unwrap()
                    .backward()
                    .unwrap()
                    .wrt(&xv)
                    .to_f64_vec()
            };
            let (plus, minus) = (grad_at(1e-6), grad_at(-1e-6));
            for ((a, b), h) in plus.iter().zip(&minus).zip(&hv) {
                let numeric = (a - b) / 2e-6;
                assert!(
                    (h - numeric).abs() <= 1e-5 + 1e-4 * numeric.abs(),
                    "{opts:?}: {h} vs {numeric}"
                );
            }
        }
    }

    #[test]
    fn bad_inputs_name_the_op() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[1, 1, 3, 3], DType::F64).unwrap());
        for bad in [
            LpPool2dOptions::new(2.0, 4),
            LpPool2dOptions::new(2.0, 2).stride(0),
            LpPool2dOptions::new(0.0, 2),
            LpPool2dOptions::new(-1.0, 2),
            LpPool2dOptions::new(f64::INFINITY, 2),
            LpPool2dOptions::new(f64::NAN, 2),
        ] {
            let e = x.try_lp_pool2d(&bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        op: "lp_pool2d",
                        ..
                    }
                ),
                "{e}"
            );
        }
        let e = x.try_lp_pool2d(&LpPool2dOptions::new(2.0, 4)).unwrap_err();
        assert!(e.to_string().contains("[1, 1, 3, 3]"), "{e}");
        let flat = g.variable(Tensor::zeros(&[3, 3], DType::F64).unwrap());
        assert!(flat.try_lp_pool2d(&LpPool2dOptions::new(2.0, 2)).is_err());
    }
}
