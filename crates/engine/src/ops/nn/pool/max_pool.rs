//! `max_pool2d` and its two companion ops, each linear in its first input
//! and routed through the argmax positions of the pooled input `x`:
//! `max_pool2d_backward` (the gradient: `g` scattered to the argmax
//! positions, added where windows overlap) and `max_pool2d_gather` (the
//! values of an input-shaped `t` at the argmax positions: the tangent of
//! max pooling). Scatter and gather are each other's transpose, so each
//! op's derivative is the other and gradients of gradients work; with
//! respect to `x` every one of them is piecewise constant (zero gradient).
//!
//! The argmax positions are saved by the forward pass: a `MaxPool2d` keeps
//! the indices of its latest forward, tagged with the output buffer's
//! address and length, and hands them to the backward ops it records. A
//! node's output buffer is alive while its backward runs, so a matching tag
//! means these indices came from the forward that made that very buffer;
//! otherwise (a shared instance, such as the registry's, used again since)
//! they are recomputed from `x`. Ties go to the first position in row-major
//! window order and a NaN propagates, as in PyTorch.

use crate::ops::declare_op;
use std::sync::{Arc, Mutex};

use super::geometry::{
    batch_planes, distinct, facts, sliding_window_setters, smooth, Geometry, Sliding, SAMPLE_SHAPE,
};
use super::Pooling2d;
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels::nn::pool::{self as kernel, NO_INDEX};
use crate::ops::nn::Spatial;
use crate::ops::rule::OpFacts;
use crate::ops::{Node, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Options of [`Var::max_pool2d`](crate::Var::max_pool2d), PyTorch's
/// `F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode)`:
/// the stride defaults to the kernel size, padding to 0 (padded positions
/// are ignored, as if `-inf`; at most half the kernel), dilation to 1.
/// Sizes take one number or `[h, w]`.
///
/// ```
/// use retrograd::MaxPool2dOptions;
/// let o = MaxPool2dOptions::new(3).stride(2).padding([1, 0]).ceil_mode(true);
/// assert_eq!(o.kernel_size(), [3, 3]);
/// assert_eq!(o.stride_size(), [2, 2]);
/// assert_eq!(MaxPool2dOptions::new([2, 3]).stride_size(), [2, 3]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxPool2dOptions {
    window: Sliding,
}

impl MaxPool2dOptions {
    /// A `kernel` window with PyTorch's defaults for the rest.
    pub fn new(kernel: impl Spatial<2>) -> Self {
        MaxPool2dOptions {
            window: Sliding::new(kernel),
        }
    }
    sliding_window_setters!();
    /// Ignored positions added on both sides (at most `kernel / 2`).
    pub fn padding(mut self, padding: impl Spatial<2>) -> Self {
        self.window.padding = padding.spatial();
        self
    }
    /// The step between the taps of a window.
    pub fn dilation(mut self, dilation: impl Spatial<2>) -> Self {
        self.window.dilation = dilation.spatial();
        self
    }
    /// The settings by name: `kernel`, `stride`, `padding`, `dilation`, `ceil_mode`.
    pub fn attributes(&self) -> OpAttributes {
        self.window
            .attributes()
            .ints("dilation", &self.window.dilation)
            .bool("ceil_mode", self.window.ceil_mode)
    }
    /// The window plan for input `x`.
    pub(super) fn geometry(&self, op: &'static str, x: &Tensor) -> Result<Geometry> {
        self.window.geometry(op, x, false)
    }
}

impl Pooling2d for MaxPool2dOptions {
    const NAME: &'static str = "max_pool2d";
    fn pool<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        x.try_max_pool2d(self)
    }
}

/// Argmax positions, one per output element (flat within its plane).
type Indices = Arc<Vec<u32>>;

/// The indices of a forward pass and the identity of the output it made.
#[derive(Debug)]
struct Saved {
    /// The output buffer's address and length.
    tag: (usize, usize),
    indices: Indices,
}

