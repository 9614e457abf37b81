"""The LoRA training step in transformers + peft that retrograd's LoRA step
on SmolLM2 is compared against: SmolLM2-135M-Instruct's Q4_1 GGUF
dequantized to f32 by transformers (gguf_file=, eager attention, as
tests/reference/smollm2_f32_reference.py loads it), LoRA r 8, lora_alpha 16,
dropout 0, bias "none" on q_proj, k_proj, v_proj, o_proj, gate_proj,
up_proj and down_proj of all 30 layers (PEFT's default initialisation),
torch.optim.AdamW(lr 2e-4, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01)
over the adapters, batch 4 x 256 tokens.

    scripts/fetch_smollm2.sh                            # the model, once
    nice -n 10 python3 bench/lora_step_peft.py [--threads 2] [--steps 5]
    python3 bench/lora_step_peft.py --steps 3 --save-adapter /tmp/peft_r8

Batches: the bundled tiny Shakespeare's (speech, next speaker's speech)
pairs with different speakers, in the order of
numpy.random.default_rng(0).permutation, each rendered with the model's
chat template (default system turn, add_generation_prompt False) and
tokenized; the pairs' ids are concatenated into one stream and cut into
consecutive 256-token windows (no padding), 4 windows a step, each step new
windows. Labels are the ids on the assistants' replies (content and closing
<|im_end|>) and -100 elsewhere, carried along with the stream; the loss is
transformers' shifted causal LM cross entropy, the mean over the labelled
targets.

A step is zero_grad, forward, loss, backward and the optimiser's update,
timed with time.perf_counter. The first step is a warm-up and is left out of
the median and range. Prints one JSON line:
  workload, impl, dtype, r, lora_alpha, targets, batch, seq, steps,
  threads, median_s, min_s, max_s (over the steps after the warm-up),
  warmup_s, losses, trainable_params, rss_after_load_mib (ru_maxrss once the
  model is loaded and wrapped), peak_rss_mib (ru_maxrss at the end, MiB),
  torch, transformers, peft, cpu (model name in /proc/cpuinfo), and with
  --save-adapter DIR the folder PEFT's save_pretrained wrote (its config's
  base_model_name_or_path set to the GGUF's file name): adapter_bytes (the
  folder's total) and adapter_files {name: bytes}.
"""

import argparse
import json
import os
import resource
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests/reference"))

import torch  # noqa: E402

from lora_smollm2_common import (MODEL, causal_lm_loss, load_model, pair_indices,  # noqa: E402
                                 render_pair, speeches)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
BATCH = 4
SEQ = 256


def windows(tok, count):
    """`count` consecutive SEQ-token (ids, labels) windows of the pair stream."""
    sp = speeches()
    ids, labels = [], []
    for i in pair_indices(len(sp), seed=0):
        if len(ids) >= count * SEQ:
            break
        if sp[i][0] == sp[i + 1][0]:
            continue
        got = render_pair(tok, sp[i][1], sp[i + 1][1])
        if got is None:
            continue
        x, start, end = got
        ids += x
        labels += [t if start <= k < end else -100 for k, t in enumerate(x)]
    return [(ids[w * SEQ:(w + 1) * SEQ], labels[w * SEQ:(w + 1) * SEQ]) for w in range(count)]


def cpu_model():
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def mib(kib):
    return round(kib / 1024, 1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="steps in all, the first a warm-up")
    ap.add_argument("--save-adapter", metavar="DIR")
    args = ap.parse_args()
    if args.steps < 2:
        ap.error("--steps must be at least 2 (the first is a warm-up)")
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    import peft
    import transformers
    from peft import LoraConfig, get_peft_model

    tok, model = load_model(args.model)
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, bias="none",
                        target_modules=TARGETS, task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    rss_after_load = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    batches = windows(tok, args.steps * BATCH)

    times, losses = [], []
    for s in range(args.steps):
        rows = batches[s * BATCH:(s + 1) * BATCH]
        x = torch.tensor([r[0] for r in rows])
        y = torch.tensor([r[1] for r in rows])
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = causal_lm_loss(model(input_ids=x).logits, y)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(round(float(loss.detach()), 4))
        print(f"step {s}: {times[-1]:.2f} s, loss {losses[-1]}", file=sys.stderr, flush=True)

    timed = times[1:]
    out = {
        "workload": "lora_step", "impl": "transformers+peft", "dtype": "float32",
        "model": os.path.basename(args.model), "r": 8, "lora_alpha": 16, "targets": TARGETS,
        "batch": BATCH, "seq": SEQ, "steps": args.steps, "threads": args.threads,
        "median_s": round(statistics.median(timed), 3), "min_s": round(min(timed), 3),
        "max_s": round(max(timed), 3), "warmup_s": round(times[0], 3), "losses": losses,
        "trainable_params": sum(p.numel() for p in params),
        "rss_after_load_mib": mib(rss_after_load),
        "peak_rss_mib": mib(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "peft": peft.__version__, "cpu": cpu_model(),
    }
    if args.save_adapter:
        model.peft_config["default"].base_model_name_or_path = os.path.basename(args.model)
        model.save_pretrained(args.save_adapter)
        files = {f: os.path.getsize(os.path.join(args.save_adapter, f))
                 for f in sorted(os.listdir(args.save_adapter))}
        out["adapter_dir"] = args.save_adapter
        out["adapter_bytes"] = sum(files.values())
        out["adapter_files"] = files
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
