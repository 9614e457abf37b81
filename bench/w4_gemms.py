#!/usr/bin/env python3
"""PyTorch's side of `bench w4_gemms`: every matrix product of one W4 GPT
iteration outside attention, each shape alone, with the layouts the
iteration gives it (the weight stored [out, in]): forward `x @ W.t()`,
input gradient `g @ W`, weight gradient `g.t() @ x`. Rows pair with
bench/retrograd/w4_gemms.rs on (layer, case).

    python3 bench/w4_gemms.py [--repeats 30] [--threads 2]
"""
import argparse
import json
import statistics
import time

import torch

ROWS, EMBD, LAYERS, VOCAB = 12 * 64, 128, 4, 65
LAYERS_OF_W4 = [("attn_qkv", EMBD, 3 * EMBD, LAYERS), ("attn_proj", EMBD, EMBD, LAYERS),
                ("mlp_fc", EMBD, 4 * EMBD, LAYERS), ("mlp_proj", 4 * EMBD, EMBD, LAYERS),
                ("lm_head", EMBD, VOCAB, 1)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    total_ms = total_flops = 0.0
    batch = 10
    for name, inp, out, calls in LAYERS_OF_W4:
        x = torch.randn(ROWS, inp, generator=g)
        w = torch.randn(out, inp, generator=g)
        gr = torch.randn(ROWS, out, generator=g)
        for case, f in [("forward_nt", lambda: x @ w.t()), ("input_grad_nn", lambda: gr @ w),
                        ("weight_grad_tn", lambda: gr.t() @ x)]:
            y = f()
            (m, n), k = y.shape, (inp if case != "input_grad_nn" else out)
            if case == "weight_grad_tn":
                k = ROWS
            times = []
            f()
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                for _ in range(batch):
                    f()
                times.append((time.perf_counter() - t0) / batch)
            med = statistics.median(times)
            flops = 2.0 * m * n * k
            total_ms += med * 1e3 * calls
            total_flops += flops * calls
            print(json.dumps(dict(framework="pytorch", workload="w4_gemms", layer=name, case=case,
                                  m=m, n=n, k=k, threads=args.threads,
                                  calls_per_iter=calls, gflops=flops / med / 1e9,
                                  ms_per_iter=med * 1e3 * calls, median=med, min=min(times),
                                  max=max(times))), flush=True)
    print(json.dumps(dict(framework="pytorch", workload="w4_gemms", case="total",
                          gflop_per_iter=total_flops / 1e9,
                          gflops=total_flops / total_ms / 1e6, ms_per_iter=total_ms)), flush=True)


if __name__ == "__main__":
    main()
