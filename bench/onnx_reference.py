#!/usr/bin/env python3
"""Times onnxruntime on a benchmark model of bench/onnx_models.py, for
bench/onnx_compare.sh; prints one JSON line like retrograd's `bench onnx`.

    python3 bench/onnx_reference.py mnist_cnn [--repeats 20] [--threads N]

The session uses ORT's default graph optimisations (all fusions on) and
`--threads` intra-op threads (default: the machine's cores, as retrograd's
rayon pool). The median of `--repeats` runs after 3 warm-up runs (the
first of them timed with the session's creation: `first_output_ms`).
"""
import argparse
import json
import os
import struct
import time

import numpy as np
import onnxruntime as ort

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DTYPES = {"F32": np.float32, "I64": np.int64}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    return {k: np.frombuffer(body[v["data_offsets"][0]:v["data_offsets"][1]], DTYPES[v["dtype"]]).reshape(v["shape"])
            for k, v in header.items() if k != "__metadata__"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    base = os.path.join(ROOT, "target", "bench-onnx", args.model)
    inputs = read_safetensors(base + ".inputs.safetensors")
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    # File to first output: the session's creation, then one run.
    start = time.perf_counter()
    session = ort.InferenceSession(base + ".onnx", options, providers=["CPUExecutionProvider"])
    feed = {i.name: inputs[i.name] for i in session.get_inputs()}
    session.run(None, feed)
    first_output_ms = (time.perf_counter() - start) * 1e3
    for _ in range(2):
        session.run(None, feed)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        session.run(None, feed)
        times.append((time.perf_counter() - start) * 1e3)
    batch = next(iter(feed.values())).shape[0]
    print(json.dumps({"impl": "onnxruntime", "version": ort.__version__, "workload": f"onnx_{args.model}",
                      "batch": batch, "threads": args.threads, "median_ms": float(np.median(times)),
                      "min_ms": min(times), "max_ms": max(times), "first_output_ms": first_output_ms}))


if __name__ == "__main__":
    main()
