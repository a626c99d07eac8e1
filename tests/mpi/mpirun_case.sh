#!/usr/bin/env bash
# One multi-process test: mpirun_case.sh JOINLAB CASE
# Runs `joinlab run tests/mpi/small.ini` as 4 processes under mpirun (UCX on loopback, the cpu
# backend) and checks the outcome of CASE:
#   shuffle shuffle_two_level gpj gpj_b gpj_h crj   the join is verified (exit 0, "yes")
#   mpi_transport           gpj and shuffle over the MPI data plane, verified
#   shape_mismatch          3 processes for a 4-rank experiment: exit 2 naming both shapes
#   kill_rank               rank 2 kills itself (SIGKILL) after its second data-plane operation;
#                           mpirun --enable-recovery lets the others run on: they must name
#                           rank 2 and end the job with a failure within 30 s (the first to fail
#                           ends it: the others may be ended before they print)
#   kill_rank_plain_mpirun  the same under plain mpirun (which aborts the job itself): the job
#                           ends with a failure within 30 s
#   stall_rank              rank 2 stops (SIGSTOP): the others name it within 30 s
#   stall_rank_recovery     the same under mpirun --enable-recovery (which would wait for the
#                           stopped rank forever)
#   startup_kill            rank 2 dies before MPI_Init_thread (--enable-recovery)
#   mpi_init_kill           rank 2 dies inside MPI_Init_thread (plain mpirun)
#   mpi_init_stall          rank 2 stops inside MPI_Init_thread (--enable-recovery)
#   wireup_kill             rank 2 dies before the UCX wireup (--enable-recovery)
#   wireup_stall            rank 2 stops before the UCX wireup (plain mpirun)
#                           start-up cases: timeout_s = 10, so the start-up bound is 5 s; the job
#                           must fail naming rank 2 within 30 s (mpirun's own start and teardown of
#                           4 processes took up to 21 s on a 2-core machine busy with a build)
#   mpi_transport_faults    rank 2 killed, then stopped, mid-run over the MPI data plane under
#                           --enable-recovery (the plane looks for the job's gone or stopped
#                           processes on its host): each run fails naming rank 2 within 20 s
#   corrupt_chunk           one chunk of gpj arrives corrupted: the checksum catches it
# Every failure case also checks that no process of the job is left (a marker in the environment
# of every process it started).
set -uo pipefail
joinlab="$1"
case_name="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

mpirun_args=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpirun_args+=(--allow-run-as-root)
export UCX_WARN_UNUSED_ENV_VARS=n

# The result table goes to stdout and progress/errors to stderr; mpirun forwards both and may
# interleave them mid-line, so they are captured apart: $rows (stdout) for the table's rows,
# $out (stdout then stderr) for everything else.
out="$work/out.txt"
rows="$work/rows.txt"
run() {  # run NPROCS [mpirun options] -- [joinlab options]
  local np="$1"
  shift
  local pre=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do pre+=("$1"); shift; done
  shift
  local start=$SECONDS
  # The marker is in the environment of mpirun and of every process it starts, not of this script.
  # -k: an mpirun that ignores the TERM is killed 10 s later, so the case fails in bounded time.
  env JOINLAB_TEST_MARK="$mark" timeout -k 10 120 mpirun "${mpirun_args[@]}" -x JOINLAB_TEST_MARK "${pre[@]}" -np "$np" \
    "$joinlab" run "$here/small.ini" --quiet "$@" >"$rows" 2>"$work/err.txt"
  status=$?
  cat "$rows" "$work/err.txt" >"$out"
  elapsed=$((SECONDS - start))
  echo "--- mpirun -np $np ${pre[*]} joinlab run small.ini $*: exit $status after ${elapsed} s"
  cat "$out"
}
mark="mpirun-case-$$-$RANDOM"
fail() {
  echo "FAILED: $*"
  exit 1
}
leftovers() {  # pids of processes that carry this test's marker
  grep -lsa "JOINLAB_TEST_MARK=$mark" /proc/[0-9]*/environ | cut -d/ -f3 | tr '\n' ' '
}
# The job failed (non-zero exit) within $1 s and left no process behind.
failed_cleanly() {
  [ "$status" -ne 0 ] || fail "the job exited 0 although a rank failed"
  # 124: timeout's TERM ended it; killed 10 s later it exits 137, as a job whose rank was killed does.
  [ "$status" -ne 124 ] && [ "$elapsed" -lt 120 ] || fail "mpirun did not end (timeout)"
  [ "$elapsed" -le "$1" ] || fail "took ${elapsed} s (more than $1)"
  sleep 1
  local left
  left=$(leftovers)
  if [ -n "$left" ]; then
    ps -o pid,stat,args -p "${left// /,}" 2>/dev/null
    kill -9 $left 2>/dev/null
    fail "processes left behind: $left"
  fi
}
startup_fault() {  # startup_fault FAULT [mpirun options]: a start-up fault of rank 2
  local fault="$1"
  shift
  JOINLAB_FAULT="$fault" run 4 "$@" -x JOINLAB_FAULT -- --experiment.strategy=gpj "${small_chunks[@]}" --cluster.timeout_s=10
  failed_cleanly 30
  grep -q "rank 2 " "$out" || fail "no message names rank 2"
}
verified() {  # the strategy's row says "yes" in the verified column
  [ "$status" -eq 0 ] || fail "exit status $status"
  grep -Eq "^$1 +cpu +4 .* yes$" "$rows" || fail "no verified row for $1"
}
errors_naming() {  # at least $2 errors naming rank $1 as dead or stopped, within 30 s
  local n
  n=$(grep -o "rank $1 \(is unreachable\|stopped responding\)" "$out" | wc -l)
  [ "$n" -ge "$2" ] || fail "expected $2 errors naming rank $1, found $n"
  [ "$elapsed" -le 30 ] || fail "took ${elapsed} s (more than 30)"
}

