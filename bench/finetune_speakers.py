"""examples/finetune_speakers.rs's recipe in PyTorch with transformers: the
same speakers, the same seeded split and batch order (SplitMix64 and
Fisher-Yates, as retrograd::data::speakers), BertForSequenceClassification
on all-MiniLM-L6-v2, AdamW with linear warm-up and decay, clipping at 1.

    python3 bench/finetune_speakers.py [--epochs 4] [--model DIR]

Prints the same per-epoch table and the final test accuracy.
"""

import argparse
import collections
import gzip
import os
import time

import torch
from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
M64 = (1 << 64) - 1


def speeches():
    text = gzip.open(os.path.join(ROOT, "data/tinyshakespeare.txt.gz"), "rt", encoding="utf-8").read()
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if "\n" not in block:
            continue
        heading, lines = block.split("\n", 1)
        lines = lines.strip("\n")
        if heading.endswith(":") and lines:
            out.append((heading[:-1], lines))
    return out


def seeded_permutation(n, seed):
    state = seed & M64
    order = list(range(n))
    for i in range(n - 1, 0, -1):
        state = (state + 0x9E3779B97F4A7C15) & M64
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        j = z % (i + 1)
        order[i], order[j] = order[j], order[i]
    return order


def speaker_task(all_speeches, n, test_fraction, seed):
    counts = collections.Counter(s for s, _ in all_speeches)
    speakers = [s for s, _ in sorted(counts.items(), key=lambda x: (-x[1], x[0]))[:n]]
    train, test = [], []
    for label, speaker in enumerate(speakers):
        own = [t for s, t in all_speeches if s == speaker]
        n_test = int(round(len(own) * test_fraction))
        # Python's round is half-to-even, Rust's half away from zero: no
        # count here lands on .5 with fraction 0.2 (checked below).
        assert (len(own) * test_fraction) % 1 != 0.5
        for k, i in enumerate(seeded_permutation(len(own), seed + label)):
            (test if k < n_test else train).append((own[i], label))
    return speakers, train, test


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", default=os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2"))
    p.add_argument("--speakers", type=int, default=10)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--warmup", type=float, default=0.1)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--max-length", type=int, default=128)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--train-limit", type=int, default=None,
                   help="train on this many training speeches only (the Rust example's choice)")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    start = time.time()
    speakers, train, test = speaker_task(speeches(), a.speakers, 0.2, a.seed)
    if a.train_limit is not None:
        order = seeded_permutation(len(train), a.seed ^ 0x11)
        train = [train[i] for i in order[:a.train_limit]]
    print(f"speakers: {', '.join(speakers)} ({len(train)} train / {len(test)} test)")
    torch.manual_seed(a.seed)
    model = BertForSequenceClassification.from_pretrained(a.model, num_labels=len(speakers))
    tok = AutoTokenizer.from_pretrained(a.model)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
        lr=a.lr, eps=1e-8,
    )
    steps_per_epoch = -(-len(train) // a.batch_size)
    total = steps_per_epoch * a.epochs
    warmup = int(round(total * a.warmup))
    sched = get_linear_schedule_with_warmup(opt, warmup, total)

    def encode(items):
        return tok([t for t, _ in items], padding=True, truncation=True, max_length=a.max_length,
                   return_tensors="pt")

    def evaluate():
        model.eval()
        correct = 0
        with torch.no_grad():
            for i in range(0, len(test), 64):
                chunk = test[i:i + 64]
                logits = model(**encode(chunk)).logits
                correct += int((logits.argmax(-1) == torch.tensor([l for _, l in chunk])).sum())
        model.train()
        return correct / len(test)

    print(f"before fine-tuning: test accuracy {100 * evaluate():.2f}%")
    print("epoch | train loss | train acc | test acc |        lr | elapsed")
    model.train()
    acc = 0.0
    for epoch in range(a.epochs):
        order = seeded_permutation(len(train), (a.seed * 1000 + epoch + 1) & M64)
        loss_sum, correct = 0.0, 0
        for s in range(0, len(order), a.batch_size):
            items = [train[i] for i in order[s:s + a.batch_size]]
            labels = torch.tensor([l for _, l in items])
            out = model(**encode(items), labels=labels)
            out.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            loss_sum += out.loss.item() * len(items)
            correct += int((out.logits.argmax(-1) == labels).sum())
        acc = evaluate()
        print(f"{epoch + 1:>5} | {loss_sum / len(train):>10.4f} | {100 * correct / len(train):>8.2f}% | "
              f"{100 * acc:>7.2f}% | {sched.get_last_lr()[0]:>9.2e} | {time.time() - start:>6.1f}s")
    print(f"final test accuracy: {100 * acc:.2f}% ({round(acc * len(test))} of {len(test)})")


if __name__ == "__main__":
    main()
