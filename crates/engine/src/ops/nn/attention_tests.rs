//! Tests of `scaled_dot_product_attention`: the fused op against the
//! unfused composition (values, first-order gradients on both sweeps),
//! finite differences, tangents, second derivatives, f32, errors.

use super::attention::sample;
use crate::ops::testing::check_hvp;
use super::{scaled_dot_product_attention_unfused as unfused, SdpaOptions};
use crate::{gradcheck, jvpcheck, BackwardOptions, DType, Error, Graph, Result, Tensor, Var};

/// A case: shapes of q, k, v, an optional mask shape and the options.
struct Case {
    q: Vec<usize>,
    k: Vec<usize>,
    v: Vec<usize>,
    mask: Option<Vec<usize>>,
    causal: bool,
    scale: Option<f64>,
    dropout: Option<(f64, u64)>,
}

fn case(q: &[usize], k: &[usize], v: &[usize]) -> Case {
    Case {
        q: q.to_vec(),
        k: k.to_vec(),
        v: v.to_vec(),
        mask: None,
        causal: false,
        scale: None,
        dropout: None,
    }
}

impl Case {
    fn inputs(&self) -> Vec<Tensor> {
        let mut xs = vec![
            sample(&self.q, 1, 1.0),
            sample(&self.k, 2, 1.0),
            sample(&self.v, 3, 1.0),
        ];
        if let Some(m) = &self.mask {
            xs.push(sample(m, 4, 0.8));
        }
        xs
    }
    fn run<'g>(&self, v: &[Var<'g>], fused: bool) -> Result<Var<'g>> {
        let mut o = SdpaOptions::new().is_causal(self.causal).scale(self.scale);
        if let Some((p, s)) = self.dropout {
            o = o.dropout_p(p, s);
        }
        if v.len() == 4 {
            o = o.attn_mask(&v[3]);
        }
        if fused {
            v[0].try_scaled_dot_product_attention(&v[1], &v[2], &o)
        } else {
            unfused(&v[0], &v[1], &v[2], &o)
        }
    }
}

fn cases() -> Vec<Case> {
    // Sizes straddling the blocks (64 rows, 128 keys) too.
    vec![
        case(&[3, 4], &[5, 4], &[5, 2]),
        Case { causal: true, ..case(&[2, 3, 5, 4], &[2, 3, 5, 4], &[2, 3, 5, 3]) },
        Case { causal: true, ..case(&[1, 7, 3], &[1, 4, 3], &[1, 4, 2]) },
        Case { causal: true, ..case(&[1, 3, 3], &[1, 6, 3], &[1, 6, 2]) },
        Case { mask: Some(vec![3, 5]), scale: Some(0.3), ..case(&[2, 3, 4], &[2, 5, 4], &[2, 5, 3]) },
        Case { mask: Some(vec![2, 1, 1, 5]), ..case(&[2, 2, 3, 4], &[2, 2, 5, 4], &[2, 2, 5, 4]) },
        Case { dropout: Some((0.3, 7)), ..case(&[2, 6, 4], &[2, 5, 4], &[2, 5, 3]) },
        Case { dropout: Some((0.25, 3)), causal: true, ..case(&[70, 8], &[140, 8], &[140, 5]) },
        Case { mask: Some(vec![70, 1]), ..case(&[2, 70, 4], &[2, 130, 4], &[2, 130, 3]) },
    ]
}

fn weights(shape: &[usize]) -> Tensor {
    sample(shape, 11, 1.0)
}

/// Value and gradients of `sum(w ⊙ attention)` with the fused op (fast or
/// `Var` sweep) or the unfused composition.
fn value_and_grads(c: &Case, xs: &[Tensor], fused: bool, fast: bool) -> (Vec<f64>, Vec<Vec<f64>>) {
    let g = Graph::new();
    let vars: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
    let y = c.run(&vars, fused).unwrap();
    let s = y
        .try_mul(&g.constant(weights(y.shape()).to_dtype(y.dtype())))
        .unwrap()
        .sum();
    let grads = s.backward_with_options(&BackwardOptions::new().fast_path(fast)).unwrap();
    (y.value().to_f64_vec(), vars.iter().map(|v| grads.wrt(v).to_f64_vec()).collect())
}

