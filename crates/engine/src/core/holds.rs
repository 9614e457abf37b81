//! [`Holds`]: what an op keeps besides its inputs, as a compiled step
//! must know it. A compiled step replays each node on new input values;
//! anything the op carries itself (indices stored in it, a tensor, a
//! closure) would silently be the captured run's. So every op says what it
//! holds, and one that says nothing is refused (the safe default).

/// What an op holds besides its inputs
/// ([`Differentiable::holds`](crate::Differentiable::holds)).
///
/// ```
/// use retrograd::{Differentiable, Holds, OpRegistry};
/// use retrograd::ops::nn::{cross_entropy::CrossEntropy, CrossEntropyOptions};
/// // Every built-in declares; cross-entropy with its targets stored in the
/// // op holds data, the registered form (targets as an input) does not.
/// let reg = OpRegistry::with_builtins();
/// assert_eq!(reg.get("cross_entropy")?.holds(), Holds::Settings);
/// let stored = CrossEntropy::new(&[1usize, 0], &CrossEntropyOptions::default());
/// assert!(matches!(stored.holds(), Holds::Data(_)));
/// assert!(stored.holds().refusal().unwrap().contains("targets"));
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Settings only: axes, shapes, a reduction, an epsilon, a fill value,
    /// a comparison. They are part of what the op is, fixed at capture as
    /// the function's control flow is (and as `jax.jit` fixes its static
    /// arguments); the op replays on new inputs. Values an op saves from
    /// its forward count as settings only when the op checks that they
    /// belong to the output it is given, or drops them in
    /// [`without_saved`](crate::Differentiable::without_saved).
    Settings,
    /// Data that can differ between runs (indices or targets stored in the
    /// op, a tensor, a closure): a compiled step refuses to capture the op
    /// with `Error::NotReplayable` and this text, which says what the data
    /// is and how to pass it as an input instead.
    Data(String),
    /// The op has not said (the trait's default): a compiled step refuses
    /// it, since it cannot know whether a replay would reuse stale data.
    Undeclared,
}

impl Holds {
    /// Data with this description.
    pub fn data(what: impl Into<String>) -> Self {
        Holds::Data(what.into())
    }

    /// Why a compiled step cannot replay an op holding this, or `None`
    /// when it can.
    pub fn refusal(&self) -> Option<String> {
        match self {
            Holds::Settings => None,
            Holds::Data(what) => Some(format!(
                "it holds {what}, which a replay would reuse from the captured run"
            )),
            Holds::Undeclared => Some(
                "it does not declare what it holds besides its inputs \
                 (implement Differentiable::holds), so a replay might reuse the captured run's data"
                    .into(),
            ),
        }
    }
}
