"""The serve example under load, against our own batched encode,
sentence-transformers and llama-cpp-python's OpenAI server, all on this
machine in one run (BENCHMARKS.md, "Serving").

    cargo build --release --example serve --example bench
    pip install openai sentence-transformers 'llama-cpp-python[server]'
    python3 bench/serve_bench.py [--rounds 3] [--skip-llama-cpp] [--skip-st]

Workloads (each the median of --rounds rounds; the servers get a warm-up
first):

- embeddings: the first 256 speeches of tiny Shakespeare (as `bench
  w6_embed` takes them) sent to the server as 256 single-text requests over
  32 keep-alive connections at once; against `bench w6_embed` (our
  `SentenceTransformer::encode` at batch 32, in-process) and
  sentence-transformers' `encode` at batch 32 (bench/pytorch_reference.py
  w6_embed, 2 threads). Texts per second.
- chat: greedy streams of 128 tokens (max_tokens 128, temperature 0), 8 at
  once and 1 alone, on our server (8 slots) and on llama-cpp-python's
  (`python -m llama_cpp.server --n_threads 2`), same GGUF file; generated
  tokens per second over the wall time, counted from each stream's usage.
- time to first token: one streamed request whose prompt is 32 tokens
  (chat template included), to its first content chunk; median of 5
  prompts that differ from their third token.

Both sides use 2 compute threads. Prints one JSON line per figure and a
summary table of ratios.
"""

import argparse
import http.client
import json
import os
import queue
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EMBED_DIR = os.path.join(ROOT, ".cache/models/all-MiniLM-L6-v2")
CHAT_FILE = os.path.join(ROOT, ".cache/models/SmolLM2-135M-Instruct.Q4_1.gguf")
SERVE = os.path.join(ROOT, "target/release/examples/serve")
BENCH = os.path.join(ROOT, "target/release/examples/bench")
EMBED_ID = "all-MiniLM-L6-v2"
CHAT_ID = "SmolLM2-135M-Instruct.Q4_1"
STREAM_PROMPTS = [
    "Write a long story about a dragon who learns to bake bread.",
    "Explain in detail how a steam engine works.",
    "Describe a walk through a forest in autumn, in many sentences.",
    "Write a letter to a friend about your summer holidays.",
    "Tell me everything you know about the history of Rome.",
    "Write a long poem about the sea and the stars.",
    "Explain how to plant and care for a vegetable garden.",
    "Describe the life of a bee in a hive, step by step.",
]
# With SmolLM2's chat template each of these is a 32-token prompt; they
# differ from their third token on, so a server that keeps the last
# prompt's cache (llama-cpp-python does) still runs 29 tokens of each.
TTFT_MESSAGES = [[{"role": "system", "content": f"{name} is a helpful assistant."},
                  {"role": "user", "content": "Tell me a short story about a cat by the river."}]
                 for name in ("Jack", "Mary", "Tom", "Anna", "Paul")]


def emit(**fields):
    print(json.dumps(fields), flush=True)


def speeches(n):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from finetune_speakers import speeches as all_speeches
    return [t for _, t in all_speeches()[:n]]


def start(args, ready_prefix, port):
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if ready_prefix in line:
            threading.Thread(target=proc.stdout.read, daemon=True).start()
            return proc
    proc.kill()
    sys.exit("server did not start:\n" + "".join(lines[-20:]))


def wait_http(port, path):
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", path)
            if c.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"nothing answers on port {port}")


def stop(proc):
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def post_json(conn, path, body):
    data = json.dumps(body)
    conn.request("POST", path, data, {"Content-Type": "application/json"})
    r = conn.getresponse()
    payload = r.read()
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {payload[:300]!r}")
    return json.loads(payload)


