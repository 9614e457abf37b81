"""Reference values for the convolution tests, computed with PyTorch.

Run:  python3 tests/reference/conv_reference.py          # rewrites conv_cases.rs
      python3 tests/reference/conv_reference.py --check  # exit 1 if it would change
(used: torch 2.15.0 from PyPI, on the CPU, one thread). It writes
tests/reference/conv_cases.rs beside this script (formatted with rustfmt
when rustfmt is on the PATH): a `CASES` table of `ConvCase`s.

Every case is one call of torch.nn.functional.conv1d / conv2d /
conv_transpose2d in float64 on inputs built from formulas over the flat
(row-major) index i, so a test rebuilds them without a random generator:

    x[i]      = sin(0.37 i + 0.1) * 2        (input)
    weight[i] = cos(0.23 i + 0.3) * 0.5
    bias[i]   = 0.1 i - 0.2
    w[i]      = cos(0.11 i)                  (output weights of the loss)

The values are computed with Python's `math` (the C library's sin and cos,
which Rust's f64::sin and f64::cos also call), so they are the same bits
as the Rust functions `input_value` etc. in the generated file. The table
holds the output and the gradients of loss = sum(out * w) with respect to
the input, the weight and the bias (that is, backward with grad_output = w).
Floats are printed with Python's repr: the shortest decimal that reads back
as the same f64.
"""
import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
# "same" padding with an even kernel: PyTorch notes that it pads a copy.
warnings.filterwarnings("ignore", message="Using padding='same'")
torch.set_default_dtype(torch.float64)

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "conv_cases.rs")


def input_value(i):
    return math.sin(0.37 * i + 0.1) * 2.0


def weight_value(i):
    return math.cos(0.23 * i + 0.3) * 0.5


def bias_value(i):
    return 0.1 * i - 0.2


def out_weight(i):
    return math.cos(0.11 * i)


def build(shape, f):
    n = math.prod(shape)
    return torch.tensor([f(i) for i in range(n)], dtype=torch.float64).reshape(shape)


# (name, op, input shape, weight shape, stride, padding, output_padding,
#  dilation, groups, has_bias). Padding: a list (per dimension), "same" or
# "valid". conv weights are [C_out, C_in / groups, k...]; conv_transpose2d
# weights are [C_in, C_out / groups, kH, kW].
CASES = [
    # ---- conv1d
    ("conv1d_stride2_pad1_dil2_groups2", "conv1d", [2, 4, 7], [4, 2, 3], [2], [1], [0], [2], 2, True),
    ("conv1d_same_even_kernel", "conv1d", [2, 3, 7], [2, 3, 4], [1], "same", [0], [1], 1, True),
    ("conv1d_same_dilated_no_bias", "conv1d", [2, 2, 6], [3, 2, 3], [1], "same", [0], [2], 1, False),
    ("conv1d_valid_stride2", "conv1d", [2, 3, 7], [4, 3, 3], [2], "valid", [0], [1], 1, True),
    ("conv1d_depthwise", "conv1d", [2, 3, 7], [6, 1, 3], [1], [1], [0], [1], 3, True),
    # ---- conv2d
    ("conv2d_pad1", "conv2d", [2, 3, 5, 6], [4, 3, 3, 3], [1, 1], [1, 1], [0, 0], [1, 1], 1, True),
    ("conv2d_stride21_pad12_dil21", "conv2d", [2, 3, 7, 6], [2, 3, 3, 2], [2, 1], [1, 2], [0, 0], [2, 1], 1, True),
    ("conv2d_groups2", "conv2d", [2, 4, 6, 5], [4, 2, 3, 3], [1, 1], [0, 1], [0, 0], [1, 1], 2, True),
    ("conv2d_depthwise_multiplier2_stride2", "conv2d", [2, 3, 6, 6], [6, 1, 3, 3], [2, 2], [1, 1], [0, 0], [1, 1], 3, True),
    ("conv2d_depthwise_no_bias", "conv2d", [2, 4, 5, 5], [4, 1, 3, 3], [1, 1], [1, 1], [0, 0], [1, 1], 4, False),
    ("conv2d_no_bias", "conv2d", [2, 2, 5, 5], [3, 2, 2, 2], [1, 1], [0, 0], [0, 0], [1, 1], 1, False),
    ("conv2d_same_even_kernel_dil12", "conv2d", [2, 2, 6, 7], [3, 2, 2, 4], [1, 1], "same", [0, 0], [1, 2], 1, True),
    ("conv2d_valid_stride2", "conv2d", [2, 3, 7, 7], [2, 3, 3, 3], [2, 2], "valid", [0, 0], [1, 1], 1, True),
    ("conv2d_1x1_stride2", "conv2d", [2, 4, 5, 4], [2, 4, 1, 1], [2, 2], [0, 0], [0, 0], [1, 1], 1, True),
    ("conv2d_kernel_fills_padded_input", "conv2d", [2, 1, 3, 3], [2, 1, 5, 5], [1, 1], [1, 1], [0, 0], [1, 1], 1, True),
    # ---- conv_transpose2d
    ("conv_transpose2d_plain", "conv_transpose2d", [2, 3, 4, 4], [3, 2, 3, 3], [1, 1], [0, 0], [0, 0], [1, 1], 1, True),
    ("conv_transpose2d_s2_p1_op1_d2_g2", "conv_transpose2d", [2, 4, 3, 4], [4, 2, 3, 3], [2, 2], [1, 1], [1, 1], [2, 2], 2, True),
    ("conv_transpose2d_stride21_asymmetric_no_bias", "conv_transpose2d", [2, 2, 4, 3], [2, 3, 2, 3], [2, 1], [0, 1], [1, 0], [1, 2], 1, False),
    ("conv_transpose2d_depthwise_stride2", "conv_transpose2d", [2, 3, 3, 3], [3, 1, 3, 3], [2, 2], [1, 1], [0, 0], [1, 1], 3, True),
]


