#!/usr/bin/env bash
# Runs retrograd's benchmarks and the PyTorch reference back to back (each
# workload: retrograd, then PyTorch, so both see the same machine state) and
# prints a ratio table. Needs `pip install torch numpy` (not part of CI).
#
#   bench/compare.sh            # every workload
#   bench/compare.sh w1 w2      # a subset (w1 w1v w2 matmul mem_w1 mem_w2)
set -euo pipefail
cd "$(dirname "$0")/.."

workloads=("$@")
[ ${#workloads[@]} -eq 0 ] && workloads=(w1 w1v w2 matmul mem_w1 mem_w2)

cargo build --release --quiet --example bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT

for w in "${workloads[@]}"; do
  case "$w" in
    w1)
      ./target/release/examples/bench w1 --repeats 5 >>"$out"
      ./target/release/examples/bench w1_tape --repeats 5 >>"$out"
      python3 bench/pytorch_reference.py w1 --dtype f64 --chains 10 --repeats 1 >>"$out"
      for d in f32 f64; do
        python3 bench/pytorch_reference.py w1 --dtype "$d" --chains 1000 --repeats 3 >>"$out"
        python3 bench/pytorch_reference.py w1 --dtype "$d" --chains 10000 --repeats 1 >>"$out"
      done ;;
    w1v)
      ./target/release/examples/bench w1v --repeats 5 >>"$out"
      python3 bench/pytorch_reference.py w1v --chains 1000 --repeats 3 >>"$out" ;;
    w2)
      ./target/release/examples/bench w2 >>"$out"
      for b in 128 1024; do python3 bench/pytorch_reference.py w2 --batch "$b" >>"$out"; done ;;
    matmul)
      ./target/release/examples/bench matmul --repeats 7 | grep '"case": "graph_op"' >>"$out" || true
      for n in 1024 2048; do python3 bench/pytorch_reference.py matmul --n "$n" --repeats 7 >>"$out"; done ;;
    mem_w1)
      ./target/release/examples/bench mem_w1 >>"$out"
      python3 bench/pytorch_reference.py mem_w1 --chains 1000 >>"$out" ;;
    mem_w2)
      ./target/release/examples/bench mem_w2 >>"$out"
      python3 bench/pytorch_reference.py mem_w2 --batch 4096 >>"$out" ;;
    *) echo "unknown workload $w" >&2; exit 2 ;;
  esac
done

python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def key(r):
    return (r["workload"], r.get("dtype", ""), r.get("chains", r.get("batch", r.get("n", ""))))
def value(r):
    if "median" in r:
        return r["median"]
    if r.get("workload") == "matmul":
        return r.get("gflops")
    return None
ours = {key(r): r for r in rows if r.get("framework") == "retrograd"}
theirs = {key(r): r for r in rows if r.get("framework") == "pytorch"}
print(f"{'workload':<10} {'dtype':<5} {'size':>6} {'unit':<20} {'retrograd':>11} {'pytorch':>11} {'ratio':>8}")
for k in sorted(set(ours) | set(theirs), key=str):
    a, b = ours.get(k), theirs.get(k)
    unit = (a or b).get("unit", "gflops")
    va = value(a) if a else None
    vb = value(b) if b else None
    # Four significant digits: W1's ratios are a few thousandths.
    ratio = f"{va / vb:8.4g}" if va and vb else "       -"
    fa = f"{va:11.4g}" if va is not None else "          -"
    fb = f"{vb:11.4g}" if vb is not None else "          -"
    print(f"{k[0]:<10} {k[1]:<5} {str(k[2]):>6} {unit:<20} {fa} {fb} {ratio}")
print("\nratio = retrograd / pytorch (lower is better for time and memory, higher for GFLOP/s)")
tape = {key(r): r for r in rows if r.get("framework") == "hand_written_tape"}
for k in sorted(tape, key=str):
    if k in ours:
        print(f"{k[0]} {k[1]} C={k[2]}: retrograd {ours[k]['median']:.4g} ns/node, "
              f"hand-written tape {tape[k]['median']:.4g}, ratio {ours[k]['median'] / tape[k]['median']:.2f} "
              "(the issue's target was 2x the tape: 30 vs 15 ns)")
for r in rows:
    if r["workload"] == "w1" and r.get("chains") == 10:
        print(f"cross-check {r['framework']}: loss {r['loss']}, grad_sum {r['grad_sum']} "
              "(expected 0.6983577607687627, 9.99670012301077)")
PY
