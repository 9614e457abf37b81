//! L-BFGS's memory: the curvature pairs, the two-loop recursion that turns
//! them into a direction, and their state-dict form (PyTorch's entries).

use std::collections::VecDeque;

use super::state::{mismatch, read_scalar};
use super::StateDict;
use crate::base::error::{Result, TensorProblem};
use crate::tensor::{DType, Tensor};

/// The memory's state-dict fields, PyTorch's names.
pub(super) const MEMORY_FIELDS: [&str; 8] = [
    "d",
    "t",
    "old_dirs",
    "old_stps",
    "ro",
    "H_diag",
    "prev_flat_grad",
    "prev_loss",
];

/// L-BFGS's memory, PyTorch's state entries (all f64, over the parameters
/// flattened and concatenated in order).
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Memory {
    /// The last direction.
    pub(super) d: Vec<f64>,
    /// The last step length.
    pub(super) t: f64,
    /// Gradient differences `y`, oldest first.
    old_dirs: VecDeque<Vec<f64>>,
    /// Steps `s`, oldest first.
    old_stps: VecDeque<Vec<f64>>,
    /// `1 / (y . s)` per pair.
    ro: VecDeque<f64>,
    /// The scale of the initial inverse Hessian, `y . s / y . y`.
    h_diag: f64,
    /// The gradient at the last iteration's start.
    pub(super) prev_flat_grad: Vec<f64>,
    /// The loss at the last iteration's start.
    pub(super) prev_loss: f64,
}

impl Memory {
    /// The memory after the first iteration's start: steepest descent,
    /// no curvature pairs.
    pub(super) fn new(flat_grad: &[f64], loss: f64) -> Self {
        Memory {
            d: flat_grad.iter().map(|g| -g).collect(),
            t: 0.0,
            old_dirs: VecDeque::new(),
            old_stps: VecDeque::new(),
            ro: VecDeque::new(),
            h_diag: 1.0,
            prev_flat_grad: flat_grad.to_vec(),
            prev_loss: loss,
        }
    }

    /// Adds the last iteration's curvature pair (if `y . s` is large enough)
    /// and sets `d` to the two-loop recursion's direction at `flat_grad`.
    pub(super) fn update_direction(&mut self, flat_grad: &[f64], history_size: usize) {
        let y: Vec<f64> = flat_grad
            .iter()
            .zip(&self.prev_flat_grad)
            .map(|(g, p)| g - p)
            .collect();
        let s: Vec<f64> = self.d.iter().map(|d| d * self.t).collect();
        let ys = dot(&y, &s);
        if ys > 1e-10 {
            if self.old_dirs.len() == history_size {
                self.old_dirs.pop_front();
                self.old_stps.pop_front();
                self.ro.pop_front();
            }
            self.h_diag = ys / dot(&y, &y);
            self.old_dirs.push_back(y);
            self.old_stps.push_back(s);
            self.ro.push_back(1.0 / ys);
        }
        // The two-loop recursion: q = -g through the history backwards,
        // scaled by h_diag, then forwards.
        let mut q: Vec<f64> = flat_grad.iter().map(|g| -g).collect();
        let mut al = vec![0.0; self.old_dirs.len()];
        for i in (0..self.old_dirs.len()).rev() {
            al[i] = dot(&self.old_stps[i], &q) * self.ro[i];
            axpy(&mut q, -al[i], &self.old_dirs[i]);
        }
        for x in &mut q {
            *x *= self.h_diag;
        }
        let pairs = self.old_dirs.iter().zip(&self.old_stps).zip(&self.ro);
        for (((y, s), ro), al) in pairs.zip(al) {
            let be = dot(y, &q) * ro;
            axpy(&mut q, al - be, s);
        }
        self.d = q;
    }

    /// Writes the entries, `put(field, tensor)`, all f64.
    pub(super) fn write(&self, put: &mut dyn FnMut(&str, Tensor)) {
        let vector = |v: Vec<f64>| {
            let n = v.len();
            Tensor::from_vec(v, &[n]).expect("a vector")
        };
        let rows = |rows: &VecDeque<Vec<f64>>| {
            let flat: Vec<f64> = rows.iter().flatten().copied().collect();
            Tensor::from_vec(flat, &[rows.len(), self.d.len()]).expect("k rows of n")
        };
        put("d", vector(self.d.clone()));
        put("t", Tensor::scalar(self.t));
        put("old_dirs", rows(&self.old_dirs));
        put("old_stps", rows(&self.old_stps));
        put("ro", vector(self.ro.iter().copied().collect()));
        put("H_diag", Tensor::scalar(self.h_diag));
        put("prev_flat_grad", vector(self.prev_flat_grad.clone()));
        put("prev_loss", Tensor::scalar(self.prev_loss));
    }

    /// Reads the entries (`key(field)` names each), checking their shapes
    /// (`[n]` vectors, `[k, n]` histories with `k <= history_size`, `[k]`
    /// `ro`, 0-d scalars) and dtype (f64).
    pub(super) fn read(
        context: &str,
        state: &StateDict,
        key: &dyn Fn(&str) -> String,
        n: usize,
        history_size: usize,
    ) -> Result<Memory> {
        let values = |field: &str, shape: &[usize]| -> Result<Vec<f64>> {
            let name = key(field);
            let t = &state[&name];
            if t.dtype() != DType::F64 {
                let (expected, found) = (DType::F64, t.dtype());
                return Err(mismatch(
                    context,
                    &name,
                    TensorProblem::DType { expected, found },
                ));
            }
            if t.shape() != shape {
                let (expected, found) = (shape.to_vec(), t.shape().to_vec());
                return Err(mismatch(
                    context,
                    &name,
                    TensorProblem::Shape { expected, found },
                ));
            }
            Ok(t.to_f64_vec())
        };
        let scalar = |field: &str| read_scalar(context, &key(field), &state[&key(field)]);
        let k = state[&key("ro")].shape().first().copied().unwrap_or(0);
        if k > history_size {
            let why = format!("{k} curvature pairs, more than history_size {history_size}");
            return Err(mismatch(context, &key("ro"), TensorProblem::Value(why)));
        }
        let rows = |field: &str| -> Result<VecDeque<Vec<f64>>> {
            let flat = values(field, &[k, n])?;
            Ok(flat.chunks(n.max(1)).take(k).map(<[f64]>::to_vec).collect())
        };
        Ok(Memory {
            d: values("d", &[n])?,
            t: scalar("t")?,
            old_dirs: rows("old_dirs")?,
            old_stps: rows("old_stps")?,
            ro: values("ro", &[k])?.into(),
            h_diag: scalar("H_diag")?,
            prev_flat_grad: values("prev_flat_grad", &[n])?,
            prev_loss: scalar("prev_loss")?,
        })
    }
}

/// `a . b`, summed in order.
pub(super) fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `a += alpha * b`.
fn axpy(a: &mut [f64], alpha: f64, b: &[f64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += alpha * y;
    }
}
