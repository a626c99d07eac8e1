#!/usr/bin/env bash
# The all-to-all benchmark on 2 GPUs of one host, about 3 minutes, from the repository root:
#   experiments/multi-gpu/run_alltoall.sh CARRY_DIR OUT_DIR
# CARRY_DIR holds bin.tar.xz (joinlab, p2p_bandwidth, test_cuda_fabric of a device build:
# -DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF -DJOINLAB_STATIC_BOOST=ON -DJOINLAB_MPI=ON) and lib/
# (libmpi_cxx.so.40, which the device lacks), or the binaries themselves.
# Steps, through run_multi.sh with JL_BENCHMARK=alltoall (its logs, status.csv, results.csv and
# summary.csv in OUT_DIR; alltoall.csv, alltoall-runs.csv, alltoall-per-rank.csv and nvlink.csv in
# experiments/results/<machine>):
#   bw       GPU0 -> GPU1 copy bandwidth, alone and both ways at once (nvlink.csv)
#   tests    test_cuda_fabric (peer, ucx, nccl as threads; it prints a line per transport and
#            run, so a cut-short log shows where it was) and gpu_cases.sh shuffle_nccl, shuffle_ucx (processes)
#   shuffle  shuffle-2gpu.ini, threads over peer with whole partitions per message (the ini) and
#            with the first device run's 128 MiB chunks, peer as 2 nodes x 1 GPU with two levels,
#            nccl as threads and under mpirun
# OUT_DIR/alltoall.csv: each run's all-to-all phase per rank (alltoall_trace.py: lead-in,
# receive span and rate, tail). The summary's fraction_of_nvlink is the all-to-all rate over the
# measured GPU-to-GPU copy bandwidth.
set -uo pipefail
carry=$(cd "${1:?usage: run_alltoall.sh CARRY_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: run_alltoall.sh CARRY_DIR OUT_DIR}"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
bin=$carry
if [ -f "$carry/bin.tar.xz" ]; then
  bin=$(mktemp -d /tmp/jl-a2a-bin.XXXXXX)
  tar xJf "$carry/bin.tar.xz" -C "$bin"
fi
[ -d "$carry/lib" ] && export LD_LIBRARY_PATH="$carry/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=index,name,memory.used --format=csv > "$out/gpus.txt" 2>&1
JL_BENCHMARK=${JL_BENCHMARK:-alltoall} JL_STEPS="bw tests shuffle" JL_RUN_S=${JL_RUN_S:-100} JL_GPU_CASES=${JL_GPU_CASES:-"shuffle_nccl shuffle_ucx"} \
  JL_SHUFFLE=${JL_SHUFFLE:-"threads:peer:1x2:1 threads:peer:1x2:1:chunk_rows=16Mi;inflight=4 threads:peer:2x1:2 threads:nccl:1x2:1 mpirun:nccl:1x2:1"} \
  bash "$here/run_multi.sh" "$bin" "$out"
table() { if command -v column > /dev/null; then column -t -s,; else cat; fi; }
echo "run_alltoall: all-to-all phase per rank ($out/alltoall.csv):"
sed "s|$out/runs/||" "$out/alltoall.csv" | table
echo "run_alltoall: all-to-all rate over NVLink bandwidth (summary.csv):"
cut -d, -f1,3,4,7,9,10,12,13 "$out/summary.csv" | table
echo "run_alltoall: test_cuda_fabric:"
grep -E "^\[fabric\]|FAILED|PASSED|Failure|error" "$out/logs/test_cuda_fabric.log" | tail -30
exit 0
