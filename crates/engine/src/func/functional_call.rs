//! A module run with parameters it is given rather than its own
//! ([`try_functional_call`]), the parameters of several copies of a model
//! stacked into one batch ([`try_stack_module_state`]), and per-sample
//! gradients ([`try_per_sample_gradients`]): the pieces that let `vmap`
//! run an ensemble as one batched model and give each example its own
//! gradient.

use crate::autograd::VMap;
use crate::base::error::{Error, Result};
use crate::core::graph::{Graph, Var};
use crate::core::Randomness;
use crate::nn::Module;
use crate::tensor::Tensor;
use crate::{grad, GradOptions};

/// Runs `f` with `module`'s parameters read as `params` (one value per
/// parameter, in [`Module::parameters`] order, with its shape and dtype):
/// every `graph.param(p)` of the module in `params`' graph returns the
/// given value, so gradients flow to `params` and not to the module's own
/// tensors. The binding lasts as long as the graph.
///
/// ```
/// use retrograd::func::try_functional_call;
/// use retrograd::nn::{Forward, Linear};
/// use retrograd::{Graph, Tensor};
/// let layer = Linear::new(2, 1)?;
/// let g = Graph::new();
/// let w = g.variable(Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2])?);
/// let b = g.variable(Tensor::from_vec(vec![0.5f32], &[1])?);
/// let x = g.constant(Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?);
/// let y = try_functional_call(&layer, &[w, b], || layer.forward(&x))?;
/// assert_eq!(y.value().to_f64_vec(), vec![11.5]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_functional_call<'g, M, R>(
    module: &M,
    params: &[Var<'g>],
    f: impl FnOnce() -> Result<R>,
) -> Result<R>
where
    M: Module + ?Sized,
{
    let own = module.parameters();
    if own.len() != params.len() {
        return Err(Error::invalid(
            "functional_call",
            format!(
                "the module has {} parameters but {} values were given",
                own.len(),
                params.len()
            ),
        ));
    }
    for ((name, p), v) in own.iter().zip(params) {
        let value = p.value();
        if value.shape() != v.shape() || value.dtype() != v.dtype() {
            return Err(Error::invalid(
                "functional_call",
                format!(
                    "parameter `{name}` is {:?} {:?} but its value is {:?} {:?}",
                    value.dtype(),
                    value.shape(),
                    v.dtype(),
                    v.shape()
                ),
            ));
        }
    }
    if let Some(first) = params.first() {
        let graph = first.graph();
        for ((_, p), v) in own.iter().zip(params) {
            graph.try_bind_param(p, v)?;
        }
    }
    f()
}

/// Each parameter of `models` (copies of one architecture) stacked along
/// a new axis 0, by name, in [`Module::parameters`] order: the inputs of
/// an ensemble run as one model with `vmap` and [`try_functional_call`].
///
/// ```
/// use retrograd::func::try_stack_module_state;
/// use retrograd::nn::Linear;
/// let models = [Linear::new(3, 2)?, Linear::new(3, 2)?];
/// let stacked = try_stack_module_state(&models)?;
/// assert_eq!(stacked[0].0, "weight");
/// assert_eq!(stacked[0].1.shape(), &[2, 2, 3]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_stack_module_state<M: Module>(models: &[M]) -> Result<Vec<(String, Tensor)>> {
    let Some(first) = models.first() else {
        return Err(Error::invalid("stack_module_state", "no models given"));
    };
    let names: Vec<(String, Vec<usize>)> = first
        .parameters()
        .into_iter()
        .map(|(n, p)| (n, p.value().shape().to_vec()))
        .collect();
    let per_model: Vec<Vec<(String, Tensor)>> = models
        .iter()
        .map(|m| {
            m.parameters()
                .into_iter()
                .map(|(n, p)| (n, p.value()))
                .collect()
        })
        .collect();
    for (i, params) in per_model.iter().enumerate() {
        let same = params.len() == names.len()
            && params
                .iter()
                .zip(&names)
                .all(|((n, t), (m, s))| n == m && t.shape() == s.as_slice());
        if !same {
            return Err(Error::invalid(
                "stack_module_state",
                format!("model {i}'s parameters differ from model 0's in names or shapes"),
            ));
        }
    }
    let graph = Graph::new();
    names
        .iter()
        .enumerate()
        .map(|(k, (name, _))| {
            let parts: Vec<Var<'_>> = per_model
                .iter()
                .map(|params| graph.constant(params[k].1.clone()))
                .collect();
            let refs: Vec<&Var<'_>> = parts.iter().collect();
            Ok((name.clone(), Var::try_stack(&refs, 0)?.into_value()))
        })
        .collect()
}

