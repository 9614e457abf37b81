//! [`LoraLinear`]: a frozen linear layer (f32 or quantized) with named
//! low-rank adapters beside it, any of them active, and merging into the
//! base that undoes bit for bit.

use super::adapter::LoraAdapter;
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::nn::{AnyLinear, Buffer, Forward, Linear, Module, Parameter, RandomStream};
use crate::tensor::Tensor;

/// `y = base(x) + Σ_active scaling · (dropout(x) · Aᵀ) · Bᵀ`.
///
/// The base is frozen when wrapped ([`Parameter::set_requires_grad`] on an
/// f32 base; a quantized base has no parameters): only the adapters
/// train. With a quantized base the gradient reaching `x` through it is the
/// transposed quantized product, computed from the blocks, so no f32 copy
/// of the base is ever made while training.
///
/// Merging folds the active adapters into an f32 copy of the base weight,
/// so inference costs one product again; the original base is kept, so
/// unmerging restores it exactly (no subtraction, no rounding).
///
/// ```
/// use retrograd::{Graph, Tensor, DType, nn::{AnyLinear, Forward, Linear}};
/// use retrograd::nn::lora::{LoraAdapter, LoraLinear};
/// let base = AnyLinear::Dense(Linear::builder(3, 2).bias(false).build()?);
/// let mut layer = LoraLinear::try_new(base)?;
/// let a = Tensor::from_vec(vec![1.0f32, 0.0, 0.0], &[1, 3])?;
/// let b = Tensor::from_vec(vec![0.5f32, -0.5], &[2, 1])?;
/// layer.try_add_adapter("style", LoraAdapter::try_from_weights(a, b, 2.0, false, (0.0, 0))?)?;
/// let g = Graph::new();
/// let x = g.constant(Tensor::ones(&[1, 3], DType::F32)?);
/// let before = layer.forward(&x)?.value().clone();
/// layer.try_merge()?;
/// let merged = layer.forward(&x)?.value().clone();
/// assert!(merged.allclose(&before, 1e-6, 1e-6));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct LoraLinear {
    /// The layer the adapters adapt: `Dense` or `Quantized`, never `Lora`.
    base: AnyLinear,
    adapters: Vec<(String, LoraAdapter)>,
    active: Vec<String>,
    /// While merged: the base as it was, and which adapters are in `base`.
    merged: Option<(AnyLinear, Vec<String>)>,
}

impl LoraLinear {
    /// Wraps `base` (frozen from now on) with no adapter yet.
    pub fn try_new(base: AnyLinear) -> Result<Self> {
        if let AnyLinear::Lora(_) = base {
            return Err(Error::invalid(
                "LoraLinear",
                "the base is already a LoraLinear: add adapters to it instead",
            ));
        }
        base.visit_parameters("", &mut |_, p| p.set_requires_grad(false));
        Ok(LoraLinear {
            base,
            adapters: Vec::new(),
            active: Vec::new(),
            merged: None,
        })
    }

