//! Matrix multiplication with PyTorch's `matmul` rules, on the `gemm` crate.
//!
//! Every product, whatever the ranks, becomes a batch of `gemm` calls on
//! strided views: a transposed operand is the same buffer read with its row
//! and column strides swapped, so `A^T B` and `A B^T` (the backward's
//! products) never materialise a transpose, except a right operand whose
//! columns lie far apart, which `gemm` would gather element by element:
//! that one is copied row-major first (`kernels::transpose`). Broadcast batch dimensions get
//! stride 0. A batched left operand times a plain matrix is folded into one
//! tall product (`[batch * m, k] x [k, n]`), which is both fewer calls and a
//! better shape for the packed kernels. A product with an identity factor
//! (the seeds of a Jacobian's sweep) is a copy of the other factor
//! (`identity_product`).
//!
//! Threading: one large product is cut into one part per rayon thread,
//! each part a single-threaded gemm call ([`gemm_split`]); a batch of small
//! products is instead split across rayon by matrix, each on one thread.
//! Below [`PARALLEL_FLOPS`] everything stays on the calling thread, since
//! waking the pool costs more than the product.

use std::mem::MaybeUninit;

use rayon::prelude::*;

use super::identity_product::{product_with_identity, MatrixRead};
use super::transpose;
use crate::base::error::{Error, Result};
use crate::tensor::shape::{broadcast_shapes, checked_numel, contiguous_strides, Dims};
use crate::tensor::{Element, Filled, Strided, Tensor};

/// Multiply-adds (`m * n * k`) from which a product is worth the thread pool.
/// Measured with `examples/bench` (`matmul` workload, `threshold_*` rows:
/// one thread against rayon, alternated) on the 2-core AVX-512 machine,
/// under the load of other jobs: rayon lost at 96^3 and 128^3 (0.72-0.73x),
/// was even at 192^3 (0.86-1.16x) and won from 256^3 on (up to 1.3-1.7x).
/// That sweep timed gemm's own threading; [`gemm_split`], which replaced
/// it, forks once per product, and lowering the threshold to 96^3 with it
/// moved neither the W2 nor the W4 step beyond noise (alternated binaries).
pub const PARALLEL_FLOPS: usize = 192 * 192 * 192;

/// One operand read as a batch of matrices.
#[derive(Clone, Copy, Debug)]
struct Operand {
    /// Element strides between consecutive rows and columns of the logical
    /// (possibly transposed) matrix.
    row_stride: isize,
    col_stride: isize,
}

/// How `a @ b` maps onto `gemm` calls.
#[derive(Debug)]
struct Plan {
    out_shape: Dims,
    /// Products to run, and the rows, columns and inner size of each.
    count: usize,
    m: usize,
    n: usize,
    k: usize,
    a: Operand,
    b: Operand,
    /// Batch dimensions of the output and each operand's element stride along them.
    batch: Dims,
    a_batch_strides: Dims,
    b_batch_strides: Dims,
}

/// An operand's shape and element strides (row-major ones for a plain
/// tensor, its own for a strided view).
#[derive(Clone, Copy)]
struct Layout<'a> {
    shape: &'a [usize],
    strides: &'a [usize],
}

/// The logical `(rows, cols)` of a rank >= 2 operand and how to read it.
fn matrix_view(x: Layout<'_>, transposed: bool) -> (usize, usize, Operand) {
    let r = x.shape.len();
    let (rows, cols) = (x.shape[r - 2], x.shape[r - 1]);
    let (rs, cs) = (x.strides[r - 2] as isize, x.strides[r - 1] as isize);
    if transposed {
        // Logical (i, j) is stored at (j, i).
        let op = Operand {
            row_stride: cs,
            col_stride: rs,
        };
        (cols, rows, op)
    } else {
        let op = Operand {
            row_stride: rs,
            col_stride: cs,
        };
        (rows, cols, op)
    }
}

/// Each batch dimension's element stride in an operand whose batch
/// dimensions (`shape`, `strides`) broadcast to `batch`: 0 where broadcast.
fn batch_strides(shape: &[usize], strides: &[usize], batch: &[usize]) -> Dims {
    let lead = batch.len() - shape.len();
    (0..batch.len())
        .map(|i| match i.checked_sub(lead) {
            Some(j) if shape[j] == batch[i] && shape[j] != 1 => strides[j],
            _ => 0,
        })
        .collect()
}

/// Whether the batch dimensions and the rows of an operand step through
/// memory as one run of rows (`row_stride` apart), so its matrices stack
/// into one tall matrix.
fn rows_stack(shape: &[usize], strides: &[usize], row_stride: isize) -> bool {
    let r = shape.len();
    let mut expected = row_stride as usize * shape[r - 2];
    for d in (0..r - 2).rev() {
        if shape[d] != 1 && strides[d] != expected {
            return false;
        }
        expected *= shape[d];
    }
    true
}

