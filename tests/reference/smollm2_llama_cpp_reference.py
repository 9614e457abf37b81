"""llama.cpp (through llama-cpp-python) on SmolLM2-135M-Instruct Q4_1: greedy
continuations of 20 chat prompts, the teacher-forced top-40 logits at the 16
generated positions, and llama.cpp's own spread across its variants (f32 KV
cache, token-by-token evaluation, flash attention).

    scripts/fetch_smollm2.sh                                 # the model, once
    nice -n 10 python3 tests/reference/smollm2_llama_cpp_reference.py
    python3 tests/reference/smollm2_llama_cpp_reference.py --model PATH.gguf --threads 2

Made with llama-cpp-python 0.3.36 (llama.cpp vendored in it, built from source
with CMAKE_ARGS="-DGGML_NATIVE=ON", CPU only), transformers 5.25.0 (only to
render the chat template), gguf 0.19.0, numpy 2.4.6, Python 3.11; exact
versions and llama.cpp's system info are recorded in the fixture. The numbers
depend on the CPU's SIMD paths (recorded in "system_info" and "cpu").

Default configuration ("default"): Llama(model, n_ctx=1024, n_threads=2,
n_threads_batch=2, n_batch=512, logits_all=True, seed=0), i.e. f16 K and V
cache, flash attention off (llama-cpp-python's default), the prompt evaluated
as one batch. Variants, each changing one thing:
  kv_f32      type_k = type_v = 0 (GGML_TYPE_F32)
  n_batch_1   n_batch = n_ubatch = 1: every token evaluated alone
  flash_attn  flash_attn = True
and, not llama.cpp but for scale, the same measures for
  transformers_f32  transformers' LlamaForCausalLM on the same GGUF dequantized
              to f32 (torch 2.15.0, 1 thread, eager attention; its greedy
              continuation by full passes); --no-transformers skips it
Greedy = argmax of the last row (lowest id on ties), exactly 16 new tokens,
no stop at <|im_end|> ("eos_at" says where the first one came). The greedy
tokens come from the incremental path (prompt, then one token per eval);
the logits below from evaluating prompt + the 16 tokens in one llm.eval
(teacher forced; with n_batch_1 that is 1 token per decode).

Writes tests/reference/smollm2/llama_cpp.json:
  versions      {python, llama_cpp, transformers, torch, gguf, tokenizers,
                 numpy, accelerate} (null where not installed)
  system_info   llama_cpp.llama_print_system_info()
  cpu           lscpu's model name
  model, top_k (40), n_new (16)
  settings      the default configuration above
  variants      {name: the keyword arguments it changes}
  prompts: [{
    question, messages ([{role, content}]), rendered (transformers'
    apply_chat_template(..., tokenize=False, add_generation_prompt=True); the
    template adds its default system prompt)
    prompt_ids    [n_prompt] llama.cpp's tokenize(rendered, add_bos=False,
                  special=True)
    transformers_ids_agree   transformers' tokenizer gives the same ids
    greedy_ids    [16], greedy_text, eos_at (index or null)
    positions     [16] row index t in prompt_ids + greedy_ids whose logits
                  predict greedy token i: t = n_prompt - 1 + i
    top_ids       [16][40] ids of the 40 largest logits, largest first
                  (ties: lower id first)
    top_logits    [16][40] those logits (float32 values)
    logsumexp     [16] logsumexp of the full 49152-wide row (float64 math,
                  stored as a float32 value)
    teacher_forced_argmax_agrees   argmax of those 16 rows == greedy_ids
    variants: {name: {
        kl            [16] KL(default || variant) of the full rows, nats
        max_abs_diff  [16] max |logit_default - logit_variant| over the row
        greedy_ids    [16] the variant's own greedy continuation
        greedy_agrees  bool}}
  }]
  summary: {name: {kl_max, kl_median, kl_mean, max_abs_diff_max,
                   max_abs_diff_median, greedy_agree (prompts of 20)}}
  over all 20 x 16 positions.
"""

import argparse
import json
import os
import platform
import subprocess

import numpy as np

from smollm2_common import MODEL, OUT, ROOT, f32, versions  # noqa: E402,F401
TOP_K = 40
N_NEW = 16

