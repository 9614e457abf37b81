//! [`LoraModel`]: adapters on a whole model, its linear layers chosen by
//! name as PEFT's `get_peft_model` chooses them.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::adapter::LoraAdapter;
use super::config::LoraConfig;
use super::linear::LoraLinear;
use crate::base::error::{Error, Result};
use crate::nn::{AnyLinear, Module, Parameter};

/// A model whose linear layers take adapters. A model lists its layers
/// (module paths as its parameter names use them, `model.layers.0.self_attn.q_proj`);
/// everything else is written once here.
pub trait LoraModel: Module {
    /// Calls `f` on every linear layer an adapter may wrap, with its path
    /// and whether it is the output head, in a fixed order.
    fn visit_linears(&self, f: &mut dyn FnMut(&str, bool, &AnyLinear));

    /// As [`visit_linears`](Self::visit_linears), mutably; stops at the first error.
    fn visit_linears_mut(
        &mut self,
        f: &mut dyn FnMut(&str, bool, &mut AnyLinear) -> Result<()>,
    ) -> Result<()>;

    /// Adds an adapter named `name` to every layer `config` targets and
    /// freezes everything else in the model (as PEFT's `get_peft_model`);
    /// the new adapter becomes the active one. Returns the paths of the
    /// adapted layers. Errors: a bad config, a name in use, or no layer
    /// matching the targets (naming them).
    fn try_add_adapter(&mut self, name: &str, config: &LoraConfig) -> Result<Vec<String>> {
        config.try_check()?;
        check_adapter_name(name)?;
        let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
        let mut adapted = Vec::new();
        self.visit_linears_mut(&mut |path, is_head, layer| {
            if !config.targets.matches(path, is_head) {
                return Ok(());
            }
            let dropout_seed = config.seed.wrapping_add(1 + adapted.len() as u64);
            let adapter = LoraAdapter::try_new(
                layer.in_features(),
                layer.out_features(),
                config.rank_for(path),
                config.alpha_for(path),
                config.use_rslora,
                (config.dropout, dropout_seed),
                config.init,
                &mut rng,
            )?;
            wrap(layer)?.try_add_adapter(name, adapter)?;
            adapted.push(path.to_string());
            Ok(())
        })?;
        if adapted.is_empty() {
            return Err(Error::invalid(
                "LoraModel::try_add_adapter",
                format!("no linear layer matches the targets {:?}", config.targets),
            ));
        }
        self.freeze_all_but_adapters();
        Ok(adapted)
    }

    /// Adds adapters given per layer path (a loader's path: the matrices
    /// come from a file). Every path must name a linear layer of the
    /// model; the new adapter becomes the active one where added.
    fn try_insert_adapters(
        &mut self,
        name: &str,
        mut adapters: Vec<(String, LoraAdapter)>,
    ) -> Result<()> {
        check_adapter_name(name)?;
        self.visit_linears_mut(&mut |path, _, layer| {
            if let Some(i) = adapters.iter().position(|(p, _)| p == path) {
                let (_, adapter) = adapters.swap_remove(i);
                wrap(layer)?.try_add_adapter(name, adapter)?;
            }
            Ok(())
        })?;
        if let Some((path, _)) = adapters.first() {
            return Err(Error::invalid(
                "LoraModel::try_insert_adapters",
                format!("the model has no linear layer `{path}`"),
            ));
        }
        self.freeze_all_but_adapters();
        Ok(())
    }

    /// Makes exactly `names` the active adapters on every adapted layer
    /// that has them (layers without any of them run their base alone).
    /// A name no layer has is an error.
    fn try_set_adapters(&mut self, names: &[&str]) -> Result<()> {
        let known = self.adapter_names();
        if let Some(missing) = names.iter().find(|n| !known.iter().any(|k| k == *n)) {
            return Err(Error::invalid(
                "LoraModel::try_set_adapters",
                format!("no adapter named `{missing}` (the model has {known:?})"),
            ));
        }
        self.visit_linears_mut(&mut |_, _, layer| {
            if let AnyLinear::Lora(l) = layer {
                let here: Vec<&str> = names
                    .iter()
                    .copied()
                    .filter(|n| l.adapter(n).is_some())
                    .collect();
                l.try_set_active(&here)?;
            }
            Ok(())
        })
    }

