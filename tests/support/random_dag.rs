//! Random DAGs of registered ops on compatible shapes, for `tests/properties.rs`.
//!
//! A [`Dag`] is planned once, in f64, from a list of choice words: each word
//! seeds the choice of one op, its operands (often earlier nodes, so values get
//! several consumers; sometimes fresh variables or constants shaped to
//! broadcast, concatenate or multiply with them) and its parameters. The
//! planner runs every candidate and keeps only those whose values stay in the
//! smooth part of the op: log/sqrt/pow bases at least 0.2, exp below 3,
//! divisors at least 0.2 away from 0, layer-norm groups with variance at
//! least 0.05, kinks (relu, abs, clamp, maximum) and extremum ties at least
//! [`MARGIN`] away. Finite differences, f32 rounding and tangents then never
//! cross a kink. [`Size`] sets how big the tensors get.
//!
//! [`Dag::build`] replays the plan on any graph in f32 or f64 and reduces it
//! to the scalar `sum_k sum(node_k * w_k)` over the chosen outputs, with fixed
//! random weights `w_k` so that errors in different elements cannot cancel.
//! Sinks left out of that sum stay in the graph as dead nodes.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use retrograd::kernels::parallel::PARALLEL_THRESHOLD;
use retrograd::{DType, Graph, Result, Tensor, Var};

use crate::registry_ops::{self, Instance};

/// How far values keep from kinks, domain edges and ties.
pub const MARGIN: f64 = 0.05;
/// The largest magnitude an intermediate value may reach.
const MAX_ABS: f64 = 30.0;

/// How big the planned tensors are.
#[derive(Clone, Copy, Debug)]
pub struct Size {
    /// Dims that new shapes draw from.
    pub dims: &'static [usize],
    /// The largest rank of the first inputs.
    pub max_input_rank: usize,
    /// The largest element count of a planned value.
    pub max_numel: usize,
    /// The most choice words (ops) per DAG.
    pub max_ops: usize,
    /// The fewest elements of the first input.
    pub first_input_min_numel: usize,
}

impl Size {
    /// Small tensors (at most 64 elements), cheap enough for finite differences.
    pub const SMALL: Size = Size {
        dims: &[1, 2, 3, 4],
        max_input_rank: 3,
        max_numel: 64,
        max_ops: 24,
        first_input_min_numel: 0,
    };
    /// 0-d first inputs: graphs whose values are mostly scalars, so their
    /// nodes take the ops' scalar lanes in a first-order backward.
    pub const SCALAR: Size = Size {
        dims: &[1, 2, 3],
        max_input_rank: 0,
        max_numel: 16,
        max_ops: 24,
        first_input_min_numel: 0,
    };
    /// Tensors of up to 2^19 elements, the first input at least
    /// `PARALLEL_THRESHOLD` (2^18), so that kernels take their parallel
    /// paths and matmul its larger blockings; fewer ops, since a debug
    /// build is slow.
    pub const LARGE: Size = Size {
        dims: &[1, 3, 64, 257, 1031],
        max_input_rank: 3,
        max_numel: 2 * PARALLEL_THRESHOLD,
        max_ops: 10,
        first_input_min_numel: PARALLEL_THRESHOLD,
    };

    fn dim(&self, rng: &mut ChaCha8Rng) -> usize {
        self.dims[rng.random_range(0..self.dims.len())]
    }
}
/// Candidate ops tried per choice word before the word is skipped.
const ATTEMPTS: usize = 12;

/// One op with its parameters; operands are given by the node.
#[derive(Clone, Debug)]
pub enum Op {
    /// A parameterless op applied by its registry name through `Graph::apply`.
    Registered(&'static str),
    /// The elementwise op `registry_ops::elementwise()[i]`.
    Elementwise(usize),
    Powf(f64),
    AddScalar(f64),
    MulScalar(f64),
    RdivScalar(f64),
    SumAxes(Vec<isize>, bool),
    MeanAxes(Vec<isize>, bool),
    Variance(Vec<isize>, f64, bool),
    LogSumExp(Vec<isize>, bool),
    MaxAxes(Vec<isize>, bool),
    MinAxes(Vec<isize>, bool),
    Softmax(isize),
    LogSoftmax(isize),
    Reshape(Vec<isize>),
    Transpose(isize, isize),
    Permute(Vec<isize>),
    Unsqueeze(isize),
    SqueezeDim(isize),
    Squeeze,
    Narrow(isize, isize, usize),
    Slice(isize, isize, isize, usize),
    Select(isize, usize),
    IndexSelect(isize, Vec<usize>),
    Expand(Vec<usize>),
    Flatten(isize, isize),
    Pad(Vec<isize>, f64),
    Cat(isize),
    Stack(isize),
    /// `matmul` with either operand transposed in its last two dims.
    MatMulTransposed(bool, bool),
    /// `where(condition, a, b)` with a fixed 0/1 condition.
    Where(Tensor),
    Gather(isize, Tensor),
    IndexAdd(isize, Vec<usize>),
    MseLoss,
    BinaryCrossEntropyWithLogits(Tensor),
    /// Normalized shape, whether a weight and a bias operand follow.
    LayerNorm(Vec<usize>, bool, bool),
}

/// A node of the plan, in execution order.
#[derive(Clone, Debug)]
pub enum Node {
    /// The `i`-th input of `build` (a variable in the properties).
    Input(usize),
    /// A frozen constant (stored in f64, converted to the graph's dtype).
    Constant(Tensor),
    /// `op` applied to earlier nodes.
    Apply(Op, Vec<usize>),
}

/// A planned random DAG; see the module docs.
#[derive(Clone, Debug)]
pub struct Dag {
    /// The input values (f64), one per `Node::Input`.
    pub inputs: Vec<Tensor>,
    pub nodes: Vec<Node>,
    /// The nodes summed into the root, each with its weights (f64).
    pub outputs: Vec<(usize, Tensor)>,
    /// The element count of the largest planned value.
    pub largest_numel: usize,
}

impl Dag {
    /// Plans a DAG of small tensors: `words` pick the ops (one word each),
    /// `seed` the values.
    pub fn plan(words: &[u32], seed: u64) -> Dag {
        Self::plan_sized(words, seed, Size::SMALL)
    }

