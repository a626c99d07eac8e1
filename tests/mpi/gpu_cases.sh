#!/usr/bin/env bash
# The cuda backend's ranks as processes, on a machine with GPUs: gpu_cases.sh JOINLAB [CASE...]
# Each case runs `mpirun -np 2 joinlab run gpu_small.ini --experiment.backend=cuda ...` (one
# process per GPU; with one GPU, share_gpus=1 and only the transports that allow two ranks on one
# GPU) and checks it:
#   shuffle_nccl shuffle_ucx   levels 1 and 2, as 1 node x 2 and as 2 nodes x 1 (emulate_nodes):
#                              4 verified runs each
#   gpj_nccl gpj_ucx           gpj (puts into the GPUs' rings: CUDA IPC, flags over UCX), verified
#   kill_nccl kill_ucx         rank 1 is killed (SIGKILL) during a long shuffle: the job must end
#                              with an error naming it (or NCCL) within 30 s of the kill (mpirun
#                              --enable-recovery, so that the surviving rank itself must notice)
# Default: every case this machine can run. NCCL_NVLS_ENABLE=0 is exported.
set -uo pipefail
joinlab="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
export NCCL_NVLS_ENABLE=0 UCX_WARN_UNUSED_ENV_VARS=n
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
mpirun_args=(--oversubscribe --bind-to none -x NCCL_NVLS_ENABLE -x UCX_WARN_UNUSED_ENV_VARS)
[ "$(id -u)" -eq 0 ] && mpirun_args+=(--allow-run-as-root)
share=()
[ "$gpus" -lt 2 ] && share=(--cluster.share_gpus=1)
cases=("$@")
if [ ${#cases[@]} -eq 0 ]; then
  cases=(shuffle_ucx gpj_ucx kill_ucx)
  [ "$gpus" -ge 2 ] && cases=(shuffle_nccl shuffle_ucx gpj_nccl gpj_ucx kill_nccl kill_ucx)
fi
failures=0
# stdout (the result table) and stderr apart, as in mpirun_case.sh: mpirun may interleave them
# mid-line. $rows: the table; $out: stdout then stderr.
out="$work/out.txt"
rows="$work/rows.txt"
run() {  # run [mpirun options] -- [joinlab options]
  local pre=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do pre+=("$1"); shift; done
  shift
  local start=$SECONDS
  timeout -k 10 180 mpirun "${mpirun_args[@]}" "${pre[@]}" -np 2 "$joinlab" run "$here/gpu_small.ini" "${share[@]}" "$@" \
    >"$rows" 2>"$work/err.txt"
  status=$?
  cat "$rows" "$work/err.txt" >"$out"
  elapsed=$((SECONDS - start))
  echo "--- mpirun -np 2 ${pre[*]} joinlab run gpu_small.ini ${share[*]} $*: exit $status after ${elapsed} s"
  tail -n 12 "$out"
}
fail() {
  echo "FAILED ($case): $*"
  failures=$((failures + 1))
}
verified() {  # exit 0 and the strategy's row says "yes"
  [ "$status" -eq 0 ] || { fail "exit status $status"; return; }
  grep -Eq "^$1 +cuda +2 .* yes$" "$rows" || fail "no verified row for $1"
}
# kill_case TRANSPORT: rank 1 dies 8 s into a long shuffle; the job must fail within 30 s after.
kill_case() {
  local start=$SECONDS
  mpirun "${mpirun_args[@]}" --enable-recovery -np 2 "$joinlab" run "$here/gpu_small.ini" "${share[@]}" \
    --cluster.transport="$1" --cluster.timeout_s=20 --experiment.repeat=200 --strategy.chunk_rows=2^16 >"$out" 2>&1 &
  local job=$!
  sleep 8
  local victim
  victim=$(pgrep -P "$job" -f joinlab | sed -n 2p)
  if [ -z "$victim" ]; then
    fail "found no second rank to kill (did the job end early?)"
    wait "$job"
    tail -n 12 "$out"
    return
  fi
  kill -KILL "$victim"
  local killed=$SECONDS
  local waited=0
  while kill -0 "$job" 2>/dev/null && [ "$waited" -lt 60 ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$job" 2>/dev/null; then
    kill -KILL "$job"
    fail "the job still ran 60 s after rank 1 was killed"
  fi
  wait "$job"
  status=$?
  elapsed=$((SECONDS - killed))
  echo "--- kill rank 1 ($1): exit $status, ${elapsed} s after the kill (run started $((killed - start)) s before)"
  tail -n 12 "$out"
  # (mpirun --enable-recovery may itself exit 0: the surviving rank's error is what counts)
  [ "$elapsed" -le 30 ] || fail "took ${elapsed} s after the kill (more than 30)"
  grep -q "joinlab: error:" "$out" || fail "no rank reported an error"
  grep -Eq "rank [01] (is unreachable|stopped responding|failed)|NCCL" "$out" || fail "no error names the dead rank or NCCL"
}

for case in "${cases[@]}"; do
  echo "=== $case"
  case "$case" in
    shuffle_nccl|shuffle_ucx)
      t=${case#shuffle_}
      for levels in 1 2; do
        run -- --experiment.strategy=shuffle --cluster.transport="$t" --strategy.levels="$levels" --strategy.chunk_rows=2^18
        verified shuffle
        run -- --experiment.strategy=shuffle --cluster.transport="$t" --strategy.levels="$levels" --strategy.chunk_rows=2^18 --cluster.nodes=2 \
          --cluster.gpus_per_node=1 --cluster.emulate_nodes=true
        verified shuffle
      done ;;
    gpj_nccl|gpj_ucx)
      run -- --experiment.strategy=gpj --cluster.transport="${case#gpj_}" --strategy.chunk_bytes=65536 \
        --strategy.batch_rows=262144
      verified gpj ;;
    kill_nccl|kill_ucx) kill_case "${case#kill_}" ;;
    *) fail "unknown case" ;;
  esac
done
[ "$failures" -eq 0 ] && echo "PASSED: ${cases[*]}" || echo "FAILED: $failures check(s)"
[ "$failures" -eq 0 ]
