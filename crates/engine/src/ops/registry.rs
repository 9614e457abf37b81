//! [`OpRegistry`]: op name -> op.
//!
//! An unknown name is a typed error in every build profile: the textbook chapter's
//! self-check 4 shows what a debug-only assertion turns into in release.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use super::Differentiable;
use crate::base::error::{Error, Result};

/// Maps op names to ops. The default registry holds every built-in under
/// PyTorch's name; user ops are registered the same way.
///
/// ```
/// use retrograd::{OpRegistry, Error};
/// let reg = OpRegistry::with_builtins();
/// assert_eq!(reg.get("mul")?.name(), "mul");
/// match reg.get("mull") {
///     Err(Error::UnregisteredOp { name, suggestion }) => {
///         assert_eq!(name, "mull");
///         assert_eq!(suggestion.as_deref(), Some("mul"));
///     }
///     _ => unreachable!(),
/// }
/// # Ok::<(), retrograd::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct OpRegistry {
    ops: HashMap<String, Arc<dyn Differentiable>>,
}

impl OpRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// A registry holding every built-in op.
    pub fn with_builtins() -> Self {
        let mut reg = Self::new();
        super::register_builtins(&mut reg);
        reg
    }

    /// The shared default registry (built once per process).
    pub fn default_shared() -> Arc<OpRegistry> {
        static DEFAULT: OnceLock<Arc<OpRegistry>> = OnceLock::new();
        DEFAULT
            .get_or_init(|| Arc::new(Self::with_builtins()))
            .clone()
    }

    /// Registers `op` under `name`; a name already taken is an error.
    pub fn register(&mut self, name: &str, op: impl Differentiable) -> Result<()> {
        self.register_shared(name, Arc::new(op))
    }

    /// Registers an op already behind an `Arc`.
    pub fn register_shared(&mut self, name: &str, op: Arc<dyn Differentiable>) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("register", "an op name cannot be empty"));
        }
        if self.ops.contains_key(name) {
            return Err(Error::DuplicateOp {
                name: name.to_string(),
            });
        }
        self.ops.insert(name.to_string(), op);
        Ok(())
    }

    /// Registers `op` under `name`, replacing any op registered there; returns
    /// the old one. An empty name is an error, as in [`register`](Self::register).
    pub fn replace(
        &mut self,
        name: &str,
        op: impl Differentiable,
    ) -> Result<Option<Arc<dyn Differentiable>>> {
        if name.is_empty() {
            return Err(Error::invalid("replace", "an op name cannot be empty"));
        }
        Ok(self.ops.insert(name.to_string(), Arc::new(op)))
    }

    /// Registers a built-in under its own name (built-in names are unique by construction).
    pub(crate) fn add_builtin(&mut self, op: impl Differentiable) {
        let name = op.name().to_string();
        let previous = self.ops.insert(name.clone(), Arc::new(op));
        debug_assert!(previous.is_none(), "built-in op `{name}` registered twice");
    }

    /// The op registered under `name`, or `Error::UnregisteredOp` naming it
    /// and the closest registered name.
    pub fn get(&self, name: &str) -> Result<&Arc<dyn Differentiable>> {
        self.ops.get(name).ok_or_else(|| Error::UnregisteredOp {
            name: name.to_string(),
            suggestion: self.closest(name),
        })
    }

    /// Whether `name` is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.ops.contains_key(name)
    }

    /// Every registered name, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.ops.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// The number of registered ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no op is registered.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// The registered name closest to `name` by edit distance, if close enough to be a typo.
    fn closest(&self, name: &str) -> Option<String> {
        let limit = (name.chars().count() / 3).max(2);
        // Case differences count as nothing first (`Relu` means `relu`, not `gelu`).
        let lower = name.to_lowercase();
        self.ops
            .keys()
            .map(|k| {
                (
                    edit_distance(&lower, &k.to_lowercase()),
                    edit_distance(name, k),
                    k,
                )
            })
            .filter(|(_, d, _)| *d <= limit)
            .min_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)).then_with(|| a.2.cmp(b.2)))
            .map(|(_, _, k)| k.clone())
    }
}

impl std::fmt::Debug for OpRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpRegistry")
            .field("ops", &self.names())
            .finish()
    }
}

/// Edit distance between two strings (by chars), with a swap of two
/// adjacent chars counted as one edit (optimal string alignment): `rleu`
/// is one typo away from `relu`, and two from `elu`.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    // Three rows of the dynamic programme: two back, one back, current.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 0..a.len() {
        cur[0] = i + 1;
        for j in 0..b.len() {
            let sub = prev[j] + usize::from(a[i] != b[j]);
            let mut best = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
            if i > 0 && j > 0 && a[i] == b[j - 1] && a[i - 1] == b[j] {
                best = best.min(before[j - 1] + 1);
            }
            cur[j + 1] = best;
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("relu", "relu"), 0);
        assert_eq!(edit_distance("rleu", "relu"), 1);
        assert_eq!(edit_distance("rleu", "elu"), 2);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }

    #[test]
    fn unknown_names_are_typed_errors_with_suggestions() {
        let reg = OpRegistry::with_builtins();
        assert!(matches!(
            reg.get("tanhh"),
            Err(Error::UnregisteredOp { suggestion: Some(s), .. }) if s == "tanh"
        ));
        assert!(matches!(
            reg.get("completely_unknown_op"),
            Err(Error::UnregisteredOp {
                suggestion: None,
                ..
            })
        ));
    }

    #[test]
    fn duplicates_need_replace() {
        let mut reg = OpRegistry::with_builtins();
        assert!(matches!(
            reg.register("mul", crate::ops::rule::Binary(crate::ops::arith::Mul)),
            Err(Error::DuplicateOp { .. })
        ));
        assert!(reg
            .replace("mul", crate::ops::rule::Binary(crate::ops::arith::Mul))
            .unwrap()
            .is_some());
        assert!(reg
            .replace("", crate::ops::rule::Binary(crate::ops::arith::Mul))
            .is_err());
    }
}
