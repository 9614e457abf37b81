//! `avg_pool2d` and `adaptive_avg_pool2d` (one op, [`AvgPool2d`], over
//! fixed or adaptive windows) and their gradient `avg_pool2d_backward` /
//! `adaptive_avg_pool2d_backward` ([`AvgPool2dBackward`]: each output
//! gradient, divided as the forward divides, spread over its window).
//! Average pooling is linear: its backward is its adjoint, whose own
//! adjoint is the pooling again, so each op's derivative is the other and
//! every order of derivative exists; the tangent of a pooling is the
//! pooling of the tangent.

use crate::ops::declare_op;
use std::sync::Arc;

use super::geometry::{
    adaptive, batch_planes, facts, sliding_window_setters, smooth, Geometry, Sliding, SAMPLE_SHAPE,
};
use super::Pooling2d;
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched};
use crate::kernels::nn::pool::{self as kernel, Divisor};
use crate::ops::nn::Spatial;
use crate::ops::rule::OpFacts;
use crate::ops::OpAttributes;
use crate::ops::{Node, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Options of [`Var::avg_pool2d`](crate::Var::avg_pool2d), PyTorch's
/// `F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode,
/// count_include_pad, divisor_override)`: the stride defaults to the kernel
/// size, padding (zeros, at most half the kernel) to 0; padded positions
/// count in the divisor unless `count_include_pad(false)`; a
/// `divisor_override` replaces the divisor.
///
/// ```
/// use retrograd::AvgPool2dOptions;
/// let o = AvgPool2dOptions::new(2).padding(1).count_include_pad(false);
/// assert_eq!(o.stride_size(), [2, 2]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvgPool2dOptions {
    window: Sliding,
    count_include_pad: bool,
    divisor_override: Option<usize>,
}

impl AvgPool2dOptions {
    /// A `kernel` window with PyTorch's defaults for the rest.
    pub fn new(kernel: impl Spatial<2>) -> Self {
        AvgPool2dOptions {
            window: Sliding::new(kernel),
            count_include_pad: true,
            divisor_override: None,
        }
    }
    sliding_window_setters!();
    /// Zeros added on both sides (at most `kernel / 2`).
    pub fn padding(mut self, padding: impl Spatial<2>) -> Self {
        self.window.padding = padding.spatial();
        self
    }
    /// Whether padded positions count in the divisor (default `true`).
    pub fn count_include_pad(mut self, count_include_pad: bool) -> Self {
        self.count_include_pad = count_include_pad;
        self
    }
    /// A fixed divisor for every window (must be > 0), or `None` (default).
    pub fn divisor_override(mut self, divisor: Option<usize>) -> Self {
        self.divisor_override = divisor;
        self
    }
    /// The divisor override, if any.
    pub fn divisor(&self) -> Option<usize> {
        self.divisor_override
    }
    /// The settings by name: `kernel`, `stride`, `padding`, `ceil_mode`,
    /// `count_include_pad` and `divisor_override` when set.
    pub fn attributes(&self) -> OpAttributes {
        self.window
            .attributes()
            .bool("ceil_mode", self.window.ceil_mode)
            .bool("count_include_pad", self.count_include_pad)
            .int_opt("divisor_override", self.divisor_override)
    }
    /// The window plan for input `x`.
    pub(super) fn geometry(&self, op: &'static str, x: &Tensor) -> Result<Geometry> {
        if self.divisor_override == Some(0) {
            return Err(Error::invalid(op, "divisor_override must be > 0, got 0"));
        }
        self.window.geometry(op, x, self.count_include_pad)
    }
}

/// Options of [`Var::adaptive_avg_pool2d`](crate::Var::adaptive_avg_pool2d)
/// (PyTorch's `F.adaptive_avg_pool2d(x, output_size)`): the output size,
/// one number or `[h, w]`; any of them converts into it.
///
/// ```
/// use retrograd::AdaptiveAvgPool2dOptions;
/// assert_eq!(AdaptiveAvgPool2dOptions::new(1).output_size(), [1, 1]);
/// assert_eq!(AdaptiveAvgPool2dOptions::from([2, 3]).output_size(), [2, 3]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdaptiveAvgPool2dOptions {
    output_size: [usize; 2],
}

