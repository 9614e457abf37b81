"""SmolLM2-135M-Instruct's tokenizer on 100 fixed texts, by llama.cpp and by
transformers, both reading the Q4_1 GGUF; the GGUF's tokenizer settings and
chat template; three conversations rendered through the template.

    scripts/fetch_smollm2.sh                      # the model, once
    python3 tests/reference/smollm2_tokens.py     # writes the fixture
    python3 tests/reference/smollm2_tokens.py --model PATH.gguf

Made with llama-cpp-python 0.3.36 (built from source, CMAKE_ARGS=-DGGML_NATIVE=ON),
transformers 5.25.0, tokenizers 0.23.3, gguf 0.19.0, Python 3.11; the exact versions
are recorded in the fixture's "versions". Deterministic (no sampling).

Writes tests/reference/smollm2/tokens.json:
  versions      {python, llama_cpp, transformers, torch, gguf, tokenizers,
                 numpy, accelerate} (null where not installed)
  model         the GGUF's file name
  gguf          {tokenizer_model, tokenizer_pre, add_bos_token, add_eos_token,
                 add_space_prefix, bos_token_id, eos_token_id, unknown_token_id,
                 padding_token_id (null where absent), vocab_size, n_merges,
                 chat_template}
  special_tokens  [{id, text, type}] for every token whose GGUF token_type is
                 not NORMAL (1): CONTROL 3, USER_DEFINED 4, ...
  cases         [{text, llama_cpp: [id], transformers: [id], agree: bool,
                  llama_cpp_detok: str}]  (100 cases; llama.cpp with
                 add_bos=False, special=True; transformers with
                 add_special_tokens=False; llama_cpp_detok is llama.cpp's
                 detokenize of its ids, special tokens rendered)
  disagreements  [{index, text, llama_cpp, transformers}]
  chat_examples [{name, messages, rendered, transformers_ids, llama_cpp_ids,
                  agree}]  rendered by transformers' apply_chat_template(...,
                 tokenize=False, add_generation_prompt=True)
"""

import argparse
import json
import os
import platform
import sys

import numpy as np

import gguf

from smollm2_common import MODEL, OUT, ROOT, f32, versions  # noqa: E402,F401

CHAT_PROMPT = (
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
    "<|im_start|>assistant\n"
)