    /// [`plan`](Self::plan) with tensors of `size`.
    pub fn plan_sized(words: &[u32], seed: u64, size: Size) -> Dag {
        let graph = Graph::new();
        let mut planner = Planner {
            graph: &graph,
            size,
            values_rng: ChaCha8Rng::seed_from_u64(seed),
            dag: Dag {
                inputs: Vec::new(),
                nodes: Vec::new(),
                outputs: Vec::new(),
                largest_numel: 0,
            },
            values: Vec::new(),
            live: Vec::new(),
        };
        planner.first_inputs();
        for &word in words {
            planner.step(word);
        }
        planner.choose_outputs();
        planner.dag
    }

    /// The number of op nodes.
    pub fn op_count(&self) -> usize {
        self.nodes
            .iter()
            .filter(|n| matches!(n, Node::Apply(..)))
            .count()
    }

    /// The ops of the plan by name (registry name or `Op` variant), in order.
    pub fn op_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .filter_map(|n| match n {
                Node::Apply(Op::Registered(name), _) => Some(name.to_string()),
                Node::Apply(Op::Elementwise(i), _) => {
                    Some(registry_ops::elementwise()[*i].name.clone())
                }
                Node::Apply(op, _) => {
                    let debug = format!("{op:?}");
                    Some(
                        debug
                            .split(['(', ' '])
                            .next()
                            .unwrap_or_default()
                            .to_string(),
                    )
                }
                _ => None,
            })
            .collect()
    }

    /// The inputs converted to `dtype`.
    pub fn inputs_as(&self, dtype: DType) -> Vec<Tensor> {
        self.inputs.iter().map(|t| t.to_dtype(dtype)).collect()
    }

    /// Replays the plan on `inputs`' graph (in their dtype) and returns the
    /// scalar root.
    pub fn build<'g>(&self, inputs: &[Var<'g>]) -> Result<Var<'g>> {
        let graph = inputs[0].graph();
        let dtype = inputs[0].dtype();
        let mut values: Vec<Var<'g>> = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let value = match node {
                Node::Input(i) => inputs[*i].clone(),
                Node::Constant(t) => graph.constant(t.to_dtype(dtype)),
                Node::Apply(op, args) => {
                    let args: Vec<&Var<'g>> = args.iter().map(|&i| &values[i]).collect();
                    apply(op, &args)?
                }
            };
            values.push(value);
        }
        let mut root: Option<Var<'g>> = None;
        for (node, weights) in &self.outputs {
            let weights = graph.constant(weights.to_dtype(dtype));
            let term = values[*node].try_mul(&weights)?.sum();
            root = Some(match root {
                None => term,
                Some(r) => r.try_add(&term)?,
            });
        }
        Ok(root.expect("a planned DAG has at least one output"))
    }
}

