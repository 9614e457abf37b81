#!/usr/bin/env python3
"""Writes the ONNX import fixtures of tests/onnx_import.rs: small models
defined in PyTorch and written by torch.onnx.export, with their inputs and
PyTorch's outputs, and a few fine-tuning steps' losses and parameters.

    python3 tests/reference/onnx_reference.py      # into tests/reference/onnx/

Every model is seeded; the files are committed (about 300 KB), so the Rust
tests need no Python. Per model NAME:

- NAME.onnx: the export (legacy TorchScript exporter at opset 17 with a free
  batch axis, unless the name says `dynamo`: the torch.export-based exporter
  at its default opset).
- NAME.io.safetensors: `caseK.<input name>` and `caseK.<output name>` for
  K = 0, 1 (two batch sizes), PyTorch's float32 outputs.
- NAME.finetune.safetensors (mlp, cnn_bn): the inputs and integer targets of
  the steps (`step.input`, `step.target`), `losses` (one per step, before
  each update) and `final.<initializer name>`: every parameter after the
  steps (Adam for the MLP, SGD with momentum for the CNN in eval mode).
"""
import json
import math
import os
import struct
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx")
DT = {np.dtype("float32"): "F32", np.dtype("float64"): "F64", np.dtype("int64"): "I64", np.dtype("bool"): "BOOL"}


def save(path, tensors):
    """A safetensors file (sorted keys, as the safetensors package writes)."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        arr = np.ascontiguousarray(tensors[name])
        data = arr.tobytes()
        header[name] = {"dtype": DT[arr.dtype], "shape": list(arr.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def export(name, model, args, input_names, output_names, dynamo=False, fold=True):
    path = os.path.join(OUT, f"{name}.onnx")
    if dynamo:
        batch = torch.export.Dim("batch", min=1, max=64)
        shapes = tuple({0: batch} for _ in args)
        torch.onnx.export(model, args, path, dynamo=True, input_names=input_names,
                          output_names=output_names, dynamic_shapes=shapes, verbose=False)
    else:
        axes = {n: {0: "batch"} for n in input_names + output_names}
        torch.onnx.export(model, args, path, dynamo=False, opset_version=17, input_names=input_names,
                          output_names=output_names, dynamic_axes=axes, do_constant_folding=fold)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def write_io(name, model, cases, input_names, output_names):
    tensors = {}
    with torch.no_grad():
        for k, args in enumerate(cases):
            outs = model(*args)
            outs = outs if isinstance(outs, tuple) else (outs,)
            for n, a in zip(input_names, args):
                tensors[f"case{k}.{n}"] = a.numpy()
            for n, o in zip(output_names, outs):
                tensors[f"case{k}.{n}"] = o.float().numpy()
    save(os.path.join(OUT, f"{name}.io.safetensors"), tensors)


def finetune(name, model, opt, x, target, steps=3):
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), target)
        losses.append(loss.item())
        loss.backward()
        opt.step()
    tensors = {"step.input": x.numpy(), "step.target": target.numpy(), "losses": np.array(losses, np.float64)}
    for n, p in model.named_parameters():
        tensors[f"final.{n}"] = p.detach().numpy()
    save(os.path.join(OUT, f"{name}.finetune.safetensors"), tensors)
    print(f"{name}: fine-tuning losses {losses}")


def mlp():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10)).eval()
    cases = [(torch.randn(4, 64),), (torch.randn(7, 64),)]
    export("mlp", m, cases[0], ["x"], ["logits"])
    write_io("mlp", m, cases, ["x"], ["logits"])
    finetune("mlp", m, torch.optim.Adam(m.parameters(), lr=0.01), torch.randn(8, 64), torch.randint(0, 10, (8,)))


def cnn(fold):
    torch.manual_seed(1)
    m = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * 7 * 7, 16), nn.ReLU(), nn.Dropout(0.25), nn.Linear(16, 10))
    with torch.no_grad():  # running statistics that matter
        for bn in (m[1], m[5]):
            bn.running_mean.uniform_(-0.3, 0.3)
            bn.running_var.uniform_(0.5, 2.0)
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.2, 0.2)
    m.eval()
    name = "cnn" if fold else "cnn_bn"
    cases = [(torch.randn(2, 1, 28, 28),), (torch.randn(5, 1, 28, 28),)]
    export(name, m, cases[0], ["image"], ["logits"], fold=fold)
    write_io(name, m, cases, ["image"], ["logits"])
    if not fold:
        opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
        finetune(name, m, opt, torch.randn(6, 1, 28, 28), torch.randint(0, 10, (6,)))


class Block(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.h = h

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda z: z.view(b, t, self.h, c // self.h).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x))))


class Gpt(nn.Module):
    """nanoGPT's model, tiny: tied embeddings, causal attention, exact GELU."""

    def __init__(self, vocab=11, block=8, d=16, heads=2, layers=2):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(block, d)
        self.h = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def gpt():
    torch.manual_seed(2)
    m = Gpt().eval()
    cases = [(torch.randint(0, 11, (2, 8)),), (torch.randint(0, 11, (3, 8)),)]
    export("gpt", m, cases[0], ["tokens"], ["logits"])
    write_io("gpt", m, cases, ["tokens"], ["logits"])
    export("gpt_dynamo", m, cases[0], ["tokens"], ["logits"], dynamo=True)
    write_io("gpt_dynamo", m, cases, ["tokens"], ["logits"])


def bert():
    from transformers import BertConfig, BertModel

    torch.manual_seed(3)
    cfg = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=16, attn_implementation="eager")
    m = BertModel(cfg, add_pooling_layer=False).eval()

    class Encoder(nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    e = Encoder(m).eval()

    def case(b, t, seed):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(1, 50, (b, t), generator=g)
        mask = torch.ones(b, t, dtype=torch.int64)
        mask[0, t - 3:] = 0  # padding in the first sequence
        return ids, mask

    cases = [case(2, 10, 0), case(3, 10, 1)]
    export("bert", e, cases[0], ["input_ids", "attention_mask"], ["last_hidden_state"])
    write_io("bert", e, cases, ["input_ids", "attention_mask"], ["last_hidden_state"])


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    mlp()
    cnn(fold=True)
    cnn(fold=False)
    gpt()
    bert()
