#!/usr/bin/env bash
# The multi-GPU benchmark on the GPUs of one host (2 or more), one command:
#   experiments/multi-gpu/run_multi.sh BIN_DIR OUT_DIR
# BIN_DIR holds joinlab, p2p_bandwidth and (optional) test_cuda_fabric (or tests/test_cuda_fabric) of a device build
# (-DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF -DJOINLAB_STATIC_BOOST=ON -DJOINLAB_MPI=ON).
# Steps (JL_STEPS limits them; default all): 
#   bw       GPU0 -> GPU1 copy bandwidth (cudaMemcpyPeer; alone and both directions at once)
#   tests    test_cuda_fabric (peer, ucx, nccl between 2 ranks as threads) and
#            tests/mpi/gpu_cases.sh (verified small runs as processes, the kill case; JL_GPU_CASES)
#   shuffle  shuffle-2gpu.ini: levels 1 and 2, as 1x2 and 2x1, over peer/nccl/ucx as threads and
#            over nccl/ucx under mpirun -np 2 (2x1 with cluster.emulate_nodes=true)
#   gpj      gpj-2gpu.ini: threads (peer, nccl, ucx) and mpirun (nccl, ucx)
#   crj      crj-2gpu.ini on the CPUs: threads and mpirun -np 2
#   scale    weak scaling, scaling-*.ini on 2, 4 and 8 GPUs (as many as the host has)
# Every run has a time limit (JL_RUN_S, default 600 s), its log in OUT_DIR/logs, and a line in
# OUT_DIR/status.csv; a failed run does not stop the others. At the end OUT_DIR/results.csv holds
# every run's row (device, date, commit, mode, transport first) and OUT_DIR/summary.csv the
# all-to-all throughput of each shuffle run next to the measured NVLink bandwidth, and
# OUT_DIR/alltoall.csv each shuffle run's all-to-all phase per rank (alltoall_trace.py).
# These go to JL_RESULTS (default experiments/results/<machine>, experiments/machine.sh) as
# B.csv (the summary), B-runs.csv, B-per-rank.csv and nvlink.csv, B = JL_BENCHMARK (multi-gpu).
# NCCL_NVLS_ENABLE=0 always (NVLink multicast stays off on these machines).
set -uo pipefail
bin=$(cd "${1:?usage: run_multi.sh BIN_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: run_multi.sh BIN_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=../machine.sh
. "$here/../machine.sh"
export NCCL_NVLS_ENABLE=0
export UCX_WARN_UNUSED_ENV_VARS=n
steps=${JL_STEPS:-bw tests shuffle gpj crj}
limit=${JL_RUN_S:-600}
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
commit=${JOINLAB_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
mkdir -p "$out/logs" "$out/runs"
echo "name,mode,transport,exit,seconds" > "$out/status.csv"
mpirun_args=(--oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x UCX_WARN_UNUSED_ENV_VARS)
[ "$(id -u)" -eq 0 ] && mpirun_args+=(--allow-run-as-root)
echo "run_multi: $device x $gpus, commit $commit, $date, steps: $steps" | tee "$out/logs/run_multi.txt"
nvidia-smi topo -m > "$out/logs/topo.txt" 2>&1

# step NAME MODE TRANSPORT -- COMMAND...: runs it under the time limit, logs, records.
step() {
  local name=$1 mode=$2 transport=$3
  shift 4
  local start=$SECONDS
  echo "=== $name ($mode, $transport)"
  timeout -k 20 "$limit" "$@" > "$out/logs/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - start))
  echo "$name,$mode,$transport,$rc,$took" >> "$out/status.csv"
  if [ "$rc" -ne 0 ]; then
    echo "!!! $name exited $rc after ${took} s; last lines:"
    tail -5 "$out/logs/$name.log"
  else
    grep -E "^[a-z-]+ +(cuda|cpu) " "$out/logs/$name.log" | tail -3
  fi
  return 0
}
# joinlab NAME MODE TRANSPORT INI [overrides...]: one experiment, its results in runs/NAME.
joinlab() {
  local name=$1 mode=$2 transport=$3 ini=$4
  shift 4
  local args=(run "$here/$ini" --experiment.output_dir="$out/runs/$name" "$@")
  [ "$transport" != cpu ] && args+=(--cluster.transport="$transport")
  if [ "$mode" = threads ]; then
    step "$name" "$mode" "$transport" -- "$bin/joinlab" "${args[@]}"
  else
    step "$name" "$mode" "$transport" -- mpirun "${mpirun_args[@]}" -np 2 "$bin/joinlab" "${args[@]}"
  fi
}

for s in $steps; do
  case $s in
    bw)
      step nvlink-bandwidth tool - -- "$bin/p2p_bandwidth" 0 1
      { echo "gpu_a,gpu_b,unidirectional_GBps,bidirectional_per_direction_GBps"; tail -1 "$out/logs/nvlink-bandwidth.log"; } \
        > "$out/nvlink.csv" ;;
    tests)
      for t in "$bin/test_cuda_fabric" "$bin/tests/test_cuda_fabric"; do
        [ -x "$t" ] && { step test_cuda_fabric tests - -- "$t"; break; }
      done
      # JL_GPU_CASES: the cases of gpu_cases.sh (default all; "none" skips it)
      if [ "${JL_GPU_CASES:-}" != none ]; then
        # shellcheck disable=SC2086  # the cases are words
        step gpu_cases tests - -- bash "$root/tests/mpi/gpu_cases.sh" "$bin/joinlab" ${JL_GPU_CASES:-}
      fi ;;
    shuffle)
      # JL_SHUFFLE: the runs as MODE:TRANSPORT:SHAPE:LEVELS[:OPTIONS] (default: every combination);
      # OPTIONS, strategy overrides as key=value;key=value, also name the run (chunk_rows=16Mi ->
      # ...-chunk_rows_16Mi).
      cases=${JL_SHUFFLE:-}
      if [ -z "$cases" ]; then
        for mode in threads mpirun; do
          transports="nccl ucx"
          [ "$mode" = threads ] && transports="peer nccl ucx"
          for t in $transports; do for shape in 1x2 2x1; do for levels in 1 2; do
            cases="$cases $mode:$t:$shape:$levels"
          done; done; done
        done
      fi
      for c in $cases; do
        IFS=: read -r mode t shape levels opts <<< "$c"
        nodes=${shape%x*}
        per=${shape#*x}
        extra=()
        [ "$mode" = mpirun ] && [ "$nodes" -gt 1 ] && extra+=(--cluster.emulate_nodes=true)
        IFS=';' read -r -a kvs <<< "${opts:-}"
        for kv in "${kvs[@]}"; do extra+=(--strategy."$kv"); done
        name="shuffle-$mode-$t-$shape-l$levels"
        [ -n "${opts:-}" ] && name="$name-$(tr ';=' '-_' <<< "$opts")"
        joinlab "$name" "$mode" "$t" shuffle-2gpu.ini --cluster.nodes="$nodes" \
          --cluster.gpus_per_node="$per" --strategy.levels="$levels" "${extra[@]}"
      done ;;
    gpj)
      # JL_GPJ: the runs as MODE:TRANSPORT (default: threads over peer/nccl/ucx, mpirun over nccl/ucx).
      for c in ${JL_GPJ:-threads:peer threads:nccl threads:ucx mpirun:nccl mpirun:ucx}; do
        IFS=: read -r mode t <<< "$c"
        joinlab "gpj-$mode-$t" "$mode" "$t" gpj-2gpu.ini
      done
      # gpj-b on the same data: its shuffle and join phases are the "shuffle time" and "join
      # time" gpj's end-to-end time is compared with (thostrup2023 section 6).
      joinlab "gpj-b-threads-${JL_GPJB_TRANSPORT:-peer}" threads "${JL_GPJB_TRANSPORT:-peer}" gpj-2gpu.ini \
        --experiment.strategy=gpj-b ;;
    scale)
      # Weak scaling on every GPU of the host (2, 4, 8), ranks as threads over
      # JL_SCALE_TRANSPORT (default peer): one- and two-level shuffle, gpj.
      t=${JL_SCALE_TRANSPORT:-peer}
      counts=2; [ "$gpus" -ge 4 ] && counts=2,4; [ "$gpus" -ge 8 ] && counts=2,4,8
      joinlab "scale-shuffle-l1-$t" threads "$t" scaling-shuffle-1level.ini --sweep.cluster.gpus_per_node="$counts"
      for per in 2 4; do
        [ $((2 * per)) -le "$gpus" ] && joinlab "scale-shuffle-l2-2x$per-$t" threads "$t" scaling-shuffle-2level.ini \
          --cluster.gpus_per_node="$per"
      done
      joinlab "scale-gpj-$t" threads "$t" scaling-gpj.ini --sweep.cluster.gpus_per_node="$counts" ;;
    crj)
      joinlab crj-threads threads cpu crj-2gpu.ini
      joinlab crj-mpirun mpirun cpu crj-2gpu.ini --cluster.transport=ucx ;;
    *) echo "run_multi: unknown step $s" ;;
  esac
