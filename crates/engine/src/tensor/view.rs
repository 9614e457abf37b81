//! Strided views: tensors that share another tensor's storage under their
//! own shape, strides and offset. `permute`/`transpose`, `narrow` (and
//! stepped slices), `select` and `expand` build one without copying an
//! element, as PyTorch's do.
//!
//! A view reads element `idx` at `offset + Σ idx[d]·strides[d]` of the
//! shared buffer. Kernels that understand strides (matmul, attention, the
//! strided copy) read it in place. Every other kernel asks for a row-major
//! slice ([`Tensor::as_slice`]) and gets the buffer itself when the view is
//! contiguous (a narrow of the first dimension), or else a packed copy,
//! made on first need and kept with the view, so a view consumed by several
//! kernels is packed once. The shared buffer is never written through a
//! view: a view never counts as the unique owner of its storage, so every
//! in-place path copies first (invariant 3, saved values stay immutable).

use std::sync::{Arc, OnceLock};

use super::shape::{broadcastable_to, checked_numel, contiguous_strides, normalize_axis, Dims};
use super::{element_count, strided_copy, DataType, Dense, Filled, Repr, Tensor};
use crate::base::error::{Error, Result};

/// The layout of a dense tensor that is not row-major over its whole
/// buffer (see the module docs).
pub(crate) struct View {
    strides: Dims,
    offset: usize,
    numel: usize,
    /// Whether the elements lie row-major from `offset` (no packing needed).
    contiguous: bool,
    /// The elements in row-major order, copied on first need: a plain
    /// tensor, so its storage comes from and goes back to the recycling pool.
    packed: OnceLock<Tensor>,
}

impl View {
    #[inline(always)]
    pub(super) fn numel(&self) -> usize {
        self.numel
    }

    /// Drops the packed copy, if one was made (a header kept for reuse).
    pub(super) fn forget_packed(&mut self) {
        drop(self.packed.take());
    }
}

/// A tensor's elements as a strided kernel reads them: element `idx` is
/// `data[Σ idx[d]·strides[d]]` (`data` starts at the tensor's offset).
pub(crate) struct Strided<'a, T> {
    pub data: &'a [T],
    pub strides: Dims,
}

/// Whether `strides` lay `shape` out row-major with no gaps (size-1
/// dimensions may have any stride, as in PyTorch).
fn is_row_major(shape: &[usize], strides: &[usize]) -> bool {
    let mut expected = 1;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != expected {
            return false;
        }
        expected *= d;
    }
    true
}

/// The strides under which `new_shape` reads the same elements, in the same
/// order, as `shape` at `strides`, if there are any (PyTorch's rule for
/// `view`: each run of dimensions that is contiguous in memory may be split
/// or merged, nothing else). Both shapes hold the same nonzero count.
fn reshaped_strides(shape: &[usize], strides: &[usize], new_shape: &[usize]) -> Option<Dims> {
    let mut out: Dims = smallvec::smallvec![0; new_shape.len()];
    let mut view_d = new_shape.len() as isize - 1;
    let mut chunk_base = *strides.last()?;
    let (mut tensor_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..shape.len()).rev() {
        tensor_numel *= shape[d];
        // A run ends where the next dimension out does not step over this one.
        if d == 0 || (shape[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base) {
            while view_d >= 0 && (view_numel < tensor_numel || new_shape[view_d as usize] == 1) {
                out[view_d as usize] = view_numel * chunk_base;
                view_numel *= new_shape[view_d as usize];
                view_d -= 1;
            }
            if view_numel != tensor_numel {
                return None;
            }
            if d > 0 {
                chunk_base = strides[d - 1];
                tensor_numel = 1;
                view_numel = 1;
            }
        }
    }
    (view_d == -1).then_some(out)
}

/// `Ok` if `perm` is a permutation of `0..rank`, an error naming `op` otherwise.
pub(crate) fn check_permutation(op: &'static str, perm: &[usize], rank: usize) -> Result<()> {
    let mut seen = vec![false; rank];
    let valid = perm.len() == rank
        && perm
            .iter()
            .all(|&p| p < rank && !std::mem::replace(&mut seen[p], true));
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            op,
            format!("{perm:?} is not a permutation of the {rank} dimensions"),
        ))
    }
}

