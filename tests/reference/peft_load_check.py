"""Checks that a LoRA adapter folder loads in PEFT and gives the logits
another implementation computed with it: SmolLM2-135M-Instruct's Q4_1 GGUF
dequantized to f32 by transformers (as smollm2_f32_reference.py loads it),
peft.PeftModel.from_pretrained(model, ADAPTER_DIR), then the logits of the
given ids against the given ones.

    python3 tests/reference/peft_load_check.py ADAPTER_DIR LOGITS.safetensors [--tol 1e-4]
    python3 tests/reference/peft_load_check.py --write ADAPTER_DIR LOGITS.safetensors

LOGITS.safetensors holds `input_ids` (int64, [T] or [1, T]) and `logits`
(float32, [T, vocab] or [1, T, vocab]). Prints the largest absolute
difference between PEFT's logits and the file's, and the largest absolute
difference between PEFT's logits with and without the adapter (how much
the adapter matters); exits 1 when the first is above --tol, 2 on a shape
mismatch.

--write makes such a file from PEFT's own logits instead (the ids of
smollm2/peft_adapter_logits.json's prompt, or --ids "1,2,3"), for
checking this script on a PEFT-saved folder:

    python3 tests/reference/peft_load_check.py --write tests/reference/smollm2/peft_adapter /tmp/own.safetensors
    python3 tests/reference/peft_load_check.py tests/reference/smollm2/peft_adapter /tmp/own.safetensors
"""

import argparse
import json
import os
import sys

import torch

from smollm2_common import MODEL, OUT
from lora_smollm2_common import load_model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("adapter_dir")
    ap.add_argument("logits")
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", action="store_true",
                    help="write LOGITS from PEFT's own logits instead of checking")
    ap.add_argument("--ids", help="comma-separated ids for --write")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from peft import PeftModel
    from safetensors.torch import load_file, save_file

    _, model = load_model(args.model)
    model = PeftModel.from_pretrained(model.eval(), args.adapter_dir).eval()

    if args.write:
        if args.ids:
            ids = [int(t) for t in args.ids.split(",")]
        else:
            with open(os.path.join(OUT, "peft_adapter_logits.json"), encoding="utf-8") as f:
                ids = json.load(f)["ids"]
        x = torch.tensor([ids], dtype=torch.int64)
        with torch.no_grad():
            logits = model(input_ids=x).logits[0].float().contiguous()
        save_file({"input_ids": x[0].contiguous(), "logits": logits}, args.logits)
        print(f"wrote {args.logits}: {len(ids)} ids, logits {list(logits.shape)}")
        return 0

    data = load_file(args.logits)
    ids = data["input_ids"].to(torch.int64).reshape(-1)
    want = data["logits"].float()
    if want.dim() == 3:
        want = want[0]
    with torch.no_grad():
        got = model(input_ids=ids[None]).logits[0].float()
        with model.disable_adapter():
            base = model(input_ids=ids[None]).logits[0].float()
    if got.shape != want.shape:
        print(f"shape mismatch: PEFT gives {list(got.shape)}, the file has {list(want.shape)}")
        return 2
    diff = float((got - want).abs().max())
    effect = float((got - base).abs().max())
    ok = diff <= args.tol
    print(f"{len(ids)} ids: max |PEFT - file| = {diff:.3e} (tol {args.tol:.1e}), "
          f"max |PEFT with - without adapter| = {effect:.4f}: {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