done

python3 "$here/collect_multi.py" --runs "$out/runs" --status "$out/status.csv" --nvlink "$out/nvlink.csv" \
  --device "$device" --date "$date" --commit "$commit" --csv "$out/results.csv" --summary "$out/summary.csv" \
  2>&1 | tee "$out/logs/collect.txt"
ls "$out"/runs/*/*.trace.json > /dev/null 2>&1 &&
  python3 "$here/alltoall_trace.py" "$out"/runs/*/*.trace.json > "$out/alltoall.csv" 2>&1
results=${JL_RESULTS:-$root/experiments/results/$(machine_name)}
bench=${JL_BENCHMARK:-multi-gpu}
mkdir -p "$results"
cp "$out/summary.csv" "$results/$bench.csv"
cp "$out/results.csv" "$results/$bench-runs.csv"
[ -f "$out/alltoall.csv" ] && cp "$out/alltoall.csv" "$results/$bench-per-rank.csv"
[ -s "$out/nvlink.csv" ] && cp "$out/nvlink.csv" "$results/nvlink.csv"
echo "run_multi: results in $results ($bench.csv, $bench-runs.csv, $bench-per-rank.csv)"
echo "run_multi: done; failed runs:"
awk -F, 'NR > 1 && $4 != 0 {print "  " $1 " (exit " $4 ")"}' "$out/status.csv"
exit 0