/// Shapes and strides of `op(a) @ op(b)` under PyTorch's rules, where `op`
/// transposes the last two dimensions of a rank >= 2 operand whose flag is
/// set (flags on 1-d operands are ignored: a vector has no orientation).
fn plan(
    op: &'static str,
    la: Layout<'_>,
    lb: Layout<'_>,
    trans_a: bool,
    trans_b: bool,
) -> Result<Plan> {
    let (a, b) = (la.shape, lb.shape);
    if a.is_empty() || b.is_empty() {
        return Err(Error::shape_mismatch(op, a, b));
    }
    // A 1-d left operand is a row [1, k]; a 1-d right operand a column [k, 1].
    let (m, ka, a_op) = if a.len() == 1 {
        let row = Operand {
            row_stride: (a[0] * la.strides[0]) as isize,
            col_stride: la.strides[0] as isize,
        };
        (1, a[0], row)
    } else {
        matrix_view(la, trans_a)
    };
    let (kb, n, b_op) = if b.len() == 1 {
        let col = Operand {
            row_stride: lb.strides[0] as isize,
            col_stride: 1,
        };
        (b[0], 1, col)
    } else {
        matrix_view(lb, trans_b)
    };
    if ka != kb {
        return Err(Error::shape_mismatch(op, a, b));
    }
    let a_batch = &a[..a.len().saturating_sub(2)];
    let b_batch = &b[..b.len().saturating_sub(2)];
    let batch =
        broadcast_shapes(op, a_batch, b_batch).map_err(|_| Error::shape_mismatch(op, a, b))?;
    let mut out_shape = batch.clone();
    if a.len() >= 2 {
        out_shape.push(m);
    }
    if b.len() >= 2 {
        out_shape.push(n);
    }
    checked_numel(op, &out_shape)?;
    let a_stacks = a.len() >= 2 && rows_stack(a, la.strides, a_op.row_stride);
    let mut plan = Plan {
        count: batch.iter().product(),
        a_batch_strides: batch_strides(a_batch, &la.strides[..a_batch.len()], &batch),
        b_batch_strides: batch_strides(b_batch, &lb.strides[..b_batch.len()], &batch),
        batch,
        out_shape,
        m,
        n,
        k: ka,
        a: a_op,
        b: b_op,
    };
    // [batch..., m, k] @ [k, n]: the left operand's matrices are stacked rows
    // of one [batch * m, k] matrix, and so are the output's.
    if plan.count > 1
        && b_batch.is_empty()
        && !trans_a
        && a_batch == plan.batch.as_slice()
        && a_stacks
    {
        plan.m *= plan.count;
        plan.count = 1;
        plan.batch.clear();
        plan.a_batch_strides.clear();
        plan.b_batch_strides.clear();
    }
    Ok(plan)
}

/// `x` itself, or its row-major copy if it repeats elements inside a
/// matrix (a stride-0 row or column of an expanded view).
fn readable(x: &Tensor) -> std::borrow::Cow<'_, Tensor> {
    let strides = x.strides();
    let r = strides.len();
    let repeats = (r.saturating_sub(2)..r).any(|d| strides[d] == 0 && x.shape()[d] > 1);
    if repeats {
        std::borrow::Cow::Owned(x.contiguous())
    } else {
        std::borrow::Cow::Borrowed(x)
    }
}

fn strided<T: Element>(x: &Tensor) -> Strided<'_, T> {
    x.strided::<T>().expect("dtype was checked by the caller")
}

/// Errors unless every one of `others` has `a`'s dtype.
fn check_dtypes<const N: usize>(op: &'static str, a: &Tensor, others: [&Tensor; N]) -> Result<()> {
    match others.iter().find(|o| o.dtype() != a.dtype()) {
        Some(other) => Err(Error::DTypeMismatch {
            op,
            lhs: a.dtype(),
            rhs: other.dtype(),
        }),
        None => Ok(()),
    }
}

/// The plan of `op(a) @ op(b)` (both of dtype `T`, read through their
/// strides) and the two operands' elements.
fn plan_views<'t, T: Element>(
    op: &'static str,
    a: &'t Tensor,
    b: &'t Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<(Plan, &'t [T], &'t [T])> {
    let (sa, sb) = (strided::<T>(a), strided::<T>(b));
    let plan = plan(
        op,
        Layout {
            shape: a.shape(),
            strides: &sa.strides,
        },
        Layout {
            shape: b.shape(),
            strides: &sb.strides,
        },
        trans_a,
        trans_b,
    )?;
    Ok((plan, sa.data, sb.data))
}

