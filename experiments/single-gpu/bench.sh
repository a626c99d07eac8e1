#!/usr/bin/env bash
# The single-GPU benchmark of the CUDA backend, one command (on the GPU machine):
#   experiments/single-gpu/bench.sh [JOINLAB_BINARY] [RESULTS_DIR]
# runs experiments/single-gpu/*.ini (phj at 4+4 and 8+8-byte tuples and with a Zipf z = 1 probe
# side, smj, npj at |R| = 2^27 and 2^20, all at |S| = 2^27; chunked with a 48 GiB pinned probe side),
# then writes (RESULTS_DIR default: experiments/results/<machine>, experiments/machine.sh)
#   RESULTS_DIR/single-gpu.csv             every run's row (device, date, commit + the runner's
#                                          columns: phase times, total, analytic bound and fraction of it)
#   RESULTS_DIR/single-gpu-breakdown.txt   where the time goes, per operator and kernel, from the traces
#   RESULTS_DIR/single-gpu-traces/         the traces (Chrome trace JSON)
# The timed region (total) leaves out data generation and result verification (phases "generate"
# and "verify": the output checksum), which are still reported as their own columns.
# JOINLAB_COMMIT names the commit when the tree has no .git; JL_BENCH limits the runs to some of
# the experiment names (default: all six).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../machine.sh
. "$here/../machine.sh"
bench_setup "$@"
status=0
for ini in ${JL_BENCH:-phj phj-8b phj-zipf smj npj chunked-48g}; do
  echo "=== $ini"
  if ! "$bin" run "$here/$ini.ini" --experiment.output_dir="$work" --quiet; then
    echo "!!! $ini failed"
    status=1
  fi
done
python3 "$here/collect.py" --device "$device" --date "$date" --commit "$commit" --runs "$work" \
  --csv "$results/single-gpu.csv" --breakdown "$results/single-gpu-breakdown.txt" || status=1
rm -rf "$results/single-gpu-traces"
mkdir -p "$results/single-gpu-traces"
cp "$work"/*.trace.json "$results/single-gpu-traces/" 2>/dev/null || true
exit $status
