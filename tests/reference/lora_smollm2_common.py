"""What the LoRA reference scripts share: SmolLM2 loaded by transformers
from the GGUF dequantized to f32, the bundled tiny Shakespeare split into
speeches the way `retrograd::data::shakespeare::speeches` does, and the
(speech, next speaker's reply) chat pairs rendered with the model's own
chat template.
"""

import gzip
import os

import numpy as np
import torch

from smollm2_common import MODEL, ROOT  # noqa: F401

SHAKESPEARE = os.path.join(ROOT, "data/tinyshakespeare.txt.gz")


def load_model(path=MODEL):
    """(tokenizer, model): transformers' f32 dequantization of the GGUF,
    eager attention, as smollm2_f32_reference.py loads it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, name = os.path.split(os.path.abspath(path))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    model = AutoModelForCausalLM.from_pretrained(
        folder, gguf_file=name, dtype=torch.float32, attn_implementation="eager")
    model.config.use_cache = False
    return tok, model


def speeches(path=SHAKESPEARE):
    """[(speaker, text)]: blocks separated by blank lines, each a `NAME:`
    heading then the lines; blocks without lines are skipped (7,097 speeches
    in the bundled text, the same list as the Rust `speeches`)."""
    with gzip.open(path, "rb") as f:
        text = f.read().decode("utf-8")
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        if "\n" not in block:
            continue
        heading, lines = block.split("\n", 1)
        if not heading.endswith(":"):
            continue
        lines = lines.strip("\n")
        if lines:
            out.append((heading[:-1], lines))
    return out


def render_pair(tok, user, reply):
    """(ids, reply_start, reply_end): the conversation [user, assistant] in
    the model's chat template (its default system turn included,
    add_generation_prompt False) tokenized with add_special_tokens=False;
    ids[reply_start:reply_end] are the reply's content tokens and its closing
    <|im_end|> (the newline after it is not part of the reply). None where
    the prompt's ids are not a prefix of the whole conversation's."""
    msgs = [{"role": "user", "content": user}, {"role": "assistant", "content": reply}]
    full = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    prompt = tok.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True)
    ids = list(tok.encode(full, add_special_tokens=False))
    pids = list(tok.encode(prompt, add_special_tokens=False))
    if ids[:len(pids)] != pids:
        return None
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    end = len(ids)
    while end > len(pids) and ids[end - 1] != im_end:
        end -= 1
    return ids, len(pids), end


def pair_indices(n_speeches, seed=0):
    """Every pair start i (the pair is speech i as the user's turn, speech
    i + 1 as the assistant's) in the order of
    numpy.random.default_rng(seed).permutation(n_speeches - 1); the callers
    skip pairs whose two speakers are the same."""
    order = np.random.default_rng(seed).permutation(n_speeches - 1)
    return [int(i) for i in order]


def labelled(ids, start, end, length):
    """(input ids, labels) cut to `length`: labels are the ids on the reply
    [start, end) and -100 elsewhere."""
    ids = ids[:length]
    labels = [t if start <= k < end else -100 for k, t in enumerate(ids)]
    return ids, labels


def causal_lm_loss(logits, labels):
    """transformers' causal LM loss written out: logits [B, T, V], labels
    [B, T]; row t predicts token t + 1, mean over every labelled (not -100)
    target of the whole batch."""
    shift_logits = logits[:, :-1, :].reshape(-1, logits.shape[-1])
    shift_labels = labels[:, 1:].reshape(-1)
    return torch.nn.functional.cross_entropy(
        shift_logits.float(), shift_labels, ignore_index=-100, reduction="mean")