fn close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol * (1.0 + y.abs()), "{what}[{i}]: {x} vs {y}");
    }
}

#[test]
fn fused_matches_the_unfused_composition() {
    for (n, c) in cases().iter().enumerate() {
        let xs = c.inputs();
        let (yr, gr) = value_and_grads(c, &xs, false, true);
        for fast in [true, false] {
            let (y, gs) = value_and_grads(c, &xs, true, fast);
            close(&y, &yr, 1e-12, &format!("case {n} value"));
            for (i, (a, b)) in gs.iter().zip(&gr).enumerate() {
                close(a, b, 1e-11, &format!("case {n} (fast {fast}) grad {i}"));
            }
        }
    }
}

#[test]
fn gradients_tangents_and_second_derivatives_against_finite_differences() {
    for (n, c) in cases().iter().enumerate().filter(|(_, c)| c.q.iter().product::<usize>() < 100) {
        let xs = c.inputs();
        gradcheck(|v| c.run(v, true), &xs).unwrap_or_else(|e| panic!("case {n}: {e}"));
        jvpcheck(|v| c.run(v, true), &xs).unwrap_or_else(|e| panic!("case {n}: {e}"));
    }
    // Gradients of gradients (through the backward op's unfused formulas):
    // Hessian-vector products against differences of gradients, per input.
    let c = Case { causal: true, dropout: Some((0.2, 5)), ..case(&[2, 3, 3], &[2, 4, 3], &[2, 4, 2]) };
    let xs = c.inputs();
    for which in 0..3 {
        let f = objective(|x| {
            let g = x.graph();
            let mut v: Vec<Var<'_>> = xs.iter().map(|t| g.constant(t.clone())).collect();
            v[which] = x.clone();
            let y = c.run(&v, true)?;
            Ok(y.try_mul(&g.constant(weights(y.shape())))?.tanh().sum())
        });
        check_hvp(f, &xs[which]);
    }
}

/// Pins a closure's signature to one that holds for every graph lifetime.
fn objective<F: for<'g> Fn(&Var<'g>) -> Result<Var<'g>>>(f: F) -> F {
    f
}

#[test]
fn f32_agrees_with_f64_and_is_deterministic() {
    let c = Case { causal: true, ..case(&[2, 130, 16], &[2, 130, 16], &[2, 130, 8]) };
    let xs = c.inputs();
    let xs32: Vec<Tensor> = xs.iter().map(|t| t.to_dtype(DType::F32)).collect();
    let (y64, g64) = value_and_grads(&c, &xs, true, true);
    let (y32, g32) = value_and_grads(&c, &xs32, true, true);
    close(&y32, &y64, 1e-5, "f32 value");
    for (a, b) in g32.iter().zip(&g64) {
        close(a, b, 1e-4, "f32 grad");
    }
    let again = value_and_grads(&c, &xs32, true, true);
    assert_eq!(again.0, y32);
    assert_eq!(again.1, g32);
    // The same bits on one thread.
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let one = pool.install(|| value_and_grads(&c, &xs32, true, true));
    assert_eq!(one.0, y32);
    assert_eq!(one.1, g32);
}