impl Dense {
    /// Element strides of this tensor in its buffer.
    fn strides(&self) -> Dims {
        match &self.view {
            Some(v) => v.strides.clone(),
            None => contiguous_strides(&self.shape),
        }
    }

    fn offset(&self) -> usize {
        self.view.as_ref().map_or(0, |v| v.offset)
    }

    /// The row-major elements of a view: a sub-slice of the buffer when the
    /// view is contiguous, else the packed copy (made now if not yet).
    /// Kept out of line: `Tensor::try_slice` is inlined everywhere, and the
    /// plain-tensor path must stay small.
    #[inline(never)]
    pub(super) fn view_slice<'a, T: DataType>(&'a self, v: &'a View) -> Option<&'a [T]> {
        if v.contiguous {
            let all = T::unwrap_buffer(&self.buf)?;
            return Some(&all[v.offset..v.offset + v.numel]);
        }
        v.packed.get_or_init(|| self.pack(v)).try_slice::<T>()
    }

    fn pack(&self, v: &View) -> Tensor {
        crate::with_any_dtype!(self.buf.dtype(), T => {
            let src = T::unwrap_buffer(&self.buf).expect("the buffer's own dtype");
            Tensor::build::<T>(self.shape.clone(), |out| {
                strided_copy::gather_into(&src[v.offset..], out, &self.shape, &v.strides);
                // SAFETY: `gather_into` writes every element of an output
                // of `shape`'s element count.
                unsafe { Filled::assume(out) }
            })
        })
    }

    /// Turns a view that is the last owner of its buffer back into a plain
    /// tensor over the whole buffer, for the recycling pool.
    #[inline(always)]
    pub(super) fn forget_view(&mut self) {
        // Tested before it is written: a plain tensor (nearly every one
        // recycled) pays one load, not a store.
        if self.view.is_some() {
            self.view = None;
            self.shape = Dims::from_slice(&[self.buf.len()]);
        }
    }
}

