//! Parameter groups, as PyTorch's optimizers take them
//! (`[{'params': decay, 'weight_decay': 0.1}, {'params': no_decay,
//! 'weight_decay': 0.0}]`): each group overrides some hyperparameters for
//! its parameters. A group's learning rate is a multiple of the optimizer's
//! ([`ParamGroup::lr_scale`]), so a schedule that sets the optimizer's rate
//! (`Optimizer::set_lr`) drives every group, keeping their ratios, as
//! PyTorch's schedulers scale each group's `initial_lr`.
//!
//! [`decay_groups`] splits a model's parameters the way nanoGPT's
//! `configure_optimizers` does: weight decay on matrices (rank >= 2), none on
//! biases, norm gains and other vectors or scalars.

use std::collections::HashSet;

use super::{check_non_negative, NamedParameter};
use crate::base::error::Result;
use crate::nn::Parameter;

/// A group of parameters with its own hyperparameters (see the module docs).
///
/// Bare parameters (no name) are numbered by their position across all the
/// groups of an optimizer (`"0"`, `"1"`, ...), as PyTorch numbers its state.
///
/// ```
/// use retrograd::{Tensor, nn::Parameter, optim::ParamGroup};
/// let w = Parameter::new(Tensor::zeros(&[2, 2], retrograd::DType::F32)?);
/// let g = ParamGroup::new([("w", w)]).weight_decay(0.1).lr_scale(0.5);
/// assert_eq!((g.len(), g.weight_decay, g.lr_scale), (1, Some(0.1), 0.5));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ParamGroup {
    params: Vec<(Option<String>, Parameter)>,
    /// The group's weight decay; `None` takes the optimizer config's.
    pub weight_decay: Option<f64>,
    /// The group's learning rate as a multiple of the optimizer's (1.0 by default).
    pub lr_scale: f64,
}

impl ParamGroup {
    /// A group of `params` (bare parameters or `(name, parameter)` pairs)
    /// with the optimizer's hyperparameters until overridden.
    pub fn new<P: NamedParameter>(params: impl IntoIterator<Item = P>) -> Self {
        ParamGroup {
            params: params.into_iter().map(NamedParameter::into_parts).collect(),
            weight_decay: None,
            lr_scale: 1.0,
        }
    }

    /// Sets the group's weight decay (its kind, L2 or decoupled, is the optimizer's).
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = Some(weight_decay);
        self
    }

    /// Sets the group's learning rate to `scale` times the optimizer's.
    pub fn lr_scale(mut self, scale: f64) -> Self {
        self.lr_scale = scale;
        self
    }

    /// The number of parameters in the group.
    pub fn len(&self) -> usize {
        self.params.len()
    }

    /// Whether the group has no parameter.
    pub fn is_empty(&self) -> bool {
        self.params.is_empty()
    }

    /// The group's parameter names (`None` for a bare parameter, named by
    /// its position once the optimizer holds it).
    pub fn names(&self) -> impl Iterator<Item = Option<&str>> + '_ {
        self.params.iter().map(|(n, _)| n.as_deref())
    }
}

/// Named parameters, as `Module::parameters` returns them.
pub type NamedParameters = Vec<(String, Parameter)>;

/// Groups flattened for an optimizer: the named parameters in group order,
/// per parameter the index of its group, and per group its settings.
pub(crate) struct Flattened {
    pub params: NamedParameters,
    pub group_of: Vec<usize>,
    pub groups: Vec<GroupSettings>,
}

/// A group's hyperparameters once resolved against the optimizer's config.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GroupSettings {
    pub weight_decay: f64,
    pub lr_scale: f64,
}

