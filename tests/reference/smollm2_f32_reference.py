"""SmolLM2-135M-Instruct's Q4_1 GGUF dequantized to f32 and run by transformers:
top-32 logits at every position of 5 chat prompts and of their greedy
continuations, and the greedy continuations (32 tokens).

    scripts/fetch_smollm2.sh                            # the model, once
    nice -n 10 python3 tests/reference/smollm2_f32_reference.py
    python3 tests/reference/smollm2_f32_reference.py --model PATH.gguf --threads 1

Made with transformers 5.25.0, torch 2.15.0+cu132 (run on CPU, 1 thread), accelerate
1.16.0 (transformers needs it to load a GGUF), gguf 0.19.0, numpy 2.4.6,
Python 3.11; the exact versions are recorded in the fixture's "versions".
transformers dequantizes every tensor with gguf-py (Q4_1 blocks, the Q8_0
token embedding, which is also the tied output matrix) to f32 and un-permutes
attn_q / attn_k to its rotate-half order; the model runs in f32, eval mode,
eager attention. Greedy = argmax (lowest id on ties), no sampling, no stop at
<|im_end|>: exactly 32 new tokens ("eos_at" says where the first <|im_end|>
or <|endoftext|> came).

Writes tests/reference/smollm2/f32_logits.json:
  versions   {python, llama_cpp, transformers, torch, gguf, tokenizers, numpy,
              accelerate} (null where not installed)
  model, dtype ("float32"), attn_implementation, top_k (32), n_new (32)
  prompts: [{
    messages      the conversation (role/content)
    rendered      apply_chat_template(messages, tokenize=False,
                  add_generation_prompt=True)
    prompt_ids    [n_prompt]   transformers' tokenizer of `rendered`,
                  add_special_tokens=False
    greedy_ids    [32]         greedy continuation, step by step with the KV
                  cache (step 0 is argmax of the prompt's last row)
    greedy_text   decode of greedy_ids (special tokens kept)
    greedy_gap    [32]  at each greedy step, top-1 logit minus top-2 logit of
                  the row that chose it (KV-cache path)
    eos_at        index into greedy_ids of the first eos/<|im_end|>, or null
    ids           prompt_ids + greedy_ids, the sequence evaluated at once
                  (teacher forced) for the rows below
    top_ids       [n_prompt + 32][32] ids of the 32 largest logits of row t
                  (row t predicts token t + 1), largest first
    top_logits    [n_prompt + 32][32] those logits (float32 values)
    logsumexp     [n_prompt + 32] logsumexp of the full 49152-wide row
                  (computed in float64, stored as a float32 value)
    teacher_forced_argmax_agrees   whether argmax of rows n_prompt-1 ..
                  n_prompt+30 equals greedy_ids (KV-cache vs one-pass)
  }]
"""

import argparse
import json
import os
import platform

import numpy as np
import torch

from smollm2_common import MODEL, OUT, ROOT, f32, versions  # noqa: E402,F401
TOP_K = 32
N_NEW = 32

CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [{"role": "system", "content": "You are a concise science tutor."},
     {"role": "user", "content": "Explain photosynthesis in two sentences."}],
    [{"role": "user", "content": "Write a Python function that reverses a string."}],
    [{"role": "user", "content": "Hi! My name is Ana."},
     {"role": "assistant", "content": "Hello Ana! How can I help you today?"},
     {"role": "user", "content": "What's my name?"}],
    [{"role": "user", "content": "Give me three tips for sleeping better."}],
]




def rows_summary(logits):
    """logits: [n, vocab] f32 tensor -> top ids, top logits, logsumexp per row."""
    top = torch.topk(logits, TOP_K, dim=-1, largest=True, sorted=True)
    lse = torch.logsumexp(logits.double(), dim=-1)
    return ([r.tolist() for r in top.indices], [f32(r.numpy()) for r in top.values], f32(lse.numpy()))


def greedy(model, prompt_ids, eos_ids):
    ids, gaps = [], []
    with torch.no_grad():
        out = model(torch.tensor([prompt_ids]), use_cache=True)
        past = out.past_key_values
        row = out.logits[0, -1]
        for _ in range(N_NEW):
            top2 = torch.topk(row, 2)
            # argmax with the lowest id on ties
            nxt = int(torch.nonzero(row == row.max())[0, 0])
            ids.append(nxt)
            gaps.append(float(top2.values[0] - top2.values[1]))
            out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            row = out.logits[0, -1]
    eos_at = next((i for i, t in enumerate(ids) if t in eos_ids), None)
    return ids, f32(gaps), eos_at


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    eos_ids = {tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")}

    prompts = []
    for messages in CONVERSATIONS:
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = list(tok.encode(rendered, add_special_tokens=False))
        new_ids, gaps, eos_at = greedy(model, prompt_ids, eos_ids)
        ids = prompt_ids + new_ids
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].float()
        top_ids, top_logits, lse = rows_summary(logits)
        tf_argmax = logits[len(prompt_ids) - 1:len(ids) - 1].argmax(-1).tolist()
        prompts.append({
            "messages": messages,
            "rendered": rendered,
            "prompt_ids": prompt_ids,
            "greedy_ids": new_ids,
            "greedy_text": tok.decode(new_ids, skip_special_tokens=False),
            "greedy_gap": gaps,
            "eos_at": eos_at,
            "ids": ids,
            "top_ids": top_ids,
            "top_logits": top_logits,
            "logsumexp": lse,
            "teacher_forced_argmax_agrees": tf_argmax == new_ids,
        })
        print(f"{len(prompt_ids)} prompt ids -> {tok.decode(new_ids)!r} "
              f"(min gap {min(gaps):.4f}, teacher-forced argmax agrees: {tf_argmax == new_ids})",
              flush=True)

    out = {
        "versions": versions(),
        "model": name,
        "dtype": "float32",
        "attn_implementation": "eager",
        "top_k": TOP_K,
        "n_new": N_NEW,
        "prompts": prompts,
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "f32_logits.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
