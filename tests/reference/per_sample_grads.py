"""Per-sample gradients computed by torch.func, for tests/per_sample_reference.rs.

    python3 tests/reference/per_sample_grads.py           # writes the fixtures
    python3 tests/reference/per_sample_grads.py --check   # recomputes, compares
                                                          # with the files

Made with torch 2.15.0+cu132 (run on the CPU, one thread) and safetensors
0.8.0 (Python 3.11); seed 0.

For three small models, the gradient of one example's loss with respect to
every parameter, for each example of a batch:
    torch.func.vmap(torch.func.grad(loss_of_one_example))(params, inputs, targets)
where loss_of_one_example runs the model through torch.func.functional_call
on the example with a batch axis of 1 added (x.unsqueeze(0)).

The models, each the Rust test's model layer for layer (parameter names are
the Rust modules' `Module::parameters()` names, which are PyTorch's):
  mlp    nn.Sequential(Linear(4, 8), Tanh, Linear(8, 3)); F.mse_loss against
         a [3] target; batch 6.
  cnn    the CNN of examples/support/mnist_cnn.rs without batch norm or dropout,
         tiny: per channel count in (2, 4) a 3x3 convolution (padding 1, with
         bias), ReLU, 2x2 max pooling; Flatten, Linear(4*2*2, 8), ReLU,
         Linear(8, 10); F.cross_entropy against one class; 8x8 one-channel
         inputs, batch 4.
  block  retrograd::nn::Block (GPT-2's pre-norm block): ln_1, causal
         self-attention with a fused [3E, E] in-projection (`attn.in_proj_weight`,
         `attn.in_proj_bias`, then `attn.out_proj`), residual, ln_2, the
         feed-forward network (`mlp.c_fc`, exact GELU, `mlp.c_proj`), residual;
         width 8, 2 heads, sequence 4, LayerNorm eps 1e-5. Loss: the output
         [4, 8] read as logits over an 8-token vocabulary, F.cross_entropy
         against 4 target tokens; batch 4. Every parameter is drawn at random
         (LayerNorm weights 1 + 0.2 N(0, 1)), so none sits at a default.

Writes tests/reference/per_sample/{mlp,cnn,block}_{f64,f32}.safetensors, each:
  <name>          the parameter, as the Rust model names it
  input           [batch, ...] the examples
  target          [batch, 3] f64/f32 (mlp), [batch] i64 (cnn), [batch, 4] i64 (block)
  grad.<name>     [batch, ...parameter shape] torch.func's per-sample gradient
The parameters and inputs are drawn once in float64; the f32 file holds them
rounded to float32 and gradients computed by torch in float32.
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.func import functional_call, grad, vmap

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "per_sample")


def mlp():
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))


def cnn():
    return nn.Sequential(
        nn.Conv2d(1, 2, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(2, 4, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 2 * 2, 8),
        nn.ReLU(),
        nn.Linear(8, 10),
    )


class Attention(nn.Module):
    """retrograd::nn::MultiheadAttention's self-attention, causal, written out."""

    def __init__(self, e, heads):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = nn.Parameter(torch.empty(3 * e, e))
        self.in_proj_bias = nn.Parameter(torch.empty(3 * e))
        self.out_proj = nn.Linear(e, e)

    def forward(self, x):
        b, t, e = x.shape
        h = self.heads
        qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
        q, k, v = (
            qkv.reshape(b, t, 3, h, e // h)[:, :, i].permute(0, 2, 1, 3) for i in range(3)
        )
        scores = q @ k.transpose(-2, -1) / (e // h) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = scores.softmax(-1) @ v
        return self.out_proj(y.permute(0, 2, 1, 3).reshape(b, t, e))


class FeedForward(nn.Module):
    def __init__(self, e):
        super().__init__()
        self.c_fc = nn.Linear(e, 4 * e)
        self.c_proj = nn.Linear(4 * e, e)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, e, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(e, eps=1e-5)
        self.attn = Attention(e, heads)
        self.ln_2 = nn.LayerNorm(e, eps=1e-5)
        self.mlp = FeedForward(e)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


def mse(out, target):
    return F.mse_loss(out, target)


def class_loss(out, target):
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), target.reshape(-1))


def cases(gen):
    """(name, model, input, target, loss), all float64, drawn from `gen`."""
    m = mlp().double()
    yield "mlp", m, torch.randn(6, 4, generator=gen), torch.randn(6, 3, generator=gen), mse

    c = cnn().double()
    x = torch.randn(4, 1, 8, 8, generator=gen)
    yield "cnn", c, x, torch.randint(0, 10, (4,), generator=gen), class_loss

    b = Block(8, 2).double()
    with torch.no_grad():
        for name, p in b.named_parameters():
            if name.startswith("ln_") and name.endswith("weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
    x = torch.randn(4, 4, 8, generator=gen)
    yield "block", b, x, torch.randint(0, 8, (4, 4), generator=gen), class_loss


def per_sample_grads(model, params, x, target, loss):
    def one(params, x, target):
        out = functional_call(model, params, (x.unsqueeze(0),))
        return loss(out, target.unsqueeze(0))

    return vmap(grad(one), in_dims=(None, 0, 0))(params, x, target)


def tensors():
    """The fixture files' contents, by file name."""
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    files = {}
    for name, model, x, target, loss in cases(gen):
        model.eval()
        # f64 first: the f32 model is the f64 one rounded (`to` converts in place).
        for dtype, tag in ((torch.float64, "f64"), (torch.float32, "f32")):
            m = model.to(dtype)
            params = {k: v.detach() for k, v in m.named_parameters()}
            xd = x.to(dtype)
            td = target.to(dtype) if target.is_floating_point() else target
            grads = per_sample_grads(m, params, xd, td, loss)
            out = {k: v.contiguous() for k, v in params.items()}
            out["input"] = xd.contiguous()
            out["target"] = td.contiguous()
            for k, g in grads.items():
                assert g.shape == (x.shape[0], *params[k].shape)
                out["grad." + k] = g.detach().contiguous()
            files[f"{name}_{tag}.safetensors"] = out
    return files


def metadata():
    from importlib.metadata import version

    return {"torch": torch.__version__, "safetensors": version("safetensors")}


def main():
    torch.set_num_threads(1)
    files = tensors()
    if "--check" in sys.argv[1:]:
        worst = 0.0
        for file, want in files.items():
            got = load_file(os.path.join(OUT, file))
            assert set(got) == set(want), file
            for k, v in want.items():
                assert got[k].dtype == v.dtype and got[k].shape == v.shape, (file, k)
                d = (got[k].double() - v.double()).abs().max().item()
                worst = max(worst, d)
        print(f"fixtures recomputed: largest difference {worst:.3e}")
        return
    os.makedirs(OUT, exist_ok=True)
    for file, out in files.items():
        save_file(out, os.path.join(OUT, file), metadata=metadata())
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in files)
    print(f"wrote {len(files)} files to {OUT}, {total} bytes in all")


if __name__ == "__main__":
    main()
