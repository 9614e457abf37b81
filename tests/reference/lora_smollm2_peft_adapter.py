"""A small random LoRA adapter for SmolLM2-135M-Instruct saved by PEFT's own
save_pretrained, and the logits that transformers + peft give with it on the
Q4_1 GGUF dequantized to f32, so that another implementation can load the
folder and compare.

    scripts/fetch_smollm2.sh                            # the model, once
    nice -n 10 python3 tests/reference/lora_smollm2_peft_adapter.py
    python3 tests/reference/lora_smollm2_peft_adapter.py --model PATH.gguf --b-scale 0.1

LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
layers_to_transform=[0, 1, 2], init_lora_weights=False, lora_dropout=0,
task_type CAUSAL_LM) after torch.manual_seed(0): A and B both drawn by
nn.Linear's default initialisation (kaiming uniform), then every lora_B
multiplied by --b-scale so that the adapter moves the logits noticeably
but not wildly (the script prints the largest change against the base).
The config's base_model_name_or_path is set to the GGUF's file name.

Writes
  tests/reference/smollm2/peft_adapter/    adapter_config.json and
      adapter_model.safetensors exactly as PeftModel.save_pretrained writes
      them, less the boilerplate model card README.md it also writes (tensor
      names "base_model.model.model.layers.L.self_attn.{q,v}_proj.
      lora_{A,B}.weight", float32)
  tests/reference/smollm2/peft_adapter_logits.json:
    versions, model, dtype, attn_implementation, lora (the config), b_scale,
    messages, rendered (apply_chat_template, add_generation_prompt True),
    ids [T]               the prompt's ids (add_special_tokens=False)
    top_k (10)
    top_ids [T][10]       ids of the 10 largest logits of row t with the
                          adapter (row t predicts token t + 1), largest first
    top_logits [T][10]    those logits with the adapter
    base_logits [T][10]   the same ids' logits of the base model (adapter
                          disabled)
    max_change            max over all rows and the whole vocabulary of
                          |logits with adapter - base logits|
"""

import argparse
import json
import os

import torch

from smollm2_common import MODEL, OUT, f32, versions
from lora_smollm2_common import load_model

TOP_K = 10
MESSAGES = [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Speak!"}]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--b-scale", type=float, default=0.1)
    ap.add_argument("--dry", action="store_true", help="print the change, write nothing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import peft
    from peft import LoraConfig, get_peft_model

    tok, model = load_model(args.model)
    model.eval()
    rendered = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    ids = list(tok.encode(rendered, add_special_tokens=False))
    x = torch.tensor([ids])

    torch.manual_seed(0)
    lora = {"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"],
            "layers_to_transform": [0, 1, 2], "init_lora_weights": False,
            "lora_dropout": 0.0, "task_type": "CAUSAL_LM"}
    model = get_peft_model(model, LoraConfig(**lora)).eval()
    # the config would otherwise name this machine's model folder
    model.peft_config["default"].base_model_name_or_path = os.path.basename(args.model)
    n = 0
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.mul_(args.b_scale)
                n += 1
    assert n == 6, n
    with torch.no_grad():
        logits = model(input_ids=x).logits[0]
        with model.disable_adapter():
            base = model(input_ids=x).logits[0]
    change = (logits - base).abs()
    top = torch.topk(logits, TOP_K, dim=-1)
    flips = int((logits.argmax(-1) != base.argmax(-1)).sum())
    print(f"{len(ids)} ids; max |logit change| {float(change.max()):.4f}, mean "
          f"{float(change.mean()):.4f}; argmax differs on {flips} of {len(ids)} rows")
    if args.dry:
        return

    folder = os.path.join(OUT, "peft_adapter")
    model.save_pretrained(folder)
    os.remove(os.path.join(folder, "README.md"))  # PEFT's boilerplate model card
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"wrote {folder}: {sorted(os.listdir(folder))}, {size} bytes")
    out = {
        "versions": dict(versions(), peft=peft.__version__),
        "model": os.path.basename(args.model),
        "dtype": "float32",
        "attn_implementation": "eager",
        "lora": lora,
        "seed": 0,
        "b_scale": args.b_scale,
        "messages": MESSAGES,
        "rendered": rendered,
        "ids": ids,
        "top_k": TOP_K,
        "top_ids": top.indices.tolist(),
        "top_logits": [f32(r.numpy()) for r in top.values],
        "base_logits": [f32(base[t, top.indices[t]].numpy()) for t in range(len(ids))],
        "max_change": f32([change.max()])[0],
    }
    path = os.path.join(OUT, "peft_adapter_logits.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
