//! `rotary_embedding`: rotary position embeddings (RoPE) as Llama and its
//! family apply them to queries and keys, in Hugging Face's convention: the
//! last dimension (size `D`, even) is split in halves, and element `i` of
//! the first half turns with element `i` of the second half by the angle
//! `p · base^(−2i/D)`, `p` the position of the row (`offset` plus the row's
//! index along the second-to-last dimension).
//!
//! GGUF files of the `llama` architecture store query and key weights with
//! each head's rows permuted so that llama.cpp can rotate adjacent pairs
//! instead; the GGUF loader puts those rows back, so one convention serves
//! both kinds of file.
//!
//! The op is a rotation of each pair: linear in its input, and its
//! derivative is the rotation by the opposite angle (`inverse`), the same
//! op. Angles are computed in f64 and rounded once to the input's dtype.

use std::sync::Arc;

use super::batch_norm::sample;
use crate::base::error::{Error, Result};
use crate::base::fallible::fallible;
use crate::core::graph::Var;
use crate::core::{BatchContext, Batched, OpAttributes};
use crate::ops::batching::on_leading_axes;
use crate::ops::rule::OpFacts;
use crate::ops::{Node, StructuredOp};
use crate::tensor::{Element, Tensor};

const OP: &str = "rotary_embedding";

/// Rotary position embedding over the last dimension of `[..., T, D]`
/// (see the module docs). `Default` is base 10,000, offset 0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RotaryEmbedding {
    /// The base of the angles (`rope_theta`).
    pub base: f64,
    /// The position of the first row.
    pub offset: usize,
    /// Rotates by the opposite angle (the derivative).
    pub inverse: bool,
}

impl Default for RotaryEmbedding {
    fn default() -> Self {
        RotaryEmbedding {
            base: 10_000.0,
            offset: 0,
            inverse: false,
        }
    }
}

impl RotaryEmbedding {
    fn check(&self, x: &Tensor) -> Result<(usize, usize)> {
        if !(self.base.is_finite() && self.base > 0.0) {
            return Err(Error::invalid(
                OP,
                format!("base must be finite and > 0, got {}", self.base),
            ));
        }
        let shape = x.shape();
        if shape.len() < 2
            || !shape[shape.len() - 1].is_multiple_of(2)
            || shape[shape.len() - 1] == 0
        {
            return Err(Error::invalid(
                OP,
                format!("the input must be [..., positions, D] with D even and > 0, got {shape:?}"),
            ));
        }
        Ok((shape[shape.len() - 2], shape[shape.len() - 1]))
    }

    /// `cos` and `sin` of every (position, pair) angle, `[T, D/2]` each.
    fn angles(&self, positions: usize, dim: usize) -> (Vec<f64>, Vec<f64>) {
        let half = dim / 2;
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        let sign = if self.inverse { -1.0 } else { 1.0 };
        let freqs: Vec<f64> = (0..half)
            .map(|i| self.base.powf(-2.0 * i as f64 / dim as f64))
            .collect();
        for t in 0..positions {
            let p = (self.offset + t) as f64;
            for &freq in &freqs {
                let (s, c) = (p * freq).sin_cos();
                cos.push(c);
                sin.push(sign * s);
            }
        }
        (cos, sin)
    }

    fn rotate<T: Element>(&self, x: &[T], positions: usize, dim: usize) -> Vec<T> {
        let half = dim / 2;
        let (cos, sin) = self.angles(positions, dim);
        let cos: Vec<T> = cos.into_iter().map(T::from_f64).collect();
        let sin: Vec<T> = sin.into_iter().map(T::from_f64).collect();
        let mut out = vec![T::zero(); x.len()];
        for (r, (row, o)) in x
            .chunks_exact(dim)
            .zip(out.chunks_exact_mut(dim))
            .enumerate()
        {
            let t = r % positions;
            let (c, s) = (
                &cos[t * half..(t + 1) * half],
                &sin[t * half..(t + 1) * half],
            );
            let (x1, x2) = row.split_at(half);
            let (o1, o2) = o.split_at_mut(half);
            for i in 0..half {
                o1[i] = x1[i] * c[i] - x2[i] * s[i];
                o2[i] = x2[i] * c[i] + x1[i] * s[i];
            }
        }
        out
    }
}

