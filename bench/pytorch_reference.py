#!/usr/bin/env python3
"""PyTorch reference for retrograd's benchmark workloads (issues 7 and 16).

Each workload is defined exactly as in `bench/retrograd/` so both frameworks
compute the same numbers; every result is one JSON line with the median, min
and max over repeats plus cross-check values.

    pip install torch numpy          # a few GB; not part of CI
    python3 bench/pytorch_reference.py w1 --dtype f32 --chains 1000
    python3 bench/pytorch_reference.py w3 --batch 64
    python3 bench/pytorch_reference.py w3_conv
    python3 bench/pytorch_reference.py w4 --compile   # torch.compile (Inductor)
    python3 bench/pytorch_reference.py all

Memory workloads run in a fresh subprocess each, so the peak RSS growth they
report is not hidden by an earlier, larger peak of the same process.
"""
import time as _time

_START = _time.perf_counter()  # before `import torch`: W6's load row reports the import too

import argparse
import json
import os
import queue as queue_module
import resource
import statistics
import subprocess
import sys
import time

import torch

torch.set_num_threads(2)
K = 256
L = 100


def emit(**fields):
    fields.setdefault("framework", "pytorch")
    print(json.dumps(fields), flush=True)


def stats(samples):
    return statistics.median(samples), min(samples), max(samples)


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# ---------------------------------------------------------------- W1 / W1v
def w1_params(dtype, width):
    if width == 1:
        vals = [((k % 17) - 8) * 0.01 for k in range(K)]
        return [torch.tensor(v, dtype=dtype, requires_grad=True) for v in vals]
    return [
        torch.tensor([(((k * width + e) % 17) - 8) * 0.01 for e in range(width)],
                     dtype=dtype, requires_grad=True)
        for k in range(K)
    ]


def w1_once(dtype, chains, width):
    p = w1_params(dtype, width)
    start = time.perf_counter()
    total = None
    for c in range(chains):
        init = 0.5 + 0.001 * c
        v = torch.tensor(init, dtype=dtype) if width == 1 else torch.full((width,), init, dtype=dtype)
        for j in range(L):
            i = c * L + j
            v = torch.tanh(v * p[i % K] + p[(7 * i + 3) % K])
        total = v if total is None else total + v
    loss = total if width == 1 else total.sum()
    loss.backward()
    grad_sum = sum(float(q.grad.sum()) for q in p)
    elapsed = time.perf_counter() - start
    return elapsed, float(loss.detach()), grad_sum


def nodes_of(chains, width):
    # 3 ops per chain step, C - 1 chain additions (+1 final sum for vectors).
    return 3 * chains * L + (chains - 1) + (0 if width == 1 else 1)


def bench_w1(dtype_name, chains, width, repeats):
    dtype = torch.float32 if dtype_name == "f32" else torch.float64
    times = []
    loss = grad_sum = None
    for _ in range(repeats):
        t, loss, grad_sum = w1_once(dtype, chains, width)
        times.append(t)
    nodes = nodes_of(chains, width)
    med, lo, hi = stats([t * 1e9 / nodes for t in times])
    emit(workload="w1" if width == 1 else "w1v", dtype=dtype_name, chains=chains,
         nodes=nodes, unit="ns_per_node", median=med, min=lo, max=hi,
         loss=loss, grad_sum=grad_sum)


# ---------------------------------------------------------------- W2
SIZES = (784, 512, 512, 10)


def mlp_params(seed):
    g = torch.Generator().manual_seed(seed)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        bound = 1.0 / fan_in ** 0.5
        w = (torch.rand(fan_in, fan_out, generator=g) * 2 - 1) * bound
        b = (torch.rand(fan_out, generator=g) * 2 - 1) * bound
        params += [w.requires_grad_(), b.requires_grad_()]
    return params


def mlp_loss(params, x, y):
    h = x
    for layer in range(3):
        w, b = params[2 * layer], params[2 * layer + 1]
        h = h @ w + b
        if layer < 2:
            h = torch.relu(h)
    return torch.nn.functional.cross_entropy(h, y)


def mlp_step(params, x, y, lr=0.01, loss_fn=mlp_loss):
    loss = loss_fn(params, x, y)
    for p in params:
        p.grad = None
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss.detach())