#[test]
fn fully_masked_rows_give_zero_and_registry_defaults() {
    let g = Graph::new();
    let (q, k, v) = (
        g.variable(sample(&[2, 3], 1, 1.0)),
        g.variable(sample(&[4, 3], 2, 1.0)),
        g.variable(sample(&[4, 2], 3, 1.0)),
    );
    let mut m = vec![0.0; 8];
    m[4..].fill(f64::NEG_INFINITY);
    let mask = g.constant(Tensor::from_vec(m, &[2, 4]).unwrap());
    let y = q.scaled_dot_product_attention(&k, &v, &SdpaOptions::new().attn_mask(&mask));
    assert_eq!(&y.value().to_f64_vec()[2..], &[0.0, 0.0]);
    let grads = y.sum().backward().unwrap();
    assert!(grads.wrt(&q).all_finite() && grads.wrt(&k).all_finite());
    // The registry's instance: defaults, mask from the input count.
    let via = g.apply("scaled_dot_product_attention", &[&q, &k, &v]).unwrap();
    let direct = q.scaled_dot_product_attention(&k, &v, &SdpaOptions::new());
    assert!(via.value().allclose(direct.value(), 0.0, 0.0));
    let gv = via.sum().backward().unwrap().wrt(&k);
    let gd = direct.sum().backward().unwrap().wrt(&k);
    assert!(gv.allclose(&gd, 0.0, 0.0));
}

#[test]
fn errors_are_typed() {
    let g = Graph::new();
    let x = |s: &[usize]| g.variable(sample(s, 1, 1.0));
    let o = SdpaOptions::new();
    let bad = |r: Result<Var<'_>>| assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    bad(x(&[3]).try_scaled_dot_product_attention(&x(&[3]), &x(&[3]), &o));
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 2]), &x(&[4, 2]), &o));
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 3]), &x(&[5, 2]), &o));
    bad(x(&[2, 2, 3]).try_scaled_dot_product_attention(&x(&[1, 4, 3]), &x(&[1, 4, 2]), &o));
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 3]), &x(&[4, 2]), &o.scale(Some(f64::NAN))));
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 3]), &x(&[4, 2]), &o.dropout_p(1.0, 0)));
    let m = x(&[3, 4]);
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 3]), &x(&[4, 2]), &o.attn_mask(&m)));
    let m2 = x(&[2, 4]);
    bad(x(&[2, 3]).try_scaled_dot_product_attention(&x(&[4, 3]), &x(&[4, 2]), &o.attn_mask(&m2).is_causal(true)));
    let k32 = g.variable(sample(&[4, 3], 1, 1.0).to_dtype(DType::F32));
    assert!(matches!(
        x(&[2, 3]).try_scaled_dot_product_attention(&k32, &x(&[4, 2]), &o),
        Err(Error::DTypeMismatch { .. })
    ));
    // Empty sizes.
    let y = x(&[0, 3]).scaled_dot_product_attention(&x(&[4, 3]), &x(&[4, 2]), &o);
    assert_eq!(y.shape(), &[0, 2]);
    let y = x(&[2, 3]).scaled_dot_product_attention(&x(&[0, 3]), &x(&[0, 2]), &o);
    assert_eq!(y.value().to_f64_vec(), vec![0.0; 4]);
}

/// A bool mask with a row hidden from every key (row 1) and a key no
/// query sees (key 2), broadcast over a batch of 2.
fn bool_mask() -> Tensor {
    let keep = [true, false, false, true, false, false, false, false, true, true, false, true];
    Tensor::from_vec(keep.to_vec(), &[3, 4]).unwrap()
}

