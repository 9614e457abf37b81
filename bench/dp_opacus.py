#!/usr/bin/env python3
"""Opacus's DP-SGD on the same CNN and data as
`cargo run --release --example train_mnist_cnn -- --dp --epochs N`, for a
side-by-side comparison of accuracy, privacy and time.

    python3 bench/dp_opacus.py                    # 15 epochs, as the example
    python3 bench/dp_opacus.py --epochs 1
    python3 bench/dp_opacus.py --epochs 3 --threads 2 --accountant prv

Data: data/mnist_5k.csv.gz (784 pixel columns 0..=255, then the label),
split as retrograd::data::mnist::load_bundled_split(seed) splits it: the
5,000 indices shuffled by rand 0.9's Fisher-Yates (`SliceRandom::shuffle`)
on ChaCha8Rng::seed_from_u64(seed), reimplemented below bit for bit; the
first 1,000 of the shuffled order are the test set, the rest train, each in
that order. Pixels are divided by 255 and normalised with MNIST's mean
0.1307 and std 0.3081.

Model: train_mnist_cnn's CNN as --dp builds it (no batch norm):
conv3x3(32)-relu-maxpool2 -> conv3x3(64)-relu-maxpool2 -> linear(128)-relu
-> dropout(0.25) -> linear(10), PyTorch's default initialisation.

Training: Adam lr 0.002 (constant), batch 64, wrapped by
PrivacyEngine.make_private_with_epsilon(target_epsilon 3, target_delta
1e-5, max_grad_norm 1.0, epochs N): Poisson sampling, per-sample gradients
clipped to norm 1, summed, Gaussian noise. The accountant is RDP, as
retrograd's, unless --accountant says otherwise (Opacus's own default is
PRV). Opacus's sample rate is 1 / len(data loader) = 1/63 with 63 steps an
epoch; retrograd's is 64/4000 with 63 steps, so the noise multipliers
differ slightly.

Prints one line per epoch, then one JSON line: epochs, test_accuracy,
epsilon, noise_multiplier, sample_rate, steps, train_s (the training
loop, evaluation included), total_s (data, model and privacy set-up
included), threads, torch, opacus.
"""

import argparse
import gzip
import json
import os
import time

_START = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import opacus  # noqa: E402
from opacus import PrivacyEngine  # noqa: E402

# The same CNN as bench/func_torch.py's (this script's folder is on the path).
from func_torch import mnist_cnn  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CSV = os.path.join(ROOT, "data", "mnist_5k.csv.gz")
TEST_LEN = 1000
MEAN, STD = 0.1307, 0.3081

M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


def _rotl(x, n):
    return ((x << n) | (x >> (32 - n))) & M32


