//! LoRA on SmolLM2-135M-Instruct against `transformers` + `peft` on the
//! same model dequantized to f32 (tests/reference/lora_smollm2_*.py):
//! 30 AdamW steps from the same adapter start on the same batches give the
//! same losses and first-step adapter gradients, and an adapter folder
//! saved by PEFT loads here and gives PEFT's logits. An adapter saved here
//! is written with its logits to target/lora_smollm2_ours/ for
//! tests/reference/peft_load_check.py, which loads it in PEFT.
//!
//! Needs the model (scripts/fetch_smollm2.sh; without it each test prints
//! a skip line) and a release build (in a debug build each test prints a
//! skip line): `cargo test --release --test lora_smollm2`.

use std::path::Path;

use serde_json::Value;

use retrograd::gguf::GgufFile;
use retrograd::hub::{load_peft_adapter, save_peft_adapter, PeftSaveOptions, WeightPrecision};
use retrograd::io::save_tensors;
use retrograd::nn::lora::{LoraAdapter, LoraModel};
use retrograd::nn::{Llama, Module};
use retrograd::optim::{Adam, AdamConfig, Optimizer};
use retrograd::{Graph, Tensor};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The f32 model, or `None` (with a skip line) in a debug build or
/// without the model file.
fn f32_model() -> Option<Llama> {
    if cfg!(debug_assertions) {
        println!("skip: the SmolLM2 LoRA comparisons run in a release build (cargo test --release --test lora_smollm2)");
        return None;
    }
    let path = root().join(".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf");
    if !path.exists() {
        println!(
            "skip: {} is missing; run scripts/fetch_smollm2.sh",
            path.display()
        );
        return None;
    }
    Some(Llama::from_gguf(&GgufFile::open(&path), WeightPrecision::F32).unwrap())
}

