#!/usr/bin/env bash
# The Triton join's benchmark on one GPU (lutz2022), one command on the GPU machine:
#   experiments/triton/bench.sh [JOINLAB_BINARY] [RESULTS_DIR]
# runs, at |R| = |S| = 2^27 .. 2^30 rows of 16 bytes (2^31 too where the host has 256 GiB of
# memory), PK-FK, the result counted:
#   triton.ini       triton, inputs in pinned host memory, 16 GiB of device memory, spill_write =
#                    copy | kernel (hierarchical), spill_read = kernel | copy
#   npj-pinned.ini   npj with its hash table and data in pinned host memory (the no-partitioning
#                    baseline), at 2^27 (its random accesses over the link take seconds per size)
#   chunked.ini      chunked, where R and its table fit the 16 GiB (2^27, 2^28)
#   cpu.ini          crj and phj on the host's CPU cores
# then writes (RESULTS_DIR default: experiments/results/<machine>, experiments/machine.sh)
#   RESULTS_DIR/triton.csv             every run's row (device, date, commit + the runner's columns:
#                                      phases, total, throughput, analytic bound and its fraction)
#   RESULTS_DIR/triton-summary.txt     per size: each run's throughput, the bound's (for triton:
#                                      the link's bytes, inputs once + spilled partitions written
#                                      and read back, over the measured link bandwidth), the
#                                      fraction reached, and the ratio to triton's best
#   RESULTS_DIR/triton-breakdown.txt   where the time goes, per operator and kernel, from the traces
# Run `joinlab calibrate --only links` first to have the link's rates by access size in the profile
# (docs/design.md, "The link microbenchmark"). JL_BENCH limits the runs to some of the files
# (default: triton npj-pinned chunked cpu); JL_SIZES replaces the sizes (exponents of 2).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../machine.sh
. "$here/../machine.sh"
bench_setup "$@"
host_gib=$(awk '/MemTotal/ {print int($2 / 1048576)}' /proc/meminfo)
sizes=${JL_SIZES:-27 28 29 30}
if [ -z "${JL_SIZES:-}" ] && [ "$host_gib" -ge 256 ]; then sizes="$sizes 31"; fi
list() {  # "2^a, 2^b, ..." of the sizes up to exponent $1
  local out="" e
  for e in $sizes; do [ "$e" -le "$1" ] && out="$out${out:+, }2^$e"; done
  echo "$out"
}
status=0
for ini in ${JL_BENCH:-triton npj-pinned chunked cpu}; do
  max=99
  [ "$ini" = chunked ] && max=28     # R and its table in 16 GiB
  [ "$ini" = npj-pinned ] && max=27  # every insert and lookup crosses the link: 15 s a run at 2^27
  rows=$(list "$max")
  [ -z "$rows" ] && continue
  echo "=== $ini: workload.rows = $rows"
  if ! "$bin" run "$here/$ini.ini" --sweep.workload.rows="$rows" --experiment.output_dir="$work" --quiet; then
    echo "!!! $ini failed"
    status=1
  fi
done
python3 "$here/../single-gpu/collect.py" --device "$device" --date "$date" --commit "$commit" --runs "$work" \
  --csv "$results/triton.csv" --breakdown "$results/triton-breakdown.txt" || status=1
python3 "$here/summarize.py" "$results/triton.csv" | tee "$results/triton-summary.txt" || status=1
rm -rf "$work"
exit $status