small_chunks=(--strategy.chunk_bytes=4096 --strategy.slots=2 --strategy.batch_rows=20000)
case "$case_name" in
  shuffle) run 4 -- --experiment.strategy=shuffle; verified shuffle ;;
  shuffle_two_level)
    run 4 -- --experiment.strategy=shuffle --strategy.levels=2 --cluster.nodes=2 --cluster.gpus_per_node=2 \
      --cluster.emulate_nodes=true
    [ "$status" -eq 0 ] || fail "exit status $status"
    grep -Eq "^shuffle +cpu +4 .* yes$" "$rows" || fail "no verified row" ;;
  gpj) run 4 -- --experiment.strategy=gpj "${small_chunks[@]}"; verified gpj ;;
  gpj_b) run 4 -- --experiment.strategy=gpj-b "${small_chunks[@]}"; verified gpj-b ;;
  gpj_h)  # 300 KB of "GPU" memory per rank: some partitions stream, the rest joins on the CPU
    run 4 -- --experiment.strategy=gpj-h "${small_chunks[@]}" --strategy.staging_rows=1024 --cluster.device_memory=300K
    verified gpj-h
    # Rank 0's trace holds every rank's spans: streamed chunks and CPU-joined rows, both.
    trace=results-mpi-tests/small-cpu.trace.json
    grep -q '"name":"stream_consume".*"bytes":[1-9]' "$trace" || fail "no partition was streamed to a GPU"
    grep -q '"name":"partitioned_join".*"rows_in":[1-9]' "$trace" || fail "no partition was joined on the CPU" ;;
  crj) run 4 -- --experiment.strategy=crj; verified crj ;;
  mpi_transport)  # the MPI data plane instead of UCX
    run 4 -- --experiment.strategy=gpj --cluster.transport=mpi "${small_chunks[@]}"; verified gpj
    run 4 -- --experiment.strategy=shuffle --cluster.transport=mpi; verified shuffle ;;
  shape_mismatch)
    run 3 -- --experiment.strategy=gpj
    [ "$status" -eq 2 ] || fail "exit status $status, expected 2 (bad input)"
    grep -q "declares 1 node x 4 ranks per node = 4 ranks" "$out" || fail "the declared shape is not named"
    grep -q "launched 3 processes on 1 host" "$out" || fail "the launch is not named" ;;
  kill_rank)
    JOINLAB_FAULT=kill:rank=2:op=2 run 4 --enable-recovery -x JOINLAB_FAULT -- --experiment.strategy=gpj \
      "${small_chunks[@]}" --cluster.timeout_s=20
    errors_naming 2 1
    failed_cleanly 30 ;;
  kill_rank_plain_mpirun)
    JOINLAB_FAULT=kill:rank=2:op=2 run 4 -x JOINLAB_FAULT -- --experiment.strategy=shuffle --cluster.timeout_s=20
    failed_cleanly 30 ;;
  stall_rank)
    JOINLAB_FAULT=stall:rank=2:op=2 run 4 -x JOINLAB_FAULT -- --experiment.strategy=crj --cluster.timeout_s=20
    failed_cleanly 30
    errors_naming 2 1
    grep -q "rank 2 stopped responding" "$out" || fail "no rank names rank 2 as stopped" ;;
  stall_rank_recovery)
    JOINLAB_FAULT=stall:rank=2:op=2 run 4 --enable-recovery -x JOINLAB_FAULT -- --experiment.strategy=crj \
      --cluster.timeout_s=20
    failed_cleanly 30
    errors_naming 2 1
    grep -q "rank 2 stopped responding" "$out" || fail "no rank names rank 2 as stopped" ;;
  startup_kill) startup_fault kill:rank=2:at=startup --enable-recovery ;;
  mpi_init_kill) startup_fault kill:rank=2:at=mpi_init ;;
  mpi_init_stall) startup_fault stall:rank=2:at=mpi_init --enable-recovery ;;
  wireup_kill) startup_fault kill:rank=2:at=wireup --enable-recovery ;;
  wireup_stall) startup_fault stall:rank=2:at=wireup ;;
  mpi_transport_faults)
    for fault in kill:rank=2:op=2 stall:rank=2:op=2; do
      JOINLAB_FAULT=$fault run 4 --enable-recovery -x JOINLAB_FAULT -- --experiment.strategy=gpj --cluster.transport=mpi \
        "${small_chunks[@]}" --cluster.timeout_s=10
      failed_cleanly 30
      grep -q "rank 2 \(has no process any more\|(pid [0-9]*) is stopped\)" "$out" || fail "no message names rank 2"
    done ;;
  corrupt_chunk)
    JOINLAB_FAULT=corrupt:rank=1:op=3 run 4 -x JOINLAB_FAULT -- --experiment.strategy=gpj "${small_chunks[@]}" \
      --strategy.chunk_timeout_s=2
    [ "$status" -ne 0 ] || fail "the corrupted chunk went unnoticed"
    grep -q "from rank 1 .* failed its checksum .*corrupted in flight" "$out" || fail "the checksum error is missing" ;;
  *) fail "unknown case $case_name" ;;
esac
echo "PASSED: $case_name"