impl StructuredOp for RotaryEmbedding {
    const NAME: &'static str = OP;
    const INPUTS: &'static [&'static str] = &["input"];
    const HOLDS: crate::Holds = crate::Holds::Settings;
    const LINEAR: &'static [usize] = &[0];
    fn attributes(&self) -> OpAttributes {
        OpAttributes::new()
            .float("base", self.base)
            .int("offset", self.offset as i64)
            .bool("inverse", self.inverse)
    }
    fn forward(&self, x: &[&Tensor]) -> Result<Tensor> {
        let (positions, dim) = self.check(x[0])?;
        let input = x[0].contiguous();
        crate::with_dtype!(OP, input.dtype(), T => {
            Tensor::from_vec(self.rotate(input.as_slice_of::<T>(), positions, dim), input.shape())
        })
    }
    fn grad<'g>(&self, _: usize, g: &Var<'g>, _: Node<'_, 'g>) -> Result<Var<'g>> {
        let inverse = RotaryEmbedding {
            inverse: !self.inverse,
            ..*self
        };
        g.graph().record(inverse, &[g])
    }
    /// Rows turn by their position along the second-to-last axis, and the
    /// batch axis leads: the op as it is.
    fn batch<'g>(&self, x: &[Batched<'g>], _: &BatchContext) -> Result<Batched<'g>> {
        on_leading_axes(self, x)
    }
    fn facts(&self) -> OpFacts {
        OpFacts {
            tangent: true,
            second_derivative: true,
            example: Some(Arc::new(RotaryEmbedding {
                base: 100.0,
                offset: 3,
                inverse: false,
            })),
            sample_inputs: Some(|seed| vec![sample(&[2, 3, 4], seed, 0.0, 1.0)]),
            ..OpFacts::opaque(Some(1))
        }
    }
}

register_defaults!(RotaryEmbedding);

/// The rotation alone, for inference where nothing requires grad (several
/// sequences decoded at once, each at its own position, on any thread):
/// the op's forward, so the bits are those of
/// [`rotary_embedding`](Var::rotary_embedding).
pub fn inference_forward(x: &Tensor, base: f64, offset: usize) -> Result<Tensor> {
    RotaryEmbedding {
        base,
        offset,
        inverse: false,
    }
    .forward(&[x])
}

impl<'g> Var<'g> {
    fallible! {
        /// Rotary position embeddings over the last dimension of
        /// `[..., positions, D]` in Hugging Face's convention (halves of
        /// the last dimension turn together; see the module docs), the
        /// first row at position `offset`, angles `p · base^(−2i/D)`.
        /// Errors: `D` odd or zero, rank below 2, a base that is not
        /// finite and positive.
        ///
        /// ```
        /// use retrograd::{Graph, Tensor};
        /// let g = Graph::new();
        /// let x = g.variable(Tensor::from_vec(vec![1.0, 0.0, 1.0, 0.0], &[2, 2])?);
        /// let y = x.try_rotary_embedding(10_000.0, 0)?.value().to_f64_vec();
        /// // Position 0 does not turn; position 1 turns (1, 0) by 1 radian.
        /// assert_eq!(&y[..2], &[1.0, 0.0]);
        /// assert!((y[2] - 1f64.cos()).abs() < 1e-12 && (y[3] - 1f64.sin()).abs() < 1e-12);
        /// # Ok::<(), retrograd::Error>(())
        /// ```
        pub fn try_rotary_embedding / rotary_embedding(&self, base: f64, offset: usize) -> Var<'g> {
            self.graph().record(RotaryEmbedding { base, offset, inverse: false }, &[self])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Graph;

    #[test]
    fn the_inverse_undoes_it_and_norms_are_kept() {
        let g = Graph::new();
        let data: Vec<f64> = (0..24).map(|i| (i as f64 * 0.7).sin()).collect();
        let x = g.variable(Tensor::from_vec(data.clone(), &[2, 3, 4]).unwrap());
        let y = x.rotary_embedding(500.0, 7);
        let back = g
            .record(
                RotaryEmbedding {
                    base: 500.0,
                    offset: 7,
                    inverse: true,
                },
                &[&y],
            )
            .unwrap();
        for (a, b) in back.value().to_f64_vec().iter().zip(&data) {
            assert!((a - b).abs() < 1e-12);
        }
        let yv = y.value().to_f64_vec();
        // Each (i, i + D/2) pair keeps its length.
        for r in 0..6 {
            for i in 0..2 {
                let (a, b) = (data[r * 4 + i], data[r * 4 + i + 2]);
                let (c, d) = (yv[r * 4 + i], yv[r * 4 + i + 2]);
                assert!(((a * a + b * b) - (c * c + d * d)).abs() < 1e-12);
            }
        }
        assert!(x.try_rotary_embedding(10_000.0, 0).is_ok());
        let odd = g.variable(Tensor::from_vec(vec![1.0; 6], &[2, 3]).unwrap());
        assert!(odd.try_rotary_embedding(10_000.0, 0).is_err());
        assert!(x.try_rotary_embedding(-1.0, 0).is_err());
    }
}
