"""Step-by-step parity of `train_shakespeare` against nanoGPT.

nanoGPT's shakespeare_char CPU run (block 64, batch 12, 4 layers, 4 heads,
width 128, dropout 0, no biases, tied embeddings; AdamW lr 1e-3, betas
(0.9, 0.99), weight decay 0.1 on the parameters with dim >= 2, eps 1e-8,
fused=False; warm-up 100 then cosine to 1e-4 at 2000; clip 1.0), with
nanoGPT's model.py, configure_optimizers, get_lr and get_batch written out
here, so both sides can be fed the same initial weights and the same
batches:

    # 1. nanoGPT's initial weights (retrograd's parameter names) and the
    #    windows of every training step and of the evaluation, drawn as
    #    nanoGPT's get_batch draws them (torch.randint from seed S):
    python3 bench/nanogpt_parity.py export --seed 1337 --steps 2000 --dir target/parity
    # 2. train both from them, one loss per step, the step-0 gradients
    #    saved, validation loss on the exported windows every 250 steps:
    python3 bench/nanogpt_parity.py train --dir target/parity --steps 2000 > target/parity/torch.txt
    RAYON_NUM_THREADS=1 cargo run --release --example nanogpt_parity -- \\
        --dir target/parity --steps 2000 > target/parity/retrograd.txt
    # 3. step-0 gradients side by side, and the two loss trajectories:
    python3 bench/nanogpt_parity.py compare --dir target/parity

    # nanoGPT's own run (its own init and batches, eval_iters 20 as in its
    # README), then the loss over every non-overlapping window of val:
    python3 bench/nanogpt_parity.py nanogpt --seed 1337 --save target/parity/torch_1337.safetensors
    # the same noise-free loss for saved weights (either side's), and the
    # spread of nanoGPT's 20-batch estimate on them:
    python3 bench/nanogpt_parity.py evalckpt --file target/train_shakespeare.safetensors

Everything is f32 on one thread (torch.set_num_threads(1)). The files are
plain safetensors (written and read here without the safetensors package).
"""

import argparse
import gzip
import json
import math
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK, BATCH, N_LAYER, N_HEAD, N_EMBD = 64, 12, 4, 4, 128
LR, MIN_LR, WARMUP, DECAY_ITERS = 1e-3, 1e-4, 100, 2000
WEIGHT_DECAY, BETAS, GRAD_CLIP = 0.1, (0.9, 0.99), 1.0
EVAL_INTERVAL, EVAL_ITERS = 250, 20


# ------------------------------------------------------------------ data
def load_data():
    """nanoGPT's data/shakespeare_char/prepare.py: sorted characters, 90/10."""
    with gzip.open(os.path.join(ROOT, "data", "tinyshakespeare.txt.gz"), "rt", encoding="utf-8") as f:
        text = f.read()
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    data = torch.from_numpy(np.array([stoi[c] for c in text], dtype=np.int64))
    n = len(data)
    return data[: int(n * 0.9)], data[int(n * 0.9):], len(chars)


def windows(data, ix):
    x = torch.stack([data[i: i + BLOCK] for i in ix])
    y = torch.stack([data[i + 1: i + 1 + BLOCK] for i in ix])
    return x, y


def get_batch_ix(data):
    """nanoGPT's get_batch draw (from torch's default generator)."""
    return torch.randint(len(data) - BLOCK, (BATCH,))


