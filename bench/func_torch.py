#!/usr/bin/env python3
"""PyTorch's torch.func against the same three workloads as retrograd's
`bench func` (bench/retrograd/func.rs), f32, same shapes, one JSON line per
measurement with the same fields.

    python3 bench/func_torch.py                 # every workload
    python3 bench/func_torch.py per_sample_grads --repeats 9
    python3 bench/func_torch.py jacobian --quick
    python3 bench/func_torch.py ensemble --threads 2

- per-sample gradients: the CNN of train_mnist_cnn without batch norm or
  dropout (conv3x3(32)-relu-maxpool2 -> conv3x3(64)-relu-maxpool2 ->
  linear(128)-relu -> linear(10), PyTorch's default initialisation) on 64
  standard-normal 1x28x28 images with uniform labels:
  vmap(grad(loss), in_dims=(None, 0, 0)) of one image's cross-entropy
  through functional_call ("vmap_grad"), against one ordinary backward of
  the batch's mean loss ("batched_backward").
- jacobian: torch.func.jacrev of x -> W2 tanh(W1 x + b1) + b2 (256-256-256,
  normal weights scaled by 1/sqrt(256)) at one input ("jacrev"), against
  torch.autograd.functional.jacobian, which runs one backward per output
  row ("row_loop").
- ensemble: 8 copies of the train_digits MLP (64-128-64-10, relu) stacked
  with stack_module_state and run with vmap over functional_call on 128
  shared inputs, the summed mean cross-entropies and one backward to the
  stacked parameters ("vmap_stacked"), against one MLP's forward and
  backward at batch 8 x 128 ("one_model_big_batch").

Each pair is timed alternately (a, b, a, b, ...) after one warm-up of each,
so both see the same load; rows carry the median, min and max in ms, and
the first row of a pair the ratio of the medians (over_<other>) and the
largest difference of its check (max_abs_diff: the mean of the per-sample
gradients against the batch's gradient, jacrev against the row loop, each
stacked model's loss against the model run alone). Threads default to the
CPUs this process may use.
"""

import argparse
import copy
import json
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, jacrev, stack_module_state, vmap

CNN_BATCH = 64
JAC_WIDTH = 256
ENSEMBLE = 8
ENSEMBLE_BATCH = 128
DIGITS_SIZES = (64, 128, 64, 10)


def emit(**fields):
    fields = {"framework": "pytorch", **fields}
    print(json.dumps(fields), flush=True)


def stats(samples):
    return statistics.median(samples), min(samples), max(samples)


def time_pair(repeats, a, b):
    """Times a and b alternately after one warm-up each; seconds."""
    a()
    b()
    ta, tb = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        a()
        ta.append(time.perf_counter() - t)
        t = time.perf_counter()
        b()
        tb.append(time.perf_counter() - t)
    return ta, tb


def row(workload, variant, sizes, secs, pair=None):
    median, lo, hi = stats(secs)
    fields = {"workload": workload, "variant": variant, "dtype": "f32", **sizes}
    if pair is not None:
        other, other_median, diff = pair
        fields[f"over_{other}"] = round(median / other_median, 4)
        fields["max_abs_diff"] = diff
    fields.update(median_ms=round(median * 1e3, 4), min_ms=round(lo * 1e3, 4),
                  max_ms=round(hi * 1e3, 4))
    emit(**fields)


def mnist_cnn(channels=(32, 64), hidden=128, dropout=0.0):
    """The CNN of examples/support/mnist_cnn.rs without batch norm."""
    layers, cin = [], 1
    for cout in channels:
        layers += [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    side = 28 >> len(channels)
    layers += [nn.Flatten(), nn.Linear(cin * side * side, hidden), nn.ReLU()]
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(hidden, 10))
    return nn.Sequential(*layers)


def digits_mlp():
    sizes = DIGITS_SIZES
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def max_abs_diff(a, b):
    return float((a - b).abs().max())


