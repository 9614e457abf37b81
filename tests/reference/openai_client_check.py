"""The serve example checked with a client no one here wrote: the official
`openai` Python package (PyPI `openai`) against a running server.

    cargo build --release --example serve --example chat
    python3 tests/reference/openai_client_check.py

Starts target/release/examples/serve on a free loopback port with
all-MiniLM-L6-v2 and SmolLM2-135M-Instruct Q4_1 (scripts/fetch_minilm.sh,
scripts/fetch_smollm2.sh), then checks:

- `client.embeddings.create` (the client asks for base64 and decodes it;
  and once as floats) equals sentence-transformers' embeddings of the same
  texts within 1e-5: the fixture tests/reference/minilm_embeddings.safetensors
  (`batch1`, written by minilm_reference.py), read here without numpy;
- `client.chat.completions.create` with temperature 0 returns the chat
  example's greedy answer (`chat --greedy`): the same text and as many
  tokens as `--print-ids` prints;
- the streaming form yields that text chunk by chunk, ends with a finish
  reason and the usage chunk;
- errors come back as the client's typed exceptions (NotFoundError,
  BadRequestError) with OpenAI's error body;
- SIGTERM during a stream: the stream still ends whole and the server
  exits 0.

Only a few requests: CI runs it (.ci/run).
"""

import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import threading
import time

import openai

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EMBED_DIR = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2")
CHAT_FILE = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
EMBED_ID = "all-MiniLM-L6-v2"
CHAT_ID = "SmolLM2-135M-Instruct.Q4_1"
PROMPTS = ["What is the capital of France?", "Name three primary colors."]
MAX_TOKENS = 32


