#!/usr/bin/env python3
"""Models people export with torch.onnx.export, imported by retrograd and
compared with onnxruntime.

Each model is built with seeded weights (nothing is downloaded), put in
eval mode, exported by both of torch's exporters (`dynamo=False`, the
TorchScript one, and `dynamo=True`, torch 2.x's default) with a free batch
axis (and a free sequence axis for the language models), then run in
onnxruntime and through retrograd's importer (`onnx run` of the onnx
example) on the same inputs at two batch sizes. A model passes when it
imports and every output agrees with onnxruntime's within
`atol + rtol * |onnxruntime|` (1e-4 each, numpy's allclose).

Models: the torchvision classification families that build without
downloaded weights (ResNet, MobileNet v2 and v3, EfficientNet, RegNet,
ConvNeXt, DenseNet, SqueezeNet, ShuffleNet, MNASNet, ViT, Swin) at their
smallest size, and small seeded transformers BERT, GPT-2 and Llama.

The exported files are written under --out (default target/onnx-zoo/,
never committed); the table of results goes to stdout and, with --write,
to tests/reference/onnx/zoo.md.

    python3 tests/reference/onnx_model_zoo.py [--bin PATH] [--only NAME,...]
        [--exporters torchscript,dynamo] [--write]

Needs torch, torchvision, transformers, onnx, onnxruntime, onnxscript
(pip). Without --bin the debug onnx example is built.
"""
import argparse
import contextlib
import io
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-4


def vision(name, builder, size=64, **kw):
    def make():
        import torchvision

        return getattr(torchvision.models, builder)(weights=None, **kw)

    return name, make, ("image", size)


def language(name, make):
    return name, make, ("tokens", None)


def bert():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, max_position_embeddings=64,
    )
    return BertModel(cfg)


def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=512, n_embd=64, n_layer=2, n_head=4, n_positions=64, bos_token_id=0, eos_token_id=0
    )
    return GPT2LMHeadModel(cfg)


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
    )
    return LlamaForCausalLM(cfg)


MODELS = [
    vision("resnet18", "resnet18"),
    vision("mobilenet_v2", "mobilenet_v2"),
    vision("mobilenet_v3_small", "mobilenet_v3_small"),
    vision("efficientnet_b0", "efficientnet_b0"),
    vision("regnet_y_400mf", "regnet_y_400mf"),
    vision("convnext_tiny", "convnext_tiny"),
    vision("densenet121", "densenet121"),
    vision("squeezenet1_1", "squeezenet1_1"),
    vision("shufflenet_v2_x0_5", "shufflenet_v2_x0_5"),
    vision("mnasnet0_5", "mnasnet0_5"),
    vision("vit_b_16", "vit_b_16", size=224),
    vision("swin_t", "swin_t", size=224),
    language("bert", bert),
    language("gpt2", gpt2),
    language("llama", llama),
]


class Wrapped:
    """A transformers model as a module of plain tensors in and one out
    (`last_hidden_state` or `logits`), so both exporters see the same thing."""

    def __new__(cls, model):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, input_ids, attention_mask):
                out = self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False)
                return out[0]

        return M()


def inputs_for(kind, size, batch, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    if kind == "image":
        return {"image": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    seq = 7 + seed
    ids = rng.integers(0, 512, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), dtype=np.int64)
    mask[0, -2:] = 0  # one padded row: the mask must be honoured
    return {"input_ids": ids, "attention_mask": mask}


def seeded_statistics(model):
    """Gives every normalisation layer seeded statistics and affine terms
    of order one, and every all-zero weight matrix seeded values.
    torchvision zero-initialises some of them (the last norm of a residual
    branch, ViT's head) and fresh running statistics are 0 and 1, so
    several fresh models print outputs of 1e-9 (or exactly 0), which any
    runtime matches within 1e-4; with these, the outputs are of order one
    and the comparison means something."""
    import torch

    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        # A zero-initialised weight matrix (ViT's classifier head) would
        # make the output a constant.
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
        for m in model.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)
            if isinstance(m, (torch.nn.modules.batchnorm._BatchNorm, torch.nn.LayerNorm, torch.nn.GroupNorm)):
                if getattr(m, "weight", None) is not None:
                    m.weight.copy_(torch.rand(m.weight.shape, generator=g) + 0.5)
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)