QUESTIONS = [
    "What is the capital of Japan?",
    "How many legs does a spider have?",
    "What is 17 times 23?",
    "Write a Python function that checks whether a number is prime.",
    "Translate 'good morning' into Spanish.",
    "Explain what a black hole is in simple terms.",
    "Give me a synonym for 'happy'.",
    "Write a haiku about the ocean.",
    "Is a tomato a fruit or a vegetable?",
    "List three primary colors.",
    "Why do leaves change color in autumn?",
    "What does HTTP stand for?",
    "Summarize the plot of Romeo and Juliet in one sentence.",
    "Quelle est la couleur du ciel ?",
    "How do I reverse a list in JavaScript?",
    "What is the boiling point of water in Fahrenheit?",
    "Tell me a joke about computers.",
    "If I have 3 apples and eat one, how many are left?",
    "What's the difference between weather and climate?",
    "Suggest a name for a pet turtle.",
]

DEFAULT = dict(n_ctx=1024, n_threads=2, n_threads_batch=2, n_batch=512,
               logits_all=True, seed=0, verbose=False)
VARIANTS = {
    "kv_f32": {"type_k": 0, "type_v": 0},
    "n_batch_1": {"n_batch": 1, "n_ubatch": 1},
    "flash_attn": {"flash_attn": True},
}



def cpu_name():
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()



def logsumexp(rows):
    r = rows.astype(np.float64)
    m = r.max(axis=-1, keepdims=True)
    return (m[..., 0] + np.log(np.exp(r - m).sum(axis=-1)))


def top(row, k):
    # largest first, lower id first on ties (a stable sort of -row)
    idx = np.argsort(-row.astype(np.float64), kind="stable")[:k]
    return idx.tolist(), f32(row[idx])


def greedy(llm, prompt_ids):
    llm.reset()
    llm.eval(prompt_ids)
    ids = []
    for _ in range(N_NEW):
        row = llm.scores[llm.n_tokens - 1]
        nxt = int(np.argmax(row))
        ids.append(nxt)
        llm.eval([nxt])
    return ids


def teacher_forced(llm, ids, n_prompt):
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[n_prompt - 1:n_prompt - 1 + N_NEW], dtype=np.float32)


def kl_rows(p_rows, q_rows):
    lp = p_rows.astype(np.float64)
    lp = lp - logsumexp(lp)[:, None]
    lq = q_rows.astype(np.float64)
    lq = lq - logsumexp(lq)[:, None]
    return (np.exp(lp) * (lp - lq)).sum(axis=-1)


