//! The registered optimizer kinds: the names [`Optimizer::kind`] returns and
//! checkpoints record, and a way to build any of them from the few settings
//! a command line gives (`--optimizer NAME --lr ...`).

use super::{NamedParameters, Optimizer};
use crate::base::error::{Error, Result};

/// The settings a command line gives any optimizer. Each kind takes those
/// it has and ignores the others; an unset one takes the kind's default.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerSettings {
    /// Learning rate.
    pub lr: f64,
    /// Weight decay (`None`: the kind's default, 0.01 for `adamw`, else 0).
    pub weight_decay: Option<f64>,
    /// Momentum, for `sgd` and `rmsprop` (`None`: 0).
    pub momentum: Option<f64>,
}

impl OptimizerSettings {
    /// Learning rate `lr`, every other setting at the kind's default.
    pub fn new(lr: f64) -> Self {
        OptimizerSettings {
            lr,
            weight_decay: None,
            momentum: None,
        }
    }

    /// The weight decay, or the kind's `default` when unset.
    pub(crate) fn decay_or(&self, default: f64) -> f64 {
        self.weight_decay.unwrap_or(default)
    }

    /// The momentum, or the kind's `default` when unset.
    pub(crate) fn momentum_or(&self, default: f64) -> f64 {
        self.momentum.unwrap_or(default)
    }
}

/// One registered optimizer kind (see [`optimizer_kinds`]).
#[derive(Clone, Copy)]
pub struct OptimizerKind {
    /// Its name: what [`Optimizer::kind`] returns and checkpoints record.
    pub name: &'static str,
    /// One line on what it is.
    pub summary: &'static str,
    pub(crate) build: fn(NamedParameters, &OptimizerSettings) -> Result<Box<dyn Optimizer>>,
}

impl OptimizerKind {
    /// An optimizer of this kind over `params`.
    pub fn build(
        &self,
        params: NamedParameters,
        settings: &OptimizerSettings,
    ) -> Result<Box<dyn Optimizer>> {
        (self.build)(params, settings)
    }
}

impl std::fmt::Debug for OptimizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OptimizerKind")
            .field("name", &self.name)
            .finish()
    }
}

/// Every registered optimizer kind, in registration order.
///
/// ```
/// let names: Vec<&str> = retrograd::optim::optimizer_kinds().map(|k| k.name).collect();
/// assert_eq!(names, ["sgd", "adam", "adamw", "rmsprop", "adagrad", "lbfgs"]);
/// ```
pub fn optimizer_kinds() -> impl Iterator<Item = &'static OptimizerKind> {
    super::REGISTERED.iter().flat_map(|kinds| kinds.iter())
}

/// The registered kind named `name` (ASCII case ignored); an unknown name
/// is an error listing the registered ones.
///
/// ```
/// use retrograd::{DType, Tensor, nn::Parameter, optim::{optimizer_kind, OptimizerSettings}};
/// let w = Parameter::new(Tensor::zeros(&[2], DType::F32)?);
/// let opt = optimizer_kind("RMSprop")?.build(vec![("w".into(), w)], &OptimizerSettings::new(0.01))?;
/// assert_eq!(opt.kind(), "rmsprop");
/// assert!(optimizer_kind("adamax").unwrap_err().to_string().contains("sgd, adam, adamw"));
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn optimizer_kind(name: &str) -> Result<&'static OptimizerKind> {
    optimizer_kinds()
        .find(|k| k.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            let known: Vec<&str> = optimizer_kinds().map(|k| k.name).collect();
            Error::invalid(
                "optimizer_kind",
                format!(
                    "unknown optimizer `{name}` (registered: {})",
                    known.join(", ")
                ),
            )
        })
}
