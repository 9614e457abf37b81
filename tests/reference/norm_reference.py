"""Reference values for tests/norm_reference.rs, computed with PyTorch.

Run:  python tests/reference/norm_reference.py > /tmp/out.rs
(used: torch 2.15.0, on the CPU, float64). It prints the Rust constants that
tests/norm_reference.rs holds; rerun it and diff to check them.

Inputs come from formulas, so the Rust side rebuilds them without an RNG:
    x[i] = sin(0.37 i + 0.1 + k) * (2 + k) + k    (row-major; k a case offset)
    weight[c] = 1 + 0.1 c,  bias[c] = 0.05 c - 0.1
    running_mean[c] = 0.1 c,  running_var[c] = 1 + 0.2 c
Gradients are those of sum(out * w), w[i] = cos(0.11 i).
"""
import math

import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def xs(shape, k=0):
    n = math.prod(shape)
    return torch.tensor([math.sin(0.37 * i + 0.1 + k) * (2 + k) + k for i in range(n)]).reshape(shape)


def ws(shape):
    n = math.prod(shape)
    return torch.tensor([math.cos(0.11 * i) for i in range(n)]).reshape(shape)


def weight(c):
    return torch.tensor([1 + 0.1 * i for i in range(c)])


def bias(c):
    return torch.tensor([0.05 * i - 0.1 for i in range(c)])


def emit(name, t):
    v = t.detach().reshape(-1).tolist()
    print(f"const {name}: [f64; {len(v)}] = [{', '.join(repr(float(a)) for a in v)}];")


def case(name, shape, f, affine):
    x = xs(shape).requires_grad_(True)
    c = shape[1]
    w = weight(c).requires_grad_(True) if affine else None
    b = bias(c).requires_grad_(True) if affine else None
    out = f(x, w, b)
    (out * ws(out.shape)).sum().backward()
    emit(f"{name}_OUT", out)
    emit(f"{name}_DX", x.grad)
    if affine:
        emit(f"{name}_DW", w.grad)
        emit(f"{name}_DB", b.grad)


case("BN_TRAIN_2D", [4, 3], lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5), True)
case("BN_TRAIN_3D", [2, 3, 5], lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-3), False)
case("BN_TRAIN_4D", [2, 3, 4, 5], lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True, eps=1e-5), True)
rm = torch.tensor([0.1 * i for i in range(3)])
rv = torch.tensor([1 + 0.2 * i for i in range(3)])
case("BN_EVAL_4D", [2, 3, 4, 5], lambda x, w, b: F.batch_norm(x, rm, rv, w, b, training=False, eps=1e-5), True)
case("GN_4D", [2, 6, 4, 5], lambda x, w, b: F.group_norm(x, 3, w, b, eps=1e-5), True)
case("GN_3D", [3, 4, 7], lambda x, w, b: F.group_norm(x, 2, w, b, eps=1e-5), False)

# nn.BatchNorm2d: three training steps on different inputs, then eval.
for label, momentum in [("MOMENTUM", 0.1), ("CUMULATIVE", None)]:
    bn = torch.nn.BatchNorm2d(3, momentum=momentum)
    with torch.no_grad():
        bn.weight.copy_(weight(3))
        bn.bias.copy_(bias(3))
    for k in range(3):
        bn(xs([2, 3, 4, 5], k))
    emit(f"RUNNING_{label}_MEAN", bn.running_mean)
    emit(f"RUNNING_{label}_VAR", bn.running_var)
    print(f"const RUNNING_{label}_TRACKED: f64 = {float(bn.num_batches_tracked)!r};")
    bn.eval()
    emit(f"RUNNING_{label}_EVAL_OUT", bn(xs([2, 3, 4, 5], 3)))