#[test]
fn a_bool_mask_is_the_additive_zero_or_minus_infinity_mask() {
    let keep = bool_mask();
    let additive = Tensor::from_vec(
        keep.to_vec::<bool>().unwrap().iter().map(|&k| if k { 0.0 } else { f64::NEG_INFINITY }).collect(),
        &[3, 4],
    )
    .unwrap();
    let xs = [sample(&[2, 3, 5], 1, 1.0), sample(&[2, 4, 5], 2, 1.0), sample(&[2, 4, 2], 3, 1.0)];
    for fast in [true, false] {
        let run = |as_bool: bool| {
            let g = Graph::new();
            let v: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
            let m = g.constant(additive.clone());
            let o = if as_bool { SdpaOptions::new().attn_mask(&keep) } else { SdpaOptions::new().attn_mask(&m) };
            let y = v[0].scaled_dot_product_attention(&v[1], &v[2], &o);
            let s = y.try_mul(&g.constant(weights(y.shape()))).unwrap().sum();
            let grads = s.backward_with_options(&BackwardOptions::new().fast_path(fast)).unwrap();
            let mut all = vec![y.value().to_f64_vec()];
            all.extend(v.iter().map(|x| grads.wrt(x).to_f64_vec()));
            all
        };
        let (b, a) = (run(true), run(false));
        assert_eq!(b, a, "fast {fast}: bool and additive masks differ");
        // Row 1 of each batch is hidden from every key: 0, and no gradient.
        assert_eq!(&b[0][2..4], &[0.0, 0.0]);
        assert_eq!(&b[1][5..10], &[0.0; 5]);
        assert!(b.iter().flatten().all(|x| x.is_finite()));
    }
    // A bool `Var` (a comparison's result) reads as a bool mask too.
    let g = Graph::new();
    let v: Vec<Var<'_>> = xs.iter().map(|t| g.variable(t.clone())).collect();
    let as_var = g.constant(keep.clone());
    let via_var = v[0].scaled_dot_product_attention(&v[1], &v[2], &SdpaOptions::new().attn_mask(&as_var));
    let via_tensor = v[0].scaled_dot_product_attention(&v[1], &v[2], &SdpaOptions::new().attn_mask(&keep));
    assert_eq!(via_var.value(), via_tensor.value());
    // And through the registry, as the fourth input.
    let via_apply = g.apply("scaled_dot_product_attention", &[&v[0], &v[1], &v[2], &as_var]).unwrap();
    assert_eq!(via_apply.value(), via_tensor.value());
}

/// Attention of `v[0]`, `v[1]`, `v[2]` under a bool mask, fused or not.
fn bool_masked<'g>(v: &[Var<'g>], keep: &Tensor, fused: bool) -> Result<Var<'g>> {
    let o = SdpaOptions::new().attn_mask(keep).scale(Some(0.7));
    if fused {
        v[0].try_scaled_dot_product_attention(&v[1], &v[2], &o)
    } else {
        unfused(&v[0], &v[1], &v[2], &o)
    }
}

#[test]
fn bool_masks_have_gradients_tangents_and_second_derivatives() {
    let keep = bool_mask();
    let xs = [sample(&[2, 3, 5], 1, 1.0), sample(&[2, 4, 5], 2, 1.0), sample(&[2, 4, 2], 3, 1.0)];
    for fused in [true, false] {
        gradcheck(|v| bool_masked(v, &keep, fused), &xs).unwrap_or_else(|e| panic!("fused {fused}: {e}"));
        jvpcheck(|v| bool_masked(v, &keep, fused), &xs).unwrap_or_else(|e| panic!("fused {fused}: {e}"));
        // Hessian-vector products against differences of gradients: no
        // NaN from the hidden row reaches a second derivative.
        for which in 0..2 {
            let f = objective(|x| {
                let g = x.graph();
                let mut v: Vec<Var<'_>> = xs.iter().map(|t| g.constant(t.clone())).collect();
                v[which] = x.clone();
                let y = bool_masked(&v, &keep, fused)?;
                Ok(y.try_mul(&g.constant(weights(y.shape())))?.tanh().sum())
            });
            check_hvp(f, &xs[which]);
        }
    }
}

#[test]
fn bool_mask_errors_are_typed() {
    let g = Graph::new();
    let x = |s: &[usize]| g.variable(sample(s, 1, 1.0));
    let (q, k, v) = (x(&[2, 3]), x(&[4, 3]), x(&[4, 2]));
    // Not bool: a float mask is a `Var` (additive), an i64 one is neither.
    let ids = Tensor::from_vec(vec![1i64; 8], &[2, 4]).unwrap();
    assert!(matches!(
        q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new().attn_mask(&ids)),
        Err(Error::WrongDType { expected: DType::Bool, found: DType::I64, .. })
    ));
    let wide = Tensor::from_vec(vec![true; 10], &[2, 5]).unwrap();
    let r = q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new().attn_mask(&wide));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    let keep = Tensor::from_vec(vec![true; 8], &[2, 4]).unwrap();
    let r = q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new().attn_mask(&keep).is_causal(true));
    assert!(matches!(r, Err(Error::InvalidArgument { .. })), "{r:?}");
    // An i64 mask as a `Var` through the registry: a dtype mismatch.
    let m = g.constant(ids);
    assert!(matches!(
        g.apply("scaled_dot_product_attention", &[&q, &k, &v, &m]),
        Err(Error::DTypeMismatch { .. })
    ));
}

