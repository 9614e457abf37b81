//! The instruction-set cap (`retrograd::set_isa_cap`, `RETROGRAD_ISA`):
//! every level this CPU has runs the same ops, the elementwise ones and
//! their reductions to the same bits, the kernels with hand-written wide
//! forms (convolution, attention, products) to within f32 rounding.
//!
//! The cap is process-wide, so the levels are switched inside one test,
//! in this test binary of its own.

use retrograd::ops::nn::Conv2dOptions;
use retrograd::{set_isa_cap, DType, Graph, Isa, Result, SdpaOptions, Tensor};

/// Each op's output and the gradients of its inputs, as f64.
type Outputs = Vec<(&'static str, Vec<f64>)>;

fn outputs() -> Result<Outputs> {
    let mut out: Outputs = Vec::new();
    let g = Graph::new();
    // 12,345 elements: full vectors at every width plus a ragged tail.
    let x = g.variable(Tensor::randn(&[5, 2469], DType::F32, 1)?);
    let b = g.variable(Tensor::randn(&[2469], DType::F32, 2)?);
    let elementwise = [
        ("exp", x.try_exp()?),
        ("tanh", x.try_tanh()?),
        ("sigmoid", x.try_sigmoid()?),
        ("gelu", x.try_gelu()?),
        ("add broadcast", x.try_add(&b)?),
        ("mul broadcast", x.try_mul(&b)?),
        ("softmax", x.try_softmax(-1)?),
        ("sum axis 0", x.try_sum_axes(&[0], false)?),
    ];
    for (name, y) in elementwise {
        out.push((name, y.value().to_f64_vec()));
        let grads = y.try_sum()?.backward()?;
        out.push((name, grads.wrt(&x).to_f64_vec()));
    }

    let image = g.variable(Tensor::randn(&[2, 16, 12, 12], DType::F32, 3)?);
    let filters = g.variable(Tensor::randn(&[32, 16, 3, 3], DType::F32, 4)?);
    let conv = image.try_conv2d(&filters, None, &Conv2dOptions::new().padding([1, 1]))?;
    out.push(("conv2d", conv.value().to_f64_vec()));
    let grads = conv.try_tanh()?.try_sum()?.backward()?;
    out.push(("conv2d", grads.wrt(&image).to_f64_vec()));
    out.push(("conv2d", grads.wrt(&filters).to_f64_vec()));

    let q = g.variable(Tensor::randn(&[2, 4, 64, 32], DType::F32, 5)?);
    let k = g.variable(Tensor::randn(&[2, 4, 64, 32], DType::F32, 6)?);
    let v = g.variable(Tensor::randn(&[2, 4, 64, 32], DType::F32, 7)?);
    let att = q.try_scaled_dot_product_attention(&k, &v, &SdpaOptions::new().is_causal(true))?;
    out.push(("attention", att.value().to_f64_vec()));
    let grads = att.try_sum()?.backward()?;
    out.push(("attention", grads.wrt(&q).to_f64_vec()));

    let a = g.variable(Tensor::randn(&[67, 129], DType::F32, 8)?);
    let m = g.variable(Tensor::randn(&[129, 71], DType::F32, 9)?);
    let prod = a.try_matmul(&m)?;
    out.push(("matmul", prod.value().to_f64_vec()));
    Ok(out)
}

/// Ops whose every level runs the same scalar code (`kernels::simd::wide`).
fn same_bits_everywhere(name: &str) -> bool {
    !matches!(name, "conv2d" | "attention" | "matmul")
}

#[test]
fn every_level_this_cpu_has_gives_the_same_results() -> Result<()> {
    let detected = Isa::detected();
    assert_eq!(set_isa_cap(Isa::Portable), Isa::Portable);
    assert_eq!(retrograd::isa(), Isa::Portable);
    let reference = outputs()?;
    for cap in Isa::ALL
        .into_iter()
        .filter(|&c| c > Isa::Portable && c <= detected)
    {
        assert_eq!(set_isa_cap(cap), cap);
        let got = outputs()?;
        for ((name, want), (_, have)) in reference.iter().zip(&got) {
            assert_eq!(want.len(), have.len(), "{name} under {cap:?}");
            let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                if same_bits_everywhere(name) {
                    assert_eq!(
                        (*w as f32).to_bits(),
                        (*h as f32).to_bits(),
                        "{name}[{i}] under {cap:?}: {h} against portable {w}"
                    );
                } else {
                    assert!(
                        (w - h).abs() <= 1e-4 * scale,
                        "{name}[{i}] under {cap:?}: {h} against portable {w}"
                    );
                }
            }
        }
    }
    // A cap above the CPU's level leaves the CPU's level in force.
    assert_eq!(set_isa_cap(Isa::Avx512), detected);
    assert_eq!(retrograd::isa(), detected);
    Ok(())
}

#[test]
fn levels_are_named_as_the_environment_variable_spells_them() {
    for isa in Isa::ALL {
        assert_eq!(Isa::from_name(isa.name()), isa);
    }
    assert_eq!(Isa::from_name(" AVX2 "), Isa::Avx2);
    let err = Isa::try_from_name("sse9").unwrap_err().to_string();
    assert!(
        err.contains("sse9") && err.contains("portable, avx2 or avx512"),
        "{err}"
    );
}

/// The cap reaches a kernel only if the kernel asks `kernels::simd`: no
/// other file of any crate in the workspace detects CPU features itself.
#[test]
fn only_kernels_simd_detects_cpu_features() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let (mut dirs, mut offenders, mut files) = (vec![root.clone()], Vec::new(), 0);
    while let Some(dir) = dirs.pop() {
        for path in std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()) {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files += 1;
                let text = std::fs::read_to_string(&path).unwrap();
                let rel = path
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if rel != "engine/src/kernels/simd.rs" && text.contains("is_x86_feature_detected!")
                {
                    offenders.push(rel);
                }
            }
        }
    }
    assert!(files > 100, "only {files} source files found");
    assert!(
        offenders.is_empty(),
        "detect CPU features through kernels::simd: {offenders:?}"
    );
}