/// A tensor's buffer identity: address and length (`None` when empty,
/// where addresses mean nothing).
fn buffer_tag(t: &Tensor) -> Option<(usize, usize)> {
    if t.numel() == 0 || t.rank() == 0 {
        return None;
    }
    Some(
        crate::with_any_dtype!(t.dtype(), T => (t.as_slice_of::<T>().as_ptr() as usize, t.numel())),
    )
}

/// 2-d max pooling, PyTorch's `F.max_pool2d`. Input: `x`, `[N, C, H, W]` or
/// `[C, H, W]`. The registry holds it with a 2x2 kernel and stride 2.
#[derive(Debug)]
pub struct MaxPool2d {
    opts: MaxPool2dOptions,
    /// Whether the forward finds and saves the argmax indices for the
    /// backward (false where nothing requires grad: the values alone).
    keep_indices: bool,
    saved: Mutex<Option<Saved>>,
}

impl Clone for MaxPool2d {
    fn clone(&self) -> Self {
        MaxPool2d {
            keep_indices: self.keep_indices,
            ..MaxPool2d::new(self.opts.clone())
        }
    }
}

impl MaxPool2d {
    /// The op for these options.
    pub fn new(opts: MaxPool2dOptions) -> Self {
        MaxPool2d {
            opts,
            keep_indices: true,
            saved: Mutex::new(None),
        }
    }

    /// The op for a forward that no backward follows: it computes the
    /// window maxima only (a backward would recompute the indices).
    fn values_only(opts: MaxPool2dOptions) -> Self {
        MaxPool2d {
            keep_indices: false,
            ..MaxPool2d::new(opts)
        }
    }

    /// `v` through the node's argmax positions: scattered back to the
    /// input's shape (`SCATTER`: the gradient) or gathered from it (the
    /// tangent).
    fn record_at_argmax<'g, const SCATTER: bool>(
        &self,
        v: &Var<'g>,
        n: Node<'_, 'g>,
    ) -> Result<Var<'g>> {
        let x = n.x(0);
        let op = MaxPool2dAtArgmax::<SCATTER> {
            opts: self.opts.clone(),
            indices: Some(self.indices_for(x.value(), n.output.value())?),
        };
        v.graph().record(op, &[v, x])
    }

    /// The argmax positions behind `out` (this op's output on `x`): saved
    /// by the forward that made `out`, or recomputed.
    fn indices_for(&self, x: &Tensor, out: &Tensor) -> Result<Indices> {
        if let Some(tag) = buffer_tag(out) {
            let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = saved.as_ref().filter(|s| s.tag == tag) {
                return Ok(s.indices.clone());
            }
        }
        let geo = self.opts.geometry("max_pool2d", x)?;
        recompute(&geo, x)
    }
}

/// The argmax positions of `x`'s windows.
fn recompute(geo: &Geometry, x: &Tensor) -> Result<Indices> {
    Ok(Arc::new(crate::with_dtype!("max_pool2d", x.dtype(), T => {
        kernel::max_pool2d_indices(x.as_slice_of::<T>(), geo.planes, &geo.plan)
    })))
}

/// The options of the structured suites' example instances.
fn example_options() -> MaxPool2dOptions {
    MaxPool2dOptions::new(3)
        .stride(2)
        .padding(1)
        .dilation([1, 2])
        .ceil_mode(true)
}

/// The output shape of the example options on the sample shape.
fn example_out_shape() -> Dims {
    let x = Tensor::zeros(&SAMPLE_SHAPE, crate::DType::F64).expect("a valid shape");
    example_options()
        .geometry("max_pool2d", &x)
        .expect("valid example options")
        .out_shape
}