/// `op(a) @ op(b)` with PyTorch's `matmul` rules: 1-d x 1-d is a dot product;
/// a 1-d left (right) operand gets a dimension prepended (appended) that is
/// removed from the result; leading dimensions broadcast as batch
/// dimensions. `trans_a` / `trans_b` swap the last two dimensions of a
/// rank >= 2 operand without copying it.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
/// let b = Tensor::from_vec(vec![1.0, 0.0, 1.0], &[3])?;
/// assert_eq!(kernels::matmul("matmul", &a, &b, false, false)?.to_f64_vec(), vec![4.0, 10.0]);
/// // a^T a, without materialising a^T.
/// let ata = kernels::matmul("matmul", &a, &a, true, false)?;
/// assert_eq!(ata.shape(), &[3, 3]);
/// assert_eq!(ata.to_f64_vec()[0], 17.0);
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn matmul(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    check_dtypes(op, a, [b])?;
    // Views are read in place through their strides, unless one repeats
    // elements within a matrix (stride 0), which gemm's packing does not take.
    let (a, b) = (readable(a), readable(b));
    Ok(crate::with_dtype!(op, a.dtype(), T => {
        let (plan, xa, xb) = plan_views::<T>(op, &a, &b, trans_a, trans_b)?;
        Tensor::build::<T>(plan.out_shape.clone(), |out| {
            run(&plan, xa, xb, out, false);
            // SAFETY: `run` writes every element of an output of the plan's shape.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// `op(a) @ op(b) + bias`, a vector `bias` of the product's last size added
/// to every row, in one pass: the output starts as the bias rows and gemm
/// accumulates the product onto them, instead of writing the product and
/// reading it again to add (ONNX `MatMul` + `Add` and `Gemm` at import,
/// ARCHITECTURE.md, PERF). Each element is `bias + (a b)` with the product's
/// terms added to the bias as gemm goes, so it may differ from
/// [`matmul`]'s result plus the bias in the last bits. `b` must be a matrix
/// (or a batch of them): the output has a last axis for the bias.
///
/// ```
/// use retrograd::{kernels, Tensor};
/// let a = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?;
/// let b = Tensor::from_vec(vec![1.0, 0.0, 0.0, 1.0], &[2, 2])?;
/// let bias = Tensor::from_vec(vec![10.0, 20.0], &[2])?;
/// let y = kernels::matmul_bias("linear", &a, &b, &bias, false, true)?;
/// assert_eq!(y.to_f64_vec(), vec![11.0, 22.0, 13.0, 24.0]);
/// assert!(kernels::matmul_bias("linear", &a, &b, &Tensor::zeros(&[3], a.dtype())?, false, false).is_err());
/// # Ok::<(), retrograd::Error>(())
/// ```
pub fn matmul_bias(
    op: &'static str,
    a: &Tensor,
    b: &Tensor,
    bias: &Tensor,
    trans_a: bool,
    trans_b: bool,
) -> Result<Tensor> {
    check_dtypes(op, a, [b, bias])?;
    let (a, b) = (readable(a), readable(b));
    Ok(crate::with_dtype!(op, a.dtype(), T => {
        let (plan, xa, xb) = plan_views::<T>(op, &a, &b, trans_a, trans_b)?;
        if b.shape().len() < 2 || bias.shape() != [plan.n] {
            return Err(Error::shape_mismatch(op, &plan.out_shape, bias.shape()));
        }
        let bias = bias.contiguous();
        let bias = bias.as_slice_of::<T>();
        Tensor::build::<T>(plan.out_shape.clone(), |out| {
            if plan.n > 0 {
                for row in out.chunks_exact_mut(plan.n) {
                    for (slot, &v) in row.iter_mut().zip(bias) {
                        slot.write(v);
                    }
                }
            }
            run(&plan, xa, xb, out, true);
            // SAFETY: every element holds its bias (written above), and `run`
            // with `read_dst` only adds to them.
            unsafe { Filled::assume(out) }
        })
    }))
}

/// Writes every element of `out` (`plan.count` row-major `[m, n]` blocks):
/// zeros when `k == 0`, else one `gemm_into` per block. With `read_dst`,
/// `out` is initialised and the products are added to it instead.
fn run<T: Element>(plan: &Plan, a: &[T], b: &[T], out: &mut [MaybeUninit<T>], read_dst: bool) {
    let (m, n, k) = (plan.m, plan.n, plan.k);
    if out.is_empty() {
        return;
    }
    assert_eq!(
        out.len(),
        plan.count * m * n,
        "an output of the plan's shape"
    );
    if k == 0 {
        if read_dst {
            return;
        }
        out.iter_mut().for_each(|o| {
            o.write(T::zero());
        });
        return;
    }
    let work = m.saturating_mul(n).saturating_mul(k);
    let pool = rayon::current_num_threads() > 1;
    let offsets = |i: usize| -> (usize, usize) {
        let (mut rem, mut oa, mut ob) = (i, 0, 0);
        for d in (0..plan.batch.len()).rev() {
            let idx = rem % plan.batch[d];
            rem /= plan.batch[d];
            oa += idx * plan.a_batch_strides[d];
            ob += idx * plan.b_batch_strides[d];
        }
        (oa, ob)
    };
    let many_small = plan.count > 1 && pool && work < PARALLEL_FLOPS;
    if many_small && work.saturating_mul(plan.count) >= PARALLEL_FLOPS {
        // Many small products: one per task, each single-threaded.
        out.par_chunks_mut(m * n).enumerate().for_each(|(i, c)| {
            let (oa, ob) = offsets(i);
            gemm_into(plan, &a[oa..], &b[ob..], c, false, read_dst);
        });
    } else {
        // One product at a time, each split across the pool when large enough.
        let threaded = pool && work >= PARALLEL_FLOPS;
        for (i, c) in out.chunks_mut(m * n).enumerate() {
            let (oa, ob) = offsets(i);
            gemm_into(plan, &a[oa..], &b[ob..], c, threaded, read_dst);
        }
    }
}

/// One `[m, k] x [k, n]` product into a row-major `[m, n]` block, every
/// element of which gemm writes (with `read_dst = false` it stores
/// `a b` without reading the destination; with `read_dst`, `out` is
/// initialised and gets `a b` added).
#[inline]
fn gemm_into<T: Element>(
    plan: &Plan,
    a: &[T],
    b: &[T],
    out: &mut [MaybeUninit<T>],
    threaded: bool,
    read_dst: bool,
) {
    let (m, n, k) = (plan.m, plan.n, plan.k);
    debug_assert_eq!(out.len(), m * n);
    // The furthest element each operand view reaches must lie in its slice.
    let reach = |op: Operand, rows: usize, cols: usize| {
        (rows - 1) * op.row_stride as usize + (cols - 1) * op.col_stride as usize
    };
    assert!(reach(plan.a, m, k) < a.len() && reach(plan.b, k, n) < b.len());
    let read = |data, rows, cols, op: Operand| MatrixRead {
        data,
        rows,
        cols,
        row_stride: op.row_stride,
        col_stride: op.col_stride,
    };
    if product_with_identity(read(a, m, k, plan.a), read(b, k, n, plan.b), out, read_dst) {
        return;
    }
    let dst = RawMat {
        ptr: out.as_mut_ptr() as *const T,
        strides: Operand {
            row_stride: n as isize,
            col_stride: 1,
        },
    };
    // SAFETY: the views stay inside `a`, `b` and `out` (checked above and by
    // construction of the plan); with `read_dst = false` gemm only writes
    // `out`, so it may be uninitialised (the caller's contract otherwise).
    unsafe {
        gemm_split(
            [m, n, k],
            dst,
            read_dst,
            RawMat {
                ptr: a.as_ptr(),
                strides: plan.a,
            },
            RawMat {
                ptr: b.as_ptr(),
                strides: plan.b,
            },
            threaded,
        )
    }
}

/// A matrix behind a raw pointer, read at `strides`.
#[derive(Clone, Copy)]
struct RawMat<T> {
    ptr: *const T,
    strides: Operand,
}

// SAFETY: only `gemm_split` dereferences the pointer, under its caller's
// contract, and its tasks write disjoint parts of the destination.
unsafe impl<T> Send for RawMat<T> {}
// SAFETY: as for `Send`: shared only to hand each task its own part.
unsafe impl<T> Sync for RawMat<T> {}

impl<T> RawMat<T> {
    fn at(self, i: usize, j: usize) -> Self {
        let Operand {
            row_stride,
            col_stride,
        } = self.strides;
        RawMat {
            ptr: self
                .ptr
                .wrapping_offset(i as isize * row_stride + j as isize * col_stride),
            ..self
        }
    }
}

/// Rows and columns per part when [`gemm_split`] cuts a product: multiples
/// of gemm's register tiles, so no part gets a ragged edge in the middle.
const SPLIT_ROWS: usize = 16;
const SPLIT_COLS: usize = 32;

/// When a column-major B (`x Wᵀ`) is copied row-major before the product
/// (`kernels::transpose`): when its columns lie at least 1 KiB apart, where
/// `gemm`'s element-by-element gather of a 64-row panel keeps returning to
/// the same few L1 sets. Measured on the AMD EPYC, `x Wᵀ` at 768 rows,
/// median GFLOP/s without and with the copy: inner size 128 (512 B apart)
/// 186-214 against 177-204, no gain; 256: 192-199 -> 207; 512: 160-170 ->
/// 212; 1024: 144-161 -> 210; `[64, 512] x [512, 512]`: 79-82 -> 109-131.
/// Below 32 x 16 outputs the copy is not repaid, and at most 16 x 16
/// `gemm` takes a path of dot products whose order a copy would change.
const COPY_MIN_STRIDE_BYTES: usize = 1024;
const COPY_MIN_ROWS: usize = 32;
const COPY_MIN_COLS: usize = 16;

/// `dst (+)= a b` for `[m, k] x [k, n]`. With `threaded`, the destination
/// is cut into one part per pool thread, along its rows when `m >= n` and
/// its columns otherwise, and each part is one single-threaded gemm call.
///
/// That beats gemm's own threading on this 2-core machine by 0-50% on the
/// MLP and GPT shapes (most on `g Wᵀ` with few rows) and loses nowhere by
/// more than noise (`bench/gemm-bakeoff`, "gemm-rows"/"gemm-cols";
/// BENCHMARKS.md, "GEMM crates side by side").
///
/// # Safety
/// The three views must lie inside their allocations, `dst` must not
/// overlap `a` or `b`, and with `read_dst` it must be initialised.
unsafe fn gemm_split<T: Element>(
    [m, n, k]: [usize; 3],
    dst: RawMat<T>,
    read_dst: bool,
    a: RawMat<T>,
    b: RawMat<T>,
    threaded: bool,
) {
    let column_major = b.strides.row_stride == 1 && b.strides.col_stride > 1;
    let far_apart =
        b.strides.col_stride as usize * std::mem::size_of::<T>() >= COPY_MIN_STRIDE_BYTES;
    if column_major && far_apart && m >= COPY_MIN_ROWS && n >= COPY_MIN_COLS {
        let src = transpose::ColumnMajor {
            ptr: b.ptr,
            ld: b.strides.col_stride as usize,
        };
        // SAFETY: the caller's `b` covers every (r, c) of its [k, n] view;
        // the copy lies in this thread's buffer, disjoint from `dst`.
        unsafe {
            transpose::row_major_copy(src, k, n, |rows| {
                let b = RawMat {
                    ptr: rows.as_ptr(),
                    strides: Operand {
                        row_stride: n as isize,
                        col_stride: 1,
                    },
                };
                gemm_parts([m, n, k], dst, read_dst, a, b, threaded)
            })
        }
    } else {
        // SAFETY: forwarded from the caller's contract.
        unsafe { gemm_parts([m, n, k], dst, read_dst, a, b, threaded) }
    }
}

/// [`gemm_split`] once its operands are in the layouts `gemm` takes.
///
/// # Safety
/// As for [`gemm_split`].
unsafe fn gemm_parts<T: Element>(
    [m, n, k]: [usize; 3],
    dst: RawMat<T>,
    read_dst: bool,
    a: RawMat<T>,
    b: RawMat<T>,
    threaded: bool,
) {
    let threads = if threaded {
        rayon::current_num_threads()
    } else {
        1
    };
    let by_rows = m >= n;
    let (extent, panel) = if by_rows {
        (m, SPLIT_ROWS)
    } else {
        (n, SPLIT_COLS)
    };
    let parts = threads.min(extent.div_ceil(panel)).max(1);
    let per = extent.div_ceil(panel).div_ceil(parts) * panel;
    let part = |t: usize| {
        let start = (t * per).min(extent);
        let len = per.min(extent - start);
        if len == 0 {
            return;
        }
        let (rows, cols, dst, a, b) = if by_rows {
            (len, n, dst.at(start, 0), a.at(start, 0), b)
        } else {
            (m, len, dst.at(0, start), a, b.at(0, start))
        };
        // SAFETY: the part is a block of the caller's views; parts are
        // disjoint in `dst`. f32 and f64 are gemm's own element types.
        unsafe {
            gemm::gemm(
                rows,
                cols,
                k,
                dst.ptr as *mut T,
                dst.strides.col_stride,
                dst.strides.row_stride,
                read_dst,
                a.ptr,
                a.strides.col_stride,
                a.strides.row_stride,
                b.ptr,
                b.strides.col_stride,
                b.strides.row_stride,
                T::one(),
                T::one(),
                false,
                false,
                false,
                gemm::Parallelism::None,
            );
        }
    };
    if parts == 1 {
        part(0);
    } else {
        (0..parts).into_par_iter().for_each(part);
    }
}

/// A matrix inside a slice: element `(i, j)` at `i * row_stride + j * col_stride`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MatView {
    pub rows: usize,
    pub cols: usize,
    pub row_stride: usize,
    pub col_stride: usize,
}

impl MatView {
    /// A row-major `[rows, cols]` matrix with rows `ld` elements apart.
    pub fn rows(rows: usize, cols: usize, ld: usize) -> Self {
        MatView {
            rows,
            cols,
            row_stride: ld,
            col_stride: 1,
        }
    }

    /// The same elements read transposed.
    pub fn t(self) -> Self {
        MatView {
            rows: self.cols,
            cols: self.rows,
            row_stride: self.col_stride,
            col_stride: self.row_stride,
        }
    }

    /// One past the furthest offset the view reads (0 when empty).
    fn reach(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            (self.rows - 1) * self.row_stride + (self.cols - 1) * self.col_stride + 1
        }
    }
}

/// `dst += a @ b` on views into slices (the products of convolutions,
/// whose operands are blocks of larger buffers). `threaded` lets `gemm`
/// split the product across rayon.
///
/// Panics if a view reaches outside its slice or the shapes do not chain.
pub(crate) fn gemm_accumulate<T: Element>(
    dst: &mut [T],
    d: MatView,
    a: &[T],
    av: MatView,
    b: &[T],
    bv: MatView,
    threaded: bool,
) {
    check_views(dst.len(), d, a, av, b, bv);
    if av.cols == 0 {
        return;
    }
    // SAFETY: the views lie inside their slices (`check_views`) and `dst`
    // is initialised, so gemm may read it.
    unsafe { gemm_raw(dst.as_mut_ptr(), d, a, av, b, bv, true, threaded) }
}

/// `dst = a @ b` on views into slices of uninitialised memory: every
/// element of `dst`'s view is written and none is read; see
/// [`gemm_accumulate`].
pub(crate) fn gemm_write<T: Element>(
    dst: &mut [MaybeUninit<T>],
    d: MatView,
    a: &[T],
    av: MatView,
    b: &[T],
    bv: MatView,
    threaded: bool,
) {
    check_views(dst.len(), d, a, av, b, bv);
    if av.cols == 0 {
        for i in 0..d.rows {
            for j in 0..d.cols {
                dst[i * d.row_stride + j * d.col_stride].write(T::zero());
            }
        }
        return;
    }
    // SAFETY: the views lie inside their slices (`check_views`); with
    // `read_dst = false` gemm writes every element of `dst`'s view without
    // reading it; `MaybeUninit<T>` has `T`'s layout.
    unsafe { gemm_raw(dst.as_mut_ptr() as *mut T, d, a, av, b, bv, false, threaded) }
}

/// `dst = a @ b` on views into slices, overwriting `dst`'s view; see
/// [`gemm_accumulate`].
pub(crate) fn gemm_overwrite<T: Element>(
    dst: &mut [T],
    d: MatView,
    a: &[T],
    av: MatView,
    b: &[T],
    bv: MatView,
    threaded: bool,
) {
    // SAFETY: `MaybeUninit<T>` has `T`'s layout, and `gemm_write` only
    // writes values of `T` (it never reads), so `dst` stays initialised.
    let dst = unsafe { &mut *(dst as *mut [T] as *mut [MaybeUninit<T>]) };
    gemm_write(dst, d, a, av, b, bv, threaded)
}

fn check_views<T>(dst_len: usize, d: MatView, a: &[T], av: MatView, b: &[T], bv: MatView) {
    assert!(
        av.rows == d.rows && bv.cols == d.cols && av.cols == bv.rows,
        "gemm views: [{}, {}] x [{}, {}] into [{}, {}]",
        av.rows,
        av.cols,
        bv.rows,
        bv.cols,
        d.rows,
        d.cols
    );
    assert!(d.reach() <= dst_len && av.reach() <= a.len() && bv.reach() <= b.len());
}

/// # Safety
/// The views must lie inside `a`, `b` and the buffer at `dst`, the shapes
/// must chain, and with `read_dst` the destination view must be initialised.
#[allow(clippy::too_many_arguments)]
unsafe fn gemm_raw<T: Element>(
    dst: *mut T,
    d: MatView,
    a: &[T],
    av: MatView,
    b: &[T],
    bv: MatView,
    read_dst: bool,
    threaded: bool,
) {
    if d.rows == 0 || d.cols == 0 {
        return;
    }
    let view = |ptr: *const T, v: MatView| RawMat {
        ptr,
        strides: Operand {
            row_stride: v.row_stride as isize,
            col_stride: v.col_stride as isize,
        },
    };
    // SAFETY: forwarded from the caller's contract.
    unsafe {
        gemm_split(
            [d.rows, d.cols, av.cols],
            view(dst, d),
            read_dst,
            view(a.as_ptr(), av),
            view(b.as_ptr(), bv),
            threaded,
        )
    }
}

/// The shape of `op(a) @ op(b)`, or the error `matmul` would return.
pub fn matmul_shape(
    op: &'static str,
    a: &[usize],
    b: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> Result<Dims> {
    let (sa, sb) = (contiguous_strides(a), contiguous_strides(b));
    Ok(plan(
        op,
        Layout {
            shape: a,
            strides: &sa,
        },
        Layout {
            shape: b,
            strides: &sb,
        },
        trans_a,
        trans_b,
    )?
    .out_shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::DType;

    /// Naive reference: `a` is [bm, m, k] flattened, etc.
    fn naive(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        c
    }

    fn seq(n: usize, scale: f64) -> Vec<f64> {
        (0..n)
            .map(|i| ((i * 7 % 11) as f64 - 5.0) * scale)
            .collect()
    }

    fn transpose(x: &[f64], r: usize, c: usize) -> Vec<f64> {
        let mut t = vec![0.0; r * c];
        for i in 0..r {
            for j in 0..c {
                t[j * r + i] = x[i * c + j];
            }
        }
        t
    }

    #[test]
    fn transposed_views_match_naive() {
        let (m, k, n) = (5, 7, 3);
        let a = seq(m * k, 0.5);
        let b = seq(k * n, 0.25);
        let want = naive(&a, &b, m, k, n);
        let at = Tensor::from_vec(transpose(&a, m, k), &[k, m]).unwrap();
        let bt = Tensor::from_vec(transpose(&b, k, n), &[n, k]).unwrap();
        let (a, b) = (
            Tensor::from_vec(a, &[m, k]).unwrap(),
            Tensor::from_vec(b, &[k, n]).unwrap(),
        );
        for (x, y, ta, tb) in [
            (&a, &b, false, false),
            (&at, &b, true, false),
            (&a, &bt, false, true),
            (&at, &bt, true, true),
        ] {
            let c = matmul("matmul", x, y, ta, tb).unwrap();
            assert_eq!(c.shape(), &[m, n]);
            assert_eq!(c.to_f64_vec(), want, "trans {ta} {tb}");
        }
    }

    /// `x Wᵀ` with W's rows far enough apart to be copied row-major first
    /// (f32 whole tiles and ragged edges, f64, one thread and two) has the
    /// bits of the product with `Wᵀ` stored row-major, which gemm reads as is.
    #[test]
    fn a_copied_transposed_operand_gives_the_bits_of_a_row_major_one() {
        for (m, n, k) in [(40, 37, 300), (64, 48, 512), (33, 16, 256)] {
            for dtype in [DType::F32, DType::F64] {
                let x = Tensor::randn(&[m, k], dtype, 1).unwrap();
                let w = Tensor::randn(&[n, k], dtype, 2).unwrap();
                let w_t = w.transpose(0, 1).unwrap().contiguous();
                let copied = matmul("linear", &x, &w, false, true).unwrap();
                let plain = matmul("linear", &x, &w_t, false, false).unwrap();
                assert_eq!(
                    copied.to_f64_vec(),
                    plain.to_f64_vec(),
                    "{m}x{n}x{k} {dtype:?}"
                );
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(2)
                    .build()
                    .unwrap();
                let split = pool.install(|| matmul("linear", &x, &w, false, true).unwrap());
                assert_eq!(
                    split.to_f64_vec(),
                    plain.to_f64_vec(),
                    "{m}x{n}x{k} {dtype:?}, 2 threads"
                );
            }
        }
    }

    #[test]
    fn batched_broadcast_and_folded_paths_match_naive() {
        let (m, k, n) = (4, 3, 5);
        let a = seq(2 * 3 * m * k, 0.5);
        let b = seq(3 * k * n, 0.25);
        let ta = Tensor::from_vec(a.clone(), &[2, 3, m, k]).unwrap();
        let tb = Tensor::from_vec(b.clone(), &[3, k, n]).unwrap();
        let c = matmul("matmul", &ta, &tb, false, false).unwrap();
        assert_eq!(c.shape(), &[2, 3, m, n]);
        let got = c.to_f64_vec();
        for i in 0..2 {
            for j in 0..3 {
                let ai = &a[(i * 3 + j) * m * k..][..m * k];
                let bj = &b[j * k * n..][..k * n];
                assert_eq!(
                    &got[(i * 3 + j) * m * n..][..m * n],
                    &naive(ai, bj, m, k, n)[..]
                );
            }
        }
        // Folded: [2, 3, m, k] @ [k, n].
        let b2 = Tensor::from_vec(b[..k * n].to_vec(), &[k, n]).unwrap();
        let c = matmul("matmul", &ta, &b2, false, false).unwrap();
        assert_eq!(c.shape(), &[2, 3, m, n]);
        assert_eq!(c.to_f64_vec(), naive(&a, &b[..k * n], 6 * m, k, n));
    }

    #[test]
    fn vector_rules_follow_pytorch() {
        let v = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3]).unwrap();
        let m = Tensor::from_vec((0..6).map(f64::from).collect(), &[3, 2]).unwrap();
        let dot = matmul("matmul", &v, &v, false, false).unwrap();
        assert!(dot.is_scalar());
        assert_eq!(dot.item(), 14.0);
        let vm = matmul("matmul", &v, &m, false, false).unwrap();
        assert_eq!(vm.shape(), &[2]);
        assert_eq!(vm.to_f64_vec(), vec![16.0, 22.0]);
        let mv = matmul("matmul", &m, &v, true, false).unwrap();
        assert_eq!(mv.to_f64_vec(), vec![16.0, 22.0]);
        let batched = Tensor::from_vec((0..12).map(f64::from).collect(), &[2, 3, 2]).unwrap();
        let bv = matmul("matmul", &v, &batched, false, false).unwrap();
        assert_eq!(bv.shape(), &[2, 2]);
        assert_eq!(bv.to_f64_vec(), vec![16.0, 22.0, 52.0, 58.0]);
    }

    #[test]
    fn errors_and_empty_products() {
        let a = Tensor::zeros(&[2, 3], crate::DType::F32).unwrap();
        let b = Tensor::zeros(&[2, 3], crate::DType::F32).unwrap();
        assert!(matches!(
            matmul("matmul", &a, &b, false, false),
            Err(Error::ShapeMismatch { op: "matmul", .. })
        ));
        assert!(matmul("matmul", &a, &b, false, true).is_ok());
        assert!(matmul("matmul", &Tensor::scalar(1.0f32), &b, false, false).is_err());
        let b64 = Tensor::zeros(&[3, 2], crate::DType::F64).unwrap();
        assert!(matches!(
            matmul("matmul", &a, &b64, false, false),
            Err(Error::DTypeMismatch { .. })
        ));
        let k0 = matmul(
            "matmul",
            &Tensor::zeros(&[2, 0], crate::DType::F64).unwrap(),
            &Tensor::zeros(&[0, 3], crate::DType::F64).unwrap(),
            false,
            false,
        )
        .unwrap();
        assert_eq!(k0.to_f64_vec(), vec![0.0; 6]);
        let m0 = matmul(
            "matmul",
            &Tensor::zeros(&[0, 3], crate::DType::F64).unwrap(),
            &b64,
            false,
            false,
        )
        .unwrap();
        assert_eq!(m0.shape(), &[0, 2]);
        let bad_batch = Tensor::zeros(&[4, 3, 2], crate::DType::F32).unwrap();
        let other = Tensor::zeros(&[5, 2, 3], crate::DType::F32).unwrap();
        assert!(matmul("matmul", &bad_batch, &other, false, false).is_err());
    }

    #[test]
    fn large_products_use_threads_and_agree() {
        // Above PARALLEL_FLOPS: one product split across the pool.
        let (m, k, n) = (200, 210, 190);
        assert!(m * n * k >= PARALLEL_FLOPS);
        let a = seq(m * k, 0.01);
        let b = seq(k * n, 0.02);
        let want = naive(&a, &b, m, k, n);
        let c = matmul(
            "matmul",
            &Tensor::from_vec(a, &[m, k]).unwrap(),
            &Tensor::from_vec(b, &[k, n]).unwrap(),
            false,
            false,
        )
        .unwrap();
        for (x, y) in c.to_f64_vec().iter().zip(&want) {
            assert!((x - y).abs() < 1e-9);
        }
        // A batch of small products above the threshold in total: split by matrix.
        let (batch, s) = (80, 48);
        assert!(batch * s * s * s >= PARALLEL_FLOPS && s * s * s < PARALLEL_FLOPS);
        let a = seq(batch * s * s, 0.1);
        let ta = Tensor::from_vec(a.clone(), &[batch, s, s]).unwrap();
        let c = matmul("matmul", &ta, &ta, false, true)
            .unwrap()
            .to_f64_vec();
        for i in [0, batch - 1] {
            let ai = &a[i * s * s..][..s * s];
            let want = naive(ai, &transpose(ai, s, s), s, s, s);
            for (x, y) in c[i * s * s..][..s * s].iter().zip(&want) {
                assert!((x - y).abs() < 1e-9);
            }
        }
    }

    /// Views are read through their strides and give what their row-major
    /// copies give: transposes, narrows, permuted heads, expanded batches.
    #[test]
    fn strided_views_match_their_copies() {
        let x = |shape: &[usize], scale: f64| {
            Tensor::from_vec(seq(shape.iter().product(), scale), shape).unwrap()
        };
        let heads = x(&[2, 5, 3, 4], 0.5).permute(&[0, 2, 1, 3]).unwrap(); // [2, 3, 5, 4]
        let keys = x(&[2, 5, 3, 4], 0.25).permute(&[0, 2, 3, 1]).unwrap(); // [2, 3, 4, 5]
        let wide = x(&[6, 9], 1.0);
        let cases: Vec<(Tensor, Tensor, bool, bool)> = vec![
            (heads.clone(), keys.clone(), false, false),
            (heads.clone(), heads.clone(), false, true),
            (heads.clone(), heads.clone(), true, false),
            (wide.transpose(0, 1).unwrap(), wide.clone(), false, false),
            (wide.narrow(1, 2, 5).unwrap(), x(&[5, 3], 1.0), false, false),
            (x(&[4, 6], 1.0), wide.narrow(1, 1, 7).unwrap(), false, false),
            (
                wide.narrow(0, 1, 4).unwrap().transpose(0, 1).unwrap(),
                x(&[4, 2], 1.0),
                false,
                false,
            ),
            (heads.clone(), x(&[4, 2], 1.0), false, false),
            (
                x(&[3, 4], 1.0).expand(&[2, 3, 3, 4]).unwrap(),
                keys.clone(),
                false,
                false,
            ),
            (
                x(&[1, 4], 1.0).expand(&[5, 4]).unwrap(),
                x(&[4, 3], 1.0),
                false,
                false,
            ),
            (
                wide.select(0, 2).unwrap(),
                wide.transpose(0, 1).unwrap(),
                false,
                false,
            ),
            (
                wide.transpose(0, 1).unwrap(),
                wide.select(1, 3).unwrap(),
                false,
                false,
            ),
        ];
        for (i, (a, b, ta, tb)) in cases.iter().enumerate() {
            let got = matmul("matmul", a, b, *ta, *tb).unwrap();
            let want = matmul("matmul", &a.contiguous(), &b.contiguous(), *ta, *tb).unwrap();
            assert_eq!(got.shape(), want.shape(), "case {i}");
            assert!(got.allclose(&want, 1e-12, 1e-12), "case {i}");
        }
    }
}
