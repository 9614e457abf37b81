//! `train_shakespeare`'s training fed nanoGPT's initial weights and batches
//! (written by `bench/nanogpt_parity.py export`), one loss per step, so the
//! two can be compared step by step; see that script's docstring.
//!
//! ```sh
//! RAYON_NUM_THREADS=1 cargo run --release --example nanogpt_parity -- --dir target/parity --steps 2000
//! ```
//!
//! Prints `step IT loss L norm N lr R` per step and `eval IT val L` every
//! 250 steps (the mean loss over the exported val windows), and saves the
//! step-0 gradients to `DIR/grads0_retrograd.safetensors` and the final
//! weights to `DIR/final_retrograd.safetensors`. The model, data split,
//! schedule, AdamW groups and clipping are `train_shakespeare`'s at its
//! defaults; only the initial weights and the
//! windows come from outside.

use std::collections::BTreeMap;
use std::path::PathBuf;

use retrograd::data::{shakespeare, train_val_split, CharTokenizer};
use retrograd::io::{load_tensors, save_tensors};
use retrograd::nn::{Gpt, GptConfig, Module};
use retrograd::optim::{
    clip_grad_norm, decay_groups, Adam, AdamConfig, LrSchedule, Optimizer, WarmupCosineLr,
};
use retrograd::{Error, Graph, Result, Tensor, Var};

const LR: f64 = 1e-3;
const MIN_LR: f64 = 1e-4;
const WARMUP: usize = 100;
const DECAY_ITERS: usize = 2000;
const EVAL_INTERVAL: usize = 250;

/// The windows starting at `starts` and the tokens one step later.
fn windows(data: &[i64], starts: &[i64], block: usize) -> Result<(Tensor, Tensor)> {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for &i in starts {
        let i = i as usize;
        x.extend_from_slice(&data[i..i + block]);
        y.extend_from_slice(&data[i + 1..i + 1 + block]);
    }
    let shape = [starts.len(), block];
    Ok((Tensor::from_vec(x, &shape)?, Tensor::from_vec(y, &shape)?))
}

fn bad(reason: String) -> Error {
    Error::InvalidArgument {
        op: "nanogpt_parity",
        reason,
    }
}

/// An `[n, batch]` tensor of window starts as `n` rows.
fn rows(t: &Tensor) -> Result<Vec<Vec<i64>>> {
    let cols = t.shape()[1];
    Ok(t.to_vec::<i64>()?
        .chunks(cols)
        .map(<[i64]>::to_vec)
        .collect())
}

fn main() -> Result<()> {
    let mut dir = PathBuf::from("target/parity");
    let mut steps = 2000;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| bad(format!("{a} needs a value")));
        match a.as_str() {
            "--dir" => dir = value()?.into(),
            "--steps" => steps = value()?.parse().map_err(|e| bad(format!("{e}")))?,
            _ => return Err(bad(format!("unknown argument {a}"))),
        }
    }
    let text = shakespeare::load_bundled()?;
    let tokenizer = CharTokenizer::from_text(&text);
    let ids = tokenizer.encode(&text)?;
    let (train, val) = train_val_split(&ids, shakespeare::TRAIN_FRACTION)?;
    let config = GptConfig::shakespeare_char(tokenizer.vocab_size());
    let model = Gpt::new(config)?;
    let init = load_tensors(dir.join("init.safetensors"))?.tensors;
    for (name, p) in model.parameters() {
        let t = init
            .get(&name)
            .ok_or_else(|| bad(format!("no `{name}` in init.safetensors")))?;
        p.set(t.clone())?;
    }
    let batches = load_tensors(dir.join("batches.safetensors"))?.tensors;
    let split = |name: &str| {
        rows(
            batches
                .get(name)
                .ok_or_else(|| bad(format!("no `{name}` in batches.safetensors")))?,
        )
    };
    let (train_ix, val_ix) = (split("train")?, split("val")?);
    if train_ix.len() < steps {
        return Err(bad(format!(
            "{steps} steps but {} exported batches",
            train_ix.len()
        )));
    }
    let block = config.block_size;

    let adam = AdamConfig::adamw().lr(LR).betas(0.9, 0.99);
    let mut optimizer = Adam::with_groups(decay_groups(model.parameters(), 0.1), adam)?;
    let estimate = |model: &Gpt| -> Result<f64> {
        let mut sum = 0.0;
        for starts in &val_ix {
            let (x, y) = windows(val, starts, block)?;
            sum += model.loss(&Var::from(x), &y)?.value().try_item()?;
        }
        Ok(sum / val_ix.len() as f64)
    };
    for (it, starts) in train_ix[..steps].iter().enumerate() {
        if it % EVAL_INTERVAL == 0 {
            println!("eval {it} val {:.6}", estimate(&model)?);
        }
        let lr = WarmupCosineLr::new(WARMUP, DECAY_ITERS, MIN_LR)?.lr_at(LR, it);
        optimizer.set_lr(lr);
        let (x, y) = windows(train, starts, block)?;
        let graph = Graph::new();
        let loss = model.loss(&graph.constant(x), &y)?;
        let mut grads = loss.backward()?;
        if it == 0 {
            let g: BTreeMap<String, Tensor> = model
                .parameters()
                .into_iter()
                .map(|(n, p)| (n, grads.of(&p)))
                .collect();
            save_tensors(
                dir.join("grads0_retrograd.safetensors"),
                &g,
                &BTreeMap::new(),
            )?;
        }
        let norm = clip_grad_norm(&mut grads, 1.0, 2.0)?;
        optimizer.step(&grads)?;
        println!(
            "step {it} loss {:.6} norm {norm:.6} lr {lr:.6e}",
            loss.value().try_item()?
        );
    }
    println!("eval {steps} val {:.6}", estimate(&model)?);
    save_tensors(
        dir.join("final_retrograd.safetensors"),
        &model.state_dict(),
        &BTreeMap::new(),
    )?;
    Ok(())
}
