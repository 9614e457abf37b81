"""The peer benchmark for `chat --bench`: llama.cpp (through llama-cpp-python)
on SmolLM2-135M-Instruct Q4_1, printing the same lines our Rust side prints.

    scripts/fetch_smollm2.sh                        # the model, once
    python3 bench/llama_cpp_bench.py                # 2 threads
    python3 bench/llama_cpp_bench.py --threads 1 --model PATH.gguf --runs 3

Made with llama-cpp-python 0.3.36, its vendored llama.cpp built from source
with CMAKE_ARGS="-DGGML_NATIVE=ON" (CPU only), numpy 2.4.6, Python 3.11.

Prints
  cpu: <lscpu model name> (family F model M, N CPUs)
  load average before: a b c      (measure on a quiet machine)
  llama.cpp: <version> | <llama_print_system_info()>
  load: S s                   Llama() construction until the first token of a
                              1-token prompt is chosen (includes mmap + page-in
                              and the first compute graph)
  prompt processing: N tokens/s (min A, max B; 3 runs)
                              llm.eval of a 512-token prompt (a fixed English
                              paragraph's tokens repeated and cut to exactly
                              512 ids) from an empty KV cache, n_batch=512
  generation: N tokens/s (min A, max B; 3 runs)
                              128 greedy tokens after a 32-token prompt; only
                              the 128 decode steps are timed (each step: one
                              llm.eval of 1 token + argmax of its logits row)
  peak RSS: N MiB             ru_maxrss after generating
  load average after: a b c
Medians of --runs runs (default 3). The KV cache is f16 and flash attention
off (llama-cpp-python's defaults), n_ctx 1024, logits_all=False,
n_threads = n_threads_batch = --threads.
"""

import argparse
import ctypes
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")

PARAGRAPH = (
    "The river ran quietly past the old mill, where the stones had long since "
    "stopped turning. In the mornings the fog lay low over the water, and the "
    "village children would gather on the bridge to watch the herons fish. "
    "Nobody remembered exactly when the miller had left, but everyone agreed "
    "that the bread had never tasted quite the same since. "
)


def cpu_name():
    name = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                name = line.split(":", 1)[1].strip()
    except OSError:
        pass
    try:  # lscpu's name can be as bare as "AMD EPYC" on a VM; add family/model
        info = dict(line.split(":", 1) for line in open("/proc/cpuinfo").read().split("\n\n")[0]
                    .splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        name += f" (family {info.get('cpu family')} model {info.get('model')}, {os.cpu_count()} CPUs)"
    except OSError:
        pass
    return name


def load_average():
    try:
        return " ".join(open("/proc/loadavg").read().split()[:3])
    except OSError:
        return "?"


def ids_of_length(llm, n):
    one = list(llm.tokenize(PARAGRAPH.encode(), add_bos=False, special=False))
    ids = (one * (n // len(one) + 1))[:n]
    assert len(ids) == n
    return ids


def last_logits(llm):
    import llama_cpp
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),))


def argmax_next(llm):
    return int(np.argmax(last_logits(llm)))


def fmt(rates):
    med = statistics.median(rates)
    return f"{med:.1f} tokens/s (min {min(rates):.1f}, max {max(rates):.1f}; {len(rates)} runs)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-prompt-tokens", type=int, default=32)
    ap.add_argument("--gen-tokens", type=int, default=128)
    args = ap.parse_args()
    import llama_cpp

    print(f"cpu: {cpu_name()}")
    print(f"load average before: {load_average()}")
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(args.model, n_ctx=1024, n_batch=512, n_threads=args.threads,
                          n_threads_batch=args.threads, logits_all=False, seed=0,
                          verbose=False)
    llm.eval(ids_of_length(llm, 1))
    argmax_next(llm)
    load_s = time.perf_counter() - t0
    print(f"llama.cpp: {llama_cpp.__version__} | threads {args.threads} | "
          f"{llama_cpp.llama_print_system_info().decode().strip()}")
    print(f"load: {load_s:.2f} s")

    prompt = ids_of_length(llm, args.prompt_tokens)
    pp = []
    for _ in range(args.runs):
        llm.reset()
        t = time.perf_counter()
        llm.eval(prompt)
        pp.append(len(prompt) / (time.perf_counter() - t))
    print(f"prompt processing: {fmt(pp)}")

    short = ids_of_length(llm, args.gen_prompt_tokens)
    tg, texts = [], set()
    for _ in range(args.runs):
        llm.reset()
        llm.eval(short)
        nxt = argmax_next(llm)
        out = []
        t = time.perf_counter()
        for _ in range(args.gen_tokens):
            out.append(nxt)
            llm.eval([nxt])
            nxt = argmax_next(llm)
        tg.append(args.gen_tokens / (time.perf_counter() - t))
        texts.add(tuple(out))
    print(f"generation: {fmt(tg)}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"peak RSS: {rss / 1024:.0f} MiB")
    print(f"load average after: {load_average()}")
    if len(texts) != 1:
        print("warning: the greedy continuations differed between runs", file=sys.stderr)


if __name__ == "__main__":
    main()