def safetensors_rows(path, name):
    """The rows of one f32 tensor of a safetensors file, as lists."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        info = header[name]
        assert info["dtype"] == "F32", info
        start, end = info["data_offsets"]
        f.seek(8 + n + start)
        data = f.read(end - start)
    rows, cols = info["shape"]
    values = struct.unpack(f"<{rows * cols}f", data)
    return [list(values[r * cols:(r + 1) * cols]) for r in range(rows)]


def fixture(count):
    """`count` texts the model takes whole, with sentence-transformers' embeddings."""
    ref = os.path.join(ROOT, "tests/reference")
    with open(os.path.join(ref, "minilm_tokens.json"), encoding="utf-8") as f:
        tokens = json.load(f)
    rows = safetensors_rows(os.path.join(ref, "minilm_embeddings.safetensors"), "batch1")
    items = [(t, r) for t, ids, r in zip(tokens["texts"], tokens["ids"], rows) if t and len(ids) < 256]
    step = max(1, len(items) // count)
    return items[::step][:count]


def start_server(binary):
    proc = subprocess.Popen(
        [binary, "--embed", EMBED_DIR, "--chat", CHAT_FILE, "--port", "0"],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    if not line.startswith("serving on "):
        proc.kill()
        sys.exit(f"the server did not start: {line!r}")
    base_url = line.split()[2]
    # The rest of stdout is drained so the server never blocks on it.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, base_url


def chat_example(binary, prompt, print_ids):
    args = [binary, "--model", CHAT_FILE, "--greedy", "--max-tokens", str(MAX_TOKENS), "--prompt", prompt]
    if print_ids:
        args.append("--print-ids")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    assert out.endswith("\n"), out
    return out[:-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server", default=os.path.join(ROOT, "target/release/examples/serve"))
    p.add_argument("--chat", default=os.path.join(ROOT, "target/release/examples/chat"))
    a = p.parse_args()
    for path in (EMBED_DIR, CHAT_FILE, a.server, a.chat):
        if not os.path.exists(path):
            sys.exit(f"missing {path}: fetch the models (scripts/) and build the examples in release")
    proc, base_url = start_server(a.server)
    failures = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)

    try:
        client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
        models = sorted(m.id for m in client.models.list())
        check(models == sorted([EMBED_ID, CHAT_ID]), f"models.list: {models}")

        items = fixture(6)
        texts = [t for t, _ in items]
        for fmt in ("base64 (the client's default)", "float"):
            kwargs = {} if fmt.startswith("base64") else {"encoding_format": "float"}
            got = client.embeddings.create(model=EMBED_ID, input=texts, **kwargs)
            worst = max(abs(x - y) for e, (_, want) in zip(got.data, items) for x, y in zip(e.embedding, want))
            check(len(got.data) == len(texts) and worst <= 1e-5,
                  f"embeddings.create, {len(texts)} texts, {fmt}: max |server - sentence-transformers| = {worst:.2e}")
        one = client.embeddings.create(model=EMBED_ID, input=texts[0])
        check(one.usage.prompt_tokens > 0 and len(one.data[0].embedding) == 384, "embeddings.create, one string")

        for prompt in PROMPTS:
            want_text = chat_example(a.chat, prompt, print_ids=False)
            want_ids = chat_example(a.chat, prompt, print_ids=True).split()
            reply = client.chat.completions.create(
                model=CHAT_ID, messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS, temperature=0, seed=0)
            text = reply.choices[0].message.content
            check(text == want_text and reply.usage.completion_tokens == len(want_ids),
                  f"chat greedy = chat example ({len(want_ids)} tokens): {prompt!r} -> {text!r}")
            pieces, finish, usage = [], None, None
            stream = client.chat.completions.create(
                model=CHAT_ID, messages=[{"role": "user", "content": prompt}],
                max_tokens=MAX_TOKENS, temperature=0, stream=True,
                stream_options={"include_usage": True})
            for chunk in stream:
                if chunk.choices:
                    if chunk.choices[0].delta.content:
                        pieces.append(chunk.choices[0].delta.content)
                    finish = chunk.choices[0].finish_reason or finish
                if chunk.usage:
                    usage = chunk.usage
            check("".join(pieces) == want_text and len(pieces) > 1 and finish in ("stop", "length")
                  and usage is not None and usage.completion_tokens == len(want_ids),
                  f"streamed in {len(pieces)} chunks, finish {finish}, same text and usage")

        try:
            client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
            check(False, "an unknown model raises NotFoundError")
        except openai.NotFoundError as e:
            check(e.body.get("code") == "model_not_found" and e.body.get("param") == "model",
                  f"unknown model: NotFoundError {e.body}")
        try:
            client.embeddings.create(model=EMBED_ID, input="")
            check(False, "an empty input raises BadRequestError")
        except openai.BadRequestError as e:
            check(e.body.get("param") == "input", f"empty input: BadRequestError {e.body}")
        try:
            client.chat.completions.create(model=CHAT_ID, messages=[{"role": "user", "content": "Hi"}],
                                           temperature=5)
            check(False, "temperature 5 raises BadRequestError")
        except openai.BadRequestError as e:
            check(e.body.get("param") == "temperature", f"temperature 5: BadRequestError {e.body}")

        # SIGTERM while a stream runs: the stream ends whole, the server exits 0.
        stream = client.chat.completions.create(
            model=CHAT_ID, messages=[{"role": "user", "content": PROMPTS[0]}],
            max_tokens=MAX_TOKENS, temperature=0, stream=True)
        pieces = []
        for i, chunk in enumerate(stream):
            if i == 1:
                proc.send_signal(signal.SIGTERM)
            if chunk.choices and chunk.choices[0].delta.content:
                pieces.append(chunk.choices[0].delta.content)
        code = proc.wait(timeout=60)
        check("".join(pieces) == chat_example(a.chat, PROMPTS[0], print_ids=False) and code == 0,
              f"SIGTERM mid-stream: the stream finished, exit code {code}")
    finally:
        if proc.poll() is None:
            proc.kill()
    print(f"{len(failures)} failed" if failures else "openai client check passed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
