//! Sub-ranges and padding: `slice` (with `narrow` on top), its gradient
//! `slice_backward`, and `constant_pad_nd` (PyTorch's `F.pad` in constant
//! mode). Each op's gradient is another op of this file, so every one can be
//! differentiated again: the gradient of a slice scatters into zeros, and the
//! gradient of a pad is the pad with negated amounts (a crop).

use crate::base::fallible::fallible;
use crate::ops::declare_op;
use smallvec::SmallVec;

use super::{FastBackward, Node, StructuredOp};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{sample_tensor, BatchContext, Batched, OpFacts};
use crate::kernels::layout;
use crate::tensor::shape::{normalize_axis, Dims};
use crate::tensor::Tensor;

/// Every `step`-th element of `start..end` along `dim` (PyTorch's `slice`,
/// `x[..., start:end:step]`). Negative bounds count from the end and bounds
/// are clamped to the dimension, as in Python slicing; `step` must be >= 1.
#[derive(Clone, Copy, Debug)]
pub struct Slice {
    /// The dimension sliced (negative counts from the end).
    pub dim: isize,
    /// First position.
    pub start: isize,
    /// End position (exclusive).
    pub end: isize,
    /// Distance between taken positions (>= 1).
    pub step: usize,
}

impl Default for Slice {
    /// The whole of dimension 0.
    fn default() -> Self {
        Slice {
            dim: 0,
            start: 0,
            end: isize::MAX,
            step: 1,
        }
    }
}

/// A slice resolved against a shape: dimension, first position, count, step.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Range {
    dim: usize,
    start: usize,
    len: usize,
    step: usize,
}

impl Slice {
    fn resolve(&self, shape: &[usize]) -> Result<Range> {
        if self.step == 0 {
            return Err(Error::invalid("slice", "step must be at least 1"));
        }
        let dim = normalize_axis("slice", self.dim, shape.len())?;
        let size = shape[dim] as isize;
        let clamp = |p: isize| if p < 0 { p.saturating_add(size) } else { p }.clamp(0, size);
        let (start, end) = (clamp(self.start), clamp(self.end));
        let len = if end > start {
            ((end - start) as usize).div_ceil(self.step)
        } else {
            0
        };
        Ok(Range {
            dim,
            start: start as usize,
            len,
            step: self.step,
        })
    }
}

impl StructuredOp for Slice {
    declare_op!("slice"(input), linear[0], settings(int dim, int start, int end, int step));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let r = self.resolve(inputs[0].shape())?;
        Ok(inputs[0].slice_dim(r.dim, r.start, r.len, r.step))
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let shape = n.x(0).shape();
        let r = self.resolve(shape)?;
        let op = SliceBackward {
            shape: Dims::from_slice(shape),
            dim: r.dim,
            start: r.start,
            step: r.step,
        };
        g.graph().record(op, &[g])
    }
    // The first slice of a tensor to be reached scatters into zeros; the
    // next ones add into that buffer in place (`backward`'s sum, without a
    // zero-filled tensor per slice).
    fn backward_accumulate(
        &self,
        call: FastBackward<'_>,
        acc: &mut Option<Tensor>,
    ) -> Result<bool> {
        let (g, input) = (call.g, call.x[0]);
        let r = self.resolve(input.shape())?;
        match acc {
            Some(acc) => layout::slice_backward_add(acc, g, r.dim, r.start, r.step),
            None => {
                *acc = Some(layout::slice_backward(
                    g,
                    input.shape(),
                    r.dim,
                    r.start,
                    r.step,
                )?);
                Ok(true)
            }
        }
    }
    // The same range of the same example axis (its size is the same in
    // every example), one past the batch.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let r = self.resolve(x[0].example_shape())?;
        let op = Slice {
            dim: r.dim as isize + 1,
            ..*self
        };
        Ok(Batched::along_batch(
            x[0].value.graph().record(op, &[&x[0].value])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        let example = Slice {
            dim: 1,
            start: 0,
            end: 3,
            step: 2,
        };
        linear_facts(example, |seed| vec![sample_tensor(&[2, 4], seed, 1.0)])
    }
}