def run(case):
    name, op, xs, ws, stride, padding, output_padding, dilation, groups, has_bias = case
    x = build(xs, input_value).requires_grad_()
    weight = build(ws, weight_value).requires_grad_()
    if op == "conv_transpose2d":
        c_out = ws[1] * groups
    else:
        c_out = ws[0]
    bias = build([c_out], bias_value).requires_grad_() if has_bias else None
    pad = padding if isinstance(padding, str) else tuple(padding)
    if op == "conv1d":
        out = F.conv1d(x, weight, bias, stride=tuple(stride), padding=pad,
                       dilation=tuple(dilation), groups=groups)
    elif op == "conv2d":
        out = F.conv2d(x, weight, bias, stride=tuple(stride), padding=pad,
                       dilation=tuple(dilation), groups=groups)
    elif op == "conv_transpose2d":
        out = F.conv_transpose2d(x, weight, bias, stride=tuple(stride), padding=pad,
                                 output_padding=tuple(output_padding), groups=groups,
                                 dilation=tuple(dilation))
    else:
        raise ValueError(op)
    w = build(list(out.shape), out_weight)
    loss = (out * w).sum()
    inputs = [x, weight] + ([bias] if has_bias else [])
    grads = torch.autograd.grad(loss, inputs)
    gb = grads[2].tolist() if has_bias else []
    return list(out.shape), out.detach().flatten().tolist(), grads[0].flatten().tolist(), \
        grads[1].flatten().tolist(), gb


def f64(v):
    r = repr(float(v))
    if r in ("nan", "inf", "-inf"):
        raise ValueError(f"non-finite reference value {r}")
    return r if ("." in r or "e" in r) else r + ".0"


def usizes(v):
    return "&[" + ", ".join(str(int(d)) for d in v) + "]"


def floats(v):
    """A slice literal, several values a line (the table is rustfmt::skip)."""
    if not v:
        return "&[]"
    lines, line = [], ""
    for x in v:
        item = f64(x) + ","
        if line and len(line) + 1 + len(item) > 88:
            lines.append(line)
            line = item
        else:
            line = f"{line} {item}" if line else item
    lines.append(line)
    return "&[\n" + "".join(f"            {l}\n" for l in lines) + "        ]"


