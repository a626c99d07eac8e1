#!/usr/bin/env bash
# Simulates the measured multi-GPU runs under experiments/results with the h200 profile and
# writes the error tables next to them (no GPU; a joinlab built with SimGrid):
#   experiments/validate/validate_multi_gpu.sh [JOINLAB]
#   2xh200/validation-shuffle.csv            shuffle, 2 GPUs, one level, peer (alltoall-runs.csv)
#   2xh200/validation-gpj.csv, -gpj-b.csv    gpj and gpj-b at 2^28 rows per GPU (gpj-overlap-runs.csv)
#   4xh200/validation-scaling-shuffle-*.csv  weak scaling, 2 and 4 GPUs (multi-gpu-runs.csv)
#   8xh200/validation-scaling-shuffle-*.csv  weak scaling, 2, 4 and 8 GPUs (scaling-shuffle-*.csv)
# Each measured row is simulated at its own options; a two-level shape declared on one host is
# simulated with cluster.emulate_nodes = true (both levels over NVLink, as measured).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
joinlab=${1:-$root/build/joinlab}
res=$root/experiments/results
multi=$root/experiments/multi-gpu
tmp=$(mktemp -d)
# rows RUNS_CSV RUN OUT: the rows of one run of a run_multi.sh / run_gpj_overlap.sh CSV, as joinlab wrote them.
rows() {
  python3 - "$@" <<'PY'
import csv, sys
src, run, out = sys.argv[1:]
r = [x for x in csv.DictReader(open(src)) if x["run"] == run]
if not r:
    sys.exit(f"{src}: no run {run}")
keys = [k for k in r[0] if k not in ("device", "date", "commit", "run", "mode", "transport")]
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
    w.writeheader()
    w.writerows(r)
PY
}
# check INI MEASURED OUT [overrides...]: the table, and one line per point on stdout.
check() {
  local ini=$1 measured=$2 out=$3
  shift 3
  "$joinlab" validate "$multi/$ini" --measured "$measured" --profile h200 --out "$out" "$@" > "$tmp/log" 2>&1 ||
    { cat "$tmp/log"; exit 1; }
  echo "${out#"$res"/}: $(grep -E "^  total" "$tmp/log" | awk '{print $NF}' | paste -sd' ')"
}
rows "$res/2xh200/alltoall-runs.csv" shuffle-threads-peer-1x2-l1 "$tmp/shuffle.csv"
check shuffle-2gpu.ini "$tmp/shuffle.csv" "$res/2xh200/validation-shuffle.csv"
rows "$res/2xh200/gpj-overlap-runs.csv" gpj-28 "$tmp/gpj.csv"
check gpj-2gpu.ini "$tmp/gpj.csv" "$res/2xh200/validation-gpj.csv"
rows "$res/2xh200/gpj-overlap-runs.csv" gpj-b-28 "$tmp/gpj-b.csv"
check gpj-2gpu.ini "$tmp/gpj-b.csv" "$res/2xh200/validation-gpj-b.csv" --experiment.strategy=gpj-b
rows "$res/4xh200/multi-gpu-runs.csv" scale-shuffle-l1-peer "$tmp/l1.csv"
check scaling-shuffle-1level.ini "$tmp/l1.csv" "$res/4xh200/validation-scaling-shuffle-1level.csv"
rows "$res/4xh200/multi-gpu-runs.csv" scale-shuffle-l2-2x2-peer "$tmp/l2.csv"
check scaling-shuffle-2level.ini "$tmp/l2.csv" "$res/4xh200/validation-scaling-shuffle-2level-2x2.csv" \
  --cluster.emulate_nodes=true
# The 8-GPU host ran these with 16Mi-row chunks and 4 buffers in flight.
old=(--strategy.chunk_rows=16Mi --strategy.inflight=4)
check scaling-shuffle-1level.ini "$res/8xh200/scaling-shuffle-1level.csv" \
  "$res/8xh200/validation-scaling-shuffle-1level.csv" "${old[@]}" --sweep.cluster.gpus_per_node=2,4,8
for per in 2 4; do
  check scaling-shuffle-2level.ini "$res/8xh200/scaling-shuffle-2level-2x$per.csv" \
    "$res/8xh200/validation-scaling-shuffle-2level-2x$per.csv" "${old[@]}" --cluster.gpus_per_node=$per \
    --cluster.emulate_nodes=true
done
rm -rf "$tmp"
