"""LoRA fine-tuning of SmolLM2-135M-Instruct by transformers + peft, on the
Q4_1 GGUF dequantized to f32: 30 AdamW steps from a deterministic adapter
initialisation on fixed batches of tiny Shakespeare chat pairs, so that
another implementation can replay the same steps and compare.

    scripts/fetch_smollm2.sh                            # the model, once
    nice -n 10 python3 tests/reference/lora_smollm2_training.py
    python3 tests/reference/lora_smollm2_training.py --model PATH.gguf --threads 2

The model is loaded as smollm2_f32_reference.py loads it (transformers'
gguf_file= dequantization, f32, eager attention, use_cache False) and run in
train mode (no dropout anywhere: the model's attention_dropout and LoRA's
lora_dropout are 0).

Adapters: r 4, lora_alpha 8 (scaling alpha / r = 2), no dropout, bias
"none", on q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
of all 30 layers; the output of a wrapped linear is
    base(x) + scaling * (x @ A^T) @ B^T.
The initial A and B are not random: for layer L and module index m in the
order above, computed in float64 and then cast to float32,
    A[i][j] = a_amp * sin(a_l*L + a_m*m + a_i*i + a_j*j + a_0)   A: [r, in]
    B[i][j] = b_amp * cos(b_l*L + b_m*m + b_i*i + b_j*j + b_0)   B: [out, r]
with the constants in the fixture's "init".

Data: the bundled data/tinyshakespeare.txt.gz split into speeches (blocks
separated by blank lines, a `NAME:` heading, blocks without lines skipped:
7,097 speeches); pair i is speech i as the user's turn and speech i + 1 as
the assistant's, kept only where the two speakers differ. Pairs are taken in
the order of numpy.random.default_rng(0).permutation(7096), rendered with
the model's chat template (its default system turn, add_generation_prompt
False), tokenized with add_special_tokens=False, and kept when the ids are
at least 48 long and the reply starts before position 40; each is cut to
its first 48 ids. Labels are the ids on the reply's content tokens and its
closing <|im_end|>, -100 elsewhere. Step s uses the kept pairs 2s and 2s+1.

Loss: cross_entropy(logits[:, :-1].reshape(-1, V), labels[:, 1:].reshape(-1),
ignore_index=-100), the mean over every labelled target of the batch.
Optimiser: torch.optim.AdamW(lr 2e-4, betas (0.9, 0.999), eps 1e-8,
weight_decay 0.01) over the LoRA parameters only.

Writes tests/reference/smollm2/lora_training.json:
  versions         {python, transformers, torch, peft, gguf, tokenizers, ...}
  model, dtype, attn_implementation, loss_definition (text)
  lora             {r, lora_alpha, scaling, lora_dropout, bias,
                    target_modules (the module order m), layers}
  init             {formula_A, formula_B, a_amp, a_l, a_m, a_i, a_j, a_0,
                    b_amp, b_l, b_m, b_i, b_j, b_0, computed_in}
  optimizer        {name, lr, betas, eps, weight_decay}
  data             {seq_len, batch, steps, max_reply_start, seed,
                    pair_starts [steps][batch] (speech index i of each row)}
  batches          [steps] {input_ids [batch][48], labels [batch][48]}
  base_loss        the first batch's loss without the adapters
  losses           [steps] the loss of each step before its update
  loss_after       the last batch's loss after the last update
  grads_step0      [{name (PEFT's runtime name, "...lora_A.default.weight"),
                     saved_name (the adapter file's, without ".default"),
                     shape, l2 (float64 norm as float32), first (the first 8
                     flattened values)}] for every LoRA parameter, in
                     model order
  final_l2         [same order] each LoRA parameter's L2 norm after the
                   last update
"""

import argparse
import json
import os
import re

import numpy as np
import torch

from smollm2_common import MODEL, OUT, f32, versions
from lora_smollm2_common import (causal_lm_loss, labelled, load_model, pair_indices,
                                 render_pair, speeches)

MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
R = 4
ALPHA = 8
SEQ = 48
MAX_START = 40
BATCH = 2
STEPS = 30
N_FIRST = 8
INIT = {
    "a_amp": 0.05, "a_l": 0.7, "a_m": 1.3, "a_i": 0.11, "a_j": 0.013, "a_0": 0.5,
    "b_amp": 0.01, "b_l": 0.3, "b_m": 0.9, "b_i": 0.017, "b_j": 0.19, "b_0": 0.25,
}
OPT = {"lr": 2e-4, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}


def init_a(layer, m, rows, cols, c):
    i = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    return (c["a_amp"] * np.sin(c["a_l"] * layer + c["a_m"] * m + c["a_i"] * i
                                + c["a_j"] * j + c["a_0"])).astype(np.float32)


def init_b(layer, m, rows, cols, c):
    i = np.arange(rows, dtype=np.float64)[:, None]
    j = np.arange(cols, dtype=np.float64)[None, :]
    return (c["b_amp"] * np.cos(c["b_l"] * layer + c["b_m"] * m + c["b_i"] * i
                                + c["b_j"] * j + c["b_0"])).astype(np.float32)