TEXTS = [
    # empty and single characters
    "",
    "a",
    " ",
    "\n",
    "\t",
    "0",
    "\u00e9",
    "\u4e2d",
    "\U0001F642",
    "<",
    "'",
    # plain English, contractions, case
    "Hello world",
    "Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure they'll say it's fine, but we've seen what you'd do.",
    "I'M SURE THEY'LL SAY IT'S FINE, DON'T YOU THINK?",
    "don't won't can't shouldn't y'all o'clock rock'n'roll",
    "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\n\r\n",
    "https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct?query=a+b&x=1#frag",
    "user@example.com, first.last+tag@sub.domain.org",
    "camelCaseIdentifier snake_case_name SCREAMING_CASE kebab-case-name",
    # code
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "const f = async (x) => { await fetch(`/api/${x}`); return x ?? null; };",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"hi\\n\");\n\treturn 0;\n}\n",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC LIMIT 10;",
    "{\"key\": [1, 2.5, -3e-7, true, null], \"nested\": {\"a\": \"b\"}}",
    "<div class=\"container\"><p>Hello &amp; welcome</p></div>",
    "$ git commit -m \"fix: off-by-one\" && cargo test --release -- --nocapture",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # squares",
    "    \n        \n\t\t\n",
    "if (a != b && c <= d || !e) { return -1; } else { x >>= 2; y <<= 3; }",
    "::std::collections::HashMap<String, Vec<Option<Box<dyn Fn()>>>>",
    "\\begin{equation} E = mc^2 \\end{equation} $\\alpha + \\beta_{i}$",
    # accented Latin and other Latin-script languages
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 fa\u00e7ade co\u00f6perate \u00c5ngstr\u00f6m",
    "Les \u00e9l\u00e8ves \u00e9tudient \u00e0 l'\u00e9cole o\u00f9 il fait tr\u00e8s froid en hiver.",
    "Stra\u00dfe, \u00fcber, M\u00e4dchen, \u00d6sterreich, Gr\u00fc\u00dfe aus K\u00f6ln!",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Ma\u00f1ana ser\u00e1 otro d\u00eda!",
    "S\u00e3o Paulo, cora\u00e7\u00e3o, informa\u00e7\u00f5es, av\u00f3",
    "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 nhi\u1ec1u d\u1ea5u thanh: \u0111\u01b0\u1eddng, ph\u1ed1, ng\u01b0\u1eddi",
    "\u0130stanbul \u0131\u015f\u0131k \u011f\u00fczel \u00e7ok \u015fey",
    "e\u0301 vs \u00e9 (combining acute vs precomposed)",
    "\u00c6\u00d8\u00c5 \u00e6\u00f8\u00e5 \u00de\u00f0 \u0153uvre \u0132 \u00ff",
    # other scripts
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3067\u3059\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3042\u308a\u307e\u3059\u3002",
    "\u6211\u7231\u5317\u4eac\u5929\u5b89\u95e8\uff0c\u5929\u5b89\u95e8\u4e0a\u592a\u9633\u5347\u3002",
    "\ud55c\uad6d\uc5b4 \ubb38\uc7a5\uc744 \ud1a0\ud070\ud654\ud569\ub2c8\ub2e4.",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645! \u0643\u064a\u0641 \u062d\u0627\u0644\u0643\u061f",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0661\u0662\u0663 \u0648 123",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430? \u0412\u0441\u0451 \u0445\u043e\u0440\u043e\u0448\u043e.",
    "\u039a\u03b1\u03bb\u03b7\u03bc\u03ad\u03c1\u03b1 \u03ba\u03cc\u03c3\u03bc\u03b5, \u03b1\u03b2\u03b3\u03b4 \u03a9",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e \u0939\u093f\u0928\u094d\u0926\u0940",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0e20\u0e32\u0e29\u0e32\u0e44\u0e17\u0e22",
    "English \u4e2d\u6587 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u0420\u0443\u0441\u0441\u043a\u0438\u0439 mixed \u65e5\u672c",
    "\u4e00\u4e8c\u4e09\u56db\u4e94\u516d\u4e03\u516b\u4e5d\u5341\u767e\u5343\u4e07",
    "\uff21\uff22\uff23\uff11\uff12\uff13 (fullwidth)",
    # emoji, ZWJ sequences, flags, skin tones, variation selectors
    "I love it \U0001F60D\U0001F525\U0001F4AF",
    "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 family",
    "\U0001F3F3\ufe0f\u200d\U0001F308 \U0001F3F4\u200d\u2620\ufe0f",
    "\U0001F469\U0001F3FD\u200d\U0001F4BB\U0001F9D1\U0001F3FF\u200d\U0001F680",
    "\U0001F1EB\U0001F1F7\U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8",
    "\u2764\ufe0f \u2714\ufe0e \u263a \u2603",
    "\U0001F44D\U0001F3FB\U0001F44D\U0001F3FC\U0001F44D\U0001F3FD\U0001F44D\U0001F3FE\U0001F44D\U0001F3FF",
    "\U0001FAE0\U0001FAE1\U0001F979 new-ish emoji",
    "1\ufe0f\u20e3 #\ufe0f\u20e3 keycaps",
    # whitespace runs, tabs, newlines
    "  leading spaces",
    "trailing spaces   ",
    "a  b   c    d     e",
    "     ",
    "\n\n\n",
    "line one\nline two\n\nline four",
    "tab\tseparated\tvalues\t\t\tend",
    "\t\tindented with tabs",
    "mixed \t \n \r\n whitespace",
    "ends with newline\n",
    "\u00a0non-breaking\u00a0space\u2003em space\u200bzero width",
    "\ufeffBOM at start",
    # digits
    "1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "99999999999999999999999999999999999999999999999999999",
    "Call +1 (555) 123-4567 or 0800 000 000.",
    "2024-12-06T17:30:00Z, 1,000,000.50 $ 42% 7/8",
    "version 1.2.3-rc.4+build.567",
    # special tokens embedded in text
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<|im_start|>user\nhi<|im_end|>",
    "text before<|im_end|>text after",
    "<|im_start|><|im_end|><|im_start|>",
    " <|im_start|> spaced <|im_end|> ",
    "<|im_start|assistant (not special)",
    "<file_sep>src/main.rs<filename>lib.rs<gh_stars>",
    "<|endoftext|><|endoftext|>next document",
    # a rendered chat prompt
    CHAT_PROMPT,
    # odd bits
    "\u00ef\u00bf\u00bd \ufffd replacement",
    "\u0000null and \u0007bell and \u007fdel",
    "\U0001D400\U0001D401 math bold, \u2200x\u2208\u211d: x\u00b2 \u2265 0",
    "!!!???...,,,;;;:::---___***",
]