/// Applies `op` to `args` through the public API.
fn apply<'g>(op: &Op, args: &[&Var<'g>]) -> Result<Var<'g>> {
    let x = args[0];
    match op {
        Op::Registered(name) => x.graph().apply(name, args),
        Op::Elementwise(i) => registry_ops::elementwise()[*i].apply(args),
        Op::Powf(e) => Ok(x.powf(*e)),
        Op::AddScalar(c) => Ok(x.add_scalar(*c)),
        Op::MulScalar(c) => Ok(x.mul_scalar(*c)),
        Op::RdivScalar(c) => Ok(x.rdiv_scalar(*c)),
        Op::SumAxes(axes, keepdim) => x.try_sum_axes(axes, *keepdim),
        Op::MeanAxes(axes, keepdim) => x.try_mean_axes(axes, *keepdim),
        Op::Variance(axes, correction, keepdim) => x.try_var(axes, *correction, *keepdim),
        Op::LogSumExp(axes, keepdim) => x.try_logsumexp(axes, *keepdim),
        Op::MaxAxes(axes, keepdim) => x.try_max_axes(axes, *keepdim),
        Op::MinAxes(axes, keepdim) => x.try_min_axes(axes, *keepdim),
        Op::Softmax(axis) => x.try_softmax(*axis),
        Op::LogSoftmax(axis) => x.try_log_softmax(*axis),
        Op::Reshape(shape) => x.try_reshape(shape),
        Op::Transpose(d0, d1) => x.try_transpose(*d0, *d1),
        Op::Permute(dims) => x.try_permute(dims),
        Op::Unsqueeze(dim) => x.try_unsqueeze(*dim),
        Op::SqueezeDim(dim) => x.try_squeeze_dim(*dim),
        Op::Squeeze => Ok(x.squeeze()),
        Op::Narrow(dim, start, len) => x.try_narrow(*dim, *start, *len),
        Op::Slice(dim, start, end, step) => x.try_slice(*dim, *start, *end, *step),
        Op::Select(dim, index) => x.try_select(*dim, *index),
        Op::IndexSelect(dim, index) => {
            x.try_index_select(*dim, &Tensor::from_indices(index, &[index.len()])?)
        }
        Op::Expand(shape) => x.try_expand(shape),
        Op::Flatten(start, end) => x.try_flatten(*start, *end),
        Op::Pad(pads, value) => x.try_pad(pads, *value),
        Op::Cat(dim) => Var::try_cat(args, *dim),
        Op::Stack(dim) => Var::try_stack(args, *dim),
        Op::MatMulTransposed(left, right) => x.try_matmul_transposed(args[1], *left, *right),
        Op::Where(condition) => x.try_where(condition, args[1]),
        Op::Gather(dim, index) => x.try_gather(*dim, index),
        Op::IndexAdd(dim, index) => {
            x.try_index_add(*dim, &Tensor::from_indices(index, &[index.len()])?, args[1])
        }
        Op::MseLoss => x.try_mse_loss(args[1]),
        Op::BinaryCrossEntropyWithLogits(target) => {
            let target = x.graph().constant(target.to_dtype(x.dtype()));
            x.try_binary_cross_entropy_with_logits(&target)
        }
        Op::LayerNorm(shape, has_weight, has_bias) => {
            let weight = has_weight.then(|| args[1]);
            let bias = has_bias.then(|| args[1 + usize::from(*has_weight)]);
            x.try_layer_norm(shape, weight, bias, 1e-5)
        }
    }
}

/// An operand of a candidate op: an existing node, or a new leaf that is
/// added to the plan only if the candidate is kept.
#[derive(Clone)]
enum Operand {
    Existing(usize),
    Fresh { value: Tensor, variable: bool },
}

struct Planner<'p> {
    graph: &'p Graph,
    size: Size,
    values_rng: ChaCha8Rng,
    dag: Dag,
    /// Each node's value in f64 (planning graph constants).
    values: Vec<Var<'p>>,
    /// Whether each node depends on some input (only those are op operands).
    live: Vec<bool>,
}

impl<'p> Planner<'p> {
    fn first_inputs(&mut self) {
        let count = self.values_rng.random_range(1..=3);
        for i in 0..count {
            let min_numel = if i == 0 {
                self.size.first_input_min_numel
            } else {
                0
            };
            let shape = loop {
                let shape = random_shape(&mut self.values_rng, self.size);
                let numel = shape.iter().product::<usize>();
                if (min_numel..=self.size.max_numel).contains(&numel) {
                    break shape;
                }
            };
            let value = self.random_values(&shape);
            self.push_leaf(value, true);
        }
    }

    /// Values in ±[0.25, 2]: away from zero so that relu, abs and division
    /// have room on fresh leaves.
    ///
    /// One ChaCha draw seeds a SplitMix64 stream for the elements: large
    /// tensors would take seconds through `random_range` in a debug build.
    fn random_values(&mut self, shape: &[usize]) -> Tensor {
        let n: usize = shape.iter().product();
        let mut state: u64 = self.values_rng.random();
        let data: Vec<f64> = (0..n)
            .map(|_| {
                state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = state;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                z ^= z >> 31;
                let unit = (z >> 11) as f64 / (1u64 << 53) as f64;
                let magnitude = 0.25 + 1.75 * unit;
                if z & 1 == 0 {
                    magnitude
                } else {
                    -magnitude
                }
            })
            .collect();
        Tensor::from_f64_slice(&data, shape, DType::F64).expect("a valid random shape")
    }

    fn push_leaf(&mut self, value: Tensor, variable: bool) -> usize {
        let node = if variable {
            self.dag.inputs.push(value.clone());
            Node::Input(self.dag.inputs.len() - 1)
        } else {
            Node::Constant(value.clone())
        };
        self.dag.nodes.push(node);
        self.dag.largest_numel = self.dag.largest_numel.max(value.numel());
        self.values.push(self.graph.constant(value));
        self.live.push(variable);
        self.dag.nodes.len() - 1
    }

    fn shape(&self, node: usize) -> Vec<usize> {
        self.values[node].shape().to_vec()
    }

    fn data(&self, node: usize) -> Vec<f64> {
        self.values[node].value().to_f64_vec()
    }

    /// One choice word: try up to `ATTEMPTS` candidates seeded by it; keep the first valid one.
    fn step(&mut self, word: u32) {
        let mut rng = ChaCha8Rng::seed_from_u64(u64::from(word));
        for _ in 0..ATTEMPTS {
            let Some((op, operands)) = self.propose(&mut rng) else {
                continue;
            };
            if self.accept(op, operands) {
                return;
            }
        }
    }