impl AdaptiveAvgPool2dOptions {
    /// Pooling to `output_size`.
    pub fn new(output_size: impl Spatial<2>) -> Self {
        AdaptiveAvgPool2dOptions {
            output_size: output_size.spatial(),
        }
    }
    /// The output size.
    pub fn output_size(&self) -> [usize; 2] {
        self.output_size
    }
}

impl<S: Spatial<2>> From<S> for AdaptiveAvgPool2dOptions {
    fn from(output_size: S) -> Self {
        AdaptiveAvgPool2dOptions::new(output_size)
    }
}

impl Pooling2d for AvgPool2dOptions {
    const NAME: &'static str = "avg_pool2d";
    fn pool<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_avg_pool2d(self)
    }
}

impl Pooling2d for AdaptiveAvgPool2dOptions {
    const NAME: &'static str = "adaptive_avg_pool2d";
    fn pool<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_adaptive_avg_pool2d(self.output_size)
    }
}

/// `g` (shaped like `x` average-pooled with `options`) spread back over
/// `x`'s windows: the recorded, differentiable adjoint of `avg_pool2d`,
/// for poolings built on it (`lp_pool2d`).
pub(super) fn avg_pool2d_adjoint<'g>(
    g: &Var<'g>,
    x: &Var<'g>,
    options: &AvgPool2dOptions,
) -> Result<Var<'g>> {
    let op = AvgPool2dBackward {
        windows: Windows::Fixed(options.clone()),
    };
    g.graph().record(op, &[g, x])
}

/// Which windows an average pooling uses.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Windows {
    /// Sliding windows (`avg_pool2d`).
    Fixed(AvgPool2dOptions),
    /// PyTorch's adaptive windows for this output size (`adaptive_avg_pool2d`).
    Adaptive([usize; 2]),
}

impl Windows {
    /// The options of fixed windows, or the `output_size` of adaptive ones.
    fn attributes(&self) -> OpAttributes {
        match self {
            Windows::Fixed(o) => o.attributes(),
            Windows::Adaptive(out) => OpAttributes::new().ints("output_size", out),
        }
    }
    fn name(&self) -> &'static str {
        match self {
            Windows::Fixed(_) => "avg_pool2d",
            Windows::Adaptive(_) => "adaptive_avg_pool2d",
        }
    }
    fn backward_name(&self) -> &'static str {
        match self {
            Windows::Fixed(_) => "avg_pool2d_backward",
            Windows::Adaptive(_) => "adaptive_avg_pool2d_backward",
        }
    }
    fn geometry(&self, op: &'static str, x: &Tensor) -> Result<Geometry> {
        match self {
            Windows::Fixed(o) => o.geometry(op, x),
            Windows::Adaptive(out) => adaptive(op, x, *out),
        }
    }
    fn divisor(&self) -> Divisor {
        match self {
            Windows::Fixed(o) => o.divisor().map_or(Divisor::Window, Divisor::Fixed),
            Windows::Adaptive(_) => Divisor::PerAxis,
        }
    }
    /// The options of the structured suites' example instances.
    fn example(&self) -> Windows {
        match self {
            Windows::Fixed(_) => Windows::Fixed(
                AvgPool2dOptions::new([3, 2])
                    .stride(2)
                    .padding(1)
                    .ceil_mode(true)
                    .count_include_pad(false),
            ),
            Windows::Adaptive(_) => Windows::Adaptive([3, 4]),
        }
    }
}

/// Average pooling, PyTorch's `F.avg_pool2d` or `F.adaptive_avg_pool2d`.
/// Input: `x`, `[N, C, H, W]` or `[C, H, W]`. The registry holds
/// `avg_pool2d` with a 2x2 kernel and stride 2, and `adaptive_avg_pool2d`
/// with output size 1x1 (global average pooling).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvgPool2d {
    windows: Windows,
}

/// The gradient of [`AvgPool2d`]: `g` (output-shaped), divided as the
/// forward divides, added over each window into a zero input-shaped value.
/// Inputs: `g`, `x` (for its shape).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvgPool2dBackward {
    windows: Windows,
}

/// `x` average-pooled.
fn pool(windows: &Windows, x: &Tensor) -> Result<Tensor> {
    let op = windows.name();
    let geo = windows.geometry(op, x)?;
    let divisor = windows.divisor();
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let xs = x.as_slice_of::<T>();
        Tensor::build::<T>(geo.out_shape.clone(), |out| kernel::avg_pool2d(xs, geo.planes, &geo.plan, divisor, out))
    }))
}