impl Tensor {
    /// The distance, in elements, between neighbours along each dimension
    /// of this tensor's storage: row-major strides for a plain tensor, its
    /// own for a view (0 along an expanded dimension).
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::zeros(&[2, 3], retrograd::DType::F32)?;
    /// assert_eq!(x.strides().as_slice(), &[3, 1]);
    /// assert_eq!(x.transpose(0, 1)?.strides().as_slice(), &[1, 3]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn strides(&self) -> Dims {
        match &self.repr {
            Repr::Dense(d) => d.strides(),
            _ => Dims::new(),
        }
    }

    /// Where this tensor's first element lies in its storage.
    pub fn storage_offset(&self) -> usize {
        match &self.repr {
            Repr::Dense(d) => d.offset(),
            _ => 0,
        }
    }

    /// Whether the elements lie in row-major order in storage (true for
    /// every tensor but a permuted, stepped, selected or expanded view).
    pub fn is_contiguous(&self) -> bool {
        match &self.repr {
            Repr::Dense(d) => d.view.as_ref().is_none_or(|v| v.contiguous),
            _ => true,
        }
    }

    /// A row-major tensor with these elements: `self` (shared) when
    /// [contiguous](Self::is_contiguous), else a copy. The copy is made once
    /// per view and shared by every later call and every kernel that reads it.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let t = x.transpose(0, 1)?;                   // no copy
    /// assert!(t.shares_storage_with(&x) && !t.is_contiguous());
    /// let c = t.contiguous();                        // the copy
    /// assert!(c.is_contiguous() && !c.shares_storage_with(&x));
    /// assert_eq!(c.to_f64_vec(), vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn contiguous(&self) -> Tensor {
        match &self.repr {
            Repr::Dense(d) => match &d.view {
                Some(v) if !v.contiguous => v.packed.get_or_init(|| d.pack(v)).clone(),
                _ => self.clone(),
            },
            _ => self.clone(),
        }
    }

    /// Whether this view has been packed into a row-major copy (tests check
    /// that strided kernels read views in place).
    #[cfg(test)]
    pub(crate) fn has_packed_copy(&self) -> bool {
        match &self.repr {
            Repr::Dense(d) => d.view.as_ref().is_some_and(|v| v.packed.get().is_some()),
            _ => false,
        }
    }

    /// The elements for a strided kernel: the buffer from this tensor's
    /// offset, and its strides. `None` if `T` is not the dtype.
    pub(crate) fn strided<T: DataType>(&self) -> Option<Strided<'_, T>> {
        match &self.repr {
            Repr::Dense(d) => {
                let all = T::unwrap_buffer(&d.buf)?;
                Some(Strided {
                    data: &all[d.offset()..],
                    strides: d.strides(),
                })
            }
            _ => Some(Strided {
                data: T::scalar_ref(self).map(std::slice::from_ref)?,
                strides: Dims::new(),
            }),
        }
    }

    /// The tensor of `shape` reading this one's buffer at `strides` from
    /// `offset` (both in buffer elements, already composed with any view
    /// this tensor is). A plain tensor when that layout is the buffer's own.
    pub(super) fn with_layout(&self, shape: Dims, strides: Dims, offset: usize) -> Tensor {
        let d = match &self.repr {
            Repr::Dense(d) => d,
            // A 0-d value: lift it to a one-element buffer first.
            _ => {
                let lifted = crate::with_any_dtype!(self.dtype(), T => {
                    let v = *T::scalar_ref(self).expect("the tensor's own dtype");
                    Tensor::from_buffer::<T>(Dims::from_slice(&[1]), Arc::from(&[v][..]))
                });
                return lifted.with_layout(shape, strides, offset);
            }
        };
        let numel = element_count(&shape);
        if shape.is_empty() || numel == 0 {
            // A 0-d result is one element, inline; an empty one has none.
            return crate::with_any_dtype!(d.buf.dtype(), T => {
                let all = T::unwrap_buffer(&d.buf).expect("the buffer's own dtype");
                let taken: Arc<[T]> = if numel == 0 {
                    Arc::from(&[][..])
                } else {
                    Arc::from(&all[offset..=offset])
                };
                Tensor::from_buffer(shape, taken)
            });
        }
        let contiguous = is_row_major(&shape, &strides);
        let view = if contiguous && offset == 0 && numel == d.buf.len() {
            None
        } else {
            Some(View {
                strides,
                offset,
                numel,
                contiguous,
                packed: OnceLock::new(),
            })
        };
        Tensor::from_repr(Repr::dense(super::planned::new_dense(
            shape,
            d.buf.clone(),
            view,
        )))
    }

    /// A view's elements under another shape of the same count: a view
    /// again when its strides allow one (squeezing, or splitting and merging
    /// runs that are contiguous), else its packed copy reshaped.
    pub(super) fn reshape_view(&self, shape: &[usize]) -> Tensor {
        let strides = self.strides();
        match reshaped_strides(self.shape(), &strides, shape) {
            Some(s) if self.numel() > 0 => {
                self.with_layout(Dims::from_slice(shape), s, self.storage_offset())
            }
            _ => self
                .contiguous()
                .reshape(shape)
                .expect("the same element count"),
        }
    }

    /// Dimension `i` of the result is dimension `perm[i]` of `self`
    /// (dimensions already normalised); a view.
    pub(crate) fn permute_dims(&self, op: &'static str, perm: &[usize]) -> Result<Tensor> {
        check_permutation(op, perm, self.rank())?;
        let (shape, strides) = (self.shape(), self.strides());
        Ok(self.with_layout(
            perm.iter().map(|&p| shape[p]).collect(),
            perm.iter().map(|&p| strides[p]).collect(),
            self.storage_offset(),
        ))
    }

    /// Every `step`-th of `len` positions from `start` along `dim` (all
    /// already checked against the shape); a view.
    pub(crate) fn slice_dim(&self, dim: usize, start: usize, len: usize, step: usize) -> Tensor {
        let size = self.shape()[dim];
        assert!(step >= 1 && (len == 0 || start + (len - 1) * step < size));
        if len == size {
            return self.clone();
        }
        let (mut shape, mut strides) = (Dims::from_slice(self.shape()), self.strides());
        let offset = self.storage_offset() + if len == 0 { 0 } else { start * strides[dim] };
        shape[dim] = len;
        strides[dim] *= step;
        self.with_layout(shape, strides, offset)
    }

    /// Position `index` of dimension `dim` (both checked), without that
    /// dimension; a view.
    pub(crate) fn select_dim(&self, dim: usize, index: usize) -> Tensor {
        assert!(index < self.shape()[dim]);
        let (mut shape, mut strides) = (Dims::from_slice(self.shape()), self.strides());
        let offset = self.storage_offset() + index * strides[dim];
        shape.remove(dim);
        strides.remove(dim);
        self.with_layout(shape, strides, offset)
    }

    /// Broadcasts to `shape` under NumPy's rules, as a view whose broadcast
    /// dimensions have stride 0 (`op` names the caller in the error).
    pub(crate) fn expand_to(&self, op: &'static str, shape: &[usize]) -> Result<Tensor> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        if !broadcastable_to(self.shape(), shape) {
            return Err(Error::shape_mismatch(op, self.shape(), shape));
        }
        checked_numel(op, shape)?;
        let (from, from_strides) = (self.shape(), self.strides());
        let lead = shape.len() - from.len();
        let strides = (0..shape.len())
            .map(|i| match i.checked_sub(lead) {
                Some(j) if from[j] == shape[i] => from_strides[j],
                _ => 0,
            })
            .collect();
        Ok(self.with_layout(Dims::from_slice(shape), strides, self.storage_offset()))
    }

    /// Swaps two dimensions (negative counts from the end), sharing storage.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::from_vec(vec![1, 2, 3, 4, 5, 6i64], &[2, 3])?;
    /// let t = x.transpose(0, -1)?;
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert_eq!(t.to_vec::<i64>()?, vec![1, 4, 2, 5, 3, 6]);
    /// assert!(t.shares_storage_with(&x));
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        let rank = self.rank();
        if rank == 0 {
            normalize_axis("transpose", dim0, 1)?;
            normalize_axis("transpose", dim1, 1)?;
            return Ok(self.clone());
        }
        let d0 = normalize_axis("transpose", dim0, rank)?;
        let d1 = normalize_axis("transpose", dim1, rank)?;
        let mut perm: Dims = (0..rank).collect();
        perm.swap(d0, d1);
        self.permute_dims("transpose", &perm)
    }

    /// Reorders the dimensions: dimension `i` of the result is dimension
    /// `dims[i]` of `self` (negative counts from the end), sharing storage.
    pub fn permute(&self, dims: &[isize]) -> Result<Tensor> {
        let perm = dims
            .iter()
            .map(|&d| normalize_axis("permute", d, self.rank()))
            .collect::<Result<Dims>>()?;
        self.permute_dims("permute", &perm)
    }

    /// `len` positions of dimension `dim` from `start` (negative `dim` and
    /// `start` count from the end), sharing storage.
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::from_vec((0..6).map(f64::from).collect(), &[3, 2])?;
    /// assert_eq!(x.narrow(0, 1, 2)?.to_f64_vec(), vec![2.0, 3.0, 4.0, 5.0]);
    /// assert_eq!(x.narrow(1, -1, 1)?.to_f64_vec(), vec![1.0, 3.0, 5.0]);
    /// assert!(x.narrow(0, 2, 2).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn narrow(&self, dim: isize, start: isize, len: usize) -> Result<Tensor> {
        let d = normalize_axis("narrow", dim, self.rank())?;
        let size = self.shape()[d];
        let begin = if start < 0 {
            start + size as isize
        } else {
            start
        };
        if begin < 0 || begin as usize > size || len > size - begin as usize {
            return Err(Error::invalid(
                "narrow",
                format!(
                    "positions {start}..{start}+{len} of dimension {dim} are outside a shape {:?}",
                    self.shape()
                ),
            ));
        }
        Ok(self.slice_dim(d, begin as usize, len, 1))
    }

    /// Position `index` of dimension `dim` (negative counts from the end),
    /// without that dimension, sharing storage.
    pub fn select(&self, dim: isize, index: usize) -> Result<Tensor> {
        let d = normalize_axis("select", dim, self.rank())?;
        if index >= self.shape()[d] {
            return Err(Error::invalid(
                "select",
                format!(
                    "index {index} is out of range for dimension {dim} of a shape {:?}",
                    self.shape()
                ),
            ));
        }
        Ok(self.select_dim(d, index))
    }

    /// A size-1 dimension inserted at `dim` (in `-rank-1..=rank`), sharing
    /// storage (a view stays a view).
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], &[2, 2])?.transpose(0, 1)?;
    /// let u = x.unsqueeze(-1)?;
    /// assert_eq!(u.shape(), &[2, 2, 1]);
    /// assert!(u.shares_storage_with(&x) && !u.is_contiguous());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = normalize_axis("unsqueeze", dim, self.rank() + 1)?;
        let mut shape = Dims::from_slice(self.shape());
        shape.insert(d, 1);
        self.reshape(&shape)
    }

    /// Broadcasts to `shape` under NumPy's rules without copying: the
    /// broadcast dimensions read the same elements (stride 0).
    ///
    /// ```
    /// use retrograd::Tensor;
    /// let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let e = x.expand(&[3, 2])?;
    /// assert_eq!(e.strides().as_slice(), &[0, 1]);
    /// assert_eq!(e.to_vec::<f32>()?, vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// assert!(x.expand(&[3]).is_err());
    /// # Ok::<(), retrograd::Error>(())
    /// ```
    pub fn expand(&self, shape: &[usize]) -> Result<Tensor> {
        self.expand_to("expand", shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::shape::contiguous_strides;
    use crate::DType;

    fn iota(shape: &[usize]) -> Tensor {
        let n = shape.iter().product::<usize>();
        Tensor::from_vec((0..n as i64).collect(), shape).unwrap()
    }

    /// Element `idx` of `t`, read through its strides.
    fn at(t: &Tensor, idx: &[usize]) -> i64 {
        let s = t.strided::<i64>().unwrap();
        s.data[idx
            .iter()
            .zip(&s.strides)
            .map(|(i, s)| i * s)
            .sum::<usize>()]
    }

    #[test]
    fn views_share_storage_and_read_the_right_elements() {
        let x = iota(&[2, 3, 4]);
        let p = x.permute(&[2, 0, 1]).unwrap();
        assert!(p.shares_storage_with(&x) && !p.is_contiguous());
        assert_eq!(p.shape(), &[4, 2, 3]);
        assert_eq!(at(&p, &[3, 1, 2]), at(&x, &[1, 2, 3]));
        let n = x.narrow(1, 1, 2).unwrap();
        assert_eq!(n.storage_offset(), 4);
        assert_eq!(
            n.to_vec::<i64>().unwrap(),
            vec![4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23]
        );
        let s = x.select(2, 3).unwrap();
        assert_eq!(s.to_vec::<i64>().unwrap(), vec![3, 7, 11, 15, 19, 23]);
        // A narrow of the first dimension is contiguous: its slice is the buffer's.
        let first = x.narrow(0, 1, 1).unwrap();
        assert!(first.is_contiguous());
        assert_eq!(first.as_slice::<i64>().unwrap()[0], 12);
    }

    #[test]
    fn views_compose() {
        let x = iota(&[4, 6]);
        let v = x
            .transpose(0, 1)
            .unwrap()
            .slice_dim(0, 1, 2, 3) // columns 1 and 4
            .narrow(1, 1, 2)
            .unwrap(); // rows 1..3
        assert_eq!(v.shape(), &[2, 2]);
        assert_eq!(v.to_vec::<i64>().unwrap(), vec![7, 13, 10, 16]);
        assert!(v.shares_storage_with(&x));
        // Transposing back twice gives a plain tensor again.
        let back = x.transpose(0, 1).unwrap().transpose(0, 1).unwrap();
        assert!(back.is_contiguous() && back.strides().as_slice() == [6, 1]);
    }

    #[test]
    fn expand_reads_one_element_many_times() {
        let x = Tensor::from_vec(vec![1.0, 2.0, 3.0], &[3, 1]).unwrap();
        let e = x.expand(&[2, 3, 4]).unwrap();
        assert_eq!(e.strides().as_slice(), &[0, 1, 0]);
        assert_eq!(
            &e.to_f64_vec()[..8],
            &[1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0]
        );
        let s = Tensor::scalar(5i64).expand(&[2, 2]).unwrap();
        assert_eq!(s.to_vec::<i64>().unwrap(), vec![5; 4]);
        assert!(x.expand(&[2, 4, 4]).is_err());
    }

    #[test]
    fn a_view_is_never_written_through() {
        let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2]).unwrap();
        let mut t = x.transpose(0, 1).unwrap();
        drop(x.clone());
        t.make_mut::<f32>().unwrap()[0] = 9.0;
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![9.0, 3.0, 2.0, 4.0]);
        assert_eq!(x.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
        // Even when the view holds the last reference to the storage.
        let mut only = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])
            .unwrap()
            .narrow(0, 1, 2)
            .unwrap();
        only.make_mut::<f32>().unwrap()[0] = 7.0;
        assert_eq!(only.to_vec::<f32>().unwrap(), vec![7.0, 3.0]);
    }

    #[test]
    fn packing_happens_once_and_contiguous_shares_it() {
        let x = iota(&[3, 5]);
        let t = x.transpose(0, 1).unwrap();
        let a = t.as_slice::<i64>().unwrap().as_ptr();
        let c = t.contiguous();
        assert_eq!(c.as_slice::<i64>().unwrap().as_ptr(), a);
        assert_eq!(c.strides().as_slice(), &[3, 1]);
        // Flattening a transpose cannot be a view: it reads the packed elements.
        let r = t.reshape(&[15]).unwrap();
        assert_eq!(r.to_vec::<i64>().unwrap()[..4], [0, 5, 10, 1]);
        assert!(!r.shares_storage_with(&x));
    }

    #[test]
    fn reshapes_of_views_stay_views_where_the_strides_allow() {
        let x = iota(&[2, 3, 4, 5]);
        let heads = x.permute(&[0, 2, 1, 3]).unwrap(); // [2, 4, 3, 5]
                                                       // Splitting and merging the batch dimensions, adding and removing 1s.
        for shape in [
            &[2, 2, 2, 3, 5][..],
            &[2, 4, 3, 5, 1],
            &[1, 2, 2, 2, 3, 5],
            &[2, 4, 3, 5],
        ] {
            let r = heads.reshape(shape).unwrap();
            assert!(r.shares_storage_with(&x), "{shape:?}");
            assert_eq!(
                r.to_vec::<i64>().unwrap(),
                heads.contiguous().to_vec::<i64>().unwrap()
            );
        }
        // Merging the permuted pair (4 and 3) needs a copy.
        let merged = heads.reshape(&[2, 12, 5]).unwrap();
        assert!(!merged.shares_storage_with(&x));
        assert_eq!(
            merged.to_vec::<i64>().unwrap(),
            heads.contiguous().to_vec::<i64>().unwrap()
        );
        // The q of a fused qkv projection: narrow, then squeeze.
        let qkv = iota(&[2, 3, 3, 4, 2]).permute(&[2, 0, 3, 1, 4]).unwrap();
        let q = qkv.narrow(0, 1, 1).unwrap().reshape(&[2, 4, 3, 2]).unwrap();
        assert!(q.shares_storage_with(&qkv) && !q.is_contiguous());
        assert_eq!(
            q.to_vec::<i64>().unwrap(),
            qkv.select(0, 1)
                .unwrap()
                .contiguous()
                .to_vec::<i64>()
                .unwrap()
        );
    }

    #[test]
    fn bad_views_are_typed_errors() {
        let x = Tensor::zeros(&[2, 3], DType::F64).unwrap();
        assert!(x.permute(&[0, 0]).is_err());
        assert!(x.permute(&[0]).is_err());
        assert!(x.transpose(0, 2).is_err());
        assert!(x.select(1, 3).is_err());
        assert!(x.narrow(1, -4, 1).is_err());
        assert!(x.narrow(1, 1, 3).is_err());
        assert!(x.narrow(1, 3, 0).is_ok());
    }

    use crate::tensor::test_util::shaped as t;

    /// Reference permute by index arithmetic.
    fn naive_permute(x: &Tensor, perm: &[usize]) -> Vec<f64> {
        let v = x.to_f64_vec();
        let shape: Vec<usize> = perm.iter().map(|&p| x.shape()[p]).collect();
        let in_strides = contiguous_strides(x.shape());
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut off = 0;
                for d in (0..shape.len()).rev() {
                    off += (i % shape[d]) * in_strides[perm[d]];
                    i /= shape[d];
                }
                v[off]
            })
            .collect()
    }

    #[test]
    fn permutations_match_index_arithmetic() {
        let x = t((0..2 * 3 * 4 * 5).map(f64::from).collect(), &[2, 3, 4, 5]);
        for perm in [
            [0, 1, 3, 2],
            [3, 2, 1, 0],
            [0, 2, 1, 3],
            [1, 0, 2, 3],
            [2, 0, 3, 1],
        ] {
            let p = x.permute_dims("permute", &perm).unwrap();
            assert_eq!(p.to_f64_vec(), naive_permute(&x, &perm), "{perm:?}");
        }
        // Large enough to take the tiled, parallel paths.
        let big = t((0..3 * 130 * 170).map(f64::from).collect(), &[3, 130, 170]);
        for perm in [[0, 2, 1], [2, 1, 0], [1, 0, 2]] {
            let p = big.permute_dims("permute", &perm).unwrap();
            assert_eq!(p.to_f64_vec(), naive_permute(&big, &perm), "{perm:?}");
        }
        let one = t((0..300 * 400).map(f64::from).collect(), &[300, 400]);
        let p = one.permute_dims("permute", &[1, 0]).unwrap();
        assert_eq!(p.to_f64_vec(), naive_permute(&one, &[1, 0]));
    }

    #[test]
    fn order_preserving_permutations_are_plain_tensors() {
        let x = t((0..6).map(f64::from).collect(), &[1, 6, 1]);
        let p = x.permute_dims("permute", &[2, 1, 0]).unwrap();
        assert!(p.shares_storage_with(&x) && p.is_contiguous() && p.storage_offset() == 0);
        assert_eq!(p.shape(), &[1, 6, 1]);
        assert!(x.permute_dims("permute", &[0, 0, 1]).is_err());
        assert!(x.permute_dims("permute", &[0, 1]).is_err());
    }
}
