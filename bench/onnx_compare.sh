#!/usr/bin/env bash
# Inference of imported ONNX models: retrograd (`bench onnx_<model>`) and
# onnxruntime (bench/onnx_reference.py) on the same .onnx file and inputs,
# back to back, RUNS times; prints each run's medians and their ratio, and
# the median ratio. Needs `pip install onnxruntime numpy`; the models come
# from `python3 bench/onnx_models.py` (torch, transformers), which writes
# target/bench-onnx/.
#
#   bench/onnx_compare.sh                       # mnist_cnn, minilm, resnet18, mobilenet_v3, bert_base
#   RUNS=5 bench/onnx_compare.sh mnist_cnn      # one model, 5 runs
#   TRACT=1 bench/onnx_compare.sh               # tract-onnx too (bench/tract, its own crate)
#   BENCH_BINS="old/bench new/bench" bench/onnx_compare.sh minilm
#                                               # builds of `bench` alternated in each run
#                                               # (no build; each against the same run's onnxruntime)
set -euo pipefail
cd "$(dirname "$0")/.."
bench/machine.sh >&2

models=("$@")
[ ${#models[@]} -eq 0 ] && models=(mnist_cnn minilm resnet18 mobilenet_v3 bert_base)
runs=${RUNS:-3}
repeats=${REPEATS:-20}
if [ -z "${BENCH_BINS:-}" ]; then
  cargo build --release --quiet --example bench
fi
read -r -a bins <<<"${BENCH_BINS:-./target/release/examples/bench}"
tract=${TRACT:-0}
if [ "$tract" = 1 ]; then
  cargo build --release --quiet --manifest-path bench/tract/Cargo.toml
fi

for m in "${models[@]}"; do
  if [ ! -f "target/bench-onnx/$m.onnx" ]; then
    echo "skipped $m: no target/bench-onnx/$m.onnx (run python3 bench/onnx_models.py)" >&2
    continue
  fi
  declare -A ratios=()
  for run in $(seq 1 "$runs"); do
    outs=()
    for bin in "${bins[@]}"; do
      outs+=("$("$bin" "onnx_$m" --repeats "$repeats")")
    done
    ort=$(python3 bench/onnx_reference.py "$m" --repeats "$repeats")
    for n in "${!bins[@]}"; do
      ours=${outs[$n]}
      line=$(python3 - "$ours" "$ort" <<'PY'
import json, sys
a, b = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f'{a["median_ms"]} {b["median_ms"]} {a["median_ms"] / b["median_ms"]} {a["load_ms"]} {a["first_output_ms"]} {b["first_output_ms"]}')
PY
)
      read -r ms_ours ms_ort ratio load first_ours first_ort <<<"$line"
      label=""
      [ ${#bins[@]} -gt 1 ] && label=" (${bins[$n]})"
      printf '%s run %d: retrograd%s %.2f ms, onnxruntime %.2f ms, ratio %.3f (retrograd load %.1f ms; file to first output %.1f ms, onnxruntime %.1f ms)\n' \
        "$m" "$run" "$label" "$ms_ours" "$ms_ort" "$ratio" "$load" "$first_ours" "$first_ort"
      ratios[$n]="${ratios[$n]:-} $ratio"
    done
    if [ "$tract" = 1 ]; then
      ms_tract=$(./bench/tract/target/release/tract-bench "$m" --repeats "$repeats" |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["median_ms"])')
      python3 -c 'import sys; t, o, r = map(float, sys.argv[1:]); print(f"  tract-onnx {t:.2f} ms: tract / onnxruntime {t / o:.3f}, retrograd / tract {r / t:.3f}")' \
        "$ms_tract" "$ms_ort" "$ms_ours"
    fi
  done
  for n in "${!bins[@]}"; do
    label="$m"
    [ ${#bins[@]} -gt 1 ] && label="$m (${bins[$n]})"
    # shellcheck disable=SC2086
    python3 -c 'import sys, statistics as s; r = [float(x) for x in sys.argv[2:]]; print(f"{sys.argv[1]}: median ratio {s.median(r):.3f} (range {min(r):.3f}-{max(r):.3f}, {len(r)} runs)")' "$label" ${ratios[$n]}
  done
  unset ratios
done
