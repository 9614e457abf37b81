//! What the 2-d poolings share: the checks of an `[N, C, H, W]` or
//! `[C, H, W]` input, the sliding ([`Sliding`]) and adaptive windows, the
//! window plan handed to the kernels (`kernels::nn::pool`), the facts
//! and sample inputs of the structured suites, and the batching rule
//! ([`batch_planes`]).

use std::sync::Arc;

use rand::seq::SliceRandom;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::super::spatial::{check_rank, check_same_dtype, Spatial, Window};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::OpAttributes;
use crate::core::{BatchContext, Batched};
use crate::kernels::nn::pool::{Axis, Plan2d};
use crate::ops::batching::{fold, materialize, unfold};
use crate::ops::{Differentiable, OpFacts};
use crate::tensor::shape::checked_numel;
use crate::tensor::{Dims, Tensor};

/// Where a pooling's windows fall on an input.
#[derive(Clone, Debug)]
pub(super) struct Geometry {
    /// `[N, C, OH, OW]` or `[C, OH, OW]`.
    pub out_shape: Dims,
    /// `N * C` (or `C`).
    pub planes: usize,
    /// The windows (empty when there are no planes).
    pub plan: Plan2d,
}

impl Geometry {
    /// The plan of `planes` planes whose windows along dim `d` (0: rows,
    /// 1: columns) are `axis(d)`.
    fn of(out_shape: Dims, planes: usize, axis: impl Fn(usize) -> Axis) -> Geometry {
        Geometry {
            out_shape,
            planes,
            plan: Plan2d {
                rows: axis(0),
                cols: axis(1),
            },
        }
    }

    /// Checks that `g` is the gradient of this pooling's output: its shape
    /// and `x`'s dtype.
    pub(super) fn check_output_like(&self, op: &'static str, g: &Tensor, x: &Tensor) -> Result<()> {
        check_same_dtype(op, x, g)?;
        if g.shape() != self.out_shape.as_slice() {
            return Err(Error::shape_mismatch(op, &self.out_shape, g.shape()));
        }
        Ok(())
    }
}

/// The input of a 2-d pooling: `[N, C, H, W]` or `[C, H, W]` with non-zero
/// `C`, `H` and `W` (PyTorch's check). Returns the leading dims, the plane
/// count and `(H, W)`.
fn planes_of(op: &'static str, x: &Tensor) -> Result<(Dims, usize, [usize; 2])> {
    let batched = check_rank(op, x, 2, true)?;
    let s = x.shape();
    let lead = usize::from(batched);
    if s[lead..].contains(&0) {
        return Err(Error::invalid(
            op,
            format!("expected non-zero channel and spatial sizes, got input shape {s:?}"),
        ));
    }
    let hw = [s[s.len() - 2], s[s.len() - 1]];
    if hw[0]
        .checked_mul(hw[1])
        .is_none_or(|n| n >= u32::MAX as usize)
    {
        return Err(Error::invalid(
            op,
            format!(
                "an input plane of {} x {} elements is too large",
                hw[0], hw[1]
            ),
        ));
    }
    let prefix = Dims::from_slice(&s[..s.len() - 2]);
    let planes = checked_numel(op, &prefix)?;
    Ok((prefix, planes, hw))
}

/// The output shape `prefix ++ out`, checked.
fn out_shape(op: &'static str, prefix: &Dims, out: [usize; 2]) -> Result<Dims> {
    let mut shape = prefix.clone();
    shape.extend_from_slice(&out);
    checked_numel(op, &shape)?;
    Ok(shape)
}

/// PyTorch's sliding windows: `kernel_size`, `stride` (default: the
/// kernel size), `padding` (at most half the kernel), `dilation`,
/// `ceil_mode`. Each sliding pooling's options hold one and add their own
/// settings; [`sliding_window_setters!`] writes their shared builders.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Sliding {
    pub kernel: [usize; 2],
    pub stride: Option<[usize; 2]>,
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub ceil_mode: bool,
}