impl StructuredOp for MaxPool2d {
    declare_op!("max_pool2d"(input));
    fn attributes(&self) -> OpAttributes {
        self.opts.attributes()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "max_pool2d";
        let x = inputs[0];
        let geo = self.opts.geometry(OP, x)?;
        if !self.keep_indices {
            return Ok(crate::with_dtype!(OP, x.dtype(), T => {
                let xs = x.as_slice_of::<T>();
                Tensor::build::<T>(geo.out_shape.clone(), |out| kernel::max_pool2d_values(xs, geo.planes, &geo.plan, out))
            }));
        }
        let mut idx = vec![NO_INDEX; geo.planes * geo.plan.out_plane()];
        let out = crate::with_dtype!(OP, x.dtype(), T => {
            let xs = x.as_slice_of::<T>();
            Tensor::build::<T>(geo.out_shape.clone(), |out| kernel::max_pool2d(xs, geo.planes, &geo.plan, out, &mut idx))
        });
        if let Some(tag) = buffer_tag(&out) {
            *self.saved.lock().unwrap_or_else(|e| e.into_inner()) = Some(Saved {
                tag,
                indices: Arc::new(idx),
            });
        }
        Ok(out)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        self.record_at_argmax::<true>(g, n)
    }
    fn grad_fast(
        &self,
        _: usize,
        g: &Tensor,
        x: &[&Tensor],
        out: &Tensor,
    ) -> Option<Result<Tensor>> {
        let idx = self.indices_for(x[0], out);
        Some(idx.and_then(|idx| scatter(&self.opts, g, x[0], Some(&idx))))
    }
    fn tangent<'g>(&self, _: usize, tx: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        self.record_at_argmax::<false>(tx, n)
    }
    /// A fresh instance: the indices it saves are the batch's own.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        batch_planes(MaxPool2d::new(self.opts.clone()), x, ctx)
    }
    fn facts(&self) -> OpFacts {
        facts(Arc::new(MaxPool2d::new(example_options())), 1, |seed| {
            vec![distinct(&SAMPLE_SHAPE, seed)]
        })
    }
}

/// The two linear maps at the argmax positions of `x`'s windows, each the
/// other's derivative (with respect to its first input; both are zero with
/// respect to `x`):
/// - [`MaxPool2dBackward`] (`SCATTER = true`), `max_pool2d`'s gradient: `g`
///   (output-shaped) added into a zero input-shaped value at the argmax
///   positions;
/// - [`MaxPool2dGather`] (`SCATTER = false`): the values of an input-shaped
///   `t` at the argmax positions (output-shaped), `max_pool2d`'s tangent.
///
/// Inputs: that first operand, then `x`. The registry holds both with a 2x2
/// kernel and stride 2 (indices recomputed from `x`).
#[derive(Clone, Debug)]
pub struct MaxPool2dAtArgmax<const SCATTER: bool> {
    opts: MaxPool2dOptions,
    indices: Option<Indices>,
}

/// `max_pool2d_backward`: see [`MaxPool2dAtArgmax`].
pub type MaxPool2dBackward = MaxPool2dAtArgmax<true>;
/// `max_pool2d_gather`: see [`MaxPool2dAtArgmax`].
pub type MaxPool2dGather = MaxPool2dAtArgmax<false>;

/// The given indices after checking their count, or `x`'s, recomputed.
fn resolve(
    op: &'static str,
    geo: &Geometry,
    x: &Tensor,
    indices: Option<&Indices>,
) -> Result<Indices> {
    match indices {
        Some(i) if i.len() == geo.planes * geo.plan.out_plane() => Ok(i.clone()),
        Some(i) => Err(Error::invalid(
            op,
            format!(
                "{} saved argmax positions do not fit an output of shape {:?}",
                i.len(),
                geo.out_shape
            ),
        )),
        None => recompute(geo, x),
    }
}

/// [`MaxPool2dBackward`]'s value.
fn scatter(
    opts: &MaxPool2dOptions,
    g: &Tensor,
    x: &Tensor,
    indices: Option<&Indices>,
) -> Result<Tensor> {
    const OP: &str = "max_pool2d_backward";
    let geo = opts.geometry(OP, x)?;
    geo.check_output_like(OP, g, x)?;
    let idx = resolve(OP, &geo, x, indices)?;
    Ok(crate::with_dtype!(OP, x.dtype(), T => {
        let gs = g.as_slice_of::<T>();
        Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::scatter(gs, &idx, geo.planes, &geo.plan, out))
    }))
}

