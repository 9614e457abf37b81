#!/usr/bin/env bash
# The prepared check for a borrowed machine (the `device` tool's host: an
# Intel Xeon so far, where issues 35's and 36's speed targets are judged).
# One command, pinned to two cores, that takes about 2 minutes and needs
# no Rust toolchain there: carry the release `bench` binary built here.
#
#   cargo build --release --example bench          # here
#   bench/device_check.sh                          # there (or here, to try it)
#
#   CPUS=4,5 bench/device_check.sh     # other cores (default 2,3)
#   ROUNDS=9 bench/device_check.sh     # W4 rounds (default 5)
#   TORCH_COMPILE=1 ...                # torch.compile's W4 too (a minute more)
#
# Writes each tool's JSON lines under $OUT (the device tool's folder) or a
# temporary one, and prints a summary: the machine (bench/machine.sh), W4's
# products on both sides at 1 and 2 threads, the 1024^3 sgemm rate, the W4
# iteration (retrograd eager and compiled, PyTorch eager) per round with the
# same-round ratios, the compiled iteration against its GEMM-bound time
# (3.9 GFLOP at retrograd's 1024^3 rate), and the compiled step's profile.
# With target/bench-onnx/mnist_cnn.onnx present, the imported CNN against
# onnxruntime too.
set -uo pipefail
cd "$(dirname "$0")/.."

bin=${BENCH:-target/release/examples/bench}
cpus=${CPUS:-2,3}
rounds=${ROUNDS:-5}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
[ -x "$bin" ] || { echo "device_check: no $bin (build it with cargo build --release --example bench)" >&2; exit 2; }
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2
pin() { taskset -c "$cpus" "$@"; }
step() { echo "device_check: $* ($(date -u +%H:%M:%S))" >&2; }

taskset -c "$cpus" bench/machine.sh | tee "$out/machine.txt"

step "W4's products, 2 threads then 1, both sides"
for t in 2 1; do
  RAYON_NUM_THREADS=$t pin "$bin" w4_gemms >"$out/w4_gemms_retrograd_t$t.jsonl"
  pin python3 bench/w4_gemms.py --threads "$t" >"$out/w4_gemms_pytorch_t$t.jsonl"
done

step "1024^3 sgemm"
RAYON_NUM_THREADS=2 pin "$bin" matmul >"$out/matmul_retrograd.jsonl"
pin python3 bench/pytorch_reference.py matmul --n 1024 >"$out/matmul_pytorch.jsonl"

step "W4 iteration, $rounds rounds"
for r in $(seq 1 "$rounds"); do
  RAYON_NUM_THREADS=2 pin "$bin" w4c | sed "s/^{/{\"round\": $r, /" >>"$out/w4.jsonl"
  pin python3 bench/pytorch_reference.py w4 | sed "s/^{/{\"round\": $r, /" >>"$out/w4.jsonl"
  if [ "${TORCH_COMPILE:-0}" = 1 ]; then
    pin python3 bench/pytorch_reference.py w4 --compile | sed "s/^{/{\"round\": $r, \"compiled\": true, /" >>"$out/w4.jsonl"
  fi
done

step "the compiled W4 step's profile"
RAYON_NUM_THREADS=2 pin "$bin" w4_profile 2>"$out/w4_profile.txt" >"$out/w4_profile.jsonl"

if [ -f target/bench-onnx/mnist_cnn.onnx ]; then
  step "the imported MNIST CNN against onnxruntime"
  RAYON_NUM_THREADS=2 BENCH_BINS="$bin" RUNS=3 pin bench/onnx_compare.sh mnist_cnn >"$out/onnx_cnn.txt" 2>&1
fi

python3 - "$out" <<'EOF'
import json, statistics, sys
from pathlib import Path

out = Path(sys.argv[1])

def lines(name):
    p = out / name
    return [json.loads(l) for l in p.read_text().splitlines() if l.startswith("{")] if p.exists() else []

print("\n== W4's products (ms an iteration; ratio = retrograd / PyTorch)")
for t in (2, 1):
    rg = {(d.get("layer"), d["case"]): d for d in lines(f"w4_gemms_retrograd_t{t}.jsonl")}
    pt = {(d.get("layer"), d["case"]): d for d in lines(f"w4_gemms_pytorch_t{t}.jsonl")}
    print(f"-- {t} thread(s)")
    for key, r in rg.items():
        p = pt.get(key) or (pt.get((None, "total")) if key[1] == "total" else None)
        if p is None:
            continue
        print(f"{key[0] or '':10} {key[1]:15} {r['ms_per_iter']:8.3f} {p['ms_per_iter']:8.3f}  {r['ms_per_iter'] / p['ms_per_iter']:.3f}")

rate = {d["case"]: d["gflops"] for d in lines("matmul_retrograd.jsonl") if d.get("n") == 1024 and "gflops" in d}
pt_rate = [d["median"] for d in lines("matmul_pytorch.jsonl")]
print(f"\n== 1024^3 sgemm GFLOP/s: retrograd graph_op {rate.get('graph_op')}, PyTorch {pt_rate[0] if pt_rate else None}")

print("\n== W4 iteration (ms): round, retrograd eager, compiled, PyTorch eager, compiled / PyTorch")
rows = lines("w4.jsonl")
ratios, bound = [], []
for r in sorted({d["round"] for d in rows}):
    get = lambda f: next((d["median"] for d in rows if d["round"] == r and f(d)), None)
    eager = get(lambda d: d["workload"] == "w4" and d["framework"] == "retrograd")
    comp = get(lambda d: d["workload"] == "w4_compiled")
    torch_eager = get(lambda d: d["framework"] == "pytorch" and not d.get("compiled"))
    torch_comp = get(lambda d: d["framework"] == "pytorch" and d.get("compiled"))
    if comp and torch_eager:
        ratios.append(comp / torch_eager)
    if comp and rate.get("graph_op"):
        bound.append(comp / (3.9e9 / (rate["graph_op"] * 1e9) * 1e3))
    extra = f", torch.compile {torch_comp:.2f}" if torch_comp else ""
    print(f"{r}: {eager} {comp} {torch_eager and round(torch_eager, 2)}  {ratios[-1] if ratios else float('nan'):.3f}{extra}")
if ratios:
    print(f"compiled / PyTorch eager: median {statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); target 0.85")
if bound:
    print(f"compiled / GEMM-bound time: median {statistics.median(bound):.2f} ({min(bound):.2f}-{max(bound):.2f}); target 1.8")

profile = out / "w4_profile.txt"
if profile.exists():
    print("\n== compiled W4 step by kind (ms a run)")
    print("\n".join(profile.read_text().splitlines()[:22]))
cnn = out / "onnx_cnn.txt"
if cnn.exists():
    print("\n== MNIST CNN imported, against onnxruntime")
    print("\n".join(l for l in cnn.read_text().splitlines() if "ratio" in l))
print(f"\n(raw lines in {out})")
EOF