/// The facts of an op of this file: linear (or affine), so its tangent and
/// second derivative come with it; an example instance and sample inputs.
fn linear_facts(example: impl crate::Differentiable, sample: crate::core::SampleInputs) -> OpFacts {
    OpFacts::differentiable(Some(1), std::sync::Arc::new(example), sample)
}

/// The gradient of [`Slice`]: zeros of the sliced input's `shape` with the
/// input written at `start, start + step, ...` along `dim`.
#[derive(Clone, Debug, Default)]
pub struct SliceBackward {
    /// The shape of the sliced tensor.
    pub shape: Dims,
    /// The dimension that was sliced.
    pub dim: usize,
    /// The first position taken.
    pub start: usize,
    /// The step between positions.
    pub step: usize,
}

impl StructuredOp for SliceBackward {
    declare_op!("slice_backward"(grad_output), linear[0], settings(ints shape, int dim, int start, int step));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        layout::slice_backward(inputs[0], &self.shape, self.dim, self.start, self.step)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        self.take(g, n.x(0).shape())
    }
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let mut shape = Dims::from_slice(&[ctx.size]);
        shape.extend_from_slice(&self.shape);
        let op = SliceBackward {
            shape,
            dim: self.dim + 1,
            ..self.clone()
        };
        Ok(Batched::along_batch(
            x[0].value.graph().record(op, &[&x[0].value])?,
        ))
    }
    fn facts(&self) -> OpFacts {
        let example = SliceBackward {
            shape: Dims::from_slice(&[2, 4]),
            dim: 1,
            start: 0,
            step: 2,
        };
        linear_facts(example, |seed| vec![sample_tensor(&[2, 2], seed, 1.0)])
    }
}

impl SliceBackward {
    /// The slice of `g` this op scattered from (`like` is that slice's shape).
    fn take<'g>(&self, g: &Var<'g>, like: &[usize]) -> Result<Var<'g>> {
        let len = like[self.dim];
        let start = self.start as isize;
        let op = Slice {
            dim: self.dim as isize,
            start,
            end: start + (len * self.step) as isize,
            step: self.step,
        };
        g.graph().record(op, &[g])
    }
}

/// Pads with a constant (PyTorch's `constant_pad_nd` / `F.pad(..., value=v)`):
/// `pads` holds `(before, after)` pairs starting from the last dimension;
/// negative amounts crop.
#[derive(Clone, Debug, Default)]
pub struct ConstantPad {
    /// Amounts, two per dimension, last dimension first.
    pub pads: SmallVec<[isize; 8]>,
    /// The value written into new positions.
    pub value: f64,
}

impl ConstantPad {
    /// `(before, after)` for every dimension of a tensor of rank `rank`, in order.
    fn per_dim(&self, rank: usize) -> Result<Vec<(isize, isize)>> {
        if !self.pads.len().is_multiple_of(2) || self.pads.len() > 2 * rank {
            return Err(Error::invalid(
                "constant_pad_nd",
                format!(
                    "{} padding amounts for a tensor of rank {rank} (need an even count, at most {})",
                    self.pads.len(),
                    2 * rank
                ),
            ));
        }
        let mut pairs = vec![(0, 0); rank];
        for (i, pair) in self.pads.chunks(2).enumerate() {
            pairs[rank - 1 - i] = (pair[0], pair[1]);
        }
        Ok(pairs)
    }
}