    /// Wraps as [`try_new`](Self::try_new); panics if `base` is one already.
    pub fn new(base: AnyLinear) -> Self {
        Self::try_new(base).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The frozen base as wrapped (the unmerged one while merged).
    pub fn base(&self) -> &AnyLinear {
        match &self.merged {
            Some((original, _)) => original,
            None => &self.base,
        }
    }

    /// Whether the product runs on the quantized base as it was loaded
    /// (not merged): what a model's stacked products of several layers
    /// need to stay valid.
    pub fn has_quantized_base(&self) -> bool {
        self.merged.is_none() && matches!(self.base, AnyLinear::Quantized(_))
    }

    /// Inputs it takes.
    pub fn in_features(&self) -> usize {
        self.base.in_features()
    }

    /// Outputs it gives.
    pub fn out_features(&self) -> usize {
        self.base.out_features()
    }

    /// Adds an adapter under `name` and makes it the only active one (as
    /// PEFT's `add_adapter` then `set_adapter`). Errors: a name in use, a
    /// shape that does not fit the base, or a merged layer.
    pub fn try_add_adapter(&mut self, name: &str, adapter: LoraAdapter) -> Result<()> {
        self.check_unmerged("try_add_adapter")?;
        if self.adapters.iter().any(|(n, _)| n == name) {
            return Err(Error::invalid(
                "LoraLinear::try_add_adapter",
                format!("an adapter named `{name}` exists already"),
            ));
        }
        if adapter.in_features() != self.in_features()
            || adapter.out_features() != self.out_features()
        {
            return Err(Error::invalid(
                "LoraLinear::try_add_adapter",
                format!(
                    "adapter `{name}` maps {} -> {}, the base {} -> {}",
                    adapter.in_features(),
                    adapter.out_features(),
                    self.in_features(),
                    self.out_features()
                ),
            ));
        }
        self.adapters.push((name.to_string(), adapter));
        self.active = vec![name.to_string()];
        Ok(())
    }

    /// The adapter named `name`.
    pub fn adapter(&self, name: &str) -> Option<&LoraAdapter> {
        self.adapters
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, a)| a)
    }

    /// Every adapter with its name, in the order they were added.
    pub fn adapters(&self) -> impl Iterator<Item = (&str, &LoraAdapter)> {
        self.adapters.iter().map(|(n, a)| (n.as_str(), a))
    }

    /// The names of the active adapters.
    pub fn active(&self) -> &[String] {
        &self.active
    }

    /// Makes exactly `names` active (empty: the base alone). A name this
    /// layer lacks is an error naming it.
    pub fn try_set_active(&mut self, names: &[&str]) -> Result<()> {
        self.check_unmerged("try_set_active")?;
        if let Some(missing) = names.iter().find(|n| self.adapter(n).is_none()) {
            return Err(Error::invalid(
                "LoraLinear::try_set_active",
                format!("no adapter named `{missing}`"),
            ));
        }
        self.active = names.iter().map(|s| s.to_string()).collect();
        Ok(())
    }

    /// Removes the adapter `name` (and from the active ones).
    pub fn try_remove_adapter(&mut self, name: &str) -> Result<LoraAdapter> {
        self.check_unmerged("try_remove_adapter")?;
        let i = self
            .adapters
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| {
                Error::invalid(
                    "LoraLinear::try_remove_adapter",
                    format!("no adapter named `{name}`"),
                )
            })?;
        self.active.retain(|n| n != name);
        Ok(self.adapters.remove(i).1)
    }

    /// Whether an active adapter's dropout draws masks now (training
    /// mode, a positive probability).
    pub fn has_active_dropout(&self) -> bool {
        self.merged.is_none()
            && self
                .active
                .iter()
                .any(|n| self.adapter(n).is_some_and(|a| a.dropout_is_active()))
    }

    /// Whether the active adapters are folded into the base.
    pub fn is_merged(&self) -> bool {
        self.merged.is_some()
    }

    /// The weight `[out, in]` in f32 with the active adapters added: the
    /// base dequantized if quantized, plus `scaling · B · A` of each.
    pub fn try_merged_weight(&self) -> Result<Tensor> {
        if self.merged.is_some() {
            return self.base.try_f32_weight();
        }
        let mut w = self.base.try_f32_weight()?;
        for name in &self.active {
            let delta = self
                .adapter(name)
                .expect("active adapters exist")
                .try_delta_weight()?;
            let g = Graph::new();
            w = g
                .constant(w)
                .try_add(&g.constant(delta))?
                .value()
                .contiguous();
        }
        Ok(w)
    }

    /// Folds the active adapters into an f32 copy of the base; the forward
    /// is then one product. Already merged: an error.
    pub fn try_merge(&mut self) -> Result<()> {
        self.check_unmerged("try_merge")?;
        let weight = Parameter::new(self.try_merged_weight()?);
        weight.set_requires_grad(false);
        let merged = AnyLinear::Dense(Linear::from_parameters(weight, None)?);
        let original = std::mem::replace(&mut self.base, merged);
        self.merged = Some((original, self.active.clone()));
        Ok(())
    }

    /// Puts the base back as it was before [`try_merge`](Self::try_merge),
    /// bit for bit. Not merged: an error.
    pub fn try_unmerge(&mut self) -> Result<()> {
        let (original, _) = self
            .merged
            .take()
            .ok_or_else(|| Error::invalid("LoraLinear::try_unmerge", "no adapter is merged"))?;
        self.base = original;
        Ok(())
    }

    /// The base alone, or with the active adapters merged into a plain
    /// f32 layer (PEFT's `merge_and_unload`): what a saver of a plain
    /// model writes.
    pub fn try_unloaded(&self, merge: bool) -> Result<AnyLinear> {
        if !merge || self.active.is_empty() && self.merged.is_none() {
            return Ok(self.base().clone());
        }
        let weight = Parameter::new(self.try_merged_weight()?);
        Ok(AnyLinear::Dense(Linear::from_parameters(weight, None)?))
    }

    /// The active adapters' contribution for `x` (`None` when none is
    /// active or they are merged): what a model adds to a product it runs
    /// on this layer's base some other way (a stacked product).
    pub fn try_adapters_delta<'g>(&self, x: &Var<'g>) -> Result<Option<Var<'g>>> {
        if self.merged.is_some() {
            return Ok(None);
        }
        let mut sum: Option<Var<'g>> = None;
        for name in &self.active {
            let d = self
                .adapter(name)
                .expect("active adapters exist")
                .try_delta(x)?;
            sum = Some(match sum {
                Some(s) => s.try_add(&d)?,
                None => d,
            });
        }
        Ok(sum)
    }

    fn check_unmerged(&self, op: &'static str) -> Result<()> {
        match &self.merged {
            Some(_) => Err(Error::invalid(
                op,
                "the adapters are merged into the base: unmerge first",
            )),
            None => Ok(()),
        }
    }
}

impl Module for LoraLinear {
    /// The base's parameters (frozen) under the prefix, as PEFT's
    /// `base_layer`, and each adapter's `lora_A.{name}.weight` and
    /// `lora_B.{name}.weight`.
    fn visit_parameters(&self, prefix: &str, f: &mut dyn FnMut(&str, &Parameter)) {
        self.base().visit_parameters(prefix, f);
        for (name, a) in &self.adapters {
            a.visit(prefix, name, f);
        }
    }
    fn visit_buffers(&self, prefix: &str, f: &mut dyn FnMut(&str, &Buffer)) {
        self.base().visit_buffers(prefix, f)
    }
    fn visit_random_streams(&self, prefix: &str, f: &mut dyn FnMut(&str, &RandomStream)) {
        for (name, a) in &self.adapters {
            a.visit_random_streams(prefix, name, f);
        }
    }
    fn set_training(&mut self, training: bool) {
        for (_, a) in &mut self.adapters {
            a.set_training(training);
        }
    }
}

impl Forward for LoraLinear {
    fn forward<'g>(&self, x: &Var<'g>) -> Result<Var<'g>> {
        let y = self.base.forward(x)?;
        match self.try_adapters_delta(x)? {
            Some(d) => y.try_add(&d),
            None => Ok(y),
        }
    }
}