    /// A live operand: the newest live node half of the time, else any live node.
    fn pick_live(&self, rng: &mut ChaCha8Rng) -> usize {
        let live: Vec<usize> = (0..self.live.len()).filter(|&i| self.live[i]).collect();
        if rng.random_bool(0.5) {
            *live.last().expect("the plan starts with an input")
        } else {
            live[rng.random_range(0..live.len())]
        }
    }

    /// A fresh leaf of `shape`, unless that is too big.
    fn fresh(&mut self, shape: &[usize], rng: &mut ChaCha8Rng) -> Option<Operand> {
        if shape.iter().product::<usize>() > self.size.max_numel {
            return None;
        }
        Some(Operand::Fresh {
            value: self.random_values(shape),
            variable: rng.random_bool(0.5),
        })
    }

    /// An existing node of exactly `shape` (60% of the time when there is
    /// one), else a fresh leaf of that shape.
    fn partner_of_shape(&mut self, shape: &[usize], rng: &mut ChaCha8Rng) -> Option<Operand> {
        let matches: Vec<usize> = (0..self.values.len())
            .filter(|&i| self.values[i].shape() == shape)
            .collect();
        if !matches.is_empty() && rng.random_bool(0.6) {
            Some(Operand::Existing(
                matches[rng.random_range(0..matches.len())],
            ))
        } else {
            self.fresh(shape, rng)
        }
    }

    fn propose(&mut self, rng: &mut ChaCha8Rng) -> Option<(Op, Vec<Operand>)> {
        let a = self.pick_live(rng);
        match rng.random_range(0..100) {
            0..30 => self
                .unary(a, rng)
                .map(|op| (op, vec![Operand::Existing(a)])),
            30..55 => self.binary(a, rng),
            55..68 => self
                .reduction(a, rng)
                .map(|op| (op, vec![Operand::Existing(a)])),
            68..88 => self.shape_op(a, rng),
            88..94 => self.matmul(a, rng),
            _ => self.nn_op(a, rng),
        }
    }

    /// A one-input elementwise op of the registry whose declared domain
    /// admits every value of `a`, or a scalar-operand variant of a binary
    /// op (`powf`, `x + c`, `x * c`, `c / x`).
    fn unary(&self, a: usize, rng: &mut ChaCha8Rng) -> Option<Op> {
        let v = self.data(a);
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let min_abs = v.iter().fold(f64::INFINITY, |m, x| m.min(x.abs()));
        let unary = elementwise_with_arity(1);
        let k = rng.random_range(0..unary.len() + 3);
        if let Some(&(i, op)) = unary.get(k) {
            return v
                .iter()
                .all(|&x| op.admits(&[x]))
                .then_some(Op::Elementwise(i));
        }
        let op = match k - unary.len() {
            0 => {
                let e = [2.0, 3.0, 0.5, 1.5, -1.0][rng.random_range(0..5)];
                let integral = e > 0.0 && e == f64::trunc(e);
                if !integral && min <= 0.2 {
                    return None;
                }
                Op::Powf(e)
            }
            1 => {
                let c = rng.random_range(-1.5..1.5);
                if rng.random_bool(0.5) {
                    Op::AddScalar(c)
                } else {
                    Op::MulScalar(c)
                }
            }
            _ if min_abs > 0.2 => Op::RdivScalar(rng.random_range(0.5..2.0)),
            _ => return None,
        };
        Some(op)
    }

    /// A broadcasting binary op; the partner is an existing node whose shape
    /// broadcasts with `a`'s, or a fresh leaf shaped to broadcast with it
    /// (size-1 dims grown, some dims set to 1, leading dims dropped).
    fn binary(&mut self, a: usize, rng: &mut ChaCha8Rng) -> Option<(Op, Vec<Operand>)> {
        let binary = elementwise_with_arity(2);
        // One more choice than the registry's binary ops: `where`.
        let choice = binary.get(rng.random_range(0..binary.len() + 1)).copied();
        let shape = self.shape(a);
        let candidates: Vec<usize> = (0..self.values.len())
            .filter(|&i| broadcast(&shape, self.values[i].shape()).is_some())
            .collect();
        let partner = if !candidates.is_empty() && rng.random_bool(0.5) {
            Operand::Existing(candidates[rng.random_range(0..candidates.len())])
        } else {
            let partner_shape = broadcast_partner(&shape, self.size, rng);
            self.fresh(&partner_shape, rng)?
        };
        let out = broadcast(&shape, &self.operand_shape(&partner)).expect("shapes broadcast");
        if out.iter().product::<usize>() > self.size.max_numel {
            return None;
        }
        let mut operands = vec![Operand::Existing(a), partner];
        if rng.random_bool(0.4) {
            operands.swap(0, 1);
        }
        if let Some((i, op)) = choice {
            let pairs = broadcast_pairs(
                &self.operand_data(&operands[0]),
                &self.operand_shape(&operands[0]),
                &self.operand_data(&operands[1]),
                &self.operand_shape(&operands[1]),
            );
            if !pairs.iter().all(|&(x, y)| op.admits(&[x, y])) {
                return None;
            }
            return Some((Op::Elementwise(i), operands));
        }
        {
            // `where`: a 0/1 condition shaped like either operand or their broadcast.
            let shapes = [
                self.operand_shape(&operands[0]),
                self.operand_shape(&operands[1]),
            ];
            let out = broadcast(&shapes[0], &shapes[1]).expect("operands broadcast");
            let condition_shape = [&shapes[0], &shapes[1], &out][rng.random_range(0..3)].clone();
            let n: usize = condition_shape.iter().product();
            let condition: Vec<f64> = (0..n)
                .map(|_| f64::from(rng.random_range(0..2u8)))
                .collect();
            let condition =
                Tensor::from_f64_slice(&condition, &condition_shape, DType::F64).expect("a shape");
            Some((Op::Where(condition), operands))
        }
    }