fn fixture(name: &str) -> Value {
    let path = root().join("tests/reference/smollm2").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

/// The fixture's adapter start: `A[i][j] = a_amp · sin(a_l·L + a_m·m + a_i·i + a_j·j + a_0)`
/// and `B[i][j] = b_amp · cos(…)`, in f64 then rounded to f32.
fn formula_adapters(model: &Llama, reference: &Value) -> Vec<(String, LoraAdapter)> {
    let (init, lora) = (&reference["init"], &reference["lora"]);
    let r = lora["r"].as_u64().unwrap() as usize;
    let alpha = f(&lora["lora_alpha"]);
    let targets: Vec<&str> = lora["target_modules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let k = |name: &str| f(&init[name]);
    let mut out = Vec::new();
    model.visit_linears(&mut |path, _, layer| {
        let leaf = path.rsplit('.').next().unwrap();
        let Some(m) = targets.iter().position(|t| *t == leaf) else {
            return;
        };
        let l: f64 = path.split('.').nth(2).unwrap().parse().unwrap();
        let m = m as f64;
        let (n_in, n_out) = (layer.in_features(), layer.out_features());
        let mut a = Vec::with_capacity(r * n_in);
        for i in 0..r {
            for j in 0..n_in {
                let phase = k("a_l") * l + k("a_m") * m + k("a_i") * i as f64 + k("a_j") * j as f64;
                a.push((k("a_amp") * (phase + k("a_0")).sin()) as f32);
            }
        }
        let mut b = Vec::with_capacity(n_out * r);
        for i in 0..n_out {
            for j in 0..r {
                let phase = k("b_l") * l + k("b_m") * m + k("b_i") * i as f64 + k("b_j") * j as f64;
                b.push((k("b_amp") * (phase + k("b_0")).cos()) as f32);
            }
        }
        let adapter = LoraAdapter::try_from_weights(
            Tensor::from_vec(a, &[r, n_in]).unwrap(),
            Tensor::from_vec(b, &[n_out, r]).unwrap(),
            alpha,
            false,
            (0.0, 0),
        )
        .unwrap();
        out.push((path.to_string(), adapter));
    });
    out
}

fn l2(v: &[f64]) -> f64 {
    v.iter().map(|x| x * x).sum::<f64>().sqrt()
}

#[test]
fn thirty_adamw_steps_follow_peft() {
    let Some(mut model) = f32_model() else {
        return;
    };
    let reference = fixture("lora_training.json");
    let adapters = formula_adapters(&model, &reference);
    assert_eq!(adapters.len(), 30 * 7);
    model.try_insert_adapters("default", adapters).unwrap();
    let params = model.adapter_parameters("default");
    assert_eq!(model.trainable_parameters().len(), params.len());
    let o = &reference["optimizer"];
    let config = AdamConfig::adamw()
        .lr(f(&o["lr"]))
        .eps(f(&o["eps"]))
        .weight_decay(f(&o["weight_decay"]));
    let mut opt = Adam::new(params.clone(), config).unwrap();
    let want_losses: Vec<f64> = reference["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    let batch = reference["data"]["batch"].as_u64().unwrap() as usize;
    let mut worst_loss = 0f64;
    for (step, b) in reference["batches"].as_array().unwrap().iter().enumerate() {
        let flat = |key: &str| -> Vec<i64> {
            b[key]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_i64().unwrap()))
                .collect()
        };
        let ids: Vec<usize> = flat("input_ids").into_iter().map(|v| v as usize).collect();
        let labels = flat("labels");
        let g = Graph::new();
        let loss = model.try_causal_lm_loss(&g, &ids, &labels, batch).unwrap();
        let value = loss.value().try_item().unwrap();
        worst_loss = worst_loss.max((value - want_losses[step]).abs());
        let grads = loss.backward().unwrap();
        if step == 0 {
            for want in reference["grads_step0"].as_array().unwrap() {
                // PEFT's runtime name has its wrapper's prefix.
                let name = want["name"].as_str().unwrap();
                let name = name.strip_prefix("base_model.model.").unwrap_or(name);
                let (_, p) = params.iter().find(|(n, _)| n == name).unwrap_or_else(|| {
                    panic!("no adapter parameter {name}");
                });
                let got = grads.of(p).to_f64_vec();
                let want_l2 = f(&want["l2"]);
                let rel = (l2(&got) - want_l2).abs() / want_l2;
                assert!(
                    rel < 1e-3,
                    "{name}: gradient norm {} against {want_l2}",
                    l2(&got)
                );
                for (g, w) in got.iter().zip(want["first"].as_array().unwrap()) {
                    assert!((g - f(w)).abs() < 1e-3 * want_l2, "{name}: {g} against {w}");
                }
            }
        }
        opt.step(&grads).unwrap();
    }
    println!("30 steps: worst loss difference from PEFT {worst_loss:.2e}");
    assert!(worst_loss < 1e-3, "worst loss difference {worst_loss}");
}

#[test]
fn a_peft_folder_loads_and_gives_peft_logits() {
    let Some(mut model) = f32_model() else {
        return;
    };
    let reference = fixture("peft_adapter_logits.json");
    let dir = root().join("tests/reference/smollm2/peft_adapter");
    let adapted = load_peft_adapter(&mut model, &dir, "default").unwrap();
    assert_eq!(adapted.len(), 6);
    let ids: Vec<usize> = reference["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    let vocab = model.config().vocab_size;
    let logits = |m: &Llama| {
        let g = Graph::new();
        m.forward(&g, &ids, 1)
            .unwrap()
            .value()
            .to_vec::<f32>()
            .unwrap()
    };
    let check = |got: &[f32], key: &str| {
        let mut worst = 0f64;
        for (p, (top, vals)) in reference["top_ids"]
            .as_array()
            .unwrap()
            .iter()
            .zip(reference[key].as_array().unwrap())
            .enumerate()
        {
            for (id, v) in top.as_array().unwrap().iter().zip(vals.as_array().unwrap()) {
                let ours = got[p * vocab + id.as_u64().unwrap() as usize] as f64;
                worst = worst.max((ours - f(v)).abs());
            }
        }
        worst
    };
    let adapted_logits = logits(&model);
    let worst = check(&adapted_logits, "top_logits");
    println!("PEFT's adapter: worst top-10 logit difference {worst:.2e}");
    assert!(worst < 1e-4, "{worst}");
    model.try_set_adapters(&[]).unwrap();
    let base = check(&logits(&model), "base_logits");
    assert!(base < 1e-4, "{base}");

    // Saved here: the same folder content, and logits for PEFT to check.
    model.try_set_adapters(&["default"]).unwrap();
    let out = root().join("target/lora_smollm2_ours");
    let options = PeftSaveOptions {
        base_model_name_or_path: Some("SmolLM2-135M-Instruct.Q4_1.gguf".into()),
    };
    save_peft_adapter(&model, "default", out.join("adapter"), &options).unwrap();
    let mut tensors = std::collections::BTreeMap::new();
    tensors.insert(
        "input_ids".to_string(),
        Tensor::from_vec(
            ids.iter().map(|&i| i as i64).collect::<Vec<_>>(),
            &[ids.len()],
        )
        .unwrap(),
    );
    tensors.insert(
        "logits".to_string(),
        Tensor::from_vec(adapted_logits.clone(), &[ids.len(), vocab]).unwrap(),
    );
    save_tensors(
        out.join("logits.safetensors"),
        &tensors,
        &Default::default(),
    )
    .unwrap();
    let mut again = f32_model().unwrap();
    load_peft_adapter(&mut again, out.join("adapter"), "default").unwrap();
    assert_eq!(logits(&again), adapted_logits);
}

/// Parameters of the model are named as PEFT names them at run time.
#[test]
fn adapter_parameters_carry_peft_runtime_names() {
    let Some(mut model) = f32_model() else {
        return;
    };
    let dir = root().join("tests/reference/smollm2/peft_adapter");
    load_peft_adapter(&mut model, &dir, "default").unwrap();
    let names: Vec<String> = model
        .adapter_parameters("default")
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(names.contains(&"model.layers.2.self_attn.v_proj.lora_B.default.weight".to_string()));
    assert_eq!(names.len(), 12);
}
