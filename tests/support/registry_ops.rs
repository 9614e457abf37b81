//! The elementwise ops of the default registry, as the test suites apply
//! them: asked of the registry (names, arity, safe input domain, example
//! instances), never kept in a list by hand. An op added with one
//! registration line is picked up by every suite that uses this module.

#![allow(dead_code)]

use std::sync::{Arc, OnceLock};

use rand::Rng;
use rand_chacha::ChaCha8Rng;
use retrograd::{Differentiable, OpFacts, OpRegistry, Result, Tensor, Var};

/// One instance of a registered elementwise op.
#[derive(Clone)]
pub struct Instance {
    /// The registry name, with ` (example)` for the example instance.
    pub label: String,
    /// The registry name.
    pub name: String,
    /// The op to record.
    pub op: Arc<dyn Differentiable>,
    /// What the op declares about itself.
    pub facts: OpFacts,
}

impl Instance {
    /// The number of inputs.
    pub fn arity(&self) -> usize {
        self.facts
            .arity
            .expect("elementwise ops have a fixed arity")
    }

    /// Records the op on `args`.
    pub fn apply<'g>(&self, args: &[&Var<'g>]) -> Result<Var<'g>> {
        args[0].graph().record(self.op.clone(), args)
    }

    /// Whether one element's operand values are a safe random input.
    pub fn admits(&self, values: &[f64]) -> bool {
        self.facts.admits(values)
    }
}

/// Every elementwise op of the default registry whose output is a float
/// (the ones with a gradient; a comparison's bool output is left out, as
/// the op itself says through `non_float_output`): its example instance
/// (typical parameters) and, where it works without parameters, the
/// registered instance too (clamp's registered instance has no bounds).
pub fn elementwise() -> &'static [Instance] {
    static ALL: OnceLock<Vec<Instance>> = OnceLock::new();
    ALL.get_or_init(|| {
        let registry = OpRegistry::default_shared();
        let mut all = Vec::new();
        for name in registry.names() {
            let op = registry.get(name).expect("a listed name").clone();
            let facts = op.facts();
            if !facts.elementwise || op.non_float_output() {
                continue;
            }
            let arity = facts.arity.expect("elementwise ops have a fixed arity");
            let probe: Vec<Tensor> = (0..arity).map(|_| Tensor::scalar(0.5)).collect();
            let probe: Vec<&Tensor> = probe.iter().collect();
            if op.forward(&probe).is_ok() {
                all.push(Instance {
                    label: name.to_string(),
                    name: name.to_string(),
                    op: op.clone(),
                    facts: facts.clone(),
                });
            }
            if let Some(example) = facts.example.clone() {
                all.push(Instance {
                    label: format!("{name} (example)"),
                    name: name.to_string(),
                    op: example,
                    facts,
                });
            }
        }
        all
    })
}

/// The instances taking `arity` inputs.
pub fn with_arity(arity: usize) -> Vec<&'static Instance> {
    elementwise()
        .iter()
        .filter(|i| i.arity() == arity)
        .collect()
}

/// One element's operand values drawn from the op's safe domain: uniform
/// in [-3, 3] per operand, rejected until the domain admits them.
pub fn sample(instance: &Instance, rng: &mut ChaCha8Rng) -> Vec<f64> {
    for _ in 0..10_000 {
        let values: Vec<f64> = (0..instance.arity())
            .map(|_| rng.random_range(-3.0..3.0))
            .collect();
        if instance.admits(&values) {
            return values;
        }
    }
    panic!("{}: no admitted input in 10,000 draws", instance.label)
}

/// `n` elements per operand, drawn with [`sample`]: one tensor of shape
/// `[n]` per input.
pub fn sample_inputs(instance: &Instance, n: usize, rng: &mut ChaCha8Rng) -> Vec<Tensor> {
    let mut columns = vec![Vec::with_capacity(n); instance.arity()];
    for _ in 0..n {
        for (column, v) in columns.iter_mut().zip(sample(instance, rng)) {
            column.push(v);
        }
    }
    columns
        .into_iter()
        .map(|c| Tensor::from_vec(c, &[n]).expect("a 1-d shape"))
        .collect()
}

/// One registered op that is not elementwise but declares sample inputs
/// ([`OpFacts::sample_inputs`]): convolutions, poolings, normalisations.
#[derive(Clone)]
pub struct Structured {
    /// The registry name.
    pub name: String,
    /// The op to record: the example instance, else the registered one.
    pub op: Arc<dyn Differentiable>,
    /// What the op declares about itself.
    pub facts: OpFacts,
}

impl Structured {
    /// Valid inputs drawn from `seed`.
    pub fn inputs(&self, seed: u64) -> Vec<Tensor> {
        (self
            .facts
            .sample_inputs
            .expect("a structured op has sample inputs"))(seed)
    }

    /// Whether the op's output is an index or a mask (no gradient), as the
    /// op says of itself.
    pub fn non_float_output(&self) -> bool {
        self.op.non_float_output()
    }

    /// Records the op on `args`.
    pub fn apply<'g>(&self, args: &[Var<'g>]) -> Result<Var<'g>> {
        let refs: Vec<&Var<'g>> = args.iter().collect();
        args[0].graph().record(self.op.clone(), &refs)
    }

    /// The float sample inputs: the ones differentiated. The others (bool
    /// masks, i64 indices) are constants, put back in place by
    /// [`apply_with`](Self::apply_with).
    pub fn float_inputs(inputs: &[Tensor]) -> Vec<Tensor> {
        inputs.iter().filter(|t| t.is_float()).cloned().collect()
    }

    /// Records the op on `floats` (variables for the float inputs, in
    /// order) with the non-float inputs of `all` as constants.
    pub fn apply_with<'g>(&self, floats: &[Var<'g>], all: &[Tensor]) -> Result<Var<'g>> {
        let graph = floats[0].graph();
        let mut floats = floats.iter();
        let args: Vec<Var<'g>> = all
            .iter()
            .map(|t| {
                if t.is_float() {
                    floats.next().expect("one variable per float input").clone()
                } else {
                    graph.constant(t.clone())
                }
            })
            .collect();
        self.apply(&args)
    }
}

/// Every op of the default registry that declares sample inputs.
pub fn structured() -> Vec<Structured> {
    let registry = OpRegistry::default_shared();
    registry
        .names()
        .into_iter()
        .filter_map(|name| {
            let op = registry.get(name).expect("a listed name").clone();
            let facts = op.facts();
            facts.sample_inputs?;
            Some(Structured {
                name: name.to_string(),
                op: facts.example.clone().unwrap_or(op),
                facts,
            })
        })
        .collect()
}