class ChaCha8:
    """rand_chacha 0.9's ChaCha8Rng from seed_from_u64 (rand_core's PCG32
    seed expansion), its u32 stream only."""

    def __init__(self, seed):
        state = seed & M64
        key = []
        for _ in range(8):
            state = (state * 6364136223846793005 + 11634580027462260723) & M64
            xorshifted = (((state >> 18) ^ state) >> 27) & M32
            rot = state >> 59
            key.append(((xorshifted >> rot) | (xorshifted << ((32 - rot) & 31))) & M32)
        self.key = key
        self.counter = 0
        self.buf = []
        self.pos = 0

    def _block(self):
        c = self.counter
        s = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574, *self.key,
             c & M32, c >> 32, 0, 0]
        x = list(s)
        for _ in range(4):  # 8 rounds: 4 double rounds
            for a, b, cc, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                                (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
                x[a] = (x[a] + x[b]) & M32
                x[d] = _rotl(x[d] ^ x[a], 16)
                x[cc] = (x[cc] + x[d]) & M32
                x[b] = _rotl(x[b] ^ x[cc], 12)
                x[a] = (x[a] + x[b]) & M32
                x[d] = _rotl(x[d] ^ x[a], 8)
                x[cc] = (x[cc] + x[d]) & M32
                x[b] = _rotl(x[b] ^ x[cc], 7)
        self.counter += 1
        return [(x[i] + s[i]) & M32 for i in range(16)]

    def next_u32(self):
        if self.pos == len(self.buf):
            self.buf = self._block()
            self.pos = 0
        w = self.buf[self.pos]
        self.pos += 1
        return w


def _random_below(rng, bound):
    """rand 0.9's `random_range(..bound)` for u32 (widening multiply, one
    extra draw when the low half is in the biased zone)."""
    x = rng.next_u32() * bound
    result, lo = x >> 32, x & M32
    if lo > ((-bound) & M32):
        new_hi = (rng.next_u32() * bound) >> 32
        if lo + new_hi > M32:
            result += 1
    return result


def shuffle(items, rng):
    """rand 0.9's `SliceRandom::shuffle` (its IncreasingUniform chooser:
    several indices drawn from one u32)."""
    if len(items) <= 1:
        return
    n, chunk, remaining = 0, 0, 1
    for i in range(len(items)):
        nxt = n + 1
        if remaining == 0:
            bound, m = nxt, nxt + 1
            while bound * m <= M32:
                bound *= m
                m += 1
            chunk = _random_below(rng, bound)
            remaining = m - nxt
        remaining -= 1
        if remaining == 0:
            index = chunk
        else:
            index = chunk % nxt
            chunk //= nxt
        n = nxt
        items[i], items[index] = items[index], items[i]


def load_split(seed):
    """(train_x, train_y, test_x, test_y) as load_bundled_split(seed) and
    Dataset::normalized give them: f32 images [n, 1, 28, 28], i64 labels."""
    with gzip.open(CSV, "rt") as f:
        rows = np.loadtxt(f, delimiter=",", dtype=np.int64)
    pixels = (rows[:, :784].astype(np.float64) / 255.0 - MEAN) / STD
    images = pixels.astype(np.float32).reshape(-1, 1, 28, 28)
    labels = rows[:, 784]
    order = list(range(len(rows)))
    shuffle(order, ChaCha8(seed))
    test, train = order[:TEST_LEN], order[TEST_LEN:]
    as_t = torch.from_numpy
    return (as_t(images[train]), as_t(labels[train]), as_t(images[test]), as_t(labels[test]))


@torch.no_grad()
def accuracy(model, x, y, batch=500):
    model.eval()
    right = sum(int((model(x[i:i + batch]).argmax(1) == y[i:i + batch]).sum())
                for i in range(0, len(x), batch))
    return right / len(x)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--epsilon", type=float, default=3.0)
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--dropout", type=float, default=0.25,
                        help="dropout before the last layer (train_mnist_cnn's default)")
    parser.add_argument("--seed", type=int, default=0, help="the split's and the weights' seed")
    parser.add_argument("--accountant", default="rdp", choices=["rdp", "prv", "gdp"])
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    train_x, train_y, test_x, test_y = load_split(args.seed)
    model = mnist_cnn(dropout=args.dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = DataLoader(TensorDataset(train_x, train_y), batch_size=args.batch_size)
    engine = PrivacyEngine(accountant=args.accountant)
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model,
        optimizer=optimizer,
        data_loader=loader,
        target_epsilon=args.epsilon,
        target_delta=args.delta,
        epochs=args.epochs,
        max_grad_norm=args.max_grad_norm,
    )
    sigma = optimizer.noise_multiplier
    sample_rate = 1 / len(loader)
    print(f"mnist: {len(train_x)} train / {len(test_x)} test images; Opacus {opacus.__version__}, "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print(f"privacy: DP-SGD to epsilon {args.epsilon} (delta {args.delta}, {args.accountant}): "
          f"noise multiplier {sigma:.4f}, clipping norm {args.max_grad_norm}, Poisson sampling at "
          f"rate {sample_rate:.5f}, {args.epochs * len(loader)} steps\n")

    start = time.perf_counter()
    test_accuracy = 0.0
    steps = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            steps += 1
        test_accuracy = accuracy(model, test_x, test_y)
        print(f"epoch {epoch:>3} | test accuracy {test_accuracy:.4f} | "
              f"epsilon {engine.get_epsilon(args.delta):.3f} | {time.perf_counter() - start:.1f} s",
              flush=True)
    train_s = time.perf_counter() - start
    print(json.dumps({
        "framework": "opacus",
        "workload": "dp_mnist_cnn",
        "epochs": args.epochs,
        "test_accuracy": test_accuracy,
        "epsilon": round(engine.get_epsilon(args.delta), 4),
        "delta": args.delta,
        "accountant": args.accountant,
        "noise_multiplier": round(sigma, 4),
        "sample_rate": round(sample_rate, 6),
        "steps": steps,
        "train_s": round(train_s, 2),
        "total_s": round(time.perf_counter() - _START, 2),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "opacus": opacus.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