/// Flattens groups into named parameters (bare ones numbered across all
/// groups) and, per parameter, the index of its group's settings; checks
/// each group's hyperparameters (`default_decay` stands for a group without
/// its own).
pub(crate) fn flatten_groups(
    op: &'static str,
    groups: impl IntoIterator<Item = ParamGroup>,
    default_decay: f64,
) -> Result<Flattened> {
    let (mut named, mut group_of, mut settings) = (Vec::new(), Vec::new(), Vec::new());
    for (gi, group) in groups.into_iter().enumerate() {
        let weight_decay = group.weight_decay.unwrap_or(default_decay);
        check_non_negative(op, &format!("group {gi}'s weight_decay"), weight_decay)?;
        check_non_negative(op, &format!("group {gi}'s lr_scale"), group.lr_scale)?;
        settings.push(GroupSettings {
            weight_decay,
            lr_scale: group.lr_scale,
        });
        for (name, p) in group.params {
            let name = name.unwrap_or_else(|| named.len().to_string());
            named.push((name, p));
            group_of.push(gi);
        }
    }
    Ok(Flattened {
        params: super::collect_named(op, named)?,
        group_of,
        groups: settings,
    })
}

/// Splits parameters as nanoGPT's `configure_optimizers` does: those of
/// rank >= 2 (weight matrices, embeddings, convolution kernels) into the
/// first list, the rest (biases, norm gains and shifts, scalars) into the
/// second. A parameter listed twice (tied weights) is kept once, under its
/// first name. Bare parameters are named by their position in `params`.
///
/// ```
/// use retrograd::{DType, Tensor, nn::Parameter, optim::split_by_rank};
/// let w = Parameter::new(Tensor::zeros(&[3, 2], DType::F32)?);
/// let b = Parameter::new(Tensor::zeros(&[3], DType::F32)?);
/// let (decay, no_decay) = split_by_rank([("w", w.clone()), ("b", b), ("tied", w)]);
/// assert_eq!(decay.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["w"]);
/// assert_eq!(no_decay.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(), ["b"]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn split_by_rank<P: NamedParameter>(
    params: impl IntoIterator<Item = P>,
) -> (NamedParameters, NamedParameters) {
    let mut seen = HashSet::new();
    let (mut decay, mut no_decay) = (Vec::new(), Vec::new());
    for (i, p) in params.into_iter().enumerate() {
        let (name, p) = p.into_named(i);
        if !seen.insert(p.id()) {
            continue;
        }
        if p.shape().len() >= 2 {
            decay.push((name, p));
        } else {
            no_decay.push((name, p));
        }
    }
    (decay, no_decay)
}

/// nanoGPT's two groups: the parameters of rank >= 2 with `weight_decay`,
/// the others with none ([`split_by_rank`]); pass them to
/// [`Adam::with_groups`](super::Adam::with_groups).
///
/// ```
/// use retrograd::{DType, Tensor, nn::{Linear, Forward, Module, Parameter}, optim::{decay_groups, Adam, AdamConfig}};
/// let weight = Parameter::new(Tensor::zeros(&[3, 4], DType::F32)?);
/// let bias = Parameter::new(Tensor::zeros(&[3], DType::F32)?);
/// let layer = Linear::from_parameters(weight, Some(bias))?;
/// let [decay, no_decay] = decay_groups(layer.parameters(), 0.1);
/// assert_eq!(decay.names().collect::<Vec<_>>(), [Some("weight")]);
/// assert_eq!(no_decay.names().collect::<Vec<_>>(), [Some("bias")]);
/// let opt = Adam::with_groups([decay, no_decay], AdamConfig::adamw().lr(1e-3))?;
/// assert_eq!(opt.weight_decay_of("weight"), Some(0.1));
/// assert_eq!(opt.weight_decay_of("bias"), Some(0.0));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn decay_groups<P: NamedParameter>(
    params: impl IntoIterator<Item = P>,
    weight_decay: f64,
) -> [ParamGroup; 2] {
    let (decay, no_decay) = split_by_rank(params);
    [
        ParamGroup::new(decay).weight_decay(weight_decay),
        ParamGroup::new(no_decay).weight_decay(0.0),
    ]
}
