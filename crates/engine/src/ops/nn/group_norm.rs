//! `group_norm` over `[N, C, *]`, PyTorch's `F.group_norm`: the channels
//! split into `G` groups, each `(sample, group)` normalised over its
//! `C/G · S` elements, then a per-channel affine. One fused forward kernel
//! (statistics per contiguous row, normalisation and affine in one write).
//!
//! Viewed as `[N, G, C/G · S]`, the normalisation is a layer norm over the
//! last dim, so the gradients reuse the fused, differentiable ops of
//! `layer_norm_backward.rs` on that view (reshapes share storage): the
//! input's gradient is `layer_norm_backward(g w)`, the weight's `Σ g x̂` and
//! the bias's `Σ g` per channel. Gradients of gradients and tangents follow
//! from those ops' own rules.

use std::sync::Arc;

use crate::base::fallible::fallible;

use super::batch_norm::{check_channel_affine, planes, sample};
use super::batch_norm_backward::{channel_sum, channel_view};
use super::layer_norm::LayerNorm;
use super::layer_norm_backward::project;
use super::normalization::{check_eps, first_input, record_affine, Affine, Role};
use crate::base::error::{Error, Result};
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::kernels::nn::batch_norm::{self as kernel, Planes};
use crate::ops::batching::{fold, unfold};
use crate::ops::rule::OpFacts;
use crate::ops::{Node, OpRegistry, StructuredOp};
use crate::tensor::{Dims, Tensor};

/// Group normalisation, PyTorch's `F.group_norm(x, num_groups, weight,
/// bias, eps)`. Inputs: `x` (`[N, C, *]`), then the weight and/or bias if
/// present (each `[C]`). The registry holds it with one group and
/// `eps = 1e-5`, the affine parameters inferred from the input count.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupNorm {
    num_groups: usize,
    eps: f64,
    affine: Affine,
}

impl Default for GroupNorm {
    fn default() -> Self {
        GroupNorm {
            num_groups: 1,
            eps: 1e-5,
            affine: Affine::FromInputs,
        }
    }
}

/// `x`'s layout, checked for `num_groups`, and the length of a group's row (`C/G · S`).
fn layout(op: &'static str, x: &Tensor, num_groups: usize) -> Result<(Planes, usize)> {
    let p = planes(op, x)?;
    if num_groups == 0 || p.c % num_groups != 0 {
        return Err(Error::invalid(
            op,
            format!(
                "num_groups ({num_groups}) must be > 0 and divide the number of channels ({}) of the input {:?}",
                p.c,
                x.shape()
            ),
        ));
    }
    Ok((p, p.c / num_groups * p.s))
}

impl GroupNorm {
    fn affine_of<'a, V>(&self, inputs: &'a [V]) -> Result<(Option<&'a V>, Option<&'a V>)> {
        self.affine.split("group_norm", 1, inputs)
    }

    /// `v` viewed as `[N, G, C/G · S]`, and the layer norm over its last dim.
    fn grouped<'g>(&self, v: &Var<'g>) -> Result<(Var<'g>, LayerNorm)> {
        let (p, row) = layout("group_norm", v.value(), self.num_groups)?;
        let view = v.try_reshape(&[p.n as isize, self.num_groups as isize, row as isize])?;
        Ok((view, LayerNorm::plain(&[row], self.eps)))
    }

    /// `σ P t` per (sample, group), in `x`'s shape.
    fn project<'g>(&self, t: &Var<'g>, x: &Var<'g>) -> Result<Var<'g>> {
        let (xv, _) = self.grouped(x)?;
        let (tv, _) = self.grouped(t)?;
        let row = Dims::from_slice(&xv.shape()[2..]);
        project(&tv, &xv, &row, self.eps)?.try_reshape(&signed(x.shape()))
    }

    /// `x̂` in `x`'s shape.
    fn xhat<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let (xv, plain) = self.grouped(x)?;
        x.graph()
            .record(plain, &[&xv])?
            .try_reshape(&signed(x.shape()))
    }
}

/// A per-channel parameter (`[C]`, or `[B, C]` batched) viewed to broadcast
/// against an `[N, C, *]` example of `rank` (batched: `[B, 1, C, 1, ...]`).
fn per_channel<'g>(p: &Batched<'g>, rank: usize) -> Result<Var<'g>> {
    if !p.batched {
        return channel_view(&p.value, rank);
    }
    let shape = p.value.shape();
    let mut dims = vec![1; rank + 1];
    (dims[0], dims[2]) = (shape[0], shape[1]);
    p.value.reshape_dims(&dims)
}

fn signed(shape: &[usize]) -> Vec<isize> {
    shape.iter().map(|&d| d as isize).collect()
}