/// Heads split from a fused `[B, T, 3, H, D]` projection by narrowing and
/// a permute, in either order (permuted first, or picked first as
/// `MultiheadAttention` does), reach the kernel as views: nothing is packed
/// in either sweep, and values and gradients are those of contiguous heads.
#[test]
fn strided_heads_are_read_in_place() {
    let (b, t, h, d) = (2, 70, 3, 4);
    for (causal, pick_first) in [(false, false), (true, false), (false, true), (true, true)] {
        let proj = sample(&[b, t, 3, h, d], 21, 1.0);
        let g = Graph::new();
        let x = g.variable(proj.clone());
        let head = |i: isize| {
            if pick_first {
                x.try_narrow(2, i, 1).unwrap().try_squeeze_dim(2).unwrap().try_permute(&[0, 2, 1, 3]).unwrap()
            } else {
                let all = x.try_permute(&[2, 0, 3, 1, 4]).unwrap();
                all.try_narrow(0, i, 1).unwrap().try_squeeze_dim(0).unwrap()
            }
        };
        let heads: Vec<Var<'_>> = (0..3).map(head).collect();
        for v in &heads {
            assert!(!v.value().is_contiguous() && v.value().shares_storage_with(&proj));
        }
        let o = SdpaOptions::new().is_causal(causal);
        let y = heads[0].try_scaled_dot_product_attention(&heads[1], &heads[2], &o).unwrap();
        // Heads merged back by a permute: dO reaches the kernel as a
        // permuted view of the merged gradient.
        let w = g.constant(weights(&[b, t, h, d]));
        let merged = y.try_permute(&[0, 2, 1, 3]).unwrap();
        let grads = merged.try_mul(&w).unwrap().sum().backward().unwrap();
        for v in &heads {
            assert!(!v.value().has_packed_copy(), "a head was packed");
        }
        // The same with contiguous heads.
        let g2 = Graph::new();
        let packed: Vec<Var<'_>> = heads.iter().map(|v| g2.variable(v.value().contiguous())).collect();
        let y2 = packed[0].try_scaled_dot_product_attention(&packed[1], &packed[2], &o).unwrap();
        let w2 = g2.constant(weights(&[b, t, h, d]).permute(&[0, 2, 1, 3]).unwrap().contiguous());
        let grads2 = y2.try_mul(&w2).unwrap().sum().backward().unwrap();
        close(&y.value().to_f64_vec(), &y2.value().to_f64_vec(), 1e-13, "output");
        let dx = grads.wrt(&x).permute(&[2, 0, 3, 1, 4]).unwrap();
        for (i, p) in packed.iter().enumerate() {
            let want = grads2.wrt(p).to_f64_vec();
            close(&dx.select(0, i).unwrap().to_f64_vec(), &want, 1e-13, "gradient");
        }
    }
}

/// Attention with a bool mask (input 3) and, if `DROPOUT`, dropout
/// (p 0.3, seed 11): its output and the gradients of `sum(y ⊙ y)` with
/// respect to `q`, `k`, `v`, recorded so that `vmap` batches the backward
/// op too.
fn attention_and_grads<'s, const DROPOUT: bool>(v: &[Var<'s>]) -> Result<Vec<Var<'s>>> {
    use crate::{grad, GradOptions};
    let mut o = SdpaOptions::new().attn_mask(&v[3]);
    if DROPOUT {
        o = o.dropout_p(0.3, 11);
    }
    let y = v[0].try_scaled_dot_product_attention(&v[1], &v[2], &o)?;
    let loss = (&y * &y).sum();
    let mut out = vec![y.clone()];
    out.extend(grad(&[&loss], &[&v[0], &v[1], &v[2]], &GradOptions::new().create_graph(true))?);
    Ok(out)
}