    fn operand_shape(&self, operand: &Operand) -> Vec<usize> {
        match operand {
            Operand::Existing(i) => self.shape(*i),
            Operand::Fresh { value, .. } => value.shape().to_vec(),
        }
    }

    fn operand_data(&self, operand: &Operand) -> Vec<f64> {
        match operand {
            Operand::Existing(i) => self.data(*i),
            Operand::Fresh { value, .. } => value.to_f64_vec(),
        }
    }

    fn reduction(&self, a: usize, rng: &mut ChaCha8Rng) -> Option<Op> {
        let shape = self.shape(a);
        // Extrema need a clear winner in every lane (checked lazily: it sorts).
        let distinct = || min_gap(&self.data(a)) > MARGIN;
        if shape.is_empty() || rng.random_bool(0.2) {
            return Some(match rng.random_range(0..4) {
                0 => Op::Registered("sum"),
                1 => Op::Registered("mean"),
                2 if distinct() => Op::Registered("max"),
                3 if distinct() => Op::Registered("min"),
                _ => return None,
            });
        }
        let axes = random_axes(&shape, rng);
        let keepdim = rng.random_bool(0.5);
        let reduced: usize = axes
            .iter()
            .map(|&d| shape[d.rem_euclid(shape.len() as isize) as usize])
            .product();
        Some(match rng.random_range(0..6) {
            0 => Op::SumAxes(axes, keepdim),
            1 => Op::MeanAxes(axes, keepdim),
            2 => Op::Variance(axes, if reduced > 1 { 1.0 } else { 0.0 }, keepdim),
            3 => Op::LogSumExp(axes, keepdim),
            4 if distinct() => Op::MaxAxes(axes, keepdim),
            5 if distinct() => Op::MinAxes(axes, keepdim),
            _ => return None,
        })
    }

    /// Softmax, log-softmax, layer norm and the elementwise losses.
    fn nn_op(&mut self, a: usize, rng: &mut ChaCha8Rng) -> Option<(Op, Vec<Operand>)> {
        let shape = self.shape(a);
        let rank = shape.len();
        let single = |op: Op| Some((op, vec![Operand::Existing(a)]));
        match rng.random_range(0..5) {
            0 if rank >= 1 => single(Op::Softmax(random_dim(rank, rng))),
            1 if rank >= 1 => single(Op::LogSoftmax(random_dim(rank, rng))),
            2 => {
                let target: Vec<f64> = (0..shape.iter().product::<usize>())
                    .map(|_| rng.random_range(0.0..=1.0))
                    .collect();
                let target = Tensor::from_f64_slice(&target, &shape, DType::F64).expect("a shape");
                single(Op::BinaryCrossEntropyWithLogits(target))
            }
            3 => {
                let partner = self.partner_of_shape(&shape, rng)?;
                Some((Op::MseLoss, vec![Operand::Existing(a), partner]))
            }
            4 if rank >= 1 => {
                // Normalise over trailing dims whose groups are far from constant
                // (layer norm's gradient grows like 1 / std).
                let k = rng.random_range(1..=rank);
                let normalized = shape[rank - k..].to_vec();
                if normalized.iter().product::<usize>() < 2 {
                    return None;
                }
                let axes: Vec<isize> = (rank - k..rank).map(|d| d as isize).collect();
                let spread = self.values[a].try_var(&axes, 0.0, false).ok()?;
                if spread.value().to_f64_vec().iter().any(|&v| v < 0.05) {
                    return None;
                }
                let (has_weight, has_bias) = (rng.random_bool(0.6), rng.random_bool(0.6));
                let mut operands = vec![Operand::Existing(a)];
                if has_weight {
                    operands.push(self.partner_of_shape(&normalized, rng)?);
                }
                if has_bias {
                    operands.push(self.partner_of_shape(&normalized, rng)?);
                }
                Some((Op::LayerNorm(normalized, has_weight, has_bias), operands))
            }
            _ => None,
        }
    }

