//! [`LoraAdapter`]: one low-rank update `scaling · B · A` of a linear
//! layer's weight, applied as `x ↦ scaling · (dropout(x) · Aᵀ) · Bᵀ` so the
//! update matrix itself is never formed while training.

use rand::Rng;

use super::config::{lora_scaling, LoraInit};
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::nn::init::{kaiming_uniform, normal, FanMode, Nonlinearity};
use crate::nn::{Dropout, Forward, Module, Parameter};
use crate::tensor::{DType, Tensor};

/// The two trainable matrices of an adapter: `A` (`[r, in]`, PEFT's
/// `lora_A`) and `B` (`[out, r]`, `lora_B`), with their scale and input
/// dropout.
#[derive(Clone, Debug)]
pub struct LoraAdapter {
    lora_a: Parameter,
    lora_b: Parameter,
    alpha: f64,
    use_rslora: bool,
    dropout: Option<Dropout>,
}

impl LoraAdapter {
    /// A new adapter of rank `r` for a layer `in_features → out_features`,
    /// started as `init` says from `rng`; dropout `p` draws its masks from
    /// `dropout_seed`.
    #[allow(clippy::too_many_arguments)]
    pub fn try_new<R: Rng + ?Sized>(
        in_features: usize,
        out_features: usize,
        r: usize,
        alpha: f64,
        use_rslora: bool,
        dropout: (f64, u64),
        init: LoraInit,
        rng: &mut R,
    ) -> Result<Self> {
        if r == 0 || in_features == 0 || out_features == 0 {
            return Err(Error::invalid(
                "LoraAdapter",
                format!(
                    "rank {r} on a layer {in_features} -> {out_features}: sizes must be positive"
                ),
            ));
        }
        // nn.Linear's start (Kaiming-uniform with a = √5: bounds ±1/√in).
        let linear_start = |shape: &[usize], rng: &mut R| {
            kaiming_uniform(
                shape,
                FanMode::FanIn,
                Nonlinearity::LeakyRelu(5f64.sqrt()),
                DType::F32,
                rng,
            )
        };
        let a = match init {
            LoraInit::Gaussian => normal(&[r, in_features], 0.0, 1.0 / r as f64, DType::F32, rng)?,
            LoraInit::Kaiming | LoraInit::Random => linear_start(&[r, in_features], rng)?,
        };
        let b = match init {
            LoraInit::Random => linear_start(&[out_features, r], rng)?,
            _ => Tensor::zeros(&[out_features, r], DType::F32)?,
        };
        Self::try_from_weights(a, b, alpha, use_rslora, dropout)
    }

    /// An adapter from its matrices (a loader's constructor): `a` is
    /// `[r, in]`, `b` is `[out, r]`, both converted to f32.
    pub fn try_from_weights(
        a: Tensor,
        b: Tensor,
        alpha: f64,
        use_rslora: bool,
        (p, seed): (f64, u64),
    ) -> Result<Self> {
        let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
        if sa.len() != 2 || sb.len() != 2 || sa[0] != sb[1] || sa[0] == 0 {
            return Err(Error::invalid(
                "LoraAdapter",
                format!("lora_A {sa:?} and lora_B {sb:?} are not [r, in] and [out, r]"),
            ));
        }
        if !alpha.is_finite() {
            return Err(Error::invalid(
                "LoraAdapter",
                format!("alpha must be finite, got {alpha}"),
            ));
        }
        let dropout = if p > 0.0 {
            Some(Dropout::new(p, seed)?)
        } else {
            None
        };
        Ok(LoraAdapter {
            lora_a: Parameter::new(a.to_dtype(DType::F32).contiguous()),
            lora_b: Parameter::new(b.to_dtype(DType::F32).contiguous()),
            alpha,
            use_rslora,
            dropout,
        })
    }

    /// `A`, `[r, in]`.
    pub fn lora_a(&self) -> &Parameter {
        &self.lora_a
    }

    /// `B`, `[out, r]`.
    pub fn lora_b(&self) -> &Parameter {
        &self.lora_b
    }

    /// The rank.
    pub fn rank(&self) -> usize {
        self.lora_a.shape()[0]
    }

    /// Inputs of the adapted layer.
    pub fn in_features(&self) -> usize {
        self.lora_a.shape()[1]
    }

    /// Outputs of the adapted layer.
    pub fn out_features(&self) -> usize {
        self.lora_b.shape()[0]
    }

    /// The alpha it was made with.
    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Whether it scales by `alpha / √r`.
    pub fn use_rslora(&self) -> bool {
        self.use_rslora
    }

    /// The dropout probability on its input.
    pub fn dropout(&self) -> f64 {
        self.dropout.as_ref().map_or(0.0, |d| d.p())
    }

    /// Whether its dropout draws masks now (training mode, `p > 0`).
    pub fn dropout_is_active(&self) -> bool {
        self.dropout.as_ref().is_some_and(|d| d.is_training())
    }

    /// The factor of `B · A`.
    pub fn scaling(&self) -> f64 {
        lora_scaling(self.alpha, self.rank(), self.use_rslora)
    }

    /// `scaling · (dropout(x) · Aᵀ) · Bᵀ` for `x` of shape `[.., in]`.
    pub fn try_delta<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let graph = x.graph();
        let x = match &self.dropout {
            Some(d) => d.forward(x)?,
            None => x.clone(),
        };
        let h = x.try_matmul_transposed(&graph.param(&self.lora_a), false, true)?;
        let y = h.try_matmul_transposed(&graph.param(&self.lora_b), false, true)?;
        Ok(y.mul_scalar(self.scaling()))
    }

    /// The update of the weight, `scaling · B · A` (`[out, in]`), in f32.
    pub fn try_delta_weight(&self) -> Result<Tensor> {
        let g = Graph::new();
        let ba = g
            .constant(self.lora_b.value())
            .try_matmul(&g.constant(self.lora_a.value()))?;
        Ok(ba.mul_scalar(self.scaling()).value().clone())
    }

    /// Visits `A` and `B` under PEFT's runtime names,
    /// `{prefix}.lora_A.{adapter}.weight` and `{prefix}.lora_B.{adapter}.weight`.
    pub(crate) fn visit(&self, prefix: &str, adapter: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        f(&format!("{prefix}.lora_A.{adapter}.weight"), &self.lora_a);
        f(&format!("{prefix}.lora_B.{adapter}.weight"), &self.lora_b);
    }

    /// Visits the dropout's random stream under `{prefix}.lora_dropout.{adapter}`.
    pub(crate) fn visit_random_streams(
        &self,
        prefix: &str,
        adapter: &str,
        f: &mut dyn FnMut(&str, &crate::nn::RandomStream),
    ) {
        if let Some(d) = &self.dropout {
            d.visit_random_streams(&format!("{prefix}.lora_dropout.{adapter}"), f)
        }
    }

    /// Dropout on in training, off in evaluation.
    pub(crate) fn set_training(&mut self, training: bool) {
        if let Some(d) = &mut self.dropout {
            d.set_training(training)
        }
    }
}
