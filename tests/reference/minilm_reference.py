"""Reference token ids and sentence embeddings of all-MiniLM-L6-v2 for
tests/hub_minilm.rs, from the Python libraries themselves.

    scripts/fetch_minilm.sh
    python3 tests/reference/minilm_reference.py [MODEL_DIR]

Writes tests/reference/minilm_tokens.json (the texts and their ids from
`tokenizers`, checked equal to `transformers`' tokenizer as
sentence-transformers calls it: truncated at max_seq_length = 256) and
tests/reference/minilm_embeddings.safetensors (f32 `batch1` [N, 384]:
`SentenceTransformer.encode` one text at a time; `batched` [N, 384]: encode
with batch_size=16, so sorted by length and padded per batch).
"""

import gzip
import json
import os
import sys

import numpy as np
import torch
from safetensors.numpy import save_file
from sentence_transformers import SentenceTransformer
from tokenizers import Tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2")
OUT = os.path.join(ROOT, "tests/reference")


def speeches():
    """The speeches of tiny Shakespeare, as retrograd::data::shakespeare::speeches splits them."""
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


def texts():
    handmade = [
        "",
        "a",
        "Hello, world!",
        "To be, or not to be: that is the question.",
        "What light through yonder window breaks?",
        "!!!???...;;;---",
        "\u2014 an em dash \u2014 and \u201ccurly quotes\u201d and \u2018single ones\u2019",
        "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate \u00c5ngstr\u00f6m Z\u00fcrich",
        "ESPA\u00d1A \u00bfD\u00f3nde est\u00e1? \u00a1Aqu\u00ed!",
        "Stra\u00dfe, \u00e6sir, \u0153uvre, \u00f8re",
        "I love it \U0001F642\U0001F44D\U0001F3FD and \U0001F1EB\U0001F1F7 flags \u2764\ufe0f",
        "\U0001F600\U0001F600\U0001F600",
        "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u6f22\u5b57",
        "\u4e2d\u6587\u53e5\u5b50 mixed with English",
        "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u03ba\u03cc\u03c3\u03bc\u03b5",
        "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 and \u05e9\u05dc\u05d5\u05dd",
        "tabs\tand\nnewlines\r\nand   many   spaces",
        "control\u0000chars\u0007here and a zero\u200bwidth space",
        "UPPER lower MiXeD CaSe",
        "numbers 3.14159 2,718 1e-9 0x1F -42 and 1,000,000",
        "e-mail someone@example.com or visit https://example.org/path?q=1&r=2",
        "don't won't can't shouldn't y'all o'clock",
        "hyphenated-words and snake_case and CamelCaseWords",
        "unaffable counterrevolutionaries antidisestablishmentarianism",
        "supercalifragilisticexpialidocious " * 3,
        "a " * 300,
        "Thou art " + "very " * 400 + "wise.",
        " ".join(["word%d" % i for i in range(200)]),
        "[CLS] [SEP] [PAD] [MASK] [UNK] are special tokens",
        "<s> </s> <pad> are not special here",
    ]
    all_speeches = speeches()
    # Speeches of every length: a fixed stride through the play, plus the
    # three longest (cut at 256 tokens).
    picked = [s for _, s in all_speeches[::97]][:70]
    longest = sorted((s for _, s in all_speeches), key=len, reverse=True)[:3]
    return handmade + picked + longest


def main():
    torch.manual_seed(0)
    items = texts()
    assert len(items) >= 100, len(items)
    model = SentenceTransformer(MODEL, device="cpu")
    model.eval()
    assert model.max_seq_length == 256
    tok = Tokenizer.from_file(os.path.join(MODEL, "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=model.max_seq_length)
    ids = [tok.encode(t).ids for t in items]
    # sentence-transformers tokenizes through transformers: the same ids.
    hf = model.tokenizer(items, truncation="longest_first", max_length=model.max_seq_length)["input_ids"]
    assert [list(x) for x in hf] == ids, "tokenizers and transformers disagree"
    assert any(len(x) == 256 for x in ids)
    with open(os.path.join(OUT, "minilm_tokens.json"), "w", encoding="utf-8") as f:
        json.dump({"max_seq_length": model.max_seq_length, "texts": items, "ids": ids}, f, ensure_ascii=False)
        f.write("\n")
    with torch.no_grad():
        batch1 = np.stack([model.encode([t], batch_size=1)[0] for t in items]).astype(np.float32)
        batched = model.encode(items, batch_size=16).astype(np.float32)
    print("max |batch1 - batched| in PyTorch itself:", float(np.abs(batch1 - batched).max()))
    save_file({"batch1": batch1, "batched": batched}, os.path.join(OUT, "minilm_embeddings.safetensors"))
    print(f"{len(items)} texts, {sum(map(len, ids))} tokens")


if __name__ == "__main__":
    main()