/// [`MaxPool2dGather`]'s value.
fn gather(
    opts: &MaxPool2dOptions,
    t: &Tensor,
    x: &Tensor,
    indices: Option<&Indices>,
) -> Result<Tensor> {
    const OP: &str = "max_pool2d_gather";
    let geo = opts.geometry(OP, x)?;
    crate::ops::nn::spatial::check_same_dtype(OP, x, t)?;
    if t.shape() != x.shape() {
        return Err(Error::shape_mismatch(OP, x.shape(), t.shape()));
    }
    let idx = resolve(OP, &geo, x, indices)?;
    Ok(crate::with_dtype!(OP, x.dtype(), T => {
        let ts = t.as_slice_of::<T>();
        Tensor::build::<T>(geo.out_shape.clone(), |out| kernel::gather(ts, &idx, geo.planes, &geo.plan, out))
    }))
}

impl<const SCATTER: bool> MaxPool2dAtArgmax<SCATTER> {
    /// Indices for `x`: the stored ones, or recomputed once so that the
    /// ops this one records need not recompute them again.
    fn indices(&self, x: &Tensor) -> Result<Indices> {
        let geo = self.opts.geometry(Self::NAME, x)?;
        resolve(Self::NAME, &geo, x, self.indices.as_ref())
    }

    /// The scatter (`S = true`) or the gather at `x`'s argmax positions,
    /// with the indices resolved once.
    fn at<const S: bool>(&self, x: &Tensor) -> Result<MaxPool2dAtArgmax<S>> {
        Ok(MaxPool2dAtArgmax {
            opts: self.opts.clone(),
            indices: Some(self.indices(x)?),
        })
    }

    /// The map itself on plain tensors: `scatter` or `gather` of `a`.
    fn apply(
        opts: &MaxPool2dOptions,
        a: &Tensor,
        x: &Tensor,
        indices: Option<&Indices>,
    ) -> Result<Tensor> {
        if SCATTER {
            scatter(opts, a, x, indices)
        } else {
            gather(opts, a, x, indices)
        }
    }
}

impl<const SCATTER: bool> StructuredOp for MaxPool2dAtArgmax<SCATTER> {
    const NAME: &'static str = if SCATTER {
        "max_pool2d_backward"
    } else {
        "max_pool2d_gather"
    };
    const INPUTS: &'static [&'static str] = &["operand", "input"];
    fn holds(&self) -> crate::Holds {
        // `without_saved` drops the indices, and a compiled step replays that form.
        match self.indices {
            Some(_) => crate::Holds::data("the argmax positions of the forward that recorded it"),
            None => crate::Holds::Settings,
        }
    }
    fn without_saved(&self) -> Option<std::sync::Arc<dyn crate::Differentiable>> {
        self.indices.as_ref().map(|_| {
            std::sync::Arc::new(MaxPool2dAtArgmax::<SCATTER> {
                opts: self.opts.clone(),
                indices: None,
            }) as std::sync::Arc<dyn crate::Differentiable>
        })
    }
    /// Both maps are piecewise constant in `x`: zero gradient.
    const NO_GRAD: &'static [usize] = &[1];
    fn attributes(&self) -> OpAttributes {
        self.opts.attributes()
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        Self::apply(&self.opts, inputs[0], inputs[1], self.indices.as_ref())
    }
    fn grad<'g>(&self, _: usize, g2: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(1);
        // The adjoint of scatter is gather and the other way round.
        if SCATTER {
            g2.graph().record(self.at::<false>(x.value())?, &[g2, x])
        } else {
            g2.graph().record(self.at::<true>(x.value())?, &[g2, x])
        }
    }
    fn grad_fast(
        &self,
        _: usize,
        g2: &Tensor,
        inputs: &[&Tensor],
        _: &Tensor,
    ) -> Option<Result<Tensor>> {
        let (opts, x, indices) = (&self.opts, inputs[1], self.indices.as_ref());
        // The adjoint: gather for the scatter, scatter for the gather.
        Some(if SCATTER {
            gather(opts, g2, x, indices)
        } else {
            scatter(opts, g2, x, indices)
        })
    }
    /// Linear in its first input; the indices resolved once for the tangent.
    fn tangent<'g>(&self, _: usize, ta: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let x = n.x(1);
        ta.graph().record(self.at::<SCATTER>(x.value())?, &[ta, x])
    }
    /// The indices held are the first example's: recomputed from the
    /// batch's `x` instead.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let op = MaxPool2dAtArgmax::<SCATTER> {
            opts: self.opts.clone(),
            indices: None,
        };
        batch_planes(op, x, ctx)
    }
    fn facts(&self) -> OpFacts {
        let example = MaxPool2dAtArgmax::<SCATTER> {
            opts: example_options(),
            indices: None,
        };
        let sample: fn(u64) -> Vec<Tensor> = if SCATTER {
            |seed| {
                vec![
                    smooth(&example_out_shape(), seed),
                    distinct(&SAMPLE_SHAPE, seed),
                ]
            }
        } else {
            |seed| vec![smooth(&SAMPLE_SHAPE, seed), distinct(&SAMPLE_SHAPE, seed)]
        };
        facts(Arc::new(example), 2, sample)
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    let two = MaxPool2dOptions::new(2);
    reg.add_builtin(MaxPool2d::new(two.clone()));
    reg.add_builtin(MaxPool2dBackward {
        opts: two.clone(),
        indices: None,
    });
    reg.add_builtin(MaxPool2dGather {
        opts: two,
        indices: None,
    });
}