HEADER = '''//! Convolution reference values from PyTorch (float64): generated by
//! `tests/reference/conv_reference.py` (torch {version}); do not edit, rerun
//! the script (`--check` says whether this file is current).
//!
//! Each case is one call of `torch.nn.functional.{{conv1d, conv2d,
//! conv_transpose2d}}` on inputs built from the flat (row-major) index by
//! [`input_value`], [`weight_value`] and [`bias_value`], and records the
//! output and the gradients of `sum(out * w)`, `w` built by [`out_weight`]
//! over the output's flat index (backward with `grad_output = w`).
//! Shapes are PyTorch's: input `[N, C_in, L]` or `[N, C_in, H, W]`; conv
//! weights `[C_out, C_in / groups, k...]`, transposed-conv weights
//! `[C_in, C_out / groups, kH, kW]`; bias `[C_out]`.

#![allow(dead_code)]

/// How a case pads: per spatial dimension, or PyTorch's strings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CasePadding {{
    /// The same padding before and after, one number per spatial dimension.
    Explicit(&'static [usize]),
    /// `padding="same"` (stride 1; an odd total puts the extra one after).
    Same,
    /// `padding="valid"`: no padding.
    Valid,
}}

/// One reference call and what PyTorch computed.
#[derive(Clone, Copy, Debug)]
pub struct ConvCase {{
    /// A unique name (says what the case exercises).
    pub name: &'static str,
    /// `"conv1d"`, `"conv2d"` or `"conv_transpose2d"`.
    pub op: &'static str,
    pub input_shape: &'static [usize],
    pub weight_shape: &'static [usize],
    /// One per spatial dimension (as are `output_padding` and `dilation`).
    pub stride: &'static [usize],
    pub padding: CasePadding,
    /// All zeros except for `conv_transpose2d`.
    pub output_padding: &'static [usize],
    pub dilation: &'static [usize],
    pub groups: usize,
    /// Whether a bias of `[C_out]` (values [`bias_value`]) is passed.
    pub has_bias: bool,
    pub out_shape: &'static [usize],
    /// The output, row-major.
    pub out: &'static [f64],
    /// Gradients of `sum(out * w)`, row-major, shaped like their tensors.
    pub grad_input: &'static [f64],
    pub grad_weight: &'static [f64],
    /// Empty when `has_bias` is false.
    pub grad_bias: &'static [f64],
}}

/// Input element `i` (flat index): `sin(0.37 i + 0.1) * 2`.
pub fn input_value(i: usize) -> f64 {{
    (0.37 * i as f64 + 0.1).sin() * 2.0
}}

/// Weight element `i`: `cos(0.23 i + 0.3) * 0.5`.
pub fn weight_value(i: usize) -> f64 {{
    (0.23 * i as f64 + 0.3).cos() * 0.5
}}

/// Bias element `i`: `0.1 i - 0.2`.
pub fn bias_value(i: usize) -> f64 {{
    0.1 * i as f64 - 0.2
}}

/// Element `i` of the loss weights `w` (the output's gradient): `cos(0.11 i)`.
pub fn out_weight(i: usize) -> f64 {{
    (0.11 * i as f64).cos()
}}

/// `n` values of `f` over the flat indices `0..n`.
pub fn values(n: usize, f: fn(usize) -> f64) -> Vec<f64> {{
    (0..n).map(f).collect()
}}

'''


def render():
    out = [HEADER.format(version=torch.__version__.split("+")[0])]
    out.append("/// Every reference case.\n#[rustfmt::skip]\npub const CASES: &[ConvCase] = &[\n")
    names = set()
    for case in CASES:
        name, op, xs, ws, stride, padding, output_padding, dilation, groups, has_bias = case
        assert name not in names, name
        names.add(name)
        dims = len(xs) - 2
        assert len(stride) == len(output_padding) == len(dilation) == dims, name
        assert all(p >= 0 for p in (padding if not isinstance(padding, str) else [])), name
        out_shape, o, gx, gw, gb = run(case)
        if isinstance(padding, str):
            pad = {"same": "CasePadding::Same", "valid": "CasePadding::Valid"}[padding]
        else:
            assert len(padding) == dims, name
            pad = f"CasePadding::Explicit({usizes(padding)})"
        out.append(
            "    ConvCase {\n"
            f"        name: \"{name}\",\n"
            f"        op: \"{op}\",\n"
            f"        input_shape: {usizes(xs)},\n"
            f"        weight_shape: {usizes(ws)},\n"
            f"        stride: {usizes(stride)},\n"
            f"        padding: {pad},\n"
            f"        output_padding: {usizes(output_padding)},\n"
            f"        dilation: {usizes(dilation)},\n"
            f"        groups: {groups},\n"
            f"        has_bias: {'true' if has_bias else 'false'},\n"
            f"        out_shape: {usizes(out_shape)},\n"
            f"        out: {floats(o)},\n"
            f"        grad_input: {floats(gx)},\n"
            f"        grad_weight: {floats(gw)},\n"
            f"        grad_bias: {floats(gb)},\n"
            "    },\n")
    out.append("];\n")
    return "".join(out)


def rustfmt(path):
    exe = shutil.which("rustfmt")
    if exe is None:
        print("rustfmt not found: the file is left unformatted", file=sys.stderr)
        return
    config = os.path.join(HERE, "..", "..", "rustfmt.toml")
    subprocess.run([exe, "--edition", "2024", "--config-path", config, path], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the committed file instead of writing")
    a = ap.parse_args()
    text = render()
    if a.check:
        with tempfile.TemporaryDirectory() as d:
            tmp = os.path.join(d, "conv_cases.rs")
            with open(tmp, "w") as f:
                f.write(text)
            rustfmt(tmp)
            with open(tmp) as f:
                new = f.read()
        with open(OUT) as f:
            same = f.read() == new
        print("conv_cases.rs is current" if same else "conv_cases.rs differs from a fresh run")
        sys.exit(0 if same else 1)
    with open(OUT, "w") as f:
        f.write(text)
    rustfmt(OUT)
    print(f"wrote {OUT}: {len(CASES)} cases")


if __name__ == "__main__":
    main()