def compiled(fn):
    """`torch.compile` (Inductor, its default backend) of `fn`: forward and
    backward (AOTAutograd) compiled at the first call; the update stays eager."""
    return torch.compile(fn)


def mlp_data(batch, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, SIZES[0], generator=g)
    y = torch.randint(0, SIZES[-1], (batch,), generator=g)
    return x, y


def bench_w2(batch, steps, warmup, compile_step=False):
    """W2; with `compile_step`, the loss under torch.compile (row "w2_compiled",
    paired with retrograd's compiled step)."""
    params = mlp_params(0)
    x, y = mlp_data(batch, 1)
    loss_fn = compiled(mlp_loss) if compile_step else mlp_loss
    # The first call compiles (seconds): warm-up enough to be past it.
    for _ in range(max(warmup, 3) if compile_step else warmup):
        mlp_step(params, x, y, loss_fn=loss_fn)
    times = []
    loss = None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = mlp_step(params, x, y, loss_fn=loss_fn)
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([t * 1e3 for t in times])
    flops = 6 * batch * sum(a * b for a, b in zip(SIZES[:-1], SIZES[1:]))
    emit(workload="w2_compiled" if compile_step else "w2", batch=batch, unit="ms_per_step",
         median=med, min=lo, max=hi, gflops=flops / (med * 1e-3) / 1e9, loss=loss)


# ---------------------------------------------------------------- W3
# Model C1 (f32): Conv2d(1,16,5,padding=2)-ReLU-MaxPool2d(2)
#   -> Conv2d(16,32,5,padding=2)-ReLU-MaxPool2d(2) -> Flatten
#   -> Linear(1568,128)-ReLU -> Linear(128,10); mean cross-entropy; Adam lr 1e-3.
# Multiply-adds of one forward pass per image; a training step counts
# 6 flops per multiply-add (forward, grad of input, grad of weight), as W2
# does, although the first convolution's input gradient is never needed.
C1_MACS = 16 * 28 * 28 * 1 * 25 + 32 * 14 * 14 * 16 * 25 + 1568 * 128 + 128 * 10


def c1_model(seed):
    """C1 with PyTorch's default initialisation, seeded."""
    torch.manual_seed(seed)
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(1568, 128), nn.ReLU(),
        nn.Linear(128, 10),
    )


