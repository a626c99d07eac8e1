#!/usr/bin/env bash
# Prints the name of this machine's folder under experiments/results: the GPU model in lower case
# (nvidia-smi's name without "NVIDIA", up to the first space: h100, h200), prefixed by the GPU
# count when there are several (2xh200, 8xh200); "cpu-<N>core" without a GPU. JL_MACHINE, when
# set, is the name. Benchmark scripts source it: results=experiments/results/$(machine_name).
machine_name() {
  if [ -n "${JL_MACHINE:-}" ]; then echo "$JL_MACHINE"; return; fi
  local names count model
  names=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)
  count=$(printf '%s\n' "$names" | grep -c .)
  if [ "$count" -eq 0 ]; then echo "cpu-$(nproc)core"; return; fi
  model=$(printf '%s\n' "$names" | head -1 | sed 's/^NVIDIA //' | awk '{print tolower($1)}')
  if [ "$count" -eq 1 ]; then echo "$model"; else echo "${count}x$model"; fi
}
# What a benchmark script needs, from its arguments [JOINLAB_BINARY] [RESULTS_DIR]: sets bin
# (default build/joinlab), results (default experiments/results/<machine>), work (a fresh
# temporary folder for the runs' CSVs and traces), date, commit ($JOINLAB_COMMIT where the tree
# has no .git) and device (the GPU's name).
bench_setup() {
  local here
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  bin=${1:-build/joinlab}
  results=${2:-$here/results/$(machine_name)}
  work=$(mktemp -d)
  date=$(date -u +%Y-%m-%d)
  commit=${JOINLAB_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
  device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  mkdir -p "$results"
}
if [ "${BASH_SOURCE[0]}" = "$0" ]; then machine_name; fi