/// The builder methods every sliding pooling's options share, over their
/// `window: Sliding` field: `stride`, `ceil_mode`, `kernel_size`,
/// `stride_size`.
macro_rules! sliding_window_setters {
    () => {
        /// The step between windows (default: the kernel size).
        pub fn stride(mut self, stride: impl Spatial<2>) -> Self {
            self.window.stride = Some(stride.spatial());
            self
        }
        /// Whether a last, partial window is kept (output sizes rounded up).
        pub fn ceil_mode(mut self, ceil_mode: bool) -> Self {
            self.window.ceil_mode = ceil_mode;
            self
        }
        /// The kernel size.
        pub fn kernel_size(&self) -> [usize; 2] {
            self.window.kernel
        }
        /// The stride in effect.
        pub fn stride_size(&self) -> [usize; 2] {
            self.window.stride_size()
        }
    };
}
pub(super) use sliding_window_setters;

impl Sliding {
    /// A `kernel` window with PyTorch's defaults for the rest.
    pub fn new(kernel: impl Spatial<2>) -> Self {
        Sliding {
            kernel: kernel.spatial(),
            stride: None,
            padding: [0; 2],
            dilation: [1; 2],
            ceil_mode: false,
        }
    }

    /// The stride in effect.
    pub fn stride_size(&self) -> [usize; 2] {
        self.stride.unwrap_or(self.kernel)
    }

    /// `kernel`, `stride` and `padding` by name, as every sliding
    /// pooling's attributes begin.
    pub fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .ints("kernel", &self.kernel)
            .ints("stride", &self.stride_size())
            .ints("padding", &self.padding)
    }

    /// The window plan for input `x`; `count_include_pad`: whether a
    /// window's divisor counts its padded positions (average pooling).
    pub fn geometry(
        &self,
        op: &'static str,
        x: &Tensor,
        count_include_pad: bool,
    ) -> Result<Geometry> {
        let (a, stride) = (self, self.stride_size());
        let (prefix, planes, hw) = planes_of(op, x)?;
        let mut out = [0; 2];
        for d in 0..2 {
            let (k, p, dil) = (a.kernel[d], a.padding[d], a.dilation[d]);
            if k > 0 && p > k / 2 {
                return Err(Error::invalid(
                    op,
                    format!(
                        "padding should be at most half of the kernel size, got padding {:?} for kernel {:?} (input shape {:?})",
                        a.padding,
                        a.kernel,
                        x.shape()
                    ),
                ));
            }
            let fits = dil
                .checked_mul(k.saturating_sub(1))
                .is_some_and(|s| s < usize::MAX)
                && p.checked_mul(2)
                    .and_then(|p2| p2.checked_add(hw[d]))
                    .is_some();
            if !fits {
                return Err(Error::invalid(
                    op,
                    format!(
                        "kernel {:?} with dilation {:?} and padding {:?} overflows (input shape {:?})",
                        a.kernel,
                        a.dilation,
                        a.padding,
                        x.shape()
                    ),
                ));
            }
            let window = Window {
                input: hw[d],
                kernel: k,
                stride: stride[d],
                pad_before: p,
                pad_after: p,
                dilation: dil,
            };
            out[d] = window.output_len(op, x.shape(), a.ceil_mode)?;
        }
        let out_shape = out_shape(op, &prefix, out)?;
        let axis = |d: usize| {
            // No planes: no windows to list (their count may be huge).
            let n = if planes == 0 { 0 } else { out[d] };
            Axis::sliding(
                hw[d],
                a.kernel[d],
                stride[d],
                a.padding[d],
                a.dilation[d],
                n,
                count_include_pad,
            )
        };
        Ok(Geometry::of(out_shape, planes, axis))
    }
}