impl StructuredOp for ConstantPad {
    declare_op!("constant_pad_nd"(input), settings(ints pads, float value));
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let pairs = self.per_dim(inputs[0].rank())?;
        layout::pad(Self::NAME, inputs[0], &pairs, self.value)
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        let crop: SmallVec<[isize; 8]> = self.pads.iter().map(|&p| -p).collect();
        g.try_pad(&crop, 0.0)
    }
    // Linear but for the constant: the tangent pads with zeros.
    fn tangent<'g>(&self, _: usize, t: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        t.try_pad(&self.pads, 0.0)
    }
    // Amounts count from the last axis and cover at most an example's
    // axes, so the batch axis in front is left as it is.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        let out = x[0].value.graph().record(self.clone(), &[&x[0].value])?;
        Ok(Batched::along_batch(out))
    }
    fn facts(&self) -> OpFacts {
        let example = ConstantPad {
            pads: SmallVec::from_slice(&[1, 2]),
            value: 0.5,
        };
        linear_facts(example, |seed| vec![sample_tensor(&[2, 3], seed, 1.0)])
    }
}

register_defaults!(Slice, SliceBackward, ConstantPad);

impl<'g> Var<'g> {
    fallible! {
        /// Every `step`-th element of `start..end` along `dim`: Python's
        /// `x[..., start:end:step]`. Negative `start`/`end` count from the end;
        /// out-of-range bounds are clamped (an empty range gives size 0); `step`
        /// must be at least 1.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec((0..10).map(f64::from).collect(), &[2, 5])?);
        /// let y = x.try_slice(1, 1, -1, 2)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![1.0, 3.0, 6.0, 8.0]);
        /// assert_eq!(x.try_slice(1, 3, 100, 1)?.shape(), &[2, 2]);
        /// assert!(x.try_slice(2, 0, 1, 1).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_slice / slice(&self, dim: isize, start: isize, end: isize, step: usize) -> Var<'g> {
            let op = Slice {
                dim,
                start,
                end,
                step,
            };
            let r = op.resolve(self.shape())?;
            if r.start == 0 && r.len == self.shape()[r.dim] {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }

    fallible! {
        /// `len` consecutive elements from `start` along `dim` (PyTorch's
        /// `narrow`; recorded as a `slice`). A negative `start` counts from the
        /// end; unlike `slice`, a range past the end is an error.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[4])?);
        /// assert_eq!(x.try_narrow(0, 1, 2)?.value().to_f64_vec(), vec![2.0, 3.0]);
        /// assert_eq!(x.try_narrow(0, -1, 1)?.value().to_f64_vec(), vec![4.0]);
        /// assert!(x.try_narrow(0, 3, 2).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_narrow / narrow(&self, dim: isize, start: isize, len: usize) -> Var<'g> {
            let d = normalize_axis("narrow", dim, self.shape().len())?;
            let size = self.shape()[d];
            let s = if start < 0 {
                start + size as isize
            } else {
                start
            };
            if s < 0 || s as usize > size {
                return Err(Error::IndexOutOfRange {
                    op: "narrow",
                    index: start as i64,
                    size,
                });
            }
            if len > size - s as usize {
                return Err(Error::invalid(
                    "narrow",
                    format!("start {start} + length {len} exceeds dimension {dim} of size {size}"),
                ));
            }
            self.try_slice(d as isize, s, s + len as isize, 1)
        }
    }

