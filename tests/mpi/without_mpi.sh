#!/usr/bin/env bash
# A joinlab built without MPI (JOINLAB_MPI=OFF) started as several processes: without_mpi.sh JOINLAB
# Each would run the whole job alone and write the same files, so the launch is refused at once
# (exit 2) with an error that names the problem. Checked with a launcher's environment set by
# hand and, where OpenMPI is installed, under `mpirun -np 2`.
set -uo pipefail
joinlab="$1"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
fail() {
  echo "FAILED: $*"
  exit 1
}
check() {  # check STATUS: exit 2, the problem named, nothing written
  [ "$1" -eq 2 ] || fail "exit status $1, expected 2"
  grep -q "built without MPI" "$work/err.txt" || fail "the error does not name the missing MPI"
  [ ! -e results-mpi-tests ] || fail "the job ran (results-mpi-tests was written)"
}

env OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0 "$joinlab" run "$here/small.ini" --quiet >"$work/out.txt" 2>"$work/err.txt"
status=$?
cat "$work/out.txt" "$work/err.txt"
check "$status"

if command -v mpirun >/dev/null; then
  args=(--oversubscribe)
  [ "$(id -u)" -eq 0 ] && args+=(--allow-run-as-root)
  timeout 60 mpirun "${args[@]}" -np 2 "$joinlab" run "$here/small.ini" --quiet >"$work/out.txt" 2>"$work/err.txt"
  status=$?
  cat "$work/out.txt" "$work/err.txt"
  [ "$status" -ne 0 ] || fail "mpirun -np 2 succeeded"
  [ "$status" -ne 124 ] || fail "mpirun -np 2 hung"
  grep -q "built without MPI" "$work/err.txt" || fail "the error does not name the missing MPI"
  [ ! -e results-mpi-tests ] || fail "the job ran (results-mpi-tests was written)"
fi
echo "PASSED"
