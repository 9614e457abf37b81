//! Which gradients travel together: parameters in reverse order (the order
//! backward finishes them), packed into buckets of one dtype up to a byte
//! budget, each bucket one all-reduce.

use retrograd_engine::base::error::{Error, Result};
use retrograd_engine::nn::Parameter;
use retrograd_engine::tensor::DType;

/// The buckets' default size: 25 MiB, PyTorch DDP's `bucket_cap_mb`.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// The first bucket's cap (PyTorch DDP's too): the last layers' gradients,
/// final first, start travelling early instead of waiting for 25 MiB.
pub const FIRST_BUCKET_BYTES: usize = 1024 * 1024;

/// One bucket: the parameters (by index) whose gradients it carries.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Bucket {
    pub(crate) dtype: DType,
    pub(crate) len: usize,
    pub(crate) members: Vec<usize>,
}

/// Every parameter's bucket and offset in it, and the buckets.
#[derive(Clone, Debug)]
pub(crate) struct BucketPlan {
    pub(crate) buckets: Vec<Bucket>,
    /// By parameter index: (bucket, offset, number of elements).
    pub(crate) place: Vec<(usize, usize, usize)>,
}

impl BucketPlan {
    /// Packs `params`, last first, into buckets of at most `cap_bytes`
    /// (the first of at most [`FIRST_BUCKET_BYTES`]; a parameter larger than
    /// its bucket's cap gets a bucket of its own) and of one dtype each.
    pub(crate) fn new(params: &[(String, Parameter)], cap_bytes: usize) -> Result<Self> {
        if cap_bytes == 0 {
            return Err(Error::invalid(
                "DataParallel",
                "bucket size must be > 0 bytes",
            ));
        }
        let mut buckets: Vec<Bucket> = Vec::new();
        let mut place = vec![(0, 0, 0); params.len()];
        for (i, (name, p)) in params.iter().enumerate().rev() {
            let dtype = p.dtype();
            let width = match dtype {
                DType::F32 => 4,
                DType::F64 => 8,
                other => {
                    return Err(Error::invalid(
                        "DataParallel",
                        format!(
                            "parameter `{name}` has dtype {other}; only f32 and f64 are trained"
                        ),
                    ))
                }
            };
            let n = p.numel();
            // The last bucket is the first one while there is only one.
            let cap = if buckets.len() == 1 {
                cap_bytes.min(FIRST_BUCKET_BYTES)
            } else {
                cap_bytes
            };
            let fits = buckets
                .last()
                .is_some_and(|b| b.dtype == dtype && (b.len + n) * width <= cap);
            if !fits {
                buckets.push(Bucket {
                    dtype,
                    len: 0,
                    members: Vec::new(),
                });
            }
            let b = buckets.len() - 1;
            let bucket = &mut buckets[b];
            place[i] = (b, bucket.len, n);
            bucket.len += n;
            bucket.members.push(i);
        }
        Ok(BucketPlan { buckets, place })
    }

    /// The bytes all-reduced per synchronised step.
    pub(crate) fn bytes(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| b.len * if b.dtype == DType::F32 { 4 } else { 8 })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retrograd_engine::Tensor;

    fn p(n: usize, dtype: DType) -> (String, Parameter) {
        (
            format!("p{n}"),
            Parameter::new(Tensor::zeros(&[n], dtype).unwrap()),
        )
    }

    #[test]
    fn reverse_order_by_budget_and_dtype() {
        let params = vec![
            p(10, DType::F64),
            p(3, DType::F64),
            p(4, DType::F32),
            p(5, DType::F32),
            p(2, DType::F32),
        ];
        // 40 bytes: f32 [2, 5] = 28 bytes, then 4 would make 44 -> new bucket.
        let plan = BucketPlan::new(&params, 40).unwrap();
        let members: Vec<Vec<usize>> = plan.buckets.iter().map(|b| b.members.clone()).collect();
        assert_eq!(members, vec![vec![4, 3], vec![2], vec![1], vec![0]]);
        assert_eq!(plan.place[3], (0, 2, 5));
        assert_eq!(plan.buckets[3].len, 10); // alone, though larger than the budget
        assert_eq!(plan.bytes(), 4 * 11 + 8 * 13);
        let one = BucketPlan::new(&params, DEFAULT_BUCKET_BYTES).unwrap();
        assert_eq!(one.buckets.len(), 2); // one per dtype
        assert!(BucketPlan::new(&params, 0).is_err());
        // W2's sizes: the first bucket stops at 1 MiB, the rest share 25 MiB.
        let w2: Vec<_> = [784 * 512, 512, 512 * 512, 512, 512 * 10, 10]
            .iter()
            .map(|&n| p(n, DType::F32))
            .collect();
        let plan = BucketPlan::new(&w2, DEFAULT_BUCKET_BYTES).unwrap();
        let members: Vec<Vec<usize>> = plan.buckets.iter().map(|b| b.members.clone()).collect();
        assert_eq!(members, vec![vec![5, 4, 3], vec![2, 1, 0]]);
        let ints = vec![("i".to_string(), Parameter::new(Tensor::vector(&[1i64])))];
        assert!(BucketPlan::new(&ints, 8).is_err());
    }
}