def build_batches(tok):
    sp = speeches()
    rows = []
    for i in pair_indices(len(sp), seed=0):
        if sp[i][0] == sp[i + 1][0]:
            continue
        got = render_pair(tok, sp[i][1], sp[i + 1][1])
        if got is None:
            continue
        ids, start, end = got
        if len(ids) < SEQ or start >= MAX_START:
            continue
        x, y = labelled(ids, start, end, SEQ)
        rows.append((i, x, y))
        if len(rows) == STEPS * BATCH:
            break
    return [rows[s * BATCH:(s + 1) * BATCH] for s in range(STEPS)], len(sp)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--a-amp", type=float, default=INIT["a_amp"])
    ap.add_argument("--b-amp", type=float, default=INIT["b_amp"])
    ap.add_argument("--dry", action="store_true", help="print the losses, write nothing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    init = dict(INIT, a_amp=args.a_amp, b_amp=args.b_amp)
    from peft import LoraConfig, get_peft_model

    tok, model = load_model(args.model)
    batches, n_speeches = build_batches(tok)
    print(f"{n_speeches} speeches, {len(batches)} batches", flush=True)
    tensors = [(torch.tensor([r[1] for r in b]), torch.tensor([r[2] for r in b])) for b in batches]

    model.train()
    with torch.no_grad():
        x, y = tensors[0]
        base_loss = float(causal_lm_loss(model(input_ids=x).logits, y))

    config = LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0, bias="none",
                        target_modules=MODULES, task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    model.train()
    n_layers = model.base_model.model.config.num_hidden_layers
    pattern = re.compile(r"\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)$")
    wrapped = 0
    with torch.no_grad():
        for name, module in model.named_modules():
            m = pattern.search(name)
            if not m or not hasattr(module, "lora_A"):
                continue
            layer, mi = int(m.group(1)), MODULES.index(m.group(3))
            a = module.lora_A["default"].weight
            b = module.lora_B["default"].weight
            a.copy_(torch.from_numpy(init_a(layer, mi, a.shape[0], a.shape[1], init)))
            b.copy_(torch.from_numpy(init_b(layer, mi, b.shape[0], b.shape[1], init)))
            wrapped += 1
    assert wrapped == n_layers * len(MODULES), wrapped

    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert all("lora_" in n for n, _ in params)
    opt = torch.optim.AdamW([p for _, p in params], lr=OPT["lr"], betas=tuple(OPT["betas"]),
                            eps=OPT["eps"], weight_decay=OPT["weight_decay"])
    losses, grads = [], []
    for step, (x, y) in enumerate(tensors):
        opt.zero_grad(set_to_none=True)
        loss = causal_lm_loss(model(input_ids=x).logits, y)
        loss.backward()
        losses.append(float(loss.detach()))
        if step == 0:
            print(f"base loss {base_loss:.6f}, initial loss with the adapters {losses[0]:.6f} "
                  f"({100 * (losses[0] / base_loss - 1):+.3f}%)", flush=True)
            if args.dry:
                return
            for n, p in params:
                g = p.grad.detach()
                grads.append({
                    "name": n,
                    "saved_name": n.replace(".default", ""),
                    "shape": list(g.shape),
                    "l2": f32([torch.linalg.vector_norm(g.double())])[0],
                    "first": f32(g.reshape(-1)[:N_FIRST].numpy()),
                })
        opt.step()
        print(f"step {step:2d} loss {losses[-1]:.6f}", flush=True)
    with torch.no_grad():
        x, y = tensors[-1]
        loss_after = float(causal_lm_loss(model(input_ids=x).logits, y))
    print(f"last batch after the last update: {loss_after:.6f}")

    out = {
        "versions": dict(versions(), peft=__import__("peft").__version__),
        "model": os.path.basename(args.model),
        "dtype": "float32",
        "attn_implementation": "eager",
        "loss_definition": ("cross_entropy(logits[:, :-1].reshape(-1, vocab), "
                            "labels[:, 1:].reshape(-1), ignore_index=-100): the mean over "
                            "every labelled (not -100) target of the batch; row t of the "
                            "logits predicts token t + 1"),
        "lora": {"r": R, "lora_alpha": ALPHA, "scaling": ALPHA / R, "lora_dropout": 0.0,
                 "bias": "none", "target_modules": MODULES, "layers": n_layers},
        "init": dict(init,
                     formula_A="A[i][j] = a_amp * sin(a_l*L + a_m*m + a_i*i + a_j*j + a_0), "
                               "A: [r, in_features]",
                     formula_B="B[i][j] = b_amp * cos(b_l*L + b_m*m + b_i*i + b_j*j + b_0), "
                               "B: [out_features, r]",
                     computed_in="float64, then cast to float32; L the layer, m the index "
                                 "in lora.target_modules"),
        "optimizer": dict(OPT, name="torch.optim.AdamW", over="the LoRA parameters only"),
        "data": {"seq_len": SEQ, "batch": BATCH, "steps": STEPS, "max_reply_start": MAX_START,
                 "seed": 0, "speeches": n_speeches,
                 "pair_starts": [[r[0] for r in b] for b in batches]},
        "batches": [{"input_ids": [r[1] for r in b], "labels": [r[2] for r in b]}
                    for b in batches],
        "base_loss": f32([base_loss])[0],
        "losses": f32(losses),
        "loss_after": f32([loss_after])[0],
        "grads_step0": grads,
        "final_l2": f32([torch.linalg.vector_norm(p.detach().double()) for _, p in params]),
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "lora_training.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