/// `g` spread back over `x`'s windows.
fn spread(windows: &Windows, g: &Tensor, x: &Tensor) -> Result<Tensor> {
    let op = windows.backward_name();
    let geo = windows.geometry(op, x)?;
    geo.check_output_like(op, g, x)?;
    let divisor = windows.divisor();
    Ok(crate::with_dtype!(op, x.dtype(), T => {
        let gs = g.as_slice_of::<T>();
        Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::avg_pool2d_backward(gs, geo.planes, &geo.plan, divisor, out))
    }))
}

/// The output shape of an example instance on the sample shape.
fn example_out_shape(windows: &Windows) -> Dims {
    let x = Tensor::zeros(&SAMPLE_SHAPE, crate::DType::F64).expect("a valid shape");
    windows
        .example()
        .geometry("avg_pool2d", &x)
        .expect("valid example options")
        .out_shape
}

impl StructuredOp for AvgPool2d {
    declare_op!("avg_pool2d"(input), linear[0]);
    fn attributes(&self) -> OpAttributes {
        self.windows.attributes()
    }
    fn name(&self) -> &'static str {
        self.windows.name()
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        pool(&self.windows, x[0])
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let op = AvgPool2dBackward {
            windows: self.windows.clone(),
        };
        g.graph().record(op, &[g, n.x(0)])
    }
    fn grad_fast(&self, _: usize, g: &Tensor, x: &[&Tensor], _: &Tensor) -> Option<Result<Tensor>> {
        Some(spread(&self.windows, g, x[0]))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_planes(self.clone(), x, ctx)
    }
    fn facts(&self) -> OpFacts {
        let example = Arc::new(AvgPool2d {
            windows: self.windows.example(),
        });
        facts(example, 1, |seed| vec![smooth(&SAMPLE_SHAPE, seed)])
    }
}

impl StructuredOp for AvgPool2dBackward {
    declare_op!("avg_pool2d_backward"(grad, input), linear[0]);
    /// `x` is read for its shape only.
    const NO_GRAD: &'static [usize] = &[1];
    fn attributes(&self) -> OpAttributes {
        self.windows.attributes()
    }
    fn name(&self) -> &'static str {
        self.windows.backward_name()
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        spread(&self.windows, x[0], x[1])
    }
    fn grad<'g>(&self, _: usize, g2: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        let op = AvgPool2d {
            windows: self.windows.clone(),
        };
        g2.graph().record(op, &[g2])
    }
    fn grad_fast(
        &self,
        _: usize,
        g2: &Tensor,
        _: &[&Tensor],
        _: &Tensor,
    ) -> Option<Result<Tensor>> {
        Some(pool(&self.windows, g2))
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_planes(self.clone(), x, ctx)
    }
    fn facts(&self) -> OpFacts {
        let windows = self.windows.example();
        let sample: fn(u64) -> Vec<Tensor> = match windows {
            Windows::Fixed(_) => |seed| {
                let w = Windows::Fixed(AvgPool2dOptions::new(1));
                vec![
                    smooth(&example_out_shape(&w), seed),
                    smooth(&SAMPLE_SHAPE, seed + 7),
                ]
            },
            Windows::Adaptive(_) => |seed| {
                let w = Windows::Adaptive([1, 1]);
                vec![
                    smooth(&example_out_shape(&w), seed),
                    smooth(&SAMPLE_SHAPE, seed + 7),
                ]
            },
        };
        facts(Arc::new(AvgPool2dBackward { windows }), 2, sample)
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    let fixed = Windows::Fixed(AvgPool2dOptions::new(2));
    let global = Windows::Adaptive([1, 1]);
    for windows in [fixed, global] {
        reg.add_builtin(AvgPool2d {
            windows: windows.clone(),
        });
        reg.add_builtin(AvgPool2dBackward { windows });
    }
}