    fn shape_op(&mut self, a: usize, rng: &mut ChaCha8Rng) -> Option<(Op, Vec<Operand>)> {
        let shape = self.shape(a);
        let rank = shape.len();
        let single = |op: Op| Some((op, vec![Operand::Existing(a)]));
        match rng.random_range(0..14) {
            0 => single(Op::Reshape(random_reshape(&shape, rng))),
            1 if rank >= 2 => single(Op::Transpose(random_dim(rank, rng), random_dim(rank, rng))),
            2 if rank >= 2 => {
                let mut dims: Vec<isize> = (0..rank as isize).collect();
                dims.shuffle(rng);
                single(Op::Permute(dims))
            }
            3 if rank <= 3 => single(Op::Unsqueeze(
                rng.random_range(0..=2 * rank + 1) as isize - rank as isize - 1,
            )),
            4 => {
                let ones: Vec<usize> = (0..rank).filter(|&d| shape[d] == 1).collect();
                if ones.is_empty() {
                    return None;
                }
                if rng.random_bool(0.5) {
                    single(Op::Squeeze)
                } else {
                    single(Op::SqueezeDim(
                        ones[rng.random_range(0..ones.len())] as isize,
                    ))
                }
            }
            5 => {
                let dim = self.dim_longer_than_one(&shape, rng)?;
                let size = shape[dim];
                let len = rng.random_range(1..size);
                let start = rng.random_range(0..=size - len);
                single(Op::Narrow(dim as isize, start as isize, len))
            }
            6 => {
                let dim = self.dim_longer_than_one(&shape, rng)?;
                let start = rng.random_range(0..shape[dim] - 1);
                single(Op::Slice(
                    dim as isize,
                    start as isize,
                    shape[dim] as isize,
                    2,
                ))
            }
            7 if rank >= 1 => {
                let dim = rng.random_range(0..rank);
                single(Op::Select(dim as isize, rng.random_range(0..shape[dim])))
            }
            8 if rank >= 1 && rng.random_bool(0.35) => {
                // Repeated indices: scatter_add in the backward sums them.
                let dim = rng.random_range(0..rank);
                let mut index_shape = shape.clone();
                index_shape[dim] = self.size.dim(rng).min(3 * shape[dim]);
                let index: Vec<usize> = (0..index_shape.iter().product::<usize>())
                    .map(|_| rng.random_range(0..shape[dim]))
                    .collect();
                let index = Tensor::from_indices(&index, &index_shape).expect("a shape");
                single(Op::Gather(dim as isize, index))
            }
            8 if rank >= 1 && rng.random_bool(0.5) => {
                // Sources added at repeated positions.
                let dim = rng.random_range(0..rank);
                let count = rng.random_range(1..=4);
                let index: Vec<usize> = (0..count)
                    .map(|_| rng.random_range(0..shape[dim]))
                    .collect();
                let mut source_shape = shape.clone();
                source_shape[dim] = count;
                let source = self.partner_of_shape(&source_shape, rng)?;
                Some((
                    Op::IndexAdd(dim as isize, index),
                    vec![Operand::Existing(a), source],
                ))
            }
            8 if rank >= 1 => {
                // Repeated indices: index_add in the backward sums them.
                let dim = rng.random_range(0..rank);
                let count = rng.random_range(1..=4);
                let index = (0..count)
                    .map(|_| rng.random_range(0..shape[dim]))
                    .collect();
                single(Op::IndexSelect(dim as isize, index))
            }
            9 => {
                let mut target: Vec<usize> = shape
                    .iter()
                    .map(|&s| if s == 1 { self.size.dim(rng) } else { s })
                    .collect();
                if rank < 3 && rng.random_bool(0.4) {
                    target.insert(0, self.size.dim(rng).max(2));
                }
                if target == shape || target.iter().product::<usize>() > self.size.max_numel {
                    return None;
                }
                single(Op::Expand(target))
            }
            10 if rank >= 2 => {
                let start = rng.random_range(0..rank - 1);
                let end = rng.random_range(start + 1..rank);
                single(Op::Flatten(start as isize, end as isize))
            }
            11 if rank >= 1 && rng.random_bool(0.5) => {
                // (before, after) pairs from the last dim backwards; negative crops.
                let dims = rng.random_range(1..=rank);
                let mut pads = Vec::with_capacity(2 * dims);
                for d in (rank - dims..rank).rev() {
                    let before = rng.random_range(0..=3usize) as isize - 1;
                    let after = rng.random_range(0..=3usize) as isize - 1;
                    if shape[d] as isize + before + after < 1 {
                        return None;
                    }
                    pads.extend([before, after]);
                }
                single(Op::Pad(
                    pads,
                    if rng.random_bool(0.5) { 0.0 } else { -0.75 },
                ))
            }
            11 if rank >= 1 => {
                let (left, right) = (
                    rng.random_range(0..=2usize) as isize,
                    rng.random_range(0..=2usize) as isize,
                );
                let value = if rng.random_bool(0.5) { 0.0 } else { 0.5 };
                single(Op::Pad(vec![left, right], value))
            }
            12 if rank >= 1 => {
                // Partners equal to `a` except along `dim`; `a` itself may repeat.
                let dim = rng.random_range(0..rank);
                let parts = rng.random_range(2..=3);
                let mut operands = vec![Operand::Existing(a)];
                for _ in 1..parts {
                    if rng.random_bool(0.3) {
                        operands.push(Operand::Existing(a));
                    } else {
                        let mut part_shape = shape.clone();
                        part_shape[dim] = self.size.dim(rng);
                        operands.push(self.partner_of_shape(&part_shape, rng)?);
                    }
                }
                operands.shuffle(rng);
                let signed = if rng.random_bool(0.5) {
                    dim as isize
                } else {
                    dim as isize - rank as isize
                };
                Some((Op::Cat(signed), operands))
            }
            13 => {
                let partner = if rng.random_bool(0.3) {
                    Operand::Existing(a)
                } else {
                    self.partner_of_shape(&shape, rng)?
                };
                let mut operands = vec![Operand::Existing(a), partner];
                operands.shuffle(rng);
                Some((Op::Stack(rng.random_range(0..=rank) as isize), operands))
            }
            _ => None,
        }
    }

