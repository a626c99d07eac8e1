#!/usr/bin/env bash
# Issue 3 benchmarks of the CUDA backend, one command (on the GPU machine):
#   experiments/bench_h100.sh [JOINLAB_BINARY] [RESULTS_DIR]
# runs experiments/h100/*.ini (W1 phj, W1 8+8-byte phj, W1 phj with a Zipf z=1 probe side,
# W1 smj, W1 and |R| = 2^20 npj, chunked with a 48 GiB pinned probe side), then writes
#   RESULTS_DIR/h100-<date><JL_TAG>.csv      every run's row (device, date, commit + the runner's columns:
#                                    phase times, total, analytic bound and fraction of it)
#   RESULTS_DIR/h100-<date><JL_TAG>-breakdown.txt   where the time goes, per operator, from the traces
#   RESULTS_DIR/h100-<date><JL_TAG>-traces/          the traces (Chrome trace JSON)
# The timed region (total) leaves out data generation and result verification (phases "generate"
# and "verify": the output checksum), which are still reported as their own columns. JOINLAB_COMMIT names the
# commit when the tree has no .git (the device machine gets a copy of the working tree);
# JL_BENCH limits the runs to some of the experiment names; JL_TAG suffixes the result names
# (e.g. -s2 for a second session's run of the same day).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build-device/joinlab}
results=${2:-$here/results}
work=$(mktemp -d)
date=$(date -u +%Y-%m-%d)
commit=${JOINLAB_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
mkdir -p "$results"
status=0
for ini in ${JL_BENCH:-w1-phj w1-phj-8b w1-phj-zipf w1-smj w1-npj chunked-48g}; do
  echo "=== $ini"
  if ! "$bin" run "$here/h100/$ini.ini" --experiment.output_dir="$work" --quiet; then
    echo "!!! $ini failed"
    status=1
  fi
done
python3 "$here/h100/collect.py" --device "$device" --date "$date" --commit "$commit" --runs "$work" \
  --csv "$results/h100-$date${JL_TAG:-}.csv" --breakdown "$results/h100-$date${JL_TAG:-}-breakdown.txt" || status=1
mkdir -p "$results/h100-$date${JL_TAG:-}-traces"
cp "$work"/*.trace.json "$results/h100-$date${JL_TAG:-}-traces/" 2>/dev/null || true
exit $status