/// The gradient with respect to `q` of `sum(dq ⊙ dq)`, `dq` from
/// [`attention_and_grads`] without dropout: a second derivative, through
/// the backward op's own (unfused) derivatives.
fn second_derivative<'s>(v: &[Var<'s>]) -> Result<Vec<Var<'s>>> {
    use crate::{grad, GradOptions};
    let dq = attention_and_grads::<false>(v)?.remove(1);
    grad(&[&(&dq * &dq).sum()], &[&v[0]], &GradOptions::new().create_graph(true))
}

/// A function of [`attention_and_grads`]'s kind.
type AttnFn = for<'s> fn(&[Var<'s>]) -> Result<Vec<Var<'s>>>;

#[test]
fn vmap_with_a_batched_bool_mask_and_dropout() {
    use crate::autograd::VMap;
    use crate::core::Randomness;
    let (b, h, l, s, e) = (3, 2, 4, 5, 3);
    let xs = [sample(&[b, h, l, e], 1, 1.0), sample(&[b, h, s, e], 2, 1.0), sample(&[b, h, s, 2], 3, 1.0)];
    // Each example's own mask, [L, S], every row attending somewhere.
    let keep: Vec<bool> = (0..b * l * s).map(|i| (i / (l * s) + i / s % l + i % s) % 3 != 0).collect();
    let mask = Tensor::from_vec(keep, &[b, l, s]).unwrap();
    let run = |f: AttnFn, randomness| {
        let g = Graph::new();
        let mut args: Vec<Var<'_>> = xs.iter().map(|x| g.variable(x.clone())).collect();
        args.push(g.constant(mask.clone()));
        let refs: Vec<&Var<'_>> = args.iter().collect();
        let out = VMap::new().randomness(randomness).try_call(f, &refs).unwrap();
        out.iter().map(|o| o.value().clone()).collect::<Vec<_>>()
    };
    let alone = |f: AttnFn, i: usize| {
        let g = Graph::new();
        let mut args: Vec<Var<'_>> = xs.iter().map(|x| g.variable(x.select(0, i).unwrap().contiguous())).collect();
        args.push(g.constant(mask.select(0, i).unwrap().contiguous()));
        f(&args).unwrap().iter().map(|o| o.value().clone()).collect::<Vec<_>>()
    };
    let row = |t: &Tensor, i: usize| t.select(0, i).unwrap().to_f64_vec();
    // Without dropout, and with a dropout every example shares
    // (Randomness::Same: each draws what it draws alone): each example's
    // values and gradients.
    for (f, randomness) in [
        (attention_and_grads::<false> as AttnFn, Randomness::Error),
        (second_derivative, Randomness::Error),
        (attention_and_grads::<true>, Randomness::Same),
    ] {
        let got = run(f, randomness);
        for i in 0..b {
            for (got, want) in got.iter().zip(alone(f, i)) {
                close(&row(got, i), &want.to_f64_vec(), 1e-12, "an example's value");
            }
        }
    }
    // Randomness::Different: the op over the whole batch (the mask
    // broadcast over the heads), so each example has its own draw.
    let got = run(attention_and_grads::<true>, Randomness::Different);
    let g = Graph::new();
    let mut args: Vec<Var<'_>> = xs.iter().map(|x| g.variable(x.clone())).collect();
    args.push(g.constant(mask.reshape(&[b, 1, l, s]).unwrap()));
    let whole = attention_and_grads::<true>(&args).unwrap();
    for (got, want) in got.iter().zip(&whole) {
        close(&got.to_f64_vec(), &want.value().to_f64_vec(), 1e-12, "the whole batch's value");
    }
    let first = alone(attention_and_grads::<true>, 1);
    assert!(row(&got[0], 1) != first[0].to_f64_vec(), "examples share a dropout mask");
}