/// The window plan of an adaptive average pooling to `out` on input `x`.
pub(super) fn adaptive(op: &'static str, x: &Tensor, out: [usize; 2]) -> Result<Geometry> {
    let (prefix, planes, hw) = planes_of(op, x)?;
    if out.contains(&0) {
        return Err(Error::invalid(
            op,
            format!(
                "output size must be > 0, got {out:?} (input shape {:?})",
                x.shape()
            ),
        ));
    }
    let out_shape = out_shape(op, &prefix, out)?;
    let axis = |d: usize| Axis::adaptive(hw[d], if planes == 0 { 0 } else { out[d] });
    Ok(Geometry::of(out_shape, planes, axis))
}

/// The batching rule of every pooling op (`op` a fresh instance: no saved
/// argmax positions, which belong to the first example's forward): a
/// pooling treats every leading axis as planes, so a batch of `[C, H, W]`
/// examples is already a valid `[N, C, H, W]` input, and a batch of
/// `[N, C, H, W]` examples is folded into `N` and back. Every input (the
/// pooled value, and for the backward ops the value it is read with) is
/// made batched, so the planes pair up.
pub(super) fn batch_planes<'g, O: Differentiable>(
    op: O,
    inputs: &[Batched<'g>],
    ctx: &BatchContext,
) -> Result<Batched<'g>> {
    let folded = inputs[0].example_rank() == 4;
    let values = inputs
        .iter()
        .map(|x| {
            let x = materialize(x, ctx)?;
            if folded {
                fold(&x)
            } else {
                Ok(x)
            }
        })
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Var<'g>> = values.iter().collect();
    let out = refs[0].graph().record(op, &refs)?;
    if folded {
        unfold(&out, ctx.size)
    } else {
        Ok(Batched::along_batch(out))
    }
}

/// The facts of a pooling op: every one has tangents and second
/// derivatives; they differ in their example and its sample inputs.
pub(super) fn facts(
    example: Arc<dyn Differentiable>,
    arity: usize,
    sample: fn(u64) -> Vec<Tensor>,
) -> OpFacts {
    OpFacts::differentiable(Some(arity), example, sample)
}

/// The shape of the structured suites' sample inputs.
pub(super) const SAMPLE_SHAPE: [usize; 4] = [2, 3, 7, 6];

/// Distinct values (a seeded permutation of `0.05 * k`, shifted to be
/// centred), so max pooling has no ties within finite-difference reach.
pub(super) fn distinct(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let mut v: Vec<f64> = (0..n).map(|k| (k as f64 - n as f64 / 2.0) * 0.05).collect();
    v.shuffle(&mut ChaCha8Rng::seed_from_u64(seed ^ 0x9001));
    Tensor::from_vec(v, shape).expect("a valid sample shape")
}

/// Smooth values from `seed`.
pub(super) fn smooth(shape: &[usize], seed: u64) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|k| ((k as f64 + 1.0) * 0.37 + seed as f64 * 1.3).sin() * 1.5)
        .collect();
    Tensor::from_vec(v, shape).expect("a valid sample shape")
}

#[cfg(test)]
mod tests {
    use super::super::options::{AvgPool2dOptions, MaxPool2dOptions};
    use super::*;
    use crate::DType;

