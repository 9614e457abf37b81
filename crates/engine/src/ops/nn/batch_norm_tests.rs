//! Tests of `batch_norm` and `group_norm`: gradients, tangents and second
//! derivatives in both modes, with and without affine parameters, on 2-d,
//! 3-d and 4-d inputs; f32; the typed errors. (Values against PyTorch:
//! `tests/norm_reference.rs`.)

use super::batch_norm::sample;
use super::BatchNormArgs;
use crate::ops::testing::check_hvp;
use crate::{gradcheck, jvpcheck, DType, Error, Graph, Result, Tensor, Var};

fn rm(c: usize) -> Tensor {
    sample(&[c], 5, 0.0, 0.3)
}
fn rv(c: usize) -> Tensor {
    sample(&[c], 9, 1.5, 0.4)
}

/// Training (`None`) or eval with running statistics (`Some`), optional affine from `v[1..]`.
fn bn<'g>(v: &[Var<'g>], affine: bool, running: Option<(&Tensor, &Tensor)>) -> Result<Var<'g>> {
    let mut args = BatchNormArgs::new().eps(1e-4);
    if affine {
        args = args.weight(&v[1]).bias(&v[2]);
    }
    if let Some((m, s)) = running {
        args = args.running(m, s).training(false);
    }
    Ok(v[0].try_batch_norm(&args)?.output)
}

#[test]
fn batch_norm_gradients_and_tangents_in_both_modes() {
    for shape in [&[5, 3][..], &[3, 3, 4], &[2, 3, 2, 3]] {
        let x = sample(shape, 1, 0.2, 2.0);
        let (w, b) = (sample(&[3], 2, 1.0, 0.5), sample(&[3], 3, 0.0, 0.5));
        let (m, s) = (rm(3), rv(3));
        for running in [None, Some((&m, &s))] {
            gradcheck(|v| bn(v, true, running), &[x.clone(), w.clone(), b.clone()]).unwrap();
            jvpcheck(|v| bn(v, true, running), &[x.clone(), w.clone(), b.clone()]).unwrap();
            gradcheck(|v| bn(v, false, running), &[x.clone()]).unwrap();
            jvpcheck(|v| bn(v, false, running), &[x.clone()]).unwrap();
        }
    }
    // Two consumers of x.
    let x = sample(&[4, 2, 3], 4, 0.0, 1.5);
    gradcheck(|v| Ok(&bn(v, false, None)?.tanh() * &v[0]), &[x]).unwrap();
}

#[test]
fn eval_mode_differentiates_the_running_statistics_too() {
    // Through the registry-level op the running statistics are inputs like any other.
    let x = sample(&[3, 2, 4], 1, 0.0, 2.0);
    let inputs = [x, rm(2), rv(2), sample(&[2], 2, 1.0, 0.5), sample(&[2], 3, 0.0, 0.5)];
    fn eval<'g>(v: &[Var<'g>]) -> Result<Var<'g>> {
        let op = super::batch_norm::BatchNorm::eval_for_tests(1e-3);
        let refs: Vec<&Var<'g>> = v.iter().collect();
        v[0].graph().record(op, &refs)
    }
    gradcheck(eval, &inputs).unwrap();
    jvpcheck(eval, &inputs).unwrap();
}

#[test]
fn second_derivatives() {
    let x = sample(&[3, 2, 4], 1, 0.0, 2.0);
    fn c<'g>(v: &Var<'g>) -> Var<'g> {
        v.graph().constant(sample(v.shape(), 8, 0.0, 1.0))
    }
    let (w, b) = (sample(&[2], 2, 1.0, 0.5), sample(&[2], 3, 0.0, 0.5));
    check_hvp(
        |x| {
            let (wv, bv) = (x.graph().constant(w.clone()), x.graph().constant(b.clone()));
            let y = x.try_batch_norm(&BatchNormArgs::new().weight(&wv).bias(&bv))?.output;
            Ok((&y.tanh() * &c(&y)).sum())
        },
        &x,
    );
    check_hvp(
        |wv| {
            let xv = wv.graph().constant(x.clone());
            let y = xv.try_batch_norm(&BatchNormArgs::new().weight(wv))?.output;
            Ok((&y.tanh() * &c(&y)).sum())
        },
        &w,
    );
    let (m, s) = (rm(2), rv(2));
    check_hvp(
        |x| {
            let args = BatchNormArgs::new().running(&m, &s).training(false);
            Ok((&x.try_batch_norm(&args)?.output.tanh() * &c(x)).sum())
        },
        &x,
    );
    check_hvp(
        |x| Ok((&x.try_group_norm(2, None, None, 1e-5)?.tanh() * &c(x)).sum()),
        &sample(&[2, 4, 3], 1, 0.0, 2.0),
    );
}