    fn dim_longer_than_one(&self, shape: &[usize], rng: &mut ChaCha8Rng) -> Option<usize> {
        let dims: Vec<usize> = (0..shape.len()).filter(|&d| shape[d] >= 2).collect();
        (!dims.is_empty()).then(|| dims[rng.random_range(0..dims.len())])
    }

    /// PyTorch `matmul` in its 1-D, 2-D and batched forms, `a` on either side.
    fn matmul(&mut self, a: usize, rng: &mut ChaCha8Rng) -> Option<(Op, Vec<Operand>)> {
        let shape = self.shape(a);
        let rank = shape.len();
        if rank == 0 || rank > 3 {
            return None;
        }
        let n = self.size.dim(rng);
        let batch = self.size.dim(rng);
        let a_on_left = rng.random_bool(0.6);
        // `matmul_transposed` reads a transposed operand's last two dims
        // swapped: plan with the logical shape, store the swapped one.
        let transpose_a = rank >= 2 && rng.random_bool(0.3);
        let mut shape = shape;
        if transpose_a {
            shape.swap(rank - 2, rank - 1);
        }
        let mut partner_shape: Vec<usize> = if a_on_left {
            let k = shape[rank - 1];
            match (rank, rng.random_range(0..3)) {
                (1, 0) | (2, 0) => vec![k],
                (1, 1) | (2, 1) | (3, 0) => vec![k, n],
                (3, 1) => vec![shape[0], k, n],
                (3, _) => vec![1, k, n],
                _ => vec![batch, k, n],
            }
        } else {
            let k = if rank == 1 { shape[0] } else { shape[rank - 2] };
            match (rank, rng.random_range(0..3)) {
                (1, 0) => vec![k],
                (1, _) | (2, 0) => vec![n, k],
                (2, 1) => vec![batch, n, k],
                (3, 0) => vec![shape[0], n, k],
                _ => vec![n, k],
            }
        };
        let (left_shape, right_shape) = if a_on_left {
            (&shape, &partner_shape)
        } else {
            (&partner_shape, &shape)
        };
        if matmul_numel(left_shape, right_shape) > self.size.max_numel {
            return None;
        }
        let partner_rank = partner_shape.len();
        let transpose_partner = partner_rank >= 2 && rng.random_bool(0.3);
        if transpose_partner {
            partner_shape.swap(partner_rank - 2, partner_rank - 1);
        }
        let partner = self.partner_of_shape(&partner_shape, rng)?;
        let (operands, left, right) = if a_on_left {
            (
                vec![Operand::Existing(a), partner],
                transpose_a,
                transpose_partner,
            )
        } else {
            (
                vec![partner, Operand::Existing(a)],
                transpose_partner,
                transpose_a,
            )
        };
        let op = if left || right {
            Op::MatMulTransposed(left, right)
        } else {
            Op::Registered("matmul")
        };
        Some((op, operands))
    }

    /// Runs the candidate on the planning graph and keeps it (with its
    /// fresh leaves) if its value is finite, small and tie-free where needed.
    fn accept(&mut self, op: Op, operands: Vec<Operand>) -> bool {
        let vars: Vec<Var<'p>> = operands
            .iter()
            .map(|o| match o {
                Operand::Existing(i) => self.values[*i].clone(),
                Operand::Fresh { value, .. } => self.graph.constant(value.clone()),
            })
            .collect();
        let refs: Vec<&Var<'p>> = vars.iter().collect();
        let out = apply(&op, &refs).unwrap_or_else(|e| {
            panic!(
                "the planner built an invalid candidate {op:?} on {:?}: {e}",
                vars.iter().map(|v| v.shape().to_vec()).collect::<Vec<_>>()
            )
        });
        let data = out.value().to_f64_vec();
        if out.value().numel() > self.size.max_numel
            || out.shape().len() > 4
            || data.iter().any(|x| !x.is_finite() || x.abs() > MAX_ABS)
        {
            return false;
        }
        let mut args = Vec::with_capacity(operands.len());
        for operand in operands {
            args.push(match operand {
                Operand::Existing(i) => i,
                Operand::Fresh { value, variable } => self.push_leaf(value, variable),
            });
        }
        let live = args.iter().any(|&i| self.live[i]);
        self.dag.nodes.push(Node::Apply(op, args));
        self.dag.largest_numel = self.dag.largest_numel.max(out.value().numel());
        self.values.push(out);
        self.live.push(live);
        true
    }

