//! Body of the `ops` fuzz target: bytes decoded into a few small tensors and
//! a short program of op applications on them (op, operands, axes, shapes,
//! indices and options all come from the bytes), then backward and a
//! second-order `grad`.
//!
//! Checked: every op and every backward returns `Ok` or an `Err` (never a
//! panic); an op's result has as many elements as its shape says; each
//! gradient has the shape of its variable.

use retrograd::autograd::{grad, GradOptions};
use retrograd::{CrossEntropyOptions, DType, Graph, NllLossOptions, Reduction, Tensor, Var};

/// Results larger than this are dropped, so a program stays fast.
const MAX_NUMEL: usize = 256;
/// Op applications per program.
const MAX_STEPS: usize = 12;

/// The input, read front to back; past the end every read gives zero.
struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn below(&mut self, n: usize) -> usize {
        self.byte() as usize % n
    }

    fn flag(&mut self) -> bool {
        self.byte() & 1 == 1
    }

    /// An axis in -4..=4: valid and invalid ones for ranks up to 3.
    fn axis(&mut self) -> isize {
        self.below(9) as isize - 4
    }

    fn axes(&mut self) -> Vec<isize> {
        (0..self.below(4)).map(|_| self.axis()).collect()
    }

    fn dims(&mut self, max_rank: usize, max_dim: usize) -> Vec<usize> {
        (0..self.below(max_rank + 1))
            .map(|_| self.below(max_dim + 1))
            .collect()
    }

    /// A value from a table of ordinary and awkward numbers.
    fn number(&mut self) -> f64 {
        const TABLE: [f64; 16] = [
            0.0,
            1.0,
            -1.0,
            0.5,
            2.0,
            -3.0,
            1e-3,
            10.0,
            -0.0,
            1e30,
            -1e30,
            1e-40,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.25,
        ];
        TABLE[self.below(TABLE.len())]
    }

    fn small_int(&mut self) -> i64 {
        self.below(8) as i64 - 2
    }
}

pub fn run(data: &[u8]) {
    let mut bytes = Bytes { data, pos: 0 };
    let graph = Graph::new();
    let dtype = if bytes.flag() { DType::F32 } else { DType::F64 };
    let mut pool: Vec<Var<'_>> = Vec::new();
    for _ in 0..1 + bytes.below(3) {
        pool.push(leaf(&graph, &mut bytes, dtype));
    }
    for _ in 0..MAX_STEPS {
        if bytes.done() {
            break;
        }
        if let Ok(v) = step(&graph, &mut bytes, &pool) {
            assert_eq!(v.value().numel(), v.shape().iter().product::<usize>());
            if v.value().numel() <= MAX_NUMEL {
                pool.push(v);
            }
        }
    }
    differentiate(&pool);
}

/// A small tensor (rank up to 3, sides up to 3, empty ones included) as a
/// variable or, now and then, a constant; one in eight has the other dtype.
fn leaf<'g>(graph: &'g Graph, bytes: &mut Bytes<'_>, dtype: DType) -> Var<'g> {
    let shape = bytes.dims(3, 3);
    let values: Vec<f64> = (0..shape.iter().product::<usize>())
        .map(|_| bytes.number())
        .collect();
    let dtype = match (bytes.below(8), dtype) {
        (0, DType::F32) => DType::F64,
        (0, DType::F64) => DType::F32,
        _ => dtype,
    };
    let t = Tensor::from_f64_slice(&values, &shape, dtype).expect("values fill the shape");
    if bytes.below(4) == 0 {
        graph.constant(t)
    } else {
        graph.variable(t)
    }
}

/// An index tensor: whole numbers from the bytes, or the value of a pool
/// entry (fractions, negatives and NaN included).
fn index_tensor(bytes: &mut Bytes<'_>, pool: &[Var<'_>]) -> retrograd::Result<Tensor> {
    if bytes.flag() {
        return Ok(pick(bytes, pool).value().clone());
    }
    let shape = bytes.dims(2, 3);
    let values: Vec<usize> = (0..shape.iter().product::<usize>())
        .map(|_| bytes.below(5))
        .collect();
    Tensor::from_indices(&values, &shape)
}

