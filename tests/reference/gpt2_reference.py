"""A small random GPT-2 for tests/hub_gpt2.rs, made by transformers, and its
logits; a byte-level BPE tokenizer.json trained on tiny Shakespeare, and
the ids the Python tokenizers give for fixed texts.

    python3 tests/reference/gpt2_reference.py            # writes the fixtures
    python3 tests/reference/gpt2_reference.py --check DIR  # loads a folder retrograd
                                                          # saved; compares logits

Writes tests/reference/gpt2_tiny/ (config.json, model.safetensors as
GPT2LMHeadModel.save_pretrained writes them: Conv1D weights [in, out], no
lm_head, tied), tests/reference/gpt2_tiny_logits.safetensors (`tokens`
[2, 12] i64, `logits` [2, 12, 96] f32, in evaluation mode) and
tests/reference/bpe_tokens.json (texts, ids; tokenizer in
tests/reference/bpe_tokenizer.json).
"""

import gzip
import json
import os
import sys

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests/reference")
TOKENS = torch.tensor(
    [[5, 17, 3, 88, 42, 0, 95, 7, 7, 31, 64, 2], [90, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]],
    dtype=torch.long,
)


def make_model():
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=96, n_positions=32, n_embd=32, n_layer=2, n_head=4,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )
    model = GPT2LMHeadModel(config).eval()
    # Non-zero biases and layer-norm shifts, so a mapping that drops one fails.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.05 * torch.randn_like(p))
    folder = os.path.join(OUT, "gpt2_tiny")
    model.save_pretrained(folder, safe_serialization=True)
    for extra in ("generation_config.json",):
        path = os.path.join(folder, extra)
        if os.path.exists(path):
            os.remove(path)
    with torch.no_grad():
        logits = model(TOKENS).logits.float().contiguous()
    save_file({"tokens": TOKENS, "logits": logits}, os.path.join(OUT, "gpt2_tiny_logits.safetensors"))
    print("gpt2_tiny:", sum(p.numel() for p in model.parameters()), "parameters")


def make_bpe():
    text = gzip.open(os.path.join(ROOT, "data/tinyshakespeare.txt.gz"), "rt", encoding="utf-8").read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([text[:200_000]], trainer)
    tok.save(os.path.join(OUT, "bpe_tokenizer.json"))
    texts = [
        "To be, or not to be: that is the question.",
        "  leading spaces and trailing   ",
        "Caf\u00e9 na\u00efve \u00c5ngstr\u00f6m \U0001F642 \u65e5\u672c\u8a9e",
        "it's they're we'll I'd you've",
        "numbers 1234567 and 3.14",
        "<|endoftext|>a new document",
        "ROMEO:\nBut, soft! what light through yonder window breaks?",
        "",
    ]
    ids = [tok.encode(t).ids for t in texts]
    decoded = [tok.decode(i) for i in ids]
    with open(os.path.join(OUT, "bpe_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"texts": texts, "ids": ids, "decoded": decoded}, f, ensure_ascii=False)
        f.write("\n")


def check(folder):
    from safetensors.torch import load_file
    ref = load_file(os.path.join(OUT, "gpt2_tiny_logits.safetensors"))
    model = GPT2LMHeadModel.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = model(ref["tokens"]).logits
    worst = float((logits - ref["logits"]).abs().max())
    print(f"transformers loads {folder}: worst |logit difference| {worst:.3e}")
    assert worst <= 1e-5


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        make_model()
        make_bpe()