    /// The names of the adapters on any layer, in the order first seen.
    fn adapter_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        self.visit_linears(&mut |_, _, layer| {
            if let AnyLinear::Lora(l) = layer {
                for (n, _) in l.adapters() {
                    if !names.iter().any(|k| k == n) {
                        names.push(n.to_string());
                    }
                }
            }
        });
        names
    }

    /// Each adapted layer's path and its adapter `name`, in layer order.
    fn adapters_named(&self, name: &str) -> Vec<(String, LoraAdapter)> {
        let mut out = Vec::new();
        self.visit_linears(&mut |path, _, layer| {
            if let AnyLinear::Lora(l) = layer
                && let Some(a) = l.adapter(name)
            {
                out.push((path.to_string(), a.clone()));
            }
        });
        out
    }

    /// The trainable matrices of adapter `name`, under PEFT's runtime
    /// names (`….q_proj.lora_A.{name}.weight`): what an optimizer takes.
    fn adapter_parameters(&self, name: &str) -> Vec<(String, Parameter)> {
        let mut out = Vec::new();
        for (path, a) in self.adapters_named(name) {
            a.visit(&path, name, &mut |n, p| {
                out.push((n.to_string(), p.clone()))
            });
        }
        out
    }

    /// Removes adapter `name` from every layer; a layer left without
    /// adapters goes back to its plain base.
    fn try_remove_adapter(&mut self, name: &str) -> Result<()> {
        if !self.adapter_names().iter().any(|n| n == name) {
            return Err(Error::invalid(
                "LoraModel::try_remove_adapter",
                format!("no adapter named `{name}`"),
            ));
        }
        self.visit_linears_mut(&mut |_, _, layer| {
            if let AnyLinear::Lora(l) = layer
                && l.adapter(name).is_some()
            {
                l.try_remove_adapter(name)?;
                if l.adapters().next().is_none() {
                    *layer = l.base().clone();
                }
            }
            Ok(())
        })
    }

    /// Folds the active adapters into every adapted layer's base (see
    /// [`LoraLinear::try_merge`]).
    fn try_merge_adapters(&mut self) -> Result<()> {
        self.visit_linears_mut(&mut |_, _, layer| match layer {
            AnyLinear::Lora(l) if !l.is_merged() => l.try_merge(),
            _ => Ok(()),
        })
    }

    /// Restores every merged layer's base bit for bit.
    fn try_unmerge_adapters(&mut self) -> Result<()> {
        self.visit_linears_mut(&mut |_, _, layer| match layer {
            AnyLinear::Lora(l) if l.is_merged() => l.try_unmerge(),
            _ => Ok(()),
        })
    }

    /// Replaces every adapted layer by a plain one: its base with the
    /// active adapters merged in as f32 (`merge`), or its base alone.
    fn try_unload_adapters(&mut self, merge: bool) -> Result<()> {
        self.visit_linears_mut(&mut |_, _, layer| {
            if let AnyLinear::Lora(l) = layer {
                *layer = l.try_unloaded(merge)?;
            }
            Ok(())
        })
    }

    /// Freezes every parameter but the adapters' matrices.
    fn freeze_all_but_adapters(&self) {
        self.visit_parameters("", &mut |_, p| p.set_requires_grad(false));
        self.visit_linears(&mut |_, _, layer| {
            if let AnyLinear::Lora(l) = layer {
                for (_, a) in l.adapters() {
                    a.lora_a().set_requires_grad(true);
                    a.lora_b().set_requires_grad(true);
                }
            }
        });
    }
}

/// The layer as a [`LoraLinear`], wrapping it first if it is plain.
fn wrap(layer: &mut AnyLinear) -> Result<&mut LoraLinear> {
    if !matches!(layer, AnyLinear::Lora(_)) {
        // A clone shares the weight (a parameter handle or a shared matrix).
        *layer = AnyLinear::Lora(Box::new(LoraLinear::try_new(layer.clone())?));
    }
    match layer {
        AnyLinear::Lora(l) => Ok(l),
        _ => unreachable!("wrapped above"),
    }
}

/// Adapter names become parts of parameter names: no dots, not empty.
fn check_adapter_name(name: &str) -> Result<()> {
    if name.is_empty() || name.contains('.') || name.contains('/') {
        return Err(Error::invalid(
            "LoraModel",
            format!("adapter name {name:?} must be non-empty without '.' or '/'"),
        ));
    }
    Ok(())
}