/// The gradient of `loss` for each example separately, with respect to
/// each of `module`'s parameters: `[batch, ...parameter shape]` per
/// parameter, by name, in [`Module::parameters`] order. `loss` computes
/// one example's loss from its slices of `data` (each batched along axis
/// 0; a model that wants a batch axis gets it with `unsqueeze(0)`) through
/// the module's own forward. This is `vmap` of a gradient: one batched
/// forward and backward, not a loop over examples. Dropout in the model
/// follows `randomness`.
///
/// ```
/// use retrograd::func::try_per_sample_gradients;
/// use retrograd::nn::{Forward, Linear};
/// use retrograd::func::Randomness;
/// use retrograd::Tensor;
/// let layer = Linear::new(2, 1)?;
/// let x = Tensor::from_vec(vec![1.0f32, 0.0, 0.0, 2.0], &[2, 2])?;
/// // loss = y (one output per example): d loss / d weight = x.
/// let grads = try_per_sample_gradients(&layer, |v| {
///     Ok(layer.forward(&v[0].unsqueeze(0))?.sum())
/// }, &[&x], Randomness::Error)?;
/// assert_eq!(grads[0].1.to_f64_vec(), vec![1.0, 0.0, 0.0, 2.0]);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn try_per_sample_gradients<M, F>(
    module: &M,
    loss: F,
    data: &[&Tensor],
    randomness: Randomness,
) -> Result<Vec<(String, Tensor)>>
where
    M: Module + ?Sized,
    F: for<'s> Fn(&[Var<'s>]) -> Result<Var<'s>>,
{
    let params = module.parameters();
    let graph = Graph::new();
    let mut inputs: Vec<Var<'_>> = params
        .iter()
        .map(|(_, p)| graph.constant(p.value()))
        .collect();
    inputs.extend(data.iter().map(|t| graph.constant((*t).clone())));
    let refs: Vec<&Var<'_>> = inputs.iter().collect();
    let mut in_axes = vec![None; params.len()];
    in_axes.extend(std::iter::repeat_n(Some(0), data.len()));
    let k = params.len();
    let grads = VMap::new()
        .in_axes(&in_axes)
        .randomness(randomness)
        .try_call(|v| gradient_of_example(module, &loss, k, v), &refs)?;
    Ok(params
        .into_iter()
        .zip(grads)
        .map(|((name, _), g)| (name, g.into_value()))
        .collect())
}

/// One example's loss gradients with respect to the module's parameters,
/// `v[..k]`, given its data `v[k..]`: recorded, so they can be batched.
fn gradient_of_example<'s, M, F>(
    module: &M,
    loss: &F,
    k: usize,
    v: &[Var<'s>],
) -> Result<Vec<Var<'s>>>
where
    M: Module + ?Sized,
    F: for<'t> Fn(&[Var<'t>]) -> Result<Var<'t>>,
{
    try_functional_call(module, &v[..k], || {
        let l = loss(&v[k..])?;
        let wrt: Vec<&Var<'s>> = v[..k].iter().collect();
        let opts = GradOptions::new().create_graph(true).allow_unused(true);
        grad(&[&l], &wrt, &opts)
    })
}
