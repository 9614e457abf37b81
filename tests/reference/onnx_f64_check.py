#!/usr/bin/env python3
"""Who is off: retrograd's f32 outputs and onnxruntime's f32 outputs, each
against the same model evaluated in float64.

For each MODEL.onnx given (with MODEL.io.safetensors beside it, as
`cargo run --example onnx -- export ... --io` writes), the model is copied
with every float initializer, constant and cast in float64 and run by
onnx's reference evaluator (numpy, float64 throughout); onnxruntime runs
the f32 model as `onnx_export_check.py` does (one thread). Prints, per
case and output, the largest |f32 - f64| of retrograd and of onnxruntime
(and the mean), and their difference from each other.

    python3 tests/reference/onnx_f64_check.py target/onnx/shakespeare.onnx

Needs onnx, onnxruntime, numpy (pip; no torch). The reference evaluator
is slow: minutes for the GPT.
"""
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, numpy_helper
from onnx.reference import ReferenceEvaluator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from onnx_export_check import read_safetensors  # noqa: E402


def to_f64(t):
    if t.data_type == TensorProto.FLOAT:
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float64), t.name))


def double_model(model):
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        to_f64(t)
    for node in m.graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.TENSOR:
                to_f64(a.t)
            if node.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.DOUBLE
    for v in list(m.graph.input) + list(m.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    del m.graph.value_info[:]
    return m


def main():
    for path in sys.argv[1:]:
        model = onnx.load(path)
        io = read_safetensors(path[: -len(".onnx")] + ".io.safetensors")
        exact = ReferenceEvaluator(double_model(model))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        inputs = [i.name for i in session.get_inputs()]
        outputs = [o.name for o in session.get_outputs()]
        k = 0
        while f"case{k}.{inputs[0]}" in io:
            feed = {n: io[f"case{k}.{n}"] for n in inputs}
            feed64 = {n: v.astype(np.float64) if v.dtype == np.float32 else v for n, v in feed.items()}
            for name, f64, f32 in zip(outputs, exact.run(None, feed64), session.run(outputs, feed)):
                ours = io[f"case{k}.{name}"].astype(np.float64)
                e_ours, e_ort = np.abs(ours - f64), np.abs(f32.astype(np.float64) - f64)
                print(f"{path} case {k} `{name}` {list(ours.shape)}, max |f64| {np.abs(f64).max():.3g}: "
                      f"retrograd - f64 max {e_ours.max():.3g} (mean {e_ours.mean():.3g}); "
                      f"onnxruntime - f64 max {e_ort.max():.3g} (mean {e_ort.mean():.3g}); "
                      f"retrograd - onnxruntime max {np.abs(ours - f32).max():.3g}")
            k += 1


if __name__ == "__main__":
    main()