#[test]
fn group_norm_gradients_and_tangents() {
    for (shape, groups) in [(&[2, 4][..], 2), (&[2, 6, 3][..], 3), (&[2, 4, 2, 3][..], 1)] {
        let c = shape[1];
        let x = sample(shape, 1, 0.3, 2.0);
        let (w, b) = (sample(&[c], 2, 1.0, 0.5), sample(&[c], 3, 0.0, 0.5));
        gradcheck(
            |v| v[0].try_group_norm(groups, Some(&v[1]), Some(&v[2]), 1e-4),
            &[x.clone(), w.clone(), b.clone()],
        )
        .unwrap();
        jvpcheck(
            |v| v[0].try_group_norm(groups, Some(&v[1]), Some(&v[2]), 1e-4),
            &[x.clone(), w, b],
        )
        .unwrap();
        gradcheck(|v| v[0].try_group_norm(groups, None, None, 1e-4), &[x.clone()]).unwrap();
        jvpcheck(|v| v[0].try_group_norm(groups, None, None, 1e-4), &[x]).unwrap();
    }
}

#[test]
fn f32_matches_f64_and_a_large_offset_stays_accurate() {
    let g = Graph::new();
    let x64 = sample(&[4, 3, 5], 1, 1e4, 2.0);
    let y64 = g.variable(x64.clone()).batch_norm(&BatchNormArgs::new()).output;
    let y32 = g.variable(x64.to_dtype(DType::F32)).batch_norm(&BatchNormArgs::new()).output;
    assert_eq!(y32.value().dtype(), DType::F32);
    assert!(y32.value().allclose(y64.value(), 1e-3, 1e-3));
    let z64 = g.variable(x64.clone()).group_norm(3, None, None, 1e-5);
    let z32 = g.variable(x64.to_dtype(DType::F32)).group_norm(3, None, None, 1e-5);
    assert!(z32.value().allclose(z64.value(), 1e-3, 1e-3));
}

#[test]
fn parallel_sizes_agree_with_a_single_thread() {
    // Above the parallel threshold: the same bits with one thread.
    let x = sample(&[8, 4, 64, 64], 1, 0.0, 2.0).to_dtype(DType::F32);
    let run = || {
        let g = Graph::new();
        let xv = g.variable(x.clone());
        let y = xv.batch_norm(&BatchNormArgs::new()).output;
        let z = xv.group_norm(2, None, None, 1e-5);
        let grads = (&(&y * &y) + &z).sum().backward().unwrap();
        (y.value().clone(), z.value().clone(), grads.wrt(&xv))
    };
    let a = run();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let b = pool.install(run);
    assert_eq!(a, b);
}

