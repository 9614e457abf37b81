#!/usr/bin/env python3
"""Writes the models and inputs of the ONNX inference benchmark
(`bench/onnx_compare.sh`) into target/bench-onnx/:

- mnist_cnn.onnx: the CNN of train_mnist_cnn (two blocks of 3x3 conv 32/64,
  batch norm, ReLU, 2x2 max pool; linear 128, ReLU, dropout; linear 10),
  defined in PyTorch, eval mode, written by torch.onnx.export (batch norm
  folded into the convolutions, as the exporter does); inputs at batch 64.
- minilm.onnx: sentence-transformers/all-MiniLM-L6-v2 (a 6-layer BERT,
  22.7M parameters), loaded from its model folder with transformers'
  BertModel (eager attention), written by torch.onnx.export with inputs
  input_ids, attention_mask, token_type_ids and output last_hidden_state;
  inputs at batch 32, 128 tokens (a few sequences padded).
- resnet18.onnx and mobilenet_v3.onnx: torchvision's ResNet-18 and
  MobileNet v3 small with seeded weights and statistics, at batch 8 and
  32, 224x224.
- bert_base.onnx: a seeded BERT-base-sized encoder (12 layers, width 768),
  inputs input_ids and attention_mask at batch 8 x 128 (a quarter padded).

    python3 bench/onnx_models.py [--minilm DIR] [--only NAME,...]   # DIR: the model folder

Each NAME.onnx gets NAME.inputs.safetensors (the inputs by name) beside it.
"""
import argparse
import json
import os
import struct
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "target", "bench-onnx")
DT = {np.dtype("float32"): "F32", np.dtype("int64"): "I64"}


def save(path, tensors):
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


def mnist_cnn():
    torch.manual_seed(0)
    m = nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10)).eval()
    x = torch.randn(64, 1, 28, 28)
    path = os.path.join(OUT, "mnist_cnn.onnx")
    torch.onnx.export(m, (x,), path, dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    save(os.path.join(OUT, "mnist_cnn.inputs.safetensors"), {"image": x.numpy()})
    print(f"wrote {path}")


def minilm(folder):
    from transformers import BertModel

    m = BertModel.from_pretrained(folder, add_pooling_layer=False, attn_implementation="eager").eval()

    class Encoder(nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state

    g = torch.Generator().manual_seed(0)
    b, t = 32, 128
    ids = torch.randint(1000, 30000, (b, t), generator=g)
    ids[:, 0] = 101  # [CLS]
    mask = torch.ones(b, t, dtype=torch.int64)
    for i in range(0, b, 4):  # a quarter of the sequences padded
        mask[i, t - 16 * (1 + i % 3):] = 0
    types = torch.zeros(b, t, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    path = os.path.join(OUT, "minilm.onnx")
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    torch.onnx.export(Encoder(m).eval(), (ids, mask, types), path, dynamo=False, opset_version=17,
                      input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes)
    save(os.path.join(OUT, "minilm.inputs.safetensors"),
         {"input_ids": ids.numpy(), "attention_mask": mask.numpy(), "token_type_ids": types.numpy()})
    print(f"wrote {path}")


def vision(name, builder, batch):
    """A torchvision classifier with seeded weights (no download), its
    normalisation statistics seeded too (see onnx_model_zoo.py), at 224x224."""
    import sys

    import torchvision

    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    from onnx_model_zoo import seeded_statistics

    torch.manual_seed(0)
    m = getattr(torchvision.models, builder)(weights=None).eval()
    seeded_statistics(m)
    x = torch.randn(batch, 3, 224, 224)
    path = os.path.join(OUT, f"{name}.onnx")
    torch.onnx.export(m, (x,), path, dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    save(os.path.join(OUT, f"{name}.inputs.safetensors"), {"image": x.numpy()})
    print(f"wrote {path}")


def bert_base():
    """A BERT-base-sized encoder (12 layers, width 768, 12 heads), seeded,
    at batch 8 x 128 with a quarter of the rows padded."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    m = BertModel(BertConfig(attn_implementation="eager"), add_pooling_layer=False).eval()

    class Encoder(nn.Module):
        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask):
            return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    g = torch.Generator().manual_seed(0)
    b, t = 8, 128
    ids = torch.randint(1000, 30000, (b, t), generator=g)
    mask = torch.ones(b, t, dtype=torch.int64)
    mask[::4, t - 32:] = 0
    names = ["input_ids", "attention_mask"]
    path = os.path.join(OUT, "bert_base.onnx")
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["last_hidden_state"] = {0: "batch", 1: "sequence"}
    torch.onnx.export(Encoder(m).eval(), (ids, mask), path, dynamo=False, opset_version=17,
                      input_names=names, output_names=["last_hidden_state"], dynamic_axes=axes)
    save(os.path.join(OUT, "bert_base.inputs.safetensors"), {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    print(f"wrote {path}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--minilm", default=os.path.join(ROOT, ".cache", "models", "all-MiniLM-L6-v2"))
    ap.add_argument("--only", help="comma-separated: mnist_cnn, minilm, resnet18, mobilenet_v3, bert_base")
    args = ap.parse_args()
    only = set(args.only.split(",")) if args.only else None
    os.makedirs(OUT, exist_ok=True)
    want = lambda name: only is None or name in only  # noqa: E731
    if want("resnet18"):
        vision("resnet18", "resnet18", 8)
    if want("mobilenet_v3"):
        vision("mobilenet_v3", "mobilenet_v3_small", 32)
    if want("bert_base"):
        bert_base()
    if want("mnist_cnn"):
        mnist_cnn()
    if not want("minilm"):
        pass
    elif os.path.exists(os.path.join(args.minilm, "model.safetensors")):
        minilm(args.minilm)
    else:
        print(f"skipped MiniLM: no model folder at {args.minilm} (scripts/fetch_minilm.sh fetches it)")
