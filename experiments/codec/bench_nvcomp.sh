#!/usr/bin/env bash
# nvcomp's cascaded codec beside ours (joinlab bench-codec --peer nvcomp), one command on the GPU
# machine from the repository root, without network:
#   experiments/codec/bench_nvcomp.sh [JOINLAB_BINARY] [RESULTS_DIR]
# The binary must be built with nvcomp (-DJOINLAB_NVCOMP=ON after pip install nvidia-libnvcomp-cu13;
# docs/benchmarks.md) and find libnvcomp.so.6 when it starts: in lib/ beside it (the binary's
# RUNPATH has $ORIGIN/lib; copy it from the pip package's lib64/) or on LD_LIBRARY_PATH.
# Writes RESULTS_DIR/codec-nvcomp.txt (default experiments/results/<machine>, experiments/machine.sh):
# the command, then bench-codec's output: our table, then nvcomp's variants on the same columns
# next to ours. JL_SF (default 10), JL_REPEAT (3), JL_BUFFERS (64), JL_PEER_CHUNK (65536 bytes).
set -uo pipefail  # no -e: machine.sh's probes fail without nvidia-smi
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../machine.sh
. "$here/../machine.sh"
bench_setup "$@"
rm -rf "$work"  # bench-codec writes no files
if ldd "$bin" | grep -q 'libnvcomp.so.6 => not found'; then
  echo "bench_nvcomp: $bin cannot load libnvcomp.so.6: put it in $(dirname "$bin")/lib/ or on LD_LIBRARY_PATH" >&2
  exit 1
fi
cmd=("$bin" bench-codec --backend cuda --sf "${JL_SF:-10}" --repeat "${JL_REPEAT:-3}" --buffers "${JL_BUFFERS:-64}"
     --peer nvcomp --peer-chunk "${JL_PEER_CHUNK:-65536}")
out="$results/codec-nvcomp.txt"
{
  echo "command: ${cmd[*]}; $date, $device"
  "${cmd[@]}"
} | tee "$out"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] || exit "$status"
# A binary without the peer, or a GPU the cuda backend did not use, prints no peer table.
grep -q '^peer nvcomp on' "$out" || { echo "bench_nvcomp: no nvcomp table in $out" >&2; exit 1; }
