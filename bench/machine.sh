#!/usr/bin/env bash
# Names the machine a benchmark ran on, one line each, so every figure can
# carry its CPU (a ratio against PyTorch taken on an AMD EPYC flatters us;
# BENCHMARKS.md, "Machine"): the CPU model and its family/model numbers,
# the vector extensions the kernels dispatch on, cores and threads per core
# (two threads of one core share its FMA units and caches), caches, and the
# load average (measure on a quiet machine).
#
#   bench/machine.sh          # to stdout
#   bench/machine.sh >&2      # what bench/compare.sh and bench/onnx_compare.sh do
set -uo pipefail

cpuinfo=/proc/cpuinfo
field() { grep -m1 "^$1" "$cpuinfo" 2>/dev/null | cut -d: -f2- | sed 's/^ *//'; }
flags=$(field flags)
has() { case " $flags " in *" $1 "*) echo -n "$1 " ;; esac; }

echo "machine: $(field 'model name') (vendor $(field vendor_id), family $(field 'cpu family') model $(field 'model'))"
echo "machine: extensions: $(has avx512f)$(has avx512_fp16)$(has avx512_bf16)$(has amx_tile)$(has avx2)$(has fma)"
if command -v lscpu >/dev/null; then
  lscpu | grep -E '^(CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket|Socket\(s\)|L1d cache|L2 cache|L3 cache):' \
    | sed 's/  */ /g; s/^/machine: /'
fi
siblings=$(cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | sort -u | tr '\n' ' ')
[ -n "$siblings" ] && echo "machine: thread siblings: $siblings"
command -v taskset >/dev/null && echo "machine: this process may run on CPUs$(taskset -cp $$ | cut -d: -f2)"
[ -n "${RAYON_NUM_THREADS:-}" ] && echo "machine: RAYON_NUM_THREADS=$RAYON_NUM_THREADS"
echo "machine: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