#[test]
fn bad_arguments_are_typed_errors_naming_the_op_and_shapes() {
    let g = Graph::new();
    let x = g.variable(sample(&[4, 3, 2], 1, 0.0, 1.0));
    let msg = |r: Result<super::BatchNormOutput<'_>>| match r {
        Err(e @ Error::InvalidArgument { op: "batch_norm", .. }) => e.to_string(),
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("no error"),
    };
    // Wrong rank.
    let v = g.variable(sample(&[4], 1, 0.0, 1.0));
    assert!(msg(v.try_batch_norm(&BatchNormArgs::new())).contains("[4]"));
    // Channel mismatch of weight / running statistics.
    let w4 = g.variable(sample(&[4], 1, 1.0, 0.1));
    let e = msg(x.try_batch_norm(&BatchNormArgs::new().weight(&w4)));
    assert!(e.contains("weight") && e.contains("[3]") && e.contains("[4, 3, 2]"), "{e}");
    let (m2, s3) = (rm(2), rv(3));
    let e = msg(x.try_batch_norm(&BatchNormArgs::new().running(&m2, &s3)));
    assert!(e.contains("running_mean"), "{e}");
    let e = msg(x.try_batch_norm(&BatchNormArgs::new().running(&m2, &s3).training(false)));
    assert!(e.contains("running_mean"), "{e}");
    // Dtype mismatch.
    let w32 = g.variable(Tensor::ones(&[3], DType::F32).unwrap());
    assert!(matches!(
        x.try_batch_norm(&BatchNormArgs::new().weight(&w32)),
        Err(Error::DTypeMismatch { op: "batch_norm", .. })
    ));
    // Eps, momentum, eval without statistics.
    msg(x.try_batch_norm(&BatchNormArgs::new().eps(-1.0)));
    msg(x.try_batch_norm(&BatchNormArgs::new().eps(f64::NAN)));
    msg(x.try_batch_norm(&BatchNormArgs::new().momentum(1.5)));
    msg(x.try_batch_norm(&BatchNormArgs::new().training(false)));
    // One value per channel in training mode; fine in eval mode.
    let one = g.variable(sample(&[1, 3, 1], 1, 0.0, 1.0));
    let e = msg(one.try_batch_norm(&BatchNormArgs::new()));
    assert!(e.contains("more than 1 value per channel"), "{e}");
    let (m3, s3) = (rm(3), rv(3));
    assert!(one.try_batch_norm(&BatchNormArgs::new().running(&m3, &s3).training(false)).is_ok());
    // Group norm.
    let e = x.try_group_norm(2, None, None, 1e-5).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "group_norm", .. }));
    assert!(e.to_string().contains("num_groups (2)") && e.to_string().contains("[4, 3, 2]"), "{e}");
    assert!(x.try_group_norm(0, None, None, 1e-5).is_err());
    assert!(x.try_group_norm(3, Some(&w4), None, 1e-5).is_err());
    assert!(x.try_group_norm(3, None, None, -1.0).is_err());
    assert!(v.try_group_norm(1, None, None, 1e-5).is_err());
}

#[test]
fn running_statistics_follow_pytorch_rules() {
    let g = Graph::new();
    let x = g.variable(Tensor::from_vec(vec![1.0, 2.0, 3.0, 6.0, 5.0, 1.0], &[3, 2]).unwrap());
    let (m, s) = (Tensor::vector(&[1.0, -1.0]), Tensor::vector(&[2.0, 0.5]));
    let out = x.batch_norm(&BatchNormArgs::new().running(&m, &s).momentum(0.25));
    // Channel 0: 1, 3, 5 (mean 3, unbiased var 4); channel 1: 2, 6, 1 (mean 3, var 7).
    assert_eq!(out.batch_mean.unwrap().to_f64_vec(), vec![3.0, 3.0]);
    assert_eq!(out.batch_var.unwrap().to_f64_vec(), vec![4.0, 7.0]);
    assert_eq!(out.running_mean.unwrap().to_f64_vec(), vec![0.25 * 3.0 + 0.75, 0.25 * 3.0 - 0.75]);
    assert_eq!(out.running_var.unwrap().to_f64_vec(), vec![0.25 * 4.0 + 1.5, 0.25 * 7.0 + 0.375]);
    // An empty batch leaves them unchanged.
    let empty = g.variable(Tensor::zeros(&[0, 2], DType::F64).unwrap());
    let out = empty.batch_norm(&BatchNormArgs::new().running(&m, &s));
    assert_eq!(out.running_mean.unwrap(), m);
    assert_eq!(out.output.shape(), &[0, 2]);
}