impl StructuredOp for GroupNorm {
    const NAME: &'static str = "group_norm";
    const INPUTS: &'static [&'static str] = &["input", "weight", "bias"];
    /// The input, then the weight and/or bias.
    fn arity(&self) -> Option<usize> {
        None
    }
    fn attributes(&self) -> OpAttributes {
        self.affine.attributes(
            OpAttributes::new()
                .int("num_groups", self.num_groups)
                .float("eps", self.eps),
        )
    }
    const HOLDS: crate::Holds = crate::Holds::Settings;
    fn forward(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        const OP: &str = "group_norm";
        let x = first_input(OP, inputs)?;
        let (w, b) = self.affine_of(inputs)?;
        check_eps(OP, self.eps)?;
        let (p, row) = layout(OP, x, self.num_groups)?;
        check_channel_affine(OP, w.copied(), b.copied(), x)?;
        let (groups, per_group) = (self.num_groups, p.c / self.num_groups);
        crate::with_dtype!(OP, x.dtype(), T => {
            let xs = x.as_slice_of::<T>();
            let stats = kernel::row_stats_all(xs, row, self.eps);
            let (ws, bs) = (w.map(|t| t.as_slice_of::<T>()), b.map(|t| t.as_slice_of::<T>()));
            let stat_of = |n, c| n * groups + c / per_group;
            Ok(Tensor::build::<T>(Dims::from_slice(x.shape()), |out| kernel::normalize(xs, p, &stats, stat_of, ws, bs, out)))
        })
    }
    fn grad<'g>(&self, i: usize, g: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, rank) = (n.x(0), n.x(0).shape().len());
        match self.affine.role(Self::NAME, 1, n.inputs.len(), i)? {
            Role::Input => {
                let a = match self.affine_of(n.inputs)?.0 {
                    Some(w) => g.try_mul(&channel_view(w, rank)?)?,
                    None => g.clone(),
                };
                self.project(&a, x)
            }
            Role::Weight => channel_sum(&g.try_mul(&self.xhat(x)?)?),
            Role::Bias | Role::Stat => channel_sum(g),
        }
    }
    fn tangent<'g>(&self, i: usize, t: &Var<'g>, n: Node<'_, 'g>) -> Result<Var<'g>> {
        let (x, rank) = (n.x(0), n.x(0).shape().len());
        match self.affine.role(Self::NAME, 1, n.inputs.len(), i)? {
            Role::Input => {
                let d = self.project(t, x)?;
                match self.affine_of(n.inputs)?.0 {
                    Some(w) => d.try_mul(&channel_view(w, rank)?),
                    None => Ok(d),
                }
            }
            Role::Weight => self.xhat(x)?.try_mul(&channel_view(t, rank)?),
            Role::Bias | Role::Stat => channel_view(t, rank),
        }
    }
    /// Statistics are per (sample, group), so the batch folds into the
    /// samples: `[B·N, C, *]`. A weight or bias that differs between
    /// examples scales and shifts the unweighted output, viewed per
    /// example as `[B, 1, C, 1, ...]`.
    fn batch<'g>(&self, x: &[Batched<'g>], ctx: &BatchContext) -> Result<Batched<'g>> {
        let input = &x[0];
        let (w, b) = self.affine_of(x)?;
        let params = w.into_iter().chain(b);
        let folded = if input.batched {
            fold(&input.value)?
        } else {
            input.value.clone()
        };
        let graph = folded.graph();
        let unfolded = |y: Var<'g>| -> Result<Batched<'g>> {
            if input.batched {
                unfold(&y, ctx.size)
            } else {
                Ok(Batched::shared(y))
            }
        };
        if !params.clone().any(|p| p.batched) {
            let args: Vec<&Var<'g>> = std::iter::once(&folded)
                .chain(params.map(|p| &p.value))
                .collect();
            return unfolded(graph.record(self.clone(), &args)?);
        }
        let plain = GroupNorm {
            affine: Affine::Given {
                weight: false,
                bias: false,
            },
            ..self.clone()
        };
        let rank = input.example_rank();
        let mut out = unfolded(graph.record(plain, &[&folded])?)?.value;
        if let Some(w) = w {
            out = out.try_mul(&per_channel(w, rank)?)?;
        }
        if let Some(b) = b {
            out = out.try_add(&per_channel(b, rank)?)?;
        }
        Ok(Batched::along_batch(out))
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(GroupNorm {
                num_groups: 2,
                eps: 1e-5,
                affine: Affine::Given {
                    weight: true,
                    bias: true,
                },
            })),
            sample_inputs: Some(|seed| {
                vec![
                    sample(&[2, 4, 3], seed, 0.0, 2.0),
                    sample(&[4], seed + 7, 1.0, 0.5),
                    sample(&[4], seed + 11, 0.0, 0.5),
                ]
            }),
            ..OpFacts::opaque(self.arity())
        }
    }
}

pub(crate) fn register(reg: &mut OpRegistry) {
    reg.add_builtin(GroupNorm::default());
}

impl<'g> Var<'g> {
    fallible! {
        /// Group normalisation of an `[N, C, *]` input: the `C` channels split
        /// into `num_groups` groups of consecutive channels, each
        /// `(sample, group)` normalised to mean 0 and variance 1 (biased,
        /// `eps` inside the square root), then scaled by `weight` and shifted
        /// by `bias` per channel (each `[C]`, optional). PyTorch's
        /// `F.group_norm(x, num_groups, weight, bias, eps)`.
        ///
        /// Errors (naming `group_norm` and the shapes): `num_groups` zero or
        /// not dividing `C`, an input of rank < 2, a weight or bias not of
        /// shape `[C]` or of another dtype, a negative or non-finite `eps`.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// // [N = 1, C = 2, L = 2], one group per channel.
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 3.0, 10.0, 20.0], &[1, 2, 2])?);
        /// let w = g.variable(Tensor::from_vec(vec![1.0, 2.0], &[2])?);
        /// let y = x.try_group_norm(2, Some(&w), None, 0.0)?;
        /// assert_eq!(y.value().to_f64_vec(), vec![-1.0, 1.0, -2.0, 2.0]);
        /// assert!(x.try_group_norm(3, None, None, 1e-5).is_err()); // 3 does not divide 2
        /// let grads = (&y * &y).sum().backward()?;
        /// assert_eq!(grads.wrt(&w).to_f64_vec(), vec![4.0, 8.0]);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_group_norm / group_norm(
        &self,
        num_groups: usize,
        weight: Option<&Var<'g>>,
        bias: Option<&Var<'g>>,
        eps: f64,
    ) -> Var<'g> {
            record_affine(self, weight, bias, |affine| GroupNorm {
                num_groups,
                eps,
                affine,
            })
        }
    }
}