def c1_data(batch, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    return x, y


def c1_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def bench_w3(batch, steps, warmup):
    model = c1_model(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = c1_data(batch, 1)
    for _ in range(warmup):
        c1_step(model, opt, x, y)
    times = []
    loss = None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = c1_step(model, opt, x, y)
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([t * 1e3 for t in times])
    flops = 6 * batch * C1_MACS
    emit(workload="w3", batch=batch, unit="ms_per_step", median=med, min=lo, max=hi,
         gflops=flops / (med * 1e-3) / 1e9, loss=loss)


# W3 conv: one 3x3 convolution, 64 -> 64 channels, padding 1, no bias, on
# [32, 64, 32, 32] f32; forward, then the gradients of sum(output) with
# respect to the input and the weight.
W3C = dict(batch=32, channels=64, side=32, kernel=3)


def bench_w3_conv(steps, warmup):
    b, c, s, k = W3C["batch"], W3C["channels"], W3C["side"], W3C["kernel"]
    g = torch.Generator().manual_seed(0)
    x = torch.randn(b, c, s, s, generator=g).requires_grad_()
    w = (torch.randn(c, c, k, k, generator=g) * (1.0 / (c * k * k)) ** 0.5).requires_grad_()

    def once():
        out = torch.nn.functional.conv2d(x, w, padding=k // 2)
        gx, gw = torch.autograd.grad(out.sum(), [x, w])
        return gx, gw

    for _ in range(warmup):
        once()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        gx, gw = once()
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([t * 1e3 for t in times])
    flops = 3 * 2 * b * c * s * s * c * k * k  # forward, grad of input, grad of weight
    emit(workload="w3_conv", batch=b, unit="ms_fwd_bwd", median=med, min=lo, max=hi,
         gflops=flops / (med * 1e-3) / 1e9, grad_x_sum=float(gx.sum()), grad_w_sum=float(gw.sum()))


# ---------------------------------------------------------------- W4 GPT iteration
# One training iteration of nanoGPT's shakespeare_char CPU configuration
# (block 64, batch 12, 4 layers, 4 heads, width 128, vocabulary 65, no
# dropout, no biases, tied embeddings), written as nanoGPT's model.py
# writes it: forward, cross-entropy, backward, clip_grad_norm_(1.0), and
# AdamW (lr 1e-3, betas (0.9, 0.99), weight decay 0.1 on matrices only) on
# a fixed batch of seeded random tokens. Pairs with bench/retrograd/w4.rs on
# ("w4", "f32", 12).
W4 = dict(vocab=65, block=64, n_layer=4, n_head=4, n_embd=128)


class GptBlock(torch.nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.h = h
        self.ln_1 = torch.nn.LayerNorm(e, bias=False)
        self.c_attn = torch.nn.Linear(e, 3 * e, bias=False)
        self.c_proj = torch.nn.Linear(e, e, bias=False)
        self.ln_2 = torch.nn.LayerNorm(e, bias=False)
        self.c_fc = torch.nn.Linear(e, 4 * e, bias=False)
        self.mlp_proj = torch.nn.Linear(4 * e, e, bias=False)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(e, dim=2)
        q, k, v = (z.view(b, t, self.h, e // self.h).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, e))
        return x + self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x))))


class Gpt(torch.nn.Module):
    def __init__(self, vocab, block, n_layer, n_head, n_embd):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, n_embd)
        self.wpe = torch.nn.Embedding(block, n_embd)
        self.h = torch.nn.ModuleList(GptBlock(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(n_embd, bias=False)
        self.lm_head = torch.nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / (2 * n_layer) ** 0.5 if name.endswith("proj.weight") else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def bench_w4(batch, steps, warmup, compile_step=False):
    """W4; with `compile_step`, the model's forward and loss under
    torch.compile (row "w4_compiled"); clipping and AdamW stay eager."""
    torch.manual_seed(0)
    model = Gpt(**W4)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, W4["vocab"], (batch, W4["block"] + 1), generator=g)
    x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    forward = compiled(model) if compile_step else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss = forward(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss.detach())

    for _ in range(max(warmup, 3) if compile_step else warmup):
        step()
    times = []
    loss = None
    for _ in range(steps):
        t0 = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([t * 1e3 for t in times])
    emit(workload="w4_compiled" if compile_step else "w4", dtype="f32", batch=batch,
         unit="ms_per_iter", median=med, min=lo, max=hi, loss=loss)


# ---------------------------------------------------------------- W4 attention
# torch.nn.functional.scaled_dot_product_attention alone, causal, f32, on
# [12, 4, T, 32] q, k, v: forward, then the gradients of sum(output) with
# respect to q, k and v. Rows pair with bench/retrograd/w4.rs on
# ("w4_attn", "f32", T) and ("mem_w4_attn", "f32", T).
W4A = dict(batch=12, heads=4, head_dim=32)


def w4_inputs(t):
    g = torch.Generator().manual_seed(0)
    shape = (W4A["batch"], W4A["heads"], t, W4A["head_dim"])
    return [torch.randn(*shape, generator=g).requires_grad_() for _ in range(3)]


def w4_pass(q, k, v):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    return torch.autograd.grad(out.sum(), [q, k, v])


def bench_w4_attn(t, steps, warmup):
    q, k, v = w4_inputs(t)
    for _ in range(warmup):
        w4_pass(q, k, v)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        w4_pass(q, k, v)
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([x * 1e3 for x in times])
    emit(workload="w4_attn", dtype="f32", n=t, unit="ms_fwd_bwd", median=med, min=lo, max=hi)


def mem_w4_attn(t):
    q, k, v = w4_inputs(t)
    base = rss_kib()
    w4_pass(q, k, v)
    growth_kib = peak_rss_kib() - base
    emit(workload="mem_w4_attn", dtype="f32", n=t, unit="MiB_peak_rss_growth",
         median=growth_kib / 1024, min=None, max=None,
         score_matrix_mib=W4A["batch"] * W4A["heads"] * t * t * 4 / 2 ** 20)


# ---------------------------------------------------------------- W5
def bench_matmul(n, repeats):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g)
    b = torch.randn(n, n, generator=g)
    torch.matmul(a, b)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([2 * n ** 3 / t / 1e9 for t in times])
    emit(workload="matmul", dtype="f32", n=n, unit="gflops", median=med, min=lo, max=hi)


# ---------------------------------------------------------------- memory
def mem_w1(chains):
    p = w1_params(torch.float32, 1)
    base = rss_kib()
    peak_before = peak_rss_kib()
    total = None
    for c in range(chains):
        v = torch.tensor(0.5 + 0.001 * c)
        for j in range(L):
            i = c * L + j
            v = torch.tanh(v * p[i % K] + p[(7 * i + 3) % K])
        total = v if total is None else total + v
    total.backward()
    growth_kib = max(peak_rss_kib(), peak_before) - base
    nodes = nodes_of(chains, 1)
    emit(workload="mem_w1", chains=chains, nodes=nodes, unit="bytes_per_node",
         median=growth_kib * 1024 / nodes, min=None, max=None)


def mem_w2(batch, steps):
    params = mlp_params(0)
    x, y = mlp_data(batch, 1)
    base = rss_kib()
    for _ in range(steps):
        mlp_step(params, x, y)
    growth_kib = peak_rss_kib() - base
    emit(workload="mem_w2", batch=batch, steps=steps, unit="MiB_peak_rss_growth",
         median=growth_kib / 1024, min=None, max=None)


# ---------------------------------------------------------------- DDP
# W2 under torch.nn.parallel.DistributedDataParallel over gloo, `ranks`
# processes of 1 thread each (torch.multiprocessing), global batch split
# over the ranks; the same rows as `bench ddp` under mpirun. `--model w4`:
# the W4 GPT training iteration (nanoGPT's model, AdamW groups, clipping)
# instead, at the given global batch (24 in compare.sh).
class W2Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ps = torch.nn.ParameterList(torch.nn.Parameter(p.detach()) for p in mlp_params(0))

    def forward(self, x):
        h = x
        for layer in range(3):
            h = h @ self.ps[2 * layer] + self.ps[2 * layer + 1]
            if layer < 2:
                h = torch.relu(h)
        return h


def ddp_worker(rank, ranks, per_rank, steps, warmup, port, queue, which="w2"):
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=ranks)
    if which == "w4":
        torch.manual_seed(0)
        gpt = Gpt(**W4)
        model = torch.nn.parallel.DistributedDataParallel(gpt)
        decay = [p for p in gpt.parameters() if p.dim() >= 2]
        no_decay = [p for p in gpt.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.99))
        g = torch.Generator().manual_seed(1 + rank)
        data = torch.randint(0, W4["vocab"], (per_rank, W4["block"] + 1), generator=g)
        x, y = data[:, :-1].contiguous(), data[:, 1:].contiguous()
    else:
        model = torch.nn.parallel.DistributedDataParallel(W2Mlp())
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x, y = mlp_data(per_rank, 1 + rank)
    times = []
    cpu0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            ru = resource.getrusage(resource.RUSAGE_SELF)
            cpu0 = ru.ru_utime + ru.ru_stime
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if which == "w4":
            model(x, y).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        else:
            torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = torch.tensor([(ru.ru_utime + ru.ru_stime - cpu0) / steps])
    med = torch.tensor([statistics.median(times)])
    dist.all_reduce(med, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
    dist.all_reduce(cpu)
    if rank == 0:
        queue.put((float(med[0]) * 1e3, float(cpu[0]) / ranks * 1e3))
    dist.destroy_process_group()


def bench_ddp(ranks, global_batch, steps, warmup, which="w2"):
    import torch.multiprocessing as mp
    per_rank = global_batch // ranks
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    # gloo sometimes aborts a worker ("terminate called without an active
    # exception"), at start-up or at teardown: keep rank 0's figures if it
    # sent them, else try again (a fresh port each time).
    for attempt in range(3):
        port = 29500 + (os.getpid() + 17 * attempt) % 1000
        try:
            mp.spawn(ddp_worker, args=(ranks, per_rank, steps, warmup, port, queue, which),
                     nprocs=ranks)
        except mp.ProcessExitedException as e:
            print(f"ddp attempt {attempt + 1}: {e}", file=sys.stderr)
        try:
            med, cpu = queue.get(timeout=5)
            break
        except queue_module.Empty:
            continue
    else:
        sys.exit("ddp: every attempt failed")
    if which == "w4":
        nbytes = 4 * sum(p.numel() for p in Gpt(**W4).parameters())
    else:
        nbytes = 4 * sum(a * b + b for a, b in zip(SIZES[:-1], SIZES[1:]))
    emit(workload=f"ddp_{which}_r{ranks}", batch=global_batch, per_rank_batch=per_rank, ranks=ranks,
         unit="ms_per_step", median=med, examples_per_s=global_batch / (med * 1e-3),
         cpu_ms_per_rank=cpu, allreduce_bytes=nbytes)


# ---------------------------------------------------------------- W6
# all-MiniLM-L6-v2 (scripts/fetch_minilm.sh); pairs with bench/retrograd/w6.rs.
MINILM = os.environ.get("RETROGRAD_MINILM", os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), ".cache/models/all-MiniLM-L6-v2"))