def embed_round(port, texts, connections=32):
    """256 single-text requests over `connections` keep-alive connections."""
    work = queue.Queue()
    for t in texts:
        work.put(t)
    errors = []

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        while True:
            try:
                t = work.get_nowait()
            except queue.Empty:
                return
            try:
                out = post_json(conn, "/v1/embeddings", {"model": EMBED_ID, "input": t})
                assert len(out["data"][0]["embedding"]) == 384
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))
                return

    threads = [threading.Thread(target=client) for _ in range(connections)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    if errors:
        sys.exit(f"embedding requests failed: {errors[:3]}")
    return len(texts) / elapsed


def stream_once(port, model, prompt, max_tokens):
    """One greedy streamed answer to `prompt` (a text, or a list of messages):
    (seconds to the first content, tokens, seconds, prompt tokens)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    body = {"model": model, "messages": messages, "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    if r.status != 200:
        raise RuntimeError(f"{r.status}: {r.read()[:300]!r}")
    first, chunks, usage = None, 0, None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        for c in chunk.get("choices") or []:
            if (c.get("delta") or {}).get("content"):
                chunks += 1
                if first is None:
                    first = time.perf_counter() - t0
    elapsed = time.perf_counter() - t0
    tokens = usage["completion_tokens"] if usage else chunks
    prompt_tokens = usage["prompt_tokens"] if usage else None
    return first, tokens, elapsed, prompt_tokens


def chat_round(port, model, streams, max_tokens=128):
    results = [None] * streams

    def run(i):
        results[i] = stream_once(port, model, STREAM_PROMPTS[i % len(STREAM_PROMPTS)], max_tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(streams)]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t0
    tokens = sum(r[1] for r in results)
    return tokens / elapsed, tokens


def ttft(port, model):
    times, prompt_tokens = [], None
    for messages in TTFT_MESSAGES:
        first, _, _, prompt_tokens = stream_once(port, model, messages, 4)
        times.append(first)
    return statistics.median(times), prompt_tokens


def chat_figures(port, model, rounds, side):
    stream_once(port, model, STREAM_PROMPTS[0], 8)  # warm-up
    one = [chat_round(port, model, 1)[0] for _ in range(rounds)]
    eight = [chat_round(port, model, 8)[0] for _ in range(rounds)]
    first, prompt_tokens = ttft(port, model)
    f = {"one_stream_tps": statistics.median(one), "eight_streams_tps": statistics.median(eight),
         "ttft_s": first, "ttft_prompt_tokens": prompt_tokens}
    emit(side=side, workload="chat", **f, one_rounds=one, eight_rounds=eight)
    return f


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--port", type=int, default=18473)
    p.add_argument("--skip-llama-cpp", action="store_true")
    p.add_argument("--skip-st", action="store_true")
    a = p.parse_args()
    subprocess.run([os.path.join(ROOT, "bench/machine.sh")], check=False)
    texts = speeches(256)
    summary = {}

    # Embeddings: our encode in-process, then the server, then sentence-transformers.
    out = subprocess.run([BENCH, "w6_embed", "--repeats", str(max(a.rounds, 5))], check=True,
                         capture_output=True, text=True).stdout
    row = json.loads(out.strip().splitlines()[-1])
    summary["encode_tps"] = 256 / (row["median_ms"] / 1e3)
    emit(side="retrograd encode (bench w6_embed)", workload="embeddings", texts_per_s=summary["encode_tps"])
    srv = start([SERVE, "--embed", EMBED_DIR, "--port", str(a.port)], "serving on", a.port)
    try:
        embed_round(a.port, texts[:64])  # warm-up
        rounds = [embed_round(a.port, texts) for _ in range(a.rounds)]
    finally:
        stop(srv)
    summary["server_embed_tps"] = statistics.median(rounds)
    emit(side="retrograd server", workload="embeddings", texts_per_s=summary["server_embed_tps"], rounds=rounds)
    if not a.skip_st:
        out = subprocess.run([sys.executable, os.path.join(ROOT, "bench/pytorch_reference.py"), "w6_embed",
                              "--repeats", str(max(a.rounds, 5))], check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        summary["st_tps"] = 256 / (row["median"] / 1e3)
        emit(side="sentence-transformers encode", workload="embeddings", texts_per_s=summary["st_tps"])

    # Chat: our server, then llama-cpp-python's.
    srv = start([SERVE, "--chat", CHAT_FILE, "--port", str(a.port), "--slots", "8"], "serving on", a.port)
    try:
        ours = chat_figures(a.port, CHAT_ID, a.rounds, "retrograd server")
    finally:
        stop(srv)
    theirs = None
    if not a.skip_llama_cpp:
        srv = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", CHAT_FILE, "--n_threads", "2",
                                "--n_threads_batch", "2", "--port", str(a.port), "--host", "127.0.0.1", "--model_alias", CHAT_ID],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_http(a.port, "/v1/models")
            theirs = chat_figures(a.port, CHAT_ID, a.rounds, "llama-cpp-python server")
        finally:
            stop(srv)

    print("\nsummary (same machine, same run):")
    e = summary
    print(f"  embeddings: server {e['server_embed_tps']:.1f} texts/s, encode {e['encode_tps']:.1f}: "
          f"{e['server_embed_tps'] / e['encode_tps']:.2f}x (target 0.9x)")
    if "st_tps" in e:
        print(f"  embeddings: sentence-transformers {e['st_tps']:.1f} texts/s: server "
              f"{e['server_embed_tps'] / e['st_tps']:.2f}x (target 1.5x)")
    print(f"  chat: 8 streams {ours['eight_streams_tps']:.1f} tokens/s, 1 stream {ours['one_stream_tps']:.1f}: "
          f"{ours['eight_streams_tps'] / ours['one_stream_tps']:.2f}x (target 3x)")
    if theirs:
        print(f"  chat: llama-cpp-python 8 streams {theirs['eight_streams_tps']:.1f} tokens/s (1 stream "
              f"{theirs['one_stream_tps']:.1f}): ours {ours['eight_streams_tps'] / theirs['eight_streams_tps']:.2f}x "
              f"(target 2x)")
        print(f"  time to first token ({ours['ttft_prompt_tokens']} prompt tokens): ours {ours['ttft_s'] * 1e3:.0f} ms, "
              f"llama-cpp-python {theirs['ttft_s'] * 1e3:.0f} ms ({theirs['ttft_prompt_tokens']} tokens): "
              f"{ours['ttft_s'] / theirs['ttft_s']:.2f}x (target at most 1x)")


if __name__ == "__main__":
    main()