# ------------------------------------------------------------------ model (nanoGPT's model.py)
class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD, bias=False)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        q = q.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        v = v.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(N_EMBD, bias=False)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(N_EMBD, bias=False)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            drop=nn.Dropout(0.0),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=LayerNorm(N_EMBD, bias=False),
        ))
        self.lm_head = nn.Linear(N_EMBD, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def configure_optimizers(model):
    params = {pn: p for pn, p in model.named_parameters() if p.requires_grad}
    decay = [p for p in params.values() if p.dim() >= 2]
    nodecay = [p for p in params.values() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": nodecay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, fused=False)


def get_lr(it):
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > DECAY_ITERS:
        return MIN_LR
    ratio = (it - WARMUP) / (DECAY_ITERS - WARMUP)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return MIN_LR + coeff * (LR - MIN_LR)


def retrograd_name(torch_name):
    """nanoGPT's parameter names to retrograd's Gpt names."""
    name = torch_name.removeprefix("transformer.")
    name = name.replace("attn.c_attn.weight", "attn.in_proj_weight")
    return name.replace("attn.c_proj.weight", "attn.out_proj.weight")


# ------------------------------------------------------------------ safetensors
DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def save_st(path, arrays):
    header, blobs, offset = {}, [], 0
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        kind = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}[a.dtype]
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": kind, "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def load_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(body[a:b], dtype=DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


# ------------------------------------------------------------------ commands
def cmd_export(a):
    train, val, vocab = load_data()
    torch.manual_seed(a.seed)
    model = GPT(vocab)
    weights = {retrograd_name(n): p.detach().numpy().copy() for n, p in model.named_parameters()}
    save_st(os.path.join(a.dir, "init.safetensors"), weights)
    # The training windows in nanoGPT's order of draws (one batch per step),
    # then the evaluation windows: EVAL_ITERS batches of val per evaluation.
    train_ix = torch.stack([get_batch_ix(train) for _ in range(a.steps)]).numpy()
    val_ix = torch.stack([get_batch_ix(val) for _ in range(a.eval_batches)]).numpy()
    save_st(os.path.join(a.dir, "batches.safetensors"), {"train": train_ix, "val": val_ix})
    print(f"exported {len(weights)} tensors, {a.steps} training batches, {a.eval_batches} val batches to {a.dir}")


def estimate(model, data, ix):
    model.eval()
    with torch.no_grad():
        losses = [model(*windows(data, row)).item() for row in ix]
    model.train()
    return float(np.mean(losses))


def cmd_train(a):
    train, val, vocab = load_data()
    model = GPT(vocab)
    init = load_st(os.path.join(a.dir, "init.safetensors"))
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(init[retrograd_name(n)].copy()))
    batches = load_st(os.path.join(a.dir, "batches.safetensors"))
    optimizer = configure_optimizers(model)
    for it in range(a.steps + 1):
        if it % EVAL_INTERVAL == 0 or it == a.steps:
            print(f"eval {it} val {estimate(model, val, batches['val']):.6f}", flush=True)
        if it == a.steps:
            break
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        loss = model(*windows(train, batches["train"][it]))
        loss.backward()
        if it == 0:
            save_st(os.path.join(a.dir, "grads0_torch.safetensors"),
                    {retrograd_name(n): p.grad.numpy().copy() for n, p in model.named_parameters()})
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        print(f"step {it} loss {loss.item():.6f} norm {norm.item():.6f} lr {lr:.6e}", flush=True)
    save_st(os.path.join(a.dir, "final_torch.safetensors"),
            {retrograd_name(n): p.detach().numpy().copy() for n, p in model.named_parameters()})


def read_log(path):
    steps, evals = {}, {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if w[:1] == ["step"]:
                steps[int(w[1])] = (float(w[3]), float(w[5]))
            elif w[:1] == ["eval"]:
                evals[int(w[1])] = float(w[3])
    return steps, evals


def cmd_compare(a):
    g_t = load_st(os.path.join(a.dir, "grads0_torch.safetensors"))
    g_r = load_st(os.path.join(a.dir, "grads0_retrograd.safetensors"))
    print("step-0 gradients, max |diff| / max |torch|:")
    for name in sorted(g_t):
        t, r = g_t[name].astype(np.float64), g_r[name].astype(np.float64)
        print(f"  {name:28s} {np.abs(t - r).max() / np.abs(t).max():.2e}")
    final = [os.path.join(a.dir, f"final_{side}.safetensors") for side in ("torch", "retrograd")]
    if all(os.path.exists(f) for f in final):
        w_t, w_r = load_st(final[0]), load_st(final[1])
        worst = max(np.abs(w_t[k].astype(np.float64) - w_r[k]).max() / np.abs(w_t[k]).max() for k in w_t)
        print(f"final weights: largest max |diff| / max |torch| over the tensors {worst:.2e}")
    st, et = read_log(os.path.join(a.dir, "torch.txt"))
    sr, er = read_log(os.path.join(a.dir, "retrograd.txt"))
    print("step    torch loss  retrograd loss   diff      torch norm  retrograd norm")
    for it in sorted(set(st) & set(sr)):
        if it < 10 or it % a.every == 0 or it == max(st):
            (lt, nt), (lr, nr) = st[it], sr[it]
            print(f"{it:5d}  {lt:10.6f}  {lr:10.6f}  {lr - lt:+.2e}  {nt:10.6f}  {nr:10.6f}")
    common = sorted(set(st) & set(sr))
    for lo, hi in [(0, 50), (0, 200), (1500, 2000)]:
        d = [sr[i][0] - st[i][0] for i in common if lo <= i < hi]
        if d:
            print(f"steps {lo}-{hi}: mean loss diff (retrograd - torch) {np.mean(d):+.5f}, "
                  f"mean |diff| {np.mean(np.abs(d)):.5f}")
    print("eval  torch val   retrograd val")
    for it in sorted(set(et) & set(er)):
        print(f"{it:5d}  {et[it]:.5f}  {er[it]:.5f}  {er[it] - et[it]:+.5f}")


def cmd_nanogpt(a):
    """nanoGPT's train.py loop itself: own init and batches from seed, eval_iters 20."""
    train, val, vocab = load_data()
    torch.manual_seed(a.seed)
    model = GPT(vocab)
    optimizer = configure_optimizers(model)

    def estimate_loss(iters):
        out = {}
        model.eval()
        with torch.no_grad():
            for split, data in (("train", train), ("val", val)):
                out[split] = float(np.mean([model(*windows(data, get_batch_ix(data))).item() for _ in range(iters)]))
        model.train()
        return out

    x, y = windows(train, get_batch_ix(train))
    for it in range(a.steps + 1):
        lr = get_lr(it)
        for g in optimizer.param_groups:
            g["lr"] = lr
        if it % EVAL_INTERVAL == 0:
            losses = estimate_loss(EVAL_ITERS)
            print(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}", flush=True)
        if it == a.steps:
            break
        loss = model(x, y)
        x, y = windows(train, get_batch_ix(train))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    print(f"final val loss over all of val: {estimate(model, val, full_val_ix(val)):.4f}")
    if a.save:
        save_st(a.save, {retrograd_name(n): p.detach().numpy().copy() for n, p in model.named_parameters()})


def full_val_ix(val):
    """Every non-overlapping window of val, in batches: a fixed, noise-free set."""
    starts = torch.arange(0, len(val) - BLOCK, BLOCK)
    return [starts[i: i + BATCH] for i in range(0, len(starts), BATCH)]


def cmd_evalckpt(a):
    """Loss of saved weights (retrograd names: a train_shakespeare checkpoint or
    `nanogpt --save`) over all of val, and the spread of eval_iters-batch estimates."""
    train, val, vocab = load_data()
    model = GPT(vocab)
    state = load_st(a.file)
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(torch.from_numpy(state[retrograd_name(n)].astype(np.float32)))
    full = estimate(model, val, full_val_ix(val))
    g = torch.Generator().manual_seed(0)
    small = [estimate(model, val, torch.randint(len(val) - BLOCK, (EVAL_ITERS, BATCH), generator=g))
             for _ in range(a.repeats)]
    print(f"{a.file}: val loss over all of val {full:.4f}; {a.repeats} estimates of {EVAL_ITERS} "
          f"batches: mean {np.mean(small):.4f}, std {np.std(small):.4f}, "
          f"min {np.min(small):.4f}, max {np.max(small):.4f}")


def main():
    torch.set_num_threads(1)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("export")
    e.add_argument("--seed", type=int, default=1337)
    e.add_argument("--steps", type=int, default=2000)
    e.add_argument("--eval-batches", type=int, default=EVAL_ITERS)
    e.add_argument("--dir", default="target/parity")
    t = sub.add_parser("train")
    t.add_argument("--steps", type=int, default=2000)
    t.add_argument("--dir", default="target/parity")
    c = sub.add_parser("compare")
    c.add_argument("--dir", default="target/parity")
    c.add_argument("--every", type=int, default=100)
    n = sub.add_parser("nanogpt")
    n.add_argument("--seed", type=int, default=1337)
    n.add_argument("--steps", type=int, default=2000)
    n.add_argument("--save", help="safetensors file for the final weights (retrograd names)")
    v = sub.add_parser("evalckpt")
    v.add_argument("--file", required=True)
    v.add_argument("--repeats", type=int, default=50)
    a = ap.parse_args()
    if getattr(a, "dir", None):
        os.makedirs(a.dir, exist_ok=True)
    {"export": cmd_export, "train": cmd_train, "compare": cmd_compare, "nanogpt": cmd_nanogpt, "evalckpt": cmd_evalckpt}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