    /// The root sums every live sink (a node no other node consumes), each
    /// kept with probability 0.85 (the newest always); the rest stay dead.
    fn choose_outputs(&mut self) {
        let mut consumed = vec![false; self.dag.nodes.len()];
        for node in &self.dag.nodes {
            if let Node::Apply(_, args) = node {
                for &i in args {
                    consumed[i] = true;
                }
            }
        }
        let newest = (0..self.live.len())
            .rev()
            .find(|&i| self.live[i])
            .expect("an input");
        for (i, consumed) in consumed.into_iter().enumerate() {
            if self.live[i] && !consumed && (i == newest || self.values_rng.random_bool(0.85)) {
                let shape = self.shape(i);
                let weights = self.random_values(&shape);
                self.dag.outputs.push((i, weights));
            }
        }
    }
}

/// A shape of rank `0..=size.max_input_rank` with dims from `size.dims`.
fn random_shape(rng: &mut ChaCha8Rng, size: Size) -> Vec<usize> {
    let rank = rng.random_range(0..=size.max_input_rank);
    (0..rank).map(|_| size.dim(rng)).collect()
}

/// A dim index in `-rank..rank`.
fn random_dim(rank: usize, rng: &mut ChaCha8Rng) -> isize {
    let d = rng.random_range(0..rank) as isize;
    if rng.random_bool(0.3) {
        d - rank as isize
    } else {
        d
    }
}

/// A non-empty set of distinct axes, some given as negative indices.
fn random_axes(shape: &[usize], rng: &mut ChaCha8Rng) -> Vec<isize> {
    let rank = shape.len();
    let mut dims: Vec<usize> = (0..rank).collect();
    dims.shuffle(rng);
    dims.truncate(rng.random_range(1..=rank));
    dims.into_iter()
        .map(|d| {
            if rng.random_bool(0.3) {
                d as isize - rank as isize
            } else {
                d as isize
            }
        })
        .collect()
}

/// A shape with the same element count (rank 0..=4), sometimes with one `-1`.
fn random_reshape(shape: &[usize], rng: &mut ChaCha8Rng) -> Vec<isize> {
    let mut factors = Vec::new();
    let mut n: usize = shape.iter().product();
    let mut p = 2;
    while n > 1 {
        while n.is_multiple_of(p) {
            factors.push(p);
            n /= p;
        }
        p += 1;
    }
    let rank = rng.random_range(factors.len().min(1)..=4.min(factors.len() + 1));
    let mut dims = vec![1usize; rank];
    for f in factors {
        let slot = rng.random_range(0..rank);
        dims[slot] *= f;
    }
    let mut dims: Vec<isize> = dims.into_iter().map(|d| d as isize).collect();
    if !dims.is_empty() && rng.random_bool(0.3) {
        let slot = rng.random_range(0..dims.len());
        dims[slot] = -1;
    }
    dims
}

/// The NumPy broadcast of two shapes, if they broadcast.
fn broadcast(a: &[usize], b: &[usize]) -> Option<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i < rank - s.len() {
            1
        } else {
            s[i - (rank - s.len())]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Some(x),
            (1, y) => Some(y),
            _ => None,
        })
        .collect()
}

/// A shape that broadcasts with `shape`: leading dims dropped, size-1 dims
/// drawn from `size.dims`, other dims kept or set to 1 (e.g. [3, 1] -> [1, 4]).
fn broadcast_partner(shape: &[usize], size: Size, rng: &mut ChaCha8Rng) -> Vec<usize> {
    let drop = if rng.random_bool(0.3) {
        rng.random_range(0..=shape.len())
    } else {
        0
    };
    shape[drop..]
        .iter()
        .map(|&s| {
            if s == 1 {
                size.dim(rng)
            } else if rng.random_bool(0.3) {
                1
            } else {
                s
            }
        })
        .collect()
}

/// The element count of `matmul(l, r)` (logical shapes that multiply).
fn matmul_numel(l: &[usize], r: &[usize]) -> usize {
    let batch = |s: &[usize]| -> Vec<usize> { s[..s.len().saturating_sub(2)].to_vec() };
    let rows = if l.len() >= 2 { l[l.len() - 2] } else { 1 };
    let cols = if r.len() >= 2 { r[r.len() - 1] } else { 1 };
    let batch = broadcast(&batch(l), &batch(r)).unwrap_or_default();
    batch.iter().product::<usize>() * rows * cols
}

/// The smallest distance between two elements (infinite for fewer than two).
fn min_gap(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min)
}

/// The registry's elementwise instances of `arity`, with their index in
/// `registry_ops::elementwise()`.
fn elementwise_with_arity(arity: usize) -> Vec<(usize, &'static Instance)> {
    registry_ops::elementwise()
        .iter()
        .enumerate()
        .filter(|(_, op)| op.arity() == arity)
        .collect()
}

/// The operand pairs of a broadcasting binary op, one per output element.
fn broadcast_pairs(a: &[f64], a_shape: &[usize], b: &[f64], b_shape: &[usize]) -> Vec<(f64, f64)> {
    let out = broadcast(a_shape, b_shape).expect("operands broadcast");
    let spread = |data: &[f64], shape: &[usize]| -> Vec<f64> {
        let t = Tensor::from_vec(data.to_vec(), shape).expect("a shape");
        retrograd::kernels::broadcast_to("broadcast_pairs", &t, &out)
            .expect("broadcastable")
            .to_f64_vec()
    };
    spread(a, a_shape)
        .into_iter()
        .zip(spread(b, b_shape))
        .collect()
}