    fallible! {
        /// Pads with `value` (PyTorch's `F.pad` in constant mode): `pads` holds
        /// `(before, after)` pairs from the last dimension backwards, so
        /// `[1, 2]` pads the last dimension by 1 before and 2 after, and
        /// `[0, 0, 1, 1]` pads the second-to-last by 1 on each side. Negative
        /// amounts crop.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?);
        /// let y = x.try_pad(&[1, 0, 0, 1], 0.0)?;
        /// assert_eq!(y.shape(), &[3, 3]);
        /// assert_eq!(y.value().to_f64_vec(), vec![0.0, 1.0, 2.0, 0.0, 3.0, 4.0, 0.0, 0.0, 0.0]);
        /// assert_eq!(x.try_pad(&[0, -1], 0.0)?.value().to_f64_vec(), vec![1.0, 3.0]);
        /// assert!(x.try_pad(&[1], 0.0).is_err());
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_pad / pad(&self, pads: &[isize], value: f64) -> Var<'g> {
            let op = ConstantPad {
                pads: SmallVec::from_slice(pads),
                value,
            };
            op.per_dim(self.shape().len())?;
            if pads.iter().all(|&p| p == 0) {
                return Ok(self.clone());
            }
            self.graph().record(op, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{gradcheck, jvpcheck, DType, Error, Graph, Tensor};

    fn vals(shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        Tensor::from_vec((0..n).map(|i| (i as f64 * 0.61).cos()).collect(), shape).unwrap()
    }

    #[test]
    fn forward_values() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec((0..12).map(f64::from).collect(), &[3, 4]).unwrap());
        assert_eq!(
            x.slice(0, -2, 3, 1).value().to_f64_vec(),
            (4..12).map(f64::from).collect::<Vec<_>>()
        );
        assert_eq!(
            x.slice(-1, 0, 4, 3).value().to_f64_vec(),
            vec![0.0, 3.0, 4.0, 7.0, 8.0, 11.0]
        );
        assert_eq!(x.slice(1, 3, 1, 1).shape(), &[3, 0]);
        assert_eq!(x.slice(1, -100, 100, 1).shape(), &[3, 4]);
        assert_eq!(
            x.narrow(0, 1, 1).value().to_f64_vec(),
            vec![4.0, 5.0, 6.0, 7.0]
        );
        let p = x.pad(&[0, 0, 1, 0], -1.0);
        assert_eq!(p.shape(), &[4, 4]);
        assert_eq!(p.value().to_f64_vec()[..5], [-1.0, -1.0, -1.0, -1.0, 0.0]);
        let c = x.pad(&[-1, -1, -1, 0], 0.0);
        assert_eq!(c.value().to_f64_vec(), vec![5.0, 6.0, 9.0, 10.0]);
    }

    #[test]
    fn errors_are_typed() {
        let g = Graph::new();
        let x = g.variable(Tensor::zeros(&[3, 4], DType::F32).unwrap());
        assert!(matches!(
            x.try_slice(0, 0, 1, 0),
            Err(Error::InvalidArgument { op: "slice", .. })
        ));
        assert!(matches!(
            x.try_slice(-3, 0, 1, 1),
            Err(Error::AxisOutOfRange { op: "slice", .. })
        ));
        assert!(matches!(
            x.try_narrow(1, -5, 1),
            Err(Error::IndexOutOfRange { op: "narrow", .. })
        ));
        assert!(x.try_narrow(1, 2, 3).is_err());
        assert!(x.try_pad(&[1, 2, 3, 4, 5, 6], 0.0).is_err());
        assert!(x.try_pad(&[0, -5], 0.0).is_err());
        let s = g.variable(Tensor::scalar(1.0));
        assert!(s.try_slice(0, 0, 1, 1).is_err());
    }