def per_sample_grads(args, repeats):
    batch = 8 if args.quick else CNN_BATCH
    torch.manual_seed(0)
    model = mnist_cnn()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    params = {k: v.detach() for k, v in model.named_parameters()}

    def image_loss(p, xi, yi):
        logits = functional_call(model, p, (xi.unsqueeze(0),))
        return F.cross_entropy(logits, yi.unsqueeze(0))

    per_sample = vmap(grad(image_loss), in_dims=(None, 0, 0))

    def vmapped():
        return per_sample(params, x, y)

    def batched():
        for p in model.parameters():
            p.grad = None
        F.cross_entropy(model(x), y).backward()
        return {k: p.grad for k, p in model.named_parameters()}

    ps, full = vmapped(), batched()
    diff = max(max_abs_diff(ps[k].mean(0), full[k]) for k in full)
    ta, tb = time_pair(repeats, vmapped, batched)
    sizes = {"model": "mnist_cnn[32,64] h128", "batch": batch,
             "params": sum(p.numel() for p in model.parameters())}
    row("func_per_sample_grads", "vmap_grad", sizes, ta,
        ("batched_backward", statistics.median(tb), diff))
    row("func_per_sample_grads", "batched_backward", sizes, tb)


def jacobian(args, repeats):
    width = 32 if args.quick else JAC_WIDTH
    g = torch.Generator().manual_seed(11)
    scale = width ** -0.5
    w1 = torch.randn(width, width, generator=g) * scale
    b1 = torch.randn(width, generator=g) * scale
    w2 = torch.randn(width, width, generator=g) * scale
    b2 = torch.randn(width, generator=g) * scale
    x = torch.randn(width, generator=g)

    def f(v):
        return w2 @ torch.tanh(w1 @ v + b1) + b2

    jf = jacrev(f)

    def vmapped():
        return jf(x)

    def looped():
        return torch.autograd.functional.jacobian(f, x)

    diff = max_abs_diff(vmapped(), looped())
    ta, tb = time_pair(repeats, vmapped, looped)
    sizes = {"model": f"tanh mlp {width}-{width}-{width}", "batch": 1}
    row("func_jacobian", "jacrev", sizes, ta, ("row_loop", statistics.median(tb), diff))
    row("func_jacobian", "row_loop", sizes, tb)


def ensemble(args, repeats):
    models_n, batch = (2, 16) if args.quick else (ENSEMBLE, ENSEMBLE_BATCH)
    torch.manual_seed(0)
    models = [digits_mlp() for _ in range(models_n)]
    params, buffers = stack_module_state(models)
    base = copy.deepcopy(models[0]).to("meta")
    g = torch.Generator().manual_seed(21)
    x = torch.randn(batch, DIGITS_SIZES[0], generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    big_x = torch.randn(models_n * batch, DIGITS_SIZES[0], generator=g)
    big_y = torch.randint(0, 10, (models_n * batch,), generator=g)
    one = models[0]

    def model_loss(p, b, xs, ys):
        return F.cross_entropy(functional_call(base, (p, b), (xs,)), ys)

    stacked_loss = vmap(model_loss, in_dims=(0, 0, None, None))

    def vmapped():
        for p in params.values():
            p.grad = None
        losses = stacked_loss(params, buffers, x, y)
        losses.sum().backward()
        return losses

    def one_model():
        for p in one.parameters():
            p.grad = None
        F.cross_entropy(one(big_x), big_y).backward()

    losses = vmapped().detach()
    with torch.no_grad():
        alone = torch.stack([F.cross_entropy(m(x), y) for m in models])
    diff = max_abs_diff(losses, alone)
    ta, tb = time_pair(repeats, vmapped, one_model)
    model = "digits mlp 64-128-64-10"
    row("func_ensemble", "vmap_stacked", {"model": model, "models": models_n, "batch": batch},
        ta, ("one_model_big_batch", statistics.median(tb), diff))
    row("func_ensemble", "one_model_big_batch",
        {"model": model, "models": 1, "batch": models_n * batch}, tb)


WORKLOADS = {
    "per_sample_grads": per_sample_grads,
    "jacobian": jacobian,
    "ensemble": ensemble,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload", nargs="?", default="all", choices=[*WORKLOADS, "all"])
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed repeats per measurement (default 15, 3 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)),
                        help="torch.set_num_threads (default: the CPUs this process may use)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    repeats = args.repeats or (3 if args.quick else 15)
    emit(workload="func_setup", torch=torch.__version__, threads=torch.get_num_threads(),
         repeats=repeats)
    for name, run in WORKLOADS.items():
        if args.workload in (name, "all"):
            run(args, repeats)


if __name__ == "__main__":
    main()