def w6_speeches(n):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from finetune_speakers import speeches
    return [t for _, t in speeches()[:n]]


def bench_w6_embed(repeats):
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(MINILM, device="cpu")
    texts = w6_speeches(256)
    model.encode(texts, batch_size=32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        e = model.encode(texts, batch_size=32)
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([x * 1e3 for x in times])
    emit(workload="w6_embed", dtype="f32", batch=32, texts=256, unit="ms_per_256_texts",
         median=med, min=lo, max=hi, first_values_sum=float(e[0][:8].sum()))


def bench_w6_onnx(repeats):
    """onnxruntime on the encoder torch.onnx.export writes, with the same
    tokenizer, length sorting, batches, mean pooling and normalisation."""
    import tempfile
    import numpy as np
    import onnxruntime as ort
    from transformers import AutoModel, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(MINILM)
    model = AutoModel.from_pretrained(MINILM).eval()
    path = os.path.join(tempfile.mkdtemp(), "minilm.onnx")
    dummy = tok(["a text", "a longer text here"], padding=True, return_tensors="pt")
    names = ["input_ids", "attention_mask", "token_type_ids"]
    axes = {n: {0: "batch", 1: "seq"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "seq"}
    class Encoder(torch.nn.Module):
        # By keyword: BertModel.forward's positional order changes between releases.
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    torch.onnx.export(Encoder(model), (dummy["input_ids"], dummy["attention_mask"], dummy["token_type_ids"]),
                      path, input_names=names, output_names=["last_hidden_state"],
                      dynamic_axes=axes, opset_version=17, dynamo=False)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    session = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    texts = w6_speeches(256)
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))

    def encode():
        out = np.zeros((len(texts), 384), dtype=np.float32)
        for s in range(0, len(order), 32):
            idx = order[s:s + 32]
            enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=256,
                      return_tensors="np")
            h = session.run(None, {n: enc[n].astype(np.int64) for n in names})[0]
            m = enc["attention_mask"][..., None].astype(np.float32)
            v = (h * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
            out[idx] = v / np.clip(np.linalg.norm(v, axis=1, keepdims=True), 1e-12, None)
        return out

    encode()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        encode()
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([x * 1e3 for x in times])
    emit(workload="w6_embed", framework="onnxruntime", dtype="f32", batch=32, texts=256,
         unit="ms_per_256_texts", median=med, min=lo, max=hi)


def bench_w6_step(steps, warmup):
    from transformers import AutoTokenizer, BertForSequenceClassification
    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(MINILM, num_labels=10).train()
    tok = AutoTokenizer.from_pretrained(MINILM)
    texts = sorted(w6_speeches(16 * 40), key=len, reverse=True)[:16]
    enc = tok(texts, padding="max_length", truncation=True, max_length=128, return_tensors="pt")
    assert enc["input_ids"].shape == (16, 128)
    labels = torch.arange(16) % 10
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}], lr=1e-5, eps=1e-8)

    def step():
        loss = model(**enc, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    med, lo, hi = stats([x * 1e3 for x in times])
    emit(workload="w6_step", dtype="f32", batch=16, seq=128, unit="ms_per_step",
         median=med, min=lo, max=hi)


def w6_load():
    """Fresh process: folder to first embedding (after `import torch`, as
    retrograd's excludes nothing but process start), then the process's
    peak RSS after embedding the 256 speeches."""
    texts = w6_speeches(256)
    imported = time.perf_counter()
    from sentence_transformers import SentenceTransformer
    t0 = time.perf_counter()
    model = SentenceTransformer(MINILM, device="cpu")
    model.encode(texts[:1], batch_size=1)
    load_ms = (time.perf_counter() - t0) * 1e3
    emit(workload="w6_load", dtype="f32", unit="ms_folder_to_first_embedding", median=load_ms,
         min=None, max=None, import_torch_ms=(imported - _START) * 1e3,
         import_sentence_transformers_ms=(t0 - imported) * 1e3)
    model.encode(texts, batch_size=32)
    emit(workload="mem_w6", dtype="f32", unit="MiB_peak_rss_load_and_embed",
         median=peak_rss_kib() / 1024, min=None, max=None)


def run_isolated(args):
    """Runs this script again in a fresh process (for peak-RSS measurements)."""
    subprocess.run([sys.executable, os.path.abspath(__file__)] + args, check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload", choices=["w1", "w1v", "w2", "w3", "w3_conv", "w4", "w4_attn", "matmul",
                                         "w6_embed", "w6_onnx", "w6_step", "w6_load",
                                     "mem_w1", "mem_w2", "mem_w4_attn", "ddp", "all"])
    ap.add_argument("--ranks", type=int, default=2, help="processes of the ddp workload")
    ap.add_argument("--model", choices=["w2", "w4"], default="w2", help="model of the ddp workload")
    ap.add_argument("--dtype", choices=["f32", "f64"], default="f32")
    ap.add_argument("--chains", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--n", type=int, default=1024)
    ap.add_argument("--t", type=int, default=1024, help="sequence length of w4_attn / mem_w4_attn")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile", action="store_true",
                    help="w2 and w4: the step under torch.compile (Inductor), rows w2_compiled / w4_compiled")
    a = ap.parse_args()
    if a.workload == "w1":
        bench_w1(a.dtype, a.chains, 1, a.repeats)
    elif a.workload == "w1v":
        bench_w1("f32", a.chains, 64, a.repeats)
    elif a.workload == "w2":
        bench_w2(a.batch, a.steps, a.warmup, a.compile)
    elif a.workload == "w3":
        bench_w3(a.batch, a.steps, a.warmup)
    elif a.workload == "w3_conv":
        bench_w3_conv(a.steps, a.warmup)
    elif a.workload == "w4":
        bench_w4(12, a.steps, a.warmup, a.compile)
    elif a.workload == "w4_attn":
        bench_w4_attn(a.t, a.steps, a.warmup)
    elif a.workload == "mem_w4_attn":
        mem_w4_attn(a.t)
    elif a.workload == "matmul":
        bench_matmul(a.n, a.repeats)
    elif a.workload == "mem_w1":
        mem_w1(a.chains)
    elif a.workload == "mem_w2":
        mem_w2(a.batch, 5)
    elif a.workload == "w6_embed":
        bench_w6_embed(a.repeats)
    elif a.workload == "w6_onnx":
        bench_w6_onnx(a.repeats)
    elif a.workload == "w6_step":
        bench_w6_step(a.steps, a.warmup)
    elif a.workload == "w6_load":
        w6_load()
    elif a.workload == "ddp":
        bench_ddp(a.ranks, a.batch, a.steps, a.warmup, a.model)
    else:
        bench_w1("f64", 10, 1, 1)  # cross-check: loss 0.6983577607687627, grad_sum 9.99670012301077
        for dtype in ("f32", "f64"):
            for chains in (1000, 10000):
                bench_w1(dtype, chains, 1, 3 if chains == 1000 else 1)
        bench_w1("f32", 1000, 64, 3)
        for batch in (128, 1024):
            bench_w2(batch, 50, 5)
        for batch in (64, 256):
            bench_w3(batch, 50, 5)
        bench_w3_conv(50, 5)
        for t in (64, 256, 1024):
            bench_w4_attn(t, 7 if t >= 1024 else 15, 2)
        for n in (1024, 2048):
            bench_matmul(n, 5)
        run_isolated(["mem_w1", "--chains", "1000"])
        run_isolated(["mem_w2", "--batch", "4096"])
        for t in (1024, 2048):
            run_isolated(["mem_w4_attn", "--t", str(t)])


if __name__ == "__main__":
    main()
