//! The integer and bool tensors of a small language model's data path, end
//! to end (issue 17, "Tensors"): token ids as i64 through `embedding`,
//! `gather`, `index_select` and the class-target losses (the same values
//! and gradients as the float-index forms), a causal bool mask from
//! `tril`, comparisons to bool, `masked_fill`, `where` with a bool
//! condition, `arange`, casts, `argmax`/`topk` positions as i64, and a
//! typed error wherever dtypes would mix without a cast.

use retrograd::{DType, Error, Graph, SdpaOptions, Tensor, Var};

fn ids() -> Tensor {
    Tensor::from_vec(vec![2i64, 0, 3, 3, 1, 0], &[2, 3]).unwrap()
}

/// `f` with the token ids as i64 and as whole-number f64: same value and
/// same gradient with respect to the float input.
fn same_with_i64_and_float_ids(
    name: &str,
    x: &Tensor,
    f: impl for<'g> Fn(&Var<'g>, &Tensor) -> retrograd::Result<Var<'g>>,
) {
    let run = |idx: &Tensor| {
        let g = Graph::new();
        let xv = g.variable(x.clone());
        let y = f(&xv, idx).unwrap_or_else(|e| panic!("{name}: {e}"));
        let grad = y.sum().backward().unwrap().wrt(&xv);
        (y.value().to_f64_vec(), grad.to_f64_vec())
    };
    let a = run(&ids());
    let b = run(&ids().to_dtype(DType::F64));
    assert_eq!(a, b, "{name}: i64 and float ids differ");
}

#[test]
fn i64_ids_index_and_are_class_targets() {
    let table = Tensor::randn(&[4, 5], DType::F64, 1).unwrap();
    same_with_i64_and_float_ids("embedding", &table, |w, i| w.try_embedding(i, i.shape()));
    same_with_i64_and_float_ids("index_select", &table, |w, i| {
        w.try_index_select(0, &i.reshape(&[6]).unwrap())
    });
    let logits = Tensor::randn(&[2, 4], DType::F64, 2).unwrap();
    same_with_i64_and_float_ids("gather", &logits, |x, i| x.try_gather(1, i));
    let targets = Tensor::from_vec(vec![3i64, 1], &[2]).unwrap();
    same_with_i64_and_float_ids("cross_entropy", &logits, |x, _| {
        x.try_cross_entropy(&targets)
    });
    same_with_i64_and_float_ids("nll_loss", &logits, |x, _| {
        x.try_log_softmax(-1)?.try_nll_loss(&targets)
    });
    // And the float-target forms agree with the i64 ones.
    let g = Graph::new();
    let x = g.variable(logits.clone());
    let a = x.cross_entropy(&targets).value().item();
    let b = x
        .cross_entropy(&targets.to_dtype(DType::F64))
        .value()
        .item();
    assert_eq!(a, b);
}

#[test]
fn masks_comparisons_positions_and_casts() {
    let g = Graph::new();
    // A causal mask: arange compared, or tril of ones; the same bools.
    let pos = g.constant(Tensor::arange(0.0, 4.0, 1.0, DType::I64).unwrap());
    let rows = pos.reshape(&[4, 1]);
    let causal = pos.le(&rows);
    assert_eq!(causal.dtype(), DType::Bool);
    let ones = g.constant(Tensor::full(&[4, 4], 1.0, DType::Bool).unwrap());
    assert_eq!(causal.value(), ones.tril(0).value());
    // masked_fill with the negated mask, and where with a bool condition.
    let scores = g.variable(Tensor::randn(&[4, 4], DType::F32, 3).unwrap());
    let hidden = causal.eq_scalar(0.0);
    let filled = scores.masked_fill(&hidden, f64::NEG_INFINITY);
    let chosen = scores
        .try_where(&causal, &g.constant(Tensor::scalar(f32::NEG_INFINITY)))
        .unwrap();
    assert_eq!(filled.value(), chosen.value());
    let p = filled.softmax(-1);
    let grads = p.select(0, 3).sum().backward().unwrap();
    assert!(grads.wrt(&scores).all_finite());
    // The same mask drives attention as a bool attn_mask.
    let q = g.variable(Tensor::randn(&[2, 4, 3], DType::F32, 4).unwrap());
    let a = q.scaled_dot_product_attention(&q, &q, &SdpaOptions::new().attn_mask(&causal));
    let b = q.scaled_dot_product_attention(&q, &q, &SdpaOptions::new().is_causal(true));
    assert!(a.value().allclose(b.value(), 1e-6, 1e-6));
    // Positions are i64 and feed back in as ids.
    let next = p.argmax(Some(-1), false);
    assert_eq!(next.dtype(), DType::I64);
    let (top, at) = p.topk(2, true);
    assert_eq!((top.dtype(), at.dtype()), (DType::F32, DType::I64));
    let firsts: Vec<i64> = at
        .value()
        .to_vec::<i64>()
        .unwrap()
        .into_iter()
        .step_by(2)
        .collect();
    assert_eq!(firsts, next.value().to_vec::<i64>().unwrap());
    let table = g.variable(Tensor::randn(&[4, 2], DType::F32, 5).unwrap());
    assert_eq!(table.embedding(next.value(), &[4]).shape(), &[4, 2]);
    // Casts: bool -> f32 counts, f32 -> i64 truncates, f32 -> bf16 is storage.
    let count = causal.to_dtype(DType::F32).sum();
    assert_eq!(count.value().item(), 10.0);
    assert_eq!(
        g.constant(Tensor::vector(&[2.7f32, -1.5]))
            .to_dtype(DType::I64)
            .value()
            .to_vec::<i64>()
            .unwrap(),
        vec![2, -1]
    );
    let stored = scores.to_dtype(DType::BF16);
    assert!(!stored.requires_grad() && stored.dtype() == DType::BF16);
}

#[test]
fn mixing_dtypes_without_a_cast_is_a_typed_error() {
    let g = Graph::new();
    let x = g.variable(Tensor::randn(&[2, 3], DType::F32, 6).unwrap());
    let i = g.constant(ids());
    let m = g.constant(Tensor::full(&[2, 3], 1.0, DType::Bool).unwrap());
    assert!(matches!(x.try_add(&i), Err(Error::DTypeMismatch { .. })));
    assert!(matches!(x.try_lt(&i), Err(Error::DTypeMismatch { .. })));
    assert!(matches!(i.try_eq(&m), Err(Error::DTypeMismatch { .. })));
    assert!(matches!(i.try_add(&i), Err(Error::NotFloat { .. })));
    assert!(matches!(
        x.try_masked_fill(&i, 0.0),
        Err(Error::WrongDType { .. })
    ));
    assert!(matches!(
        g.try_variable(ids()),
        Err(Error::NotDifferentiable { .. })
    ));
    // With the cast, each works.
    assert!(x.try_add(&i.to_dtype(DType::F32)).is_ok());
    assert!(x.try_masked_fill(&i.ne_scalar(0.0), 0.0).is_ok());
}