def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def gguf_settings(path):
    r = gguf.GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    types = field(r, "tokenizer.ggml.token_type")
    special = [{"id": i, "text": tokens[i], "type": int(t)}
               for i, t in enumerate(types) if int(t) != 1]
    settings = {
        "tokenizer_model": field(r, "tokenizer.ggml.model"),
        "tokenizer_pre": field(r, "tokenizer.ggml.pre"),
        "add_bos_token": field(r, "tokenizer.ggml.add_bos_token"),
        "add_eos_token": field(r, "tokenizer.ggml.add_eos_token"),
        "add_space_prefix": field(r, "tokenizer.ggml.add_space_prefix"),
        "bos_token_id": field(r, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": field(r, "tokenizer.ggml.eos_token_id"),
        "unknown_token_id": field(r, "tokenizer.ggml.unknown_token_id"),
        "padding_token_id": field(r, "tokenizer.ggml.padding_token_id"),
        "vocab_size": len(tokens),
        "n_merges": len(field(r, "tokenizer.ggml.merges")),
        "chat_template": field(r, "tokenizer.chat_template"),
    }
    return settings, special


CONVERSATIONS = [
    ("with_system", [
        {"role": "system", "content": "You are a terse assistant. Answer in one sentence."},
        {"role": "user", "content": "Why is the sky blue?"},
    ]),
    ("without_system", [
        {"role": "user", "content": "Write a haiku about autumn leaves."},
    ]),
    ("multi_turn", [
        {"role": "user", "content": "What is 2 + 2?"},
        {"role": "assistant", "content": "2 + 2 = 4."},
        {"role": "user", "content": "And times 3?"},
    ]),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=MODEL)
    args = ap.parse_args()
    import llama_cpp
    from transformers import AutoTokenizer

    assert len(TEXTS) == 100, len(TEXTS)
    assert len(set(TEXTS)) == len(TEXTS)
    folder, name = os.path.split(os.path.abspath(args.model))
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    llm = llama_cpp.Llama(args.model, vocab_only=True, verbose=False)

    def lc(text):
        return list(llm.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def hf(text):
        return list(tok.encode(text, add_special_tokens=False))

    cases, disagreements = [], []
    for i, text in enumerate(TEXTS):
        a, b = lc(text), hf(text)
        detok = llm.detokenize(a, special=True).decode("utf-8", errors="replace")
        cases.append({"text": text, "llama_cpp": a, "transformers": b, "agree": a == b,
                      "llama_cpp_detok": detok})
        if a != b:
            disagreements.append({"index": i, "text": text, "llama_cpp": a, "transformers": b})

    chats = []
    for cname, messages in CONVERSATIONS:
        rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        a, b = lc(rendered), hf(rendered)
        chats.append({"name": cname, "messages": messages, "rendered": rendered,
                      "transformers_ids": b, "llama_cpp_ids": a, "agree": a == b})

    settings, special = gguf_settings(args.model)
    out = {
        "versions": versions(),
        "model": name,
        "gguf": settings,
        "special_tokens": special,
        "cases": cases,
        "disagreements": disagreements,
        "chat_examples": chats,
    }
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, "tokens.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"{len(cases)} texts, {len(disagreements)} disagreements; "
          f"chat examples agree: {[c['agree'] for c in chats]}; wrote {path} "
          f"({os.path.getsize(path)} bytes)")
    for d in disagreements:
        print(f"  #{d['index']} {d['text']!r}\n    llama.cpp    {d['llama_cpp']}\n"
              f"    transformers {d['transformers']}")


if __name__ == "__main__":
    main()