fn pick<'p, 'g>(bytes: &mut Bytes<'_>, pool: &'p [Var<'g>]) -> &'p Var<'g> {
    &pool[bytes.below(pool.len())]
}

fn reduction(bytes: &mut Bytes<'_>) -> Reduction {
    [Reduction::None, Reduction::Mean, Reduction::Sum][bytes.below(3)]
}

fn targets(bytes: &mut Bytes<'_>) -> Vec<i64> {
    (0..bytes.below(5)).map(|_| bytes.small_int()).collect()
}

/// One op application chosen by the next byte.
fn step<'g>(
    graph: &'g Graph,
    bytes: &mut Bytes<'_>,
    pool: &[Var<'g>],
) -> retrograd::Result<Var<'g>> {
    let x = pick(bytes, pool);
    match bytes.below(34) {
        0..=5 => {
            // Any registered op by name, with its arity's worth of operands.
            let registry = graph.registry().clone();
            let names = registry.names();
            let name = names[bytes.below(names.len())];
            let arity = registry.get(name)?.arity().unwrap_or(1 + bytes.below(3));
            let operands: Vec<&Var<'g>> = (0..arity).map(|_| pick(bytes, pool)).collect();
            graph.apply(name, &operands)
        }
        6 => x.try_sum_axes(&bytes.axes(), bytes.flag()),
        7 => x.try_mean_axes(&bytes.axes(), bytes.flag()),
        8 => x.try_max_axes(&bytes.axes(), bytes.flag()),
        9 => x.try_min_axes(&bytes.axes(), bytes.flag()),
        10 => x.try_logsumexp(&bytes.axes(), bytes.flag()),
        11 => x.try_var(&bytes.axes(), bytes.below(3) as f64, bytes.flag()),
        12 => {
            let axis = bytes.flag().then(|| bytes.axis());
            if bytes.flag() {
                x.try_argmax(axis, bytes.flag())
            } else {
                x.try_argmin(axis, bytes.flag())
            }
        }
        13 => {
            if bytes.flag() {
                x.try_softmax(bytes.axis())
            } else {
                x.try_log_softmax(bytes.axis())
            }
        }
        14 => {
            let shape: Vec<isize> = (0..bytes.below(4))
                .map(|_| bytes.below(6) as isize - 1)
                .collect();
            x.try_reshape(&shape)
        }
        15 => x.try_flatten(bytes.axis(), bytes.axis()),
        16 => {
            if bytes.flag() {
                x.try_squeeze_dim(bytes.axis())
            } else {
                x.try_unsqueeze(bytes.axis())
            }
        }
        17 => match bytes.below(3) {
            0 => x.try_transpose(bytes.axis(), bytes.axis()),
            1 => x.try_permute(&bytes.axes()),
            _ => x.try_t(),
        },
        18 => x.try_expand(&bytes.dims(3, 3)),
        19 => x.try_narrow(bytes.axis(), bytes.small_int() as isize, bytes.below(4)),
        20 => x.try_slice(
            bytes.axis(),
            bytes.small_int() as isize,
            bytes.small_int() as isize,
            bytes.below(4),
        ),
        21 => x.try_select(bytes.axis(), bytes.below(4)),
        22 => {
            let pads: Vec<isize> = (0..bytes.below(7))
                .map(|_| bytes.small_int() as isize)
                .collect();
            x.try_pad(&pads, bytes.number())
        }
        23 => {
            let parts: Vec<&Var<'g>> = (0..bytes.below(4)).map(|_| pick(bytes, pool)).collect();
            if bytes.flag() {
                Var::try_cat(&parts, bytes.axis())
            } else {
                Var::try_stack(&parts, bytes.axis())
            }
        }
        24 => {
            let y = pick(bytes, pool);
            if bytes.flag() {
                x.try_matmul(y)
            } else {
                x.try_matmul_transposed(y, bytes.flag(), bytes.flag())
            }
        }
        25 => {
            let index = index_tensor(bytes, pool)?;
            let dim = bytes.axis();
            match bytes.below(4) {
                0 => x.try_index_select(dim, &index),
                1 => x.try_gather(dim, &index),
                2 => x.try_scatter_add(dim, &index, pick(bytes, pool)),
                _ => x.try_index_add(dim, &index, pick(bytes, pool)),
            }
        }
        26 => {
            let min = bytes.flag().then(|| bytes.number());
            let max = bytes.flag().then(|| bytes.number());
            x.try_clamp(min, max)
        }
        27 => x.try_where(pick(bytes, pool), pick(bytes, pool)),
        28 => {
            let targets = targets(bytes);
            let mut options = CrossEntropyOptions::default()
                .reduction(reduction(bytes))
                .label_smoothing(bytes.number().abs().min(2.0));
            if bytes.flag() {
                options = options.ignore_index(Some(bytes.small_int()));
            }
            if bytes.flag() {
                options = options.weight(pick(bytes, pool).value().clone());
            }
            x.try_cross_entropy_with(&targets, &options)
        }
        29 => {
            let targets = targets(bytes);
            let mut options = NllLossOptions::default().reduction(reduction(bytes));
            if bytes.flag() {
                options = options.weight(pick(bytes, pool).value().clone());
            }
            x.try_nll_loss_with(&targets, &options)
        }
        30 => {
            let y = pick(bytes, pool);
            match bytes.below(2) {
                0 => x.try_mse_loss_with(y, reduction(bytes)),
                _ => x.try_binary_cross_entropy_with_logits(y),
            }
        }
        31 => {
            let normalized = bytes.dims(2, 3);
            let weight = bytes.flag().then(|| pick(bytes, pool));
            let bias = bytes.flag().then(|| pick(bytes, pool));
            x.try_layer_norm(&normalized, weight, bias, [1e-5, 0.0, -1.0][bytes.below(3)])
        }
        32 => {
            let index_shape = bytes.dims(2, 3);
            let indices: Vec<i64> = (0..index_shape.iter().product::<usize>())
                .map(|_| bytes.small_int())
                .collect();
            let padding = bytes.flag().then(|| bytes.small_int());
            x.try_embedding_with(&indices, &index_shape, padding)
        }
        _ => x.try_dropout(
            [0.0, 0.5, 1.0, 1.5, -0.5][bytes.below(5)],
            bytes.flag(),
            bytes.byte() as u64,
        ),
    }
}

/// Backward from the newest value that requires grad (summed to a scalar),
/// then a second-order pass through `grad` with `create_graph`.
fn differentiate(pool: &[Var<'_>]) {
    let Some(out) = pool.iter().rev().find(|v| v.requires_grad()) else {
        return;
    };
    let root = if out.value().numel() == 1 && out.shape().is_empty() {
        out.clone()
    } else {
        out.sum()
    };
    let leaves: Vec<&Var<'_>> = pool
        .iter()
        .filter(|v| v.requires_grad() && v.is_leaf())
        .collect();
    if let Ok(grads) = root.backward() {
        for v in &leaves {
            if let Ok(g) = grads.try_wrt(v) {
                assert_eq!(g.shape(), v.shape(), "gradient shape");
            }
        }
    }
    let options = GradOptions::new().create_graph(true).allow_unused(true);
    if let Ok(firsts) = grad(&[&root], &leaves, &options) {
        // Each first-order gradient that recorded a graph, backward on its own
        // (operands may differ in dtype, so they are not added together).
        for g in firsts.iter().filter(|g| g.requires_grad()) {
            let _ = g.sum().backward();
        }
    }
}