impl<'g> Var<'g> {
    fallible! {
        /// 2-d max pooling of an `[N, C, H, W]` (or `[C, H, W]`) value:
        /// PyTorch's `F.max_pool2d(x, kernel_size, stride, padding, dilation,
        /// ceil_mode)`, with the options of [`MaxPool2dOptions`]. The gradient
        /// goes to the position of each window's maximum (the first one on a
        /// tie), found in the forward pass and saved for the backward.
        ///
        /// Errors (`Error::InvalidArgument`, naming `max_pool2d` and the input
        /// shape): an input that is not 3-d or 4-d, a zero kernel, stride or
        /// dilation, padding above half the kernel, a window larger than the
        /// padded input.
        ///
        /// ```
        /// use retrograd::{Graph, MaxPool2dOptions, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec((1..=16).map(f64::from).collect(), &[1, 1, 4, 4])?);
        /// let y = x.try_max_pool2d(&MaxPool2dOptions::new(2))?;
        /// assert_eq!(y.shape(), &[1, 1, 2, 2]);
        /// assert_eq!(y.value().to_f64_vec(), vec![6.0, 8.0, 14.0, 16.0]);
        /// let dx = y.sum().backward()?.wrt(&x).to_f64_vec();
        /// assert_eq!(dx.iter().filter(|&&v| v == 1.0).count(), 4);
        /// assert_eq!((dx[5], dx[7], dx[13], dx[15]), (1.0, 1.0, 1.0, 1.0));
        /// // Kernel 3, stride 2, padding 1: windows overlap the border.
        /// let y = x.try_max_pool2d(&MaxPool2dOptions::new(3).stride(2).padding(1))?;
        /// assert_eq!(y.value().to_f64_vec(), vec![6.0, 8.0, 14.0, 16.0]);
        /// assert!(x.try_max_pool2d(&MaxPool2dOptions::new(2).padding(2)).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_max_pool2d / max_pool2d(&self, options: &MaxPool2dOptions) -> Var<'g> {
            // Without a backward to come, the argmax indices are not needed.
            let op = if self.requires_grad() && self.graph().is_recording() {
                MaxPool2d::new(options.clone())
            } else {
                MaxPool2d::values_only(options.clone())
            };
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
    fn values_ties_padding_and_dilation() {
        let g = Graph::new();
        let x =
            g.variable(Tensor::from_vec(vec![1.0, 2.0, 2.0, 0.0, -1.0, 5.0], &[1, 2, 3]).unwrap());
        // Kernel [1, 2] with stride 1: the tie at positions 1, 2 goes to 1.
        let y = x.max_pool2d(&MaxPool2dOptions::new([1, 2]).stride(1));
        assert_eq!(y.value().to_f64_vec(), vec![2.0, 2.0, 0.0, 5.0]);
        let dx = y.sum().backward().unwrap().wrt(&x).to_f64_vec();
        assert_eq!(dx, vec![0.0, 2.0, 0.0, 1.0, 0.0, 1.0]);
        // Dilation 2 on a row: taps 0 and 2.
        let y = x.max_pool2d(&MaxPool2dOptions::new([1, 2]).stride(1).dilation([1, 2]));
        assert_eq!(y.value().to_f64_vec(), vec![2.0, 5.0]);
        // Padding is ignored (as -inf), not zero.
        let neg =
            g.variable(Tensor::from_vec(vec![-3.0, -1.0, -2.0, -4.0], &[1, 1, 2, 2]).unwrap());
        let y = neg.max_pool2d(&MaxPool2dOptions::new(2).stride(1).padding(1));
        assert_eq!(
            y.value().to_f64_vec(),
            vec![-3.0, -1.0, -1.0, -2.0, -1.0, -1.0, -2.0, -2.0, -4.0]
        );
        // A window with no input position (dilation past the padding): -inf
        // and no gradient, as PyTorch.
        let opts = MaxPool2dOptions::new(2).stride(1).padding(1).dilation(3);
        let y = neg.max_pool2d(&opts);
        assert_eq!(y.value().to_f64_vec(), vec![f64::NEG_INFINITY]);
        let dx = (&y * 0.0).sum().backward().unwrap().wrt(&neg).to_f64_vec();
        assert_eq!(dx, vec![0.0; 4]);
        // ceil_mode keeps a last partial window.
        let z = g.variable(Tensor::from_vec((0..25).map(f64::from).collect(), &[1, 5, 5]).unwrap());
        assert_eq!(z.max_pool2d(&MaxPool2dOptions::new(2)).shape(), &[1, 2, 2]);
        let c = z.max_pool2d(&MaxPool2dOptions::new(2).ceil_mode(true));
        assert_eq!(
            c.value().to_f64_vec(),
            vec![6.0, 8.0, 9.0, 16.0, 18.0, 19.0, 21.0, 23.0, 24.0]
        );
        // Registry: kernel 2, stride 2.
        let via = g.apply("max_pool2d", &[&z]).unwrap();
        assert_eq!(via.value().to_f64_vec(), vec![6.0, 8.0, 16.0, 18.0]);
        // f32 agrees.
        let z32 = g.variable(z.value().to_dtype(DType::F32));
        assert_eq!(
            z32.max_pool2d(&MaxPool2dOptions::new(2)).value().dtype(),
            DType::F32
        );
    }

    /// A random configuration and an input with distinct values.
    fn random_case(rng: &mut ChaCha8Rng) -> (MaxPool2dOptions, Tensor) {
        loop {
            let k = [rng.random_range(1..4), rng.random_range(1..4)];
            let opts = MaxPool2dOptions::new(k)
                .stride([rng.random_range(1..4), rng.random_range(1..4)])
                .padding([
                    rng.random_range(0..=k[0] / 2),
                    rng.random_range(0..=k[1] / 2),
                ])
                .dilation([rng.random_range(1..3), rng.random_range(1..3)])
                .ceil_mode(rng.random_bool(0.5));
            let shape = [
                rng.random_range(1..3),
                rng.random_range(1..3),
                rng.random_range(3..7),
                rng.random_range(3..7),
            ];
            let x = distinct(&shape, rng.random());
            if opts.geometry("max_pool2d", &x).is_ok() {
                return (opts, x);
            }
        }
    }

    /// Where nothing requires grad the forward skips the indices: the same
    /// bits as the forward that keeps them, ties, signed zeros and NaNs
    /// included, on the 2x2 fast path and on random configurations.
    #[test]
    fn the_values_only_forward_matches_the_indexed_one() {
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let special = [
            0.0,
            -0.0,
            1.0,
            1.0,
            -1.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let mut cases = vec![
            (MaxPool2dOptions::new(2), [2, 3, 6, 10]),
            (MaxPool2dOptions::new(2), [1, 2, 7, 33]),
        ];
        for _ in 0..12 {
            let (opts, x) = random_case(&mut rng);
            cases.push((
                opts,
                [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]],
            ));
        }
        for (opts, shape) in cases {
            let n: usize = shape.iter().product();
            let data: Vec<f64> = (0..n)
                .map(|_| {
                    if rng.random_bool(0.5) {
                        special[rng.random_range(0..special.len())]
                    } else {
                        rng.random_range(-2..3) as f64
                    }
                })
                .collect();
            for dtype in [DType::F32, DType::F64] {
                let x = Tensor::from_vec(data.clone(), &shape)
                    .unwrap()
                    .to_dtype(dtype);
                let g = Graph::new();
                let kept = g.variable(x.clone()).max_pool2d(&opts);
                let plain = crate::Var::from(x).max_pool2d(&opts);
                let bits = |t: &Tensor| {
                    t.to_f64_vec()
                        .iter()
                        .map(|v| v.to_bits())
                        .collect::<Vec<_>>()
                };
                assert_eq!(
                    bits(kept.value()),
                    bits(plain.value()),
                    "{opts:?} {shape:?} {dtype}"
                );
            }
        }
    }

    #[test]
    fn gradients_and_tangents_over_random_configurations() {
        let mut rng = ChaCha8Rng::seed_from_u64(16);
        for _ in 0..12 {
            let (opts, x) = random_case(&mut rng);
            gradcheck(|v| v[0].try_max_pool2d(&opts), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            jvpcheck(|v| v[0].try_max_pool2d(&opts), &[x.clone()])
                .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
            // A nonlinear use of the pooled value, and two consumers of x.
            gradcheck(
                |v| Ok(&v[0].try_max_pool2d(&opts)?.tanh().sum() * &v[0].sum()),
                &[x],
            )
            .unwrap_or_else(|e| panic!("{opts:?}: {e}"));
        }
    }

    #[test]
    fn backward_ops_are_differentiable() {
        let opts = example_options();
        let x = distinct(&SAMPLE_SHAPE, 3);
        let g = smooth(&example_out_shape(), 3);
        let back = MaxPool2dBackward {
            opts: opts.clone(),
            indices: None,
        };
        derivatives_agree(&back, &[g, x.clone()]).unwrap();
        let gat = MaxPool2dGather {
            opts,
            indices: None,
        };
        let t = smooth(&SAMPLE_SHAPE, 4);
        derivatives_agree(&gat, &[t, x]).unwrap();
    }

    #[test]
    fn saved_indices_are_used_only_for_their_own_output() {
        let op = MaxPool2d::new(MaxPool2dOptions::new(2));
        let a = Tensor::from_vec(vec![1.0, 4.0, 3.0, 2.0], &[1, 1, 2, 2]).unwrap();
        let b = Tensor::from_vec(vec![5.0, 4.0, 3.0, 2.0], &[1, 1, 2, 2]).unwrap();
        let ya = op.forward(&[&a]).unwrap();
        assert_eq!(*op.indices_for(&a, &ya).unwrap(), vec![1]);
        let yb = op.forward(&[&b]).unwrap();
        // The latest forward is b's: a's output no longer matches the tag.
        assert_eq!(*op.indices_for(&b, &yb).unwrap(), vec![0]);
        assert_eq!(*op.indices_for(&a, &ya).unwrap(), vec![1]);
        // The saved indices really are used: a (wrong) input with the right output tag.
        assert_eq!(*op.indices_for(&a, &yb).unwrap(), vec![0]);
        // A shared instance through the registry, in two graphs at once.
        let g1 = Graph::new();
        let g2 = Graph::new();
        let (xa, xb) = (g1.variable(a.clone()), g2.variable(b.clone()));
        let (pa, pb) = (
            g1.apply("max_pool2d", &[&xa]).unwrap(),
            g2.apply("max_pool2d", &[&xb]).unwrap(),
        );
        assert_eq!(
            pa.sum().backward().unwrap().wrt(&xa).to_f64_vec(),
            vec![0.0, 1.0, 0.0, 0.0]
        );
        assert_eq!(
            pb.sum().backward().unwrap().wrt(&xb).to_f64_vec(),
            vec![1.0, 0.0, 0.0, 0.0]
        );
    }

    #[test]
    fn second_derivatives_through_a_nonlinearity() {
        // H v of sum(tanh(pool(x))^2 * w) by reverse-over-reverse, against
        // central differences of first-order gradients.
        let x = distinct(&[1, 2, 5, 4], 9);
        let opts = MaxPool2dOptions::new(2).stride(1).padding(1);
        fn f<'g>(v: &Var<'g>, opts: &MaxPool2dOptions) -> Result<Var<'g>> {
            let y = v.try_max_pool2d(opts)?.tanh();
            Ok((&y * &y * &y.sin()).sum())
        }
        let dir = smooth(x.shape(), 1);
        let hv = crate::hessian_vector_product(|v| f(v, &opts), &x, &dir)
            .unwrap()
            .to_f64_vec();
        let grad_at = |s: f64| {
            let shifted: Vec<f64> = x
                .to_f64_vec()
                .iter()
                .zip(dir.to_f64_vec())
                .map(|(a, d)| a + s * d)
                .collect();
            let g = Graph::new();
            let xv = g.variable(Tensor::from_vec(shifted, x.shape()).unwrap());
            f(&xv, &opts)
                .unwrap()
                .backward()
                .unwrap()
                .wrt(&xv)
                .to_f64_vec()
        };
        let eps = 1e-6;
        let (plus, minus) = (grad_at(eps), grad_at(-eps));
        assert!(hv.iter().any(|v| v.abs() > 1e-3));
        for ((p, m), a) in plus.iter().zip(&minus).zip(&hv) {
            let numeric = (p - m) / (2.0 * eps);
            assert!(
                (a - numeric).abs() <= 1e-6 + 1e-4 * numeric.abs(),
                "{a} vs {numeric}"
            );
        }
    }

