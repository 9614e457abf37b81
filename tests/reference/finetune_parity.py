"""Fine-tuning parity fixture for tests/hub_finetune_parity.rs, in the style
of bench/nanogpt_parity.py: all-MiniLM-L6-v2 as transformers'
BertForSequenceClassification (10 speakers), dropout off, a seeded head,
50 AdamW steps (lr 5e-5, weight decay 0.01 on matrices, 5 warm-up steps then
linear decay to 0 at step 50, clipping at 1) on fixed batches of 8 training
speeches cut at 64 tokens. Records the head's initial weights, the batches
(indices into retrograd::data::speakers' training list) and every step's loss.

    python3 tests/reference/finetune_parity.py [MODEL_DIR]
"""

import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoTokenizer, BertForSequenceClassification, get_linear_schedule_with_warmup

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../bench"))
from finetune_speakers import seeded_permutation, speaker_task, speeches  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2")
STEPS, BATCH, MAX_LENGTH = 50, 8, 64


def main():
    torch.manual_seed(0)
    speakers, train, _ = speaker_task(speeches(), 10, 0.2, 0)
    model = BertForSequenceClassification.from_pretrained(
        MODEL, num_labels=len(speakers), hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
    )
    model.train()
    tok = AutoTokenizer.from_pretrained(MODEL)
    head = {k: v.detach().clone() for k, v in model.classifier.state_dict().items()}
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        lr=5e-5, eps=1e-8,
    )
    sched = get_linear_schedule_with_warmup(opt, 5, STEPS)
    order = seeded_permutation(len(train), 1)[: STEPS * BATCH]
    losses = []
    for step in range(STEPS):
        items = [train[i] for i in order[step * BATCH:(step + 1) * BATCH]]
        enc = tok([t for t, _ in items], padding=True, truncation=True, max_length=MAX_LENGTH,
                  return_tensors="pt")
        out = model(**enc, labels=torch.tensor([l for _, l in items]))
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(float(out.loss))
    save_file(
        {
            "classifier.weight": head["weight"].contiguous(),
            "classifier.bias": head["bias"].contiguous(),
            "batches": torch.tensor(order, dtype=torch.long).reshape(STEPS, BATCH),
            "labels": torch.tensor([train[i][1] for i in order], dtype=torch.long).reshape(STEPS, BATCH),
            "losses": torch.tensor(losses, dtype=torch.float64),
        },
        os.path.join(ROOT, "tests/reference/finetune_parity.safetensors"),
    )
    print("losses:", " ".join(f"{l:.5f}" for l in losses[:5]), "...", f"{losses[-1]:.5f}")


if __name__ == "__main__":
    main()