    /// `x`'s gradient of `sum(max_pool(x)^2) + sum(avg_pool(x)^2)`,
    /// recorded, with the pooled values: the poolings and their backward
    /// ops.
    fn pooled_and_grad<'s>(v: &[crate::Var<'s>]) -> Result<Vec<crate::Var<'s>>> {
        use crate::{grad, GradOptions};
        let x = &v[0];
        let m = x.try_max_pool2d(&MaxPool2dOptions::new(3).stride(2).padding(1))?;
        let a = x.try_avg_pool2d(&AvgPool2dOptions::new(2).stride(1))?;
        let loss = &(&m * &m).sum() + &(&a * &a).sum();
        let dx = grad(&[&loss], &[x], &GradOptions::new().create_graph(true))?;
        Ok(vec![m, a, dx[0].clone()])
    }

    #[test]
    fn vmap_over_images_with_and_without_a_batch_axis() {
        use crate::autograd::VMap;
        // Examples [C, H, W] (the batch is the op's N) and [N, C, H, W]
        // (the batch folded into N).
        for shape in [vec![3, 2, 5, 6], vec![3, 2, 2, 5, 6]] {
            let xs = distinct(&shape, 4);
            let g = crate::Graph::new();
            let xv = g.variable(xs.clone());
            let got = VMap::new().try_call(pooled_and_grad, &[&xv]).unwrap();
            for e in 0..3 {
                let h = crate::Graph::new();
                let x = h.variable(xs.select(0, e).unwrap().contiguous());
                let want = pooled_and_grad(&[x]).unwrap();
                for (got, want) in got.iter().zip(&want) {
                    let got = got.value().select(0, e).unwrap().contiguous();
                    assert!(
                        got.allclose(want.value(), 1e-12, 1e-12),
                        "{shape:?}, example {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn bad_inputs_are_typed_errors_naming_the_op_and_shape() {
        let x = Tensor::zeros(&[1, 2, 5, 5], DType::F32).unwrap();
        let e = MaxPool2dOptions::new(2)
            .padding(2)
            .geometry("max_pool2d", &x)
            .unwrap_err();
        assert!(matches!(
            e,
            Error::InvalidArgument {
                op: "max_pool2d",
                ..
            }
        ));
        assert!(e.to_string().contains("[1, 2, 5, 5]"), "{e}");
        assert!(MaxPool2dOptions::new(6).geometry("m", &x).is_err());
        assert!(MaxPool2dOptions::new(2)
            .stride(0)
            .geometry("m", &x)
            .is_err());
        assert!(MaxPool2dOptions::new(0).geometry("m", &x).is_err());
        assert!(MaxPool2dOptions::new(2)
            .dilation(usize::MAX)
            .geometry("m", &x)
            .is_err());
        assert!(MaxPool2dOptions::new(usize::MAX)
            .padding(usize::MAX / 2)
            .geometry("m", &x)
            .is_err());
        let flat = Tensor::zeros(&[5, 5], DType::F32).unwrap();
        assert!(MaxPool2dOptions::new(2).geometry("m", &flat).is_err());
        let empty_c = Tensor::zeros(&[1, 0, 5, 5], DType::F32).unwrap();
        assert!(MaxPool2dOptions::new(2).geometry("m", &empty_c).is_err());
        assert!(AvgPool2dOptions::new(2)
            .divisor_override(Some(0))
            .geometry("a", &x)
            .is_err());
        assert!(adaptive("a", &x, [0, 2]).is_err());
        // Zero batch: fine, and no windows are listed even for huge planes.
        let none = Tensor::zeros(&[0, 1, 1 << 30, 1 << 1], DType::F32).unwrap();
        let g = MaxPool2dOptions::new(2).geometry("m", &none).unwrap();
        assert_eq!(g.out_shape.as_slice(), &[0, 1, 1 << 29, 1]);
        assert!(g.plan.rows.taps.is_empty());
        let g = adaptive("a", &none, [usize::MAX, 3]).unwrap();
        assert_eq!(g.planes, 0);
    }

    #[test]
    fn unbatched_inputs_and_samples() {
        let x = Tensor::zeros(&[3, 7, 6], DType::F64).unwrap();
        let g = MaxPool2dOptions::new(3)
            .stride(2)
            .padding(1)
            .dilation([1, 2])
            .ceil_mode(true)
            .geometry("m", &x)
            .unwrap();
        assert_eq!(g.out_shape.as_slice(), &[3, 4, 3]);
        assert_eq!(g.planes, 3);
        let d = distinct(&SAMPLE_SHAPE, 1).to_f64_vec();
        let mut s = d.clone();
        s.sort_by(f64::total_cmp);
        s.dedup();
        assert_eq!(s.len(), d.len());
    }
}