    #[test]
    fn bad_inputs_name_the_op() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[1, 1, 3, 3], DType::F64).unwrap());
        for bad in [
            MaxPool2dOptions::new(4),
            MaxPool2dOptions::new(2).stride(0),
            MaxPool2dOptions::new(2).padding(2),
            MaxPool2dOptions::new(0),
        ] {
            let e = x.try_max_pool2d(&bad).unwrap_err();
            assert!(
                matches!(
                    e,
                    Error::InvalidArgument {
                        op: "max_pool2d",
                        ..
                    }
                ),
                "{e}"
            );
            assert!(e.to_string().contains("[1, 1, 3, 3]"), "{e}");
        }
        let flat = g.variable(Tensor::zeros(&[3, 3], DType::F64).unwrap());
        assert!(flat.try_max_pool2d(&MaxPool2dOptions::new(2)).is_err());
        let x32 = Tensor::zeros(&[1, 1, 2, 2], DType::F32).unwrap();
        let g64 = Tensor::zeros(&[1, 1, 1, 1], DType::F64).unwrap();
        let back = MaxPool2dBackward {
            opts: MaxPool2dOptions::new(2),
            indices: None,
        };
        assert!(matches!(
            back.forward(&[&g64, &x32]),
            Err(Error::DTypeMismatch { .. })
        ));
        let g32 = Tensor::zeros(&[1, 1, 2, 1], DType::F32).unwrap();
        assert!(matches!(
            back.forward(&[&g32, &x32]),
            Err(Error::ShapeMismatch { .. })
        ));
        // Empty batch: an empty result and gradient.
        let e = g.variable(Tensor::zeros(&[0, 2, 4, 4], DType::F64).unwrap());
        let y = e.max_pool2d(&MaxPool2dOptions::new(2));
        assert_eq!(y.shape(), &[0, 2, 2, 2]);
        assert_eq!(y.sum().backward().unwrap().wrt(&e).shape(), &[0, 2, 4, 4]);
    }
}