def export(name, make, kind, size, exporter, out):
    import torch

    torch.manual_seed(0)
    model = make()
    model.eval()
    seeded_statistics(model)
    if kind == "tokens":
        model = Wrapped(model).eval()
    example = inputs_for(kind, size, 2, 0)
    args = tuple(torch.from_numpy(v) for v in example.values())
    names = list(example)
    path = out / f"{name}.{exporter}.onnx"
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        if exporter == "torchscript":
            axes = {n: {0: "batch"} for n in names}
            if kind == "tokens":
                axes = {n: {0: "batch", 1: "sequence"} for n in names}
            axes["output"] = {0: "batch"} if kind == "image" else {0: "batch", 1: "sequence"}
            torch.onnx.export(
                model, args, str(path), dynamo=False, input_names=names,
                output_names=["output"], dynamic_axes=axes, opset_version=17,
            )
        else:
            batch = torch.export.Dim("batch", min=1, max=64)
            # By position: the keys would be forward's parameter names.
            shapes = tuple({0: batch} for _ in names)
            if kind == "tokens":
                seq = torch.export.Dim("sequence", min=2, max=60)
                shapes = tuple({0: batch, 1: seq} for _ in names)
            program = torch.onnx.export(
                model, args, dynamo=True, input_names=names, output_names=["output"],
                dynamic_shapes=shapes, external_data=False,
            )
            program.save(str(path), external_data=False)
    return path, names


def compare(binary, path, kind, size, work):
    import numpy as np
    import onnxruntime as ort
    from safetensors.numpy import load_file, save_file

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    worst, largest = 0.0, 0.0
    for batch, seed in ((2, 0), (3, 1)):
        # The exporters name the inputs their own way: fed in order.
        values = inputs_for(kind, size, batch, seed).values()
        feed = dict(zip([i.name for i in session.get_inputs()], values))
        want = session.run(None, feed)
        ins, outs = work / f"{path.stem}.in.safetensors", work / f"{path.stem}.out.safetensors"
        save_file(feed, str(ins))
        r = subprocess.run(
            [str(binary), "run", str(path), "--inputs", str(ins), "--out", str(outs)],
            capture_output=True, text=True,
        )
        if r.returncode != 0:
            return "error", (r.stderr.strip() or r.stdout.strip()).splitlines()[-1][:200]
        got = load_file(str(outs))
        names = [o.name for o in session.get_outputs()]
        for n, w in zip(names, want):
            g = got[n]
            if g.shape != w.shape:
                return "fail", f"{n}: shape {g.shape}, onnxruntime {w.shape}"
            diff = np.abs(g.astype(np.float64) - w.astype(np.float64))
            worst = max(worst, float(diff.max()))
            largest = max(largest, float(np.abs(w).max()))
            if not np.allclose(g, w, atol=TOL, rtol=TOL):
                return "fail", f"{n} at batch {batch}: max difference {diff.max():.3g} (largest magnitude {np.abs(w).max():.3g})"
    return "pass", f"max difference {worst:.2g} (largest magnitude {largest:.3g})"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", type=Path)
    ap.add_argument("--out", type=Path, default=ROOT / "target" / "onnx-zoo")
    ap.add_argument("--only", help="comma-separated model names")
    ap.add_argument("--exporters", default="torchscript,dynamo")
    ap.add_argument("--write", action="store_true", help="write tests/reference/onnx/zoo.md")
    a = ap.parse_args()
    binary = a.bin
    if binary is None:
        subprocess.run(["cargo", "build", "--quiet", "--example", "onnx"], cwd=ROOT, check=True)
        binary = ROOT / "target" / "debug" / "examples" / "onnx"
    a.out.mkdir(parents=True, exist_ok=True)
    only = set(a.only.split(",")) if a.only else None
    rows = []
    for name, make, (kind, size) in MODELS:
        if only and name not in only:
            continue
        for exporter in a.exporters.split(","):
            start = time.time()
            try:
                path, _ = export(name, make, kind, size, exporter, a.out)
            except Exception as e:  # the exporter's own failure: recorded, not ours
                rows.append((name, exporter, "export failed", str(e).splitlines()[0][:160]))
                print(f"{name:20} {exporter:11} export failed: {rows[-1][3]}", flush=True)
                continue
            status, detail = compare(binary, path, kind, size, a.out)
            rows.append((name, exporter, status, detail))
            print(f"{name:20} {exporter:11} {status:6} {detail} ({time.time() - start:.0f} s)", flush=True)
    exported = [r for r in rows if r[2] != "export failed"]
    passed = [r for r in exported if r[2] == "pass"]
    print(f"{len(passed)} of {len(exported)} exported models import and match onnxruntime within {TOL:g}")
    if a.write:
        import torch
        import torchvision

        lines = [
            "# Models exported by torch.onnx.export, imported",
            "",
            f"Written by `tests/reference/onnx_model_zoo.py` (torch {torch.__version__}, torchvision "
            f"{torchvision.__version__}): seeded weights, both exporters, free batch axis (and sequence "
            f"for the language models), outputs compared with onnxruntime's at two batch sizes within "
            f"{TOL:g} + {TOL:g}·|value|.",
            "",
            f"**{len(passed)} of {len(exported)}** exported models pass.",
            "",
            "| model | exporter | result | detail |",
            "|---|---|---|---|",
        ]
        lines += [f"| {n} | {e} | {s} | {d} |" for n, e, s, d in rows]
        (ROOT / "tests" / "reference" / "onnx" / "zoo.md").write_text("\n".join(lines) + "\n")
    return 0 if len(passed) == len(exported) else 1


if __name__ == "__main__":
    sys.exit(main())