def transformers_row(model_path, prompts, full_rows, eos_ids):
    """The same measures for transformers on the GGUF dequantized to f32."""
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(1)
    folder, name = os.path.split(os.path.abspath(model_path))
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager").eval()
    kls, diffs, agree = [], [], 0
    with torch.no_grad():
        for p, ref_rows in zip(prompts, full_rows):
            n = len(p["prompt_ids"])
            g, ids = [], list(p["prompt_ids"])
            for _ in range(N_NEW):  # greedy, one full pass per step (no cache)
                g.append(int(np.argmax(model(torch.tensor([ids])).logits[0, -1].numpy())))
                ids.append(g[-1])
            logits = model(torch.tensor([p["prompt_ids"] + p["greedy_ids"]])).logits[0]
            rows = logits[n - 1:n - 1 + N_NEW].numpy().astype(np.float32)
            kl = kl_rows(ref_rows, rows)
            diff = np.abs(ref_rows.astype(np.float64) - rows).max(axis=-1)
            p["variants"]["transformers_f32"] = {
                "kl": f32(kl), "max_abs_diff": f32(diff), "greedy_ids": g,
                "greedy_agrees": g == p["greedy_ids"]}
            kls.append(kl)
            diffs.append(diff)
            agree += g == p["greedy_ids"]
    kls, diffs = np.concatenate(kls), np.concatenate(diffs)
    return {
        "kl_max": f32([kls.max()])[0], "kl_median": f32([np.median(kls)])[0],
        "kl_mean": f32([kls.mean()])[0],
        "max_abs_diff_max": f32([diffs.max()])[0],
        "max_abs_diff_median": f32([np.median(diffs)])[0],
        "greedy_agree": int(agree),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-transformers", action="store_true",
                    help="skip the transformers_f32 comparison row (needs torch)")
    args = ap.parse_args()
    import llama_cpp
    from transformers import AutoTokenizer

    folder, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    base = dict(DEFAULT, n_threads=args.threads, n_threads_batch=args.threads)

    llm = llama_cpp.Llama(args.model, **base)
    eos_ids = {llm.token_eos(), int(tok.convert_tokens_to_ids("<|im_end|>")),
               int(tok.convert_tokens_to_ids("<|endoftext|>"))}
    prompts, full_rows = [], []
    for q in QUESTIONS:
        messages = [{"role": "user", "content": q}]
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        prompt_ids = list(llm.tokenize(rendered.encode("utf-8"), add_bos=False, special=True))
        hf_ids = list(tok.encode(rendered, add_special_tokens=False))
        new_ids = greedy(llm, prompt_ids)
        rows = teacher_forced(llm, prompt_ids + new_ids, len(prompt_ids))
        full_rows.append(rows)
        tops = [top(r, TOP_K) for r in rows]
        eos_at = next((i for i, t in enumerate(new_ids) if t in eos_ids), None)
        prompts.append({
            "question": q,
            "messages": messages,
            "rendered": rendered,
            "prompt_ids": prompt_ids,
            "transformers_ids_agree": hf_ids == prompt_ids,
            "greedy_ids": new_ids,
            "greedy_text": llm.detokenize(new_ids, special=True).decode("utf-8", errors="replace"),
            "eos_at": eos_at,
            "positions": [len(prompt_ids) - 1 + i for i in range(N_NEW)],
            "top_ids": [t[0] for t in tops],
            "top_logits": [t[1] for t in tops],
            "logsumexp": f32(logsumexp(rows)),
            "teacher_forced_argmax_agrees": rows.argmax(-1).tolist() == new_ids,
            "variants": {},
        })
        print(f"{len(prompt_ids):3d} ids, tokenizers agree {hf_ids == prompt_ids}: "
              f"{prompts[-1]['greedy_text']!r}", flush=True)
    del llm

    summary = {}
    for vname, kw in VARIANTS.items():
        llm = llama_cpp.Llama(args.model, **dict(base, **kw))
        kls, diffs, agree = [], [], 0
        for p, ref_rows in zip(prompts, full_rows):
            g = greedy(llm, p["prompt_ids"])
            rows = teacher_forced(llm, p["prompt_ids"] + p["greedy_ids"], len(p["prompt_ids"]))
            kl = kl_rows(ref_rows, rows)
            diff = np.abs(ref_rows.astype(np.float64) - rows).max(axis=-1)
            p["variants"][vname] = {"kl": f32(kl), "max_abs_diff": f32(diff),
                                    "greedy_ids": g, "greedy_agrees": g == p["greedy_ids"]}
            kls.append(kl)
            diffs.append(diff)
            agree += g == p["greedy_ids"]
        del llm
        kls, diffs = np.concatenate(kls), np.concatenate(diffs)
        summary[vname] = {
            "kl_max": f32([kls.max()])[0], "kl_median": f32([np.median(kls)])[0],
            "kl_mean": f32([kls.mean()])[0],
            "max_abs_diff_max": f32([diffs.max()])[0],
            "max_abs_diff_median": f32([np.median(diffs)])[0],
            "greedy_agree": int(agree),
        }
        print(f"{vname}: {summary[vname]}", flush=True)

    if not args.no_transformers:
        summary["transformers_f32"] = transformers_row(args.model, prompts, full_rows, eos_ids)
        print(f"transformers_f32: {summary['transformers_f32']}", flush=True)

    out = {
        "versions": versions(),
        "system_info": llama_cpp.llama_print_system_info().decode(),
        "cpu": cpu_name(),
        "model": name,
        "top_k": TOP_K,
        "n_new": N_NEW,
        "settings": {k: v for k, v in base.items() if k != "verbose"} | {
            "type_k": "f16", "type_v": "f16", "flash_attn": False, "n_ubatch": 512},
        "variants": dict(VARIANTS, **({} if args.no_transformers else {
            "transformers_f32": "not llama.cpp: transformers' LlamaForCausalLM on the "
                                "same GGUF dequantized to f32 (torch, 1 thread, eager "
                                "attention), for scale"})),
        "prompts": prompts,
        "summary": summary,
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "llama_cpp.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
