#!/usr/bin/env python3
"""Checks retrograd's ONNX exports against onnxruntime.

For each MODEL.onnx given (with MODEL.io.safetensors beside it, written by
`cargo run --example onnx -- export ... --io`, or by `tests/onnx_export.rs`
with RETROGRAD_ONNX_OPS_DIR set: one model per op), validates the model with
onnx.checker, runs it in onnxruntime on every recorded case (the batch it
was recorded at and another one, through the free axes) and compares with
retrograd's outputs: the largest absolute difference, |onnxruntime -
retrograd| over every element of every output, is printed beside the
largest |value| it was measured on, and every element must satisfy
|onnxruntime - retrograd| <= tol + tol * |retrograd| (numpy's `allclose`
with atol = rtol = --tol, default 1e-5): absolute 1e-5 where values stay
near 1 or below. Logits of magnitude 10 sit ten f32 ulps from one
another after two runtimes sum in different orders (the trained GPT:
1.1e-5 absolute, 1.0e-6 of its largest logit; onnxruntime's own results
move by as much between its optimisation levels). A model
with an `attention_mask` input is compared on its real tokens: an output
per token (`[batch, sequence, ...]`) at padded positions holds states no
one reads (pooling masks them), which are ill-conditioned (PyTorch's own
f32 and f64 differ there by 1.5e-5 on all-MiniLM-L6-v2); their difference
is printed, not checked.

    python3 tests/reference/onnx_export_check.py [--quiet] [--tol T] target/onnx/*.onnx

Needs onnx, onnxruntime, numpy (pip; no torch).
"""
import argparse
import json
import struct
import sys

import numpy as np
import onnx
import onnxruntime as ort

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64, "BOOL": np.bool_}


def read_safetensors(path):
    """The tensors of a safetensors file, without the safetensors package."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = data[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(body[start:end], dtype=DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def check(path, tol, quiet):
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    io = read_safetensors(path[: -len(".onnx")] + ".io.safetensors")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]
    worst = 0.0
    magnitude = 0.0
    failed = []
    k = 0
    while f"case{k}.{inputs[0]}" in io:
        feed = {name: io[f"case{k}.{name}"] for name in inputs}
        got = session.run(outputs, feed)
        for name, value in zip(outputs, got):
            expected = io[f"case{k}.{name}"]
            if value.shape != expected.shape:
                raise SystemExit(f"{path} case {k}: `{name}` has shape {value.shape}, retrograd {expected.shape}")
            exp64 = expected.astype(np.float64)
            error = np.abs(value.astype(np.float64) - exp64)
            mask = feed.get("attention_mask")
            padded = ""
            if mask is not None and error.shape[: mask.ndim] == mask.shape:
                real = mask != 0
                padded = f", padded positions (not checked) {float(np.max(error[~real], initial=0.0)):.3g}"
                error, exp64 = error[real], exp64[real]
            diff = float(np.max(error, initial=0.0))
            size = float(np.max(np.abs(exp64), initial=0.0))
            over = float(np.max(error - tol * (1.0 + np.abs(exp64)), initial=-1.0))
            if over > 0:
                failed.append(f"`{name}` case {k}: |difference| exceeds {tol} + {tol} * |value| by {over:.3g}")
            worst = max(worst, diff)
            magnitude = max(magnitude, size)
            shapes = ", ".join(str(list(feed[n].shape)) for n in inputs)
            if not quiet:
                print(f"{path}: case {k}, inputs {shapes}: `{name}` max |onnxruntime - retrograd| = {diff:.3g} (max |value| {size:.3g}{padded})")
        k += 1
    ops = sorted({n.op_type for n in model.graph.node})
    if not quiet:
        print(f"{path}: opset {model.opset_import[0].version}, {len(model.graph.node)} nodes ({', '.join(ops)}); "
              f"worst |difference| {worst:.3g} on values up to {magnitude:.3g}")
    if k == 0 or failed:
        raise SystemExit(f"{path}: " + ("; ".join(failed) if k else "no cases"))
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--quiet", action="store_true", help="print only the summary (and failures)")
    args = ap.parse_args()
    worst = max(check(p, args.tol, args.quiet) for p in args.models)
    print(f"all {len(args.models)} models match onnxruntime (worst absolute difference {worst:.3g}; "
          f"tolerance {args.tol} + {args.tol} * |value|)")


if __name__ == "__main__":
    sys.exit(main())