impl<'g> Var<'g> {
    fallible! {
        /// 2-d average pooling of an `[N, C, H, W]` (or `[C, H, W]`) value:
        /// PyTorch's `F.avg_pool2d(x, kernel_size, stride, padding, ceil_mode,
        /// count_include_pad, divisor_override)`, with the options of
        /// [`AvgPool2dOptions`]. Padding is zeros, counted in the divisor
        /// unless `count_include_pad(false)`.
        ///
        /// Errors (`Error::InvalidArgument`, naming `avg_pool2d` and the input
        /// shape): an input that is not 3-d or 4-d, a zero kernel or stride,
        /// padding above half the kernel, a window larger than the padded
        /// input, a zero `divisor_override`.
        ///
        /// ```
        /// use retrograd::{AvgPool2dOptions, Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec((1..=16).map(f64::from).collect(), &[1, 1, 4, 4])?);
        /// let y = x.try_avg_pool2d(&AvgPool2dOptions::new(2))?;
        /// assert_eq!(y.value().to_f64_vec(), vec![3.5, 5.5, 11.5, 13.5]);
        /// assert_eq!(y.sum().backward()?.wrt(&x).to_f64_vec(), vec![0.25; 16]);
        /// // Padding 1: the corner window holds 1 input and 3 zeros...
        /// let p = x.try_avg_pool2d(&AvgPool2dOptions::new(2).padding(1))?;
        /// assert_eq!(p.value().to_f64_vec()[0], 0.25);
        /// // ... or averages its one input.
        /// let q = x.try_avg_pool2d(&AvgPool2dOptions::new(2).padding(1).count_include_pad(false))?;
        /// assert_eq!(q.value().to_f64_vec()[0], 1.0);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_avg_pool2d / avg_pool2d(&self, options: &AvgPool2dOptions) -> Var<'g> {
            let op = AvgPool2d { windows: Windows::Fixed(options.clone()) };
            self.graph().record(op, &[self])
        }
    }

    fallible! {
        /// Adaptive 2-d average pooling to `output_size` (one number or
        /// `[h, w]`): PyTorch's `F.adaptive_avg_pool2d`, where output row `i`
        /// of `out` averages input rows `floor(i H / out)` to
        /// `ceil((i + 1) H / out)` (windows may overlap), and likewise for
        /// columns. Output size 1 is global average pooling.
        ///
        /// Errors (`Error::InvalidArgument`): an input that is not 3-d or 4-d
        /// or has a zero channel or spatial size, an output size of 0.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec((0..6).map(f64::from).collect(), &[1, 2, 3])?);
        /// let y = x.try_adaptive_avg_pool2d([1, 2])?;
        /// // Columns {0, 1} and {1, 2} of rows 0..2: [0 1 2; 3 4 5].
        /// assert_eq!(y.value().to_f64_vec(), vec![2.0, 3.0]);
        /// let dx = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// assert_eq!(dx, vec![0.25, 0.5, 0.25, 0.25, 0.5, 0.25]);
        /// assert_eq!(x.try_adaptive_avg_pool2d(1)?.value().to_f64_vec(), vec![2.5]);
        /// assert!(x.try_adaptive_avg_pool2d(0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_adaptive_avg_pool2d / adaptive_avg_pool2d<S: Spatial<2>>(&self, output_size: S) -> Var<'g> {
            let op = AvgPool2d { windows: Windows::Adaptive(output_size.spatial()) };
            self.graph().record(op, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::testing::derivatives_agree;
    use crate::{gradcheck, jvpcheck, DType, Graph};
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    #[test]
    fn values_padding_divisors_and_ceil_mode() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec((0..25).map(f64::from).collect(), &[1, 5, 5]).unwrap());
        // ceil_mode: the last window is clipped to the input (no padding to count).
        let c = x.avg_pool2d(&AvgPool2dOptions::new(2).ceil_mode(true));
        assert_eq!(c.shape(), &[1, 3, 3]);
        let v = c.value().to_f64_vec();
        assert_eq!(v[2], (4.0 + 9.0) / 2.0);
        assert_eq!(v[8], 24.0);
        // divisor_override replaces the divisor.
        let d = x.avg_pool2d(&AvgPool2dOptions::new(2).divisor_override(Some(1)));
        assert_eq!(d.value().to_f64_vec()[0], 0.0 + 1.0 + 5.0 + 6.0);
        // Registry: kernel 2 and global average pooling.
        assert_eq!(g.apply("avg_pool2d", &[&x]).unwrap().shape(), &[1, 2, 2]);
        let m = g.apply("adaptive_avg_pool2d", &[&x]).unwrap();
        assert_eq!(m.value().to_f64_vec(), vec![12.0]);
        // Adaptive to the input size is the identity; f32 works.
        let x32 = g.variable(x.value().to_dtype(DType::F32));
        let same = x32.adaptive_avg_pool2d(5);
        assert_eq!(same.value(), x32.value());
    }

    fn random_options(rng: &mut ChaCha8Rng) -> AvgPool2dOptions {
        let k = [rng.random_range(1..4), rng.random_range(1..4)];
        let divisor = rng.random_bool(0.25).then(|| rng.random_range(1..5));
        AvgPool2dOptions::new(k)
            .stride([rng.random_range(1..4), rng.random_range(1..4)])
            .padding([
                rng.random_range(0..=k[0] / 2),
                rng.random_range(0..=k[1] / 2),
            ])
            .ceil_mode(rng.random_bool(0.5))
            .count_include_pad(rng.random_bool(0.5))
            .divisor_override(divisor)
    }

    #[test]
    fn gradients_and_tangents_over_random_configurations() {
        let mut rng = ChaCha8Rng::seed_from_u64(61);
        let mut done = 0;
        while done < 12 {
            let opts = random_options(&mut rng);
            let shape = [
                rng.random_range(1..3),
                rng.random_range(1..3),
                rng.random_range(2..7),
                rng.random_range(2..7),
            ];
            let x = smooth(&shape, rng.random());
            if opts.geometry("avg_pool2d", &x).is_err() {
                continue;
            }
            done += 1;
            gradcheck(|v| v[0].try_avg_pool2d(&opts), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            jvpcheck(|v| v[0].try_avg_pool2d(&opts), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            gradcheck(|v| Ok(v[0].try_avg_pool2d(&opts)?.tanh()), &[x.clone()]).unwrap();
            let out = [rng.random_range(1..5), rng.random_range(1..5)];
            gradcheck(
                |v| Ok(v[0].try_adaptive_avg_pool2d(out)?.sin()),
                &[x.clone()],
            )
            .unwrap_or_else(|e| panic!("{out:?}: {e}"));
            jvpcheck(|v| Ok(v[0].try_adaptive_avg_pool2d(out)?.sin()), &[x])
                .unwrap_or_else(|e| panic!("{out:?}: {e}"));
        }
    }

    #[test]
    fn backward_ops_are_differentiable_and_adjoint() {
        for windows in [
            Windows::Fixed(AvgPool2dOptions::new(1)),
            Windows::Adaptive([1, 1]),
        ] {
            let ex = windows.example();
            let back = AvgPool2dBackward {
                windows: ex.clone(),
            };
            let g = smooth(&example_out_shape(&windows), 2);
            let x = smooth(&SAMPLE_SHAPE, 5);
            derivatives_agree(&back, &[g.clone(), x.clone()]).unwrap();
            // <pool(x), g> = <x, spread(g)>.
            let lhs: f64 = pool(&ex, &x)
                .unwrap()
                .to_f64_vec()
                .iter()
                .zip(g.to_f64_vec())
                .map(|(a, b)| a * b)
                .sum();
            let rhs: f64 = spread(&ex, &g, &x)
                .unwrap()
                .to_f64_vec()
                .iter()
                .zip(x.to_f64_vec())
                .map(|(a, b)| a * b)
                .sum();
            assert!(
                (lhs - rhs).abs() < 1e-12 * lhs.abs().max(1.0),
                "{lhs} vs {rhs}"
            );
        }
    }

    #[test]
    fn bad_inputs_name_the_op() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[1, 1, 3, 3], DType::F64).unwrap());
        for bad in [
            AvgPool2dOptions::new(4),
            AvgPool2dOptions::new(2).stride(0),
            AvgPool2dOptions::new(2).padding(2),
            AvgPool2dOptions::new(2).divisor_override(Some(0)),
        ] {
            let e = x.try_avg_pool2d(&bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        op: "avg_pool2d",
                        ..
                    }
                ),
                "{e}"
            );
        }
        let e = x.try_adaptive_avg_pool2d([2, 0]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidArgument {
                    op: "adaptive_avg_pool2d",
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("[1, 1, 3, 3]"), "{e}");
        let wrong = g.variable(Tensor::zeros(&[3], DType::F64).unwrap());
        assert!(wrong.try_adaptive_avg_pool2d(1).is_err());
        let back = AvgPool2dBackward {
            windows: Windows::Adaptive([2, 2]),
        };
        let x32 = Tensor::zeros(&[1, 3, 3], DType::F32).unwrap();
        let g32 = Tensor::zeros(&[1, 2, 3], DType::F32).unwrap();
        assert!(matches!(
            back.forward(&[&g32, &x32]),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}