    #[test]
    fn gradients_and_tangents() {
        let x = vals(&[3, 5]);
        gradcheck(|v| v[0].try_slice(1, 1, 5, 2), std::slice::from_ref(&x)).unwrap();
        gradcheck(
            |v| Ok(v[0].try_narrow(0, 1, 2)?.tanh()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        gradcheck(
            |v| v[0].try_pad(&[1, -2, 0, 1], 0.5),
            std::slice::from_ref(&x),
        )
        .unwrap();
        // Two consumers: a slice of x times another slice of x.
        gradcheck(
            |v| Ok(v[0].try_narrow(1, 0, 2)? * v[0].try_slice(1, 3, 5, 1)?),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(
            |v| Ok(v[0].try_slice(0, 0, 3, 2)?.exp()),
            std::slice::from_ref(&x),
        )
        .unwrap();
        jvpcheck(|v| v[0].try_pad(&[2, 1], 0.0), std::slice::from_ref(&x)).unwrap();
    }

    #[test]
    fn slices_add_into_one_gradient() {
        use crate::ops::testing::fast_path_agrees;
        // Overlapping and strided slices of one tensor (the first reached
        // scatters into zeros, the rest add in place), a slice whose input
        // also has a dense consumer (the accumulated buffer then comes from
        // elsewhere), and q/k/v-style heads of a permuted view.
        let x = vals(&[4, 6]);
        fast_path_agrees(
            |v| {
                let a = v[0].try_slice(1, 0, 6, 2)?;
                let b = v[0].try_slice(1, 1, 4, 1)?;
                let c = v[0].try_narrow(0, 1, 2)?;
                Ok(a.sum() * b.tanh().sum() + c.exp().sum())
            },
            std::slice::from_ref(&x),
        )
        .unwrap();
        fast_path_agrees(
            |v| Ok(v[0].exp() + v[0].try_narrow(1, 2, 3)?.sin().try_pad(&[2, 1], 0.0)?),
            std::slice::from_ref(&x),
        )
        .unwrap();
        let qkv = vals(&[2, 3, 12]).to_dtype(DType::F32);
        fast_path_agrees(
            |v| {
                let all = v[0]
                    .try_reshape(&[2, 3, 3, 2, 2])?
                    .try_permute(&[2, 0, 3, 1, 4])?;
                let pick = |i: isize| all.try_narrow(0, i, 1)?.try_squeeze_dim(0);
                let (q, k, w) = (pick(0)?, pick(1)?, pick(2)?);
                Ok(q.tanh() * k.exp() + w.sin())
            },
            &[qkv],
        )
        .unwrap();
        // The same sums bit for bit as the Var-level path, in f32 too.
        let g = Graph::new();
        let x = g.variable(vals(&[3, 4]).to_dtype(DType::F32));
        let y = x.try_narrow(1, 0, 2).unwrap().sum() + x.try_narrow(1, 1, 3).unwrap().exp().sum();
        let fast = y.backward().unwrap().wrt(&x);
        let slow = y
            .backward_with_options(&crate::BackwardOptions::new().fast_path(false))
            .unwrap()
            .wrt(&x);
        assert_eq!(fast.to_vec::<f32>().unwrap(), slow.to_vec::<f32>().unwrap());
    }

    #[test]
    fn gradient_ops_are_differentiable() {
        // slice_backward and a cropping pad, each differentiated again.
        let g = vals(&[3, 2]);
        fn scatter<'g>(v: &[crate::Var<'g>]) -> crate::Result<crate::Var<'g>> {
            let op = super::SliceBackward {
                shape: smallvec::smallvec![3, 5],
                dim: 1,
                start: 1,
                step: 3,
            };
            v[0].graph().record(op, &[&v[0]])
        }
        gradcheck(|v| Ok(scatter(v)?.tanh()), std::slice::from_ref(&g)).unwrap();
        jvpcheck(scatter, std::slice::from_ref(&g)).unwrap();
        gradcheck(|v| Ok(v[0].try_pad(&[-1, 0], 0.0)?.exp()), &[g]).unwrap();
    }

    #[test]
    fn f32_and_registry() {
        let g = Graph::new();
        let x = g.variable(Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3]).unwrap());
        let y = g.apply("slice", &[&x]).unwrap();
        assert_eq!(y.value().to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0]);
        let z = x.pad(&[1, 1], 0.5);
        assert_eq!(
            z.value().to_vec::<f32>().unwrap(),
            vec![0.5, 1.0, 2.0, 3.0, 0.5]
        );
        let grad = (&z * &z).sum().backward().unwrap().wrt(&x);
        assert_eq!(grad.to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
        assert_eq!(x.narrow(0, 1, 2).dtype(), DType::F32);
    }
}
