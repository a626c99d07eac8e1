#!/usr/bin/env bash
# Multi-GPU validation, the device half: on one host with 4 (or 2) H100 or H200 GPUs, in one call
# of at most ~9 minutes, measure what the multi-GPU bar needs (shuffle one- and two-level, gpj,
# gpj-b and crj at 2 and 4 GPUs; `joinlab validate` within 10% in total and 20% per phase) on runs
# not used for fitting, and calibrate this machine's profile beside them.
#   experiments/validate/run_multi_gpu_validation.sh BIN_DIR OUT_DIR [STEP ...]
# BIN_DIR holds joinlab and p2p_bandwidth of a device build (-DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF
# -DJOINLAB_STATIC_BOOST=ON; every run is threads in one process, so -DJOINLAB_MPI=OFF will do; a
# BIN_DIR/lib folder, e.g. with an MPI build's libmpi_cxx.so.40, goes on LD_LIBRARY_PATH). Then,
# where SimGrid is:
#   experiments/validate/fit_and_validate_multi.sh OUT_DIR
# Steps, in this order (default all; each under `timeout`, never past the call's deadline):
#   links      p2p_bandwidth: GPU 0 -> 1 alone and both ways, then --peers 2 and --peers 4 (one GPU
#              to several peers at once, several to one, every GPU to every other) -> links.csv
#   calibrate  joinlab calibrate --backend cuda: this machine's profile (h100 or h200, from the GPU's
#              name; the peer link is measured, two GPUs being visible), with the shuffle's hash
#              partitions at fanouts 2, 4 and 8, the host CPUs' per-core rates alone and with every
#              core busy, the memory roof, and the transports' per-message costs over 2 ranks
#              -> PROFILE.ini, its samples in samples.tar.xz
#   shuffle1   multi-gpu-shuffle-1level.ini: one-level shuffle, 1 x 2 and 1 x 4 GPUs
#   shuffle2   multi-gpu-shuffle-2level.ini: two-level shuffle, 2 x 1 and 2 x 2 GPUs (emulate_nodes)
#   gpj        multi-gpu-gpj.ini: gpj and gpj-b, 2 and 4 GPUs
#   crj        multi-gpu-crj.ini: crj, 2 and 4 CPU ranks
#   localjoin  multi-gpu-local-join.ini (diagnostic, one GPU): npj (the shuffle's local join) and
#              phj (gpj-b's) at 16-byte tuples, each with count_then_write and with direct output
# GPU runs are ranks as threads over the peer transport (cluster.transport=peer), repeat 5 (the CSV's
# total and phases are the median run's), each verified by joinlab (a wrong result exits 3 and is a
# failed step, never a number). With 2 GPUs only the 2-GPU points run.
# OUT_DIR at the end (8 files, none in folders: a GPU machine's results come back as at most 8 files):
#   PROFILE.ini      the calibrated GPU profile (h100.ini or h200.ini)
#   measured.csv     every run's row (device, date, commit and the step first; the union of columns)
#   links.csv        peer copy bandwidths: pair,<a>,<b>,<one way>,<both ways> and peers,<n>,<fan out>,<fan in>,<all to all>
#   alltoall.csv     per shuffle run and rank: the all-to-all's lead-in, receive span and rate, tail
#   ops.csv          per run, rank and phase: each operator kind's count, summed and busy time
#   status.csv       step,exit,seconds,limit_s (exit 124: timed out; "skipped": not run, and why)
#   logs.tar.xz      every log, the Chrome traces, nvidia-smi and the GPU topology
#   samples.tar.xz   calibration samples (refit with joinlab calibrate --fit)
# Environment: JL_TOTAL_S (520: the deadline of the whole call, packing included), JL_REPEAT (5),
# JL_PROFILE (h100 / h200: from the GPU's name), JL_CALIBRATE_ARGS (extra calibrate options),
# JOINLAB_COMMIT.
# Expected time on 4 H100s (estimate from the steps' earlier runs: calibrate 43 s on an H100 before
# the low fanouts were added; the 2^27-rows-per-GPU shuffles took 4 s a call, gpj 2^27 0.3 s a run):
# links ~15 s, calibrate ~130 s, shuffles ~20 s each, gpj ~60 s, crj ~40 s, localjoin ~10 s: about
# 4-5 minutes; the step limits below sum to more, the deadline caps the call.
set -uo pipefail
usage="usage: run_multi_gpu_validation.sh BIN_DIR OUT_DIR [links calibrate shuffle1 shuffle2 gpj crj localjoin]"
bin=$(cd "${1:?$usage}" && pwd)
mkdir -p "${2:?$usage}"
out=$(cd "$2" && pwd)
shift 2
steps=${*:-links calibrate shuffle1 shuffle2 gpj crj localjoin}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
deadline=$((SECONDS + ${JL_TOTAL_S:-520}))
repeat=${JL_REPEAT:-5}
export NCCL_NVLS_ENABLE=0  # NVLink multicast stays off on these machines
[ -d "$bin/lib" ] && export LD_LIBRARY_PATH="$bin/lib:${LD_LIBRARY_PATH:-}"
work=$out/work             # packed into logs.tar.xz / samples.tar.xz at the end
mkdir -p "$work/logs" "$work/runs" "$work/samples"
date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
commit=${JOINLAB_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
device=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
case "$device" in *H200*) profile=${JL_PROFILE:-h200} ;; *) profile=${JL_PROFILE:-h100} ;; esac
nvidia-smi > "$work/logs/nvidia-smi.txt" 2>&1
nvidia-smi topo -m > "$work/logs/topo.txt" 2>&1
echo "step,exit,seconds,limit_s" > "$out/status.csv"
echo "run_multi_gpu_validation: $device x $gpus, profile $profile, commit $commit, $date, steps: $steps" |
  tee "$work/logs/run.txt"
counts=2
[ "$gpus" -ge 4 ] && counts=2,4

# step NAME LIMIT_S LOG COMMAND...: runs it under min(LIMIT_S, time left before the deadline less
# 20 s for packing); a step with under 10 s left is skipped.
step() {
  local name=$1 limit=$2 log=$3
  shift 3
  local left=$((deadline - SECONDS - 20))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 10 ]; then
    echo "$name,skipped: out of time,0,0" >> "$out/status.csv"
    echo "=== $name: skipped (out of time)"
    return 1
  fi
  local t0=$SECONDS
  echo "=== $name (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  echo "$name,$rc,$((SECONDS - t0)),$limit" >> "$out/status.csv"
  if [ "$rc" -ne 0 ]; then
    echo "!!! $name exited $rc after $((SECONDS - t0)) s; last lines:"
    tail -5 "$log"
  fi
  return "$rc"
}
# run NAME LIMIT_S INI [overrides...]: one experiment, its CSV and traces in work/runs/NAME.
run() {
  local name=$1 limit=$2 ini=$3
  shift 3
  step "$name" "$limit" "$work/logs/$name.log" "$bin/joinlab" run "$here/$ini" \
    --experiment.output_dir="$work/runs/$name" --experiment.repeat="$repeat" "$@"
  tail -4 "$work/logs/$name.log" | grep -E "^[a-z-]+ +(cuda|cpu) " || true
}

for s in $steps; do
  case $s in
    links)
      {
        step pair 30 "$work/logs/p2p-pair.log" "$bin/p2p_bandwidth" 0 1 && echo "pair,$(tail -1 "$work/logs/p2p-pair.log")"
        for n in 2 4; do
          [ "$n" -le "$gpus" ] && step "peers$n" 40 "$work/logs/p2p-peers$n.log" "$bin/p2p_bandwidth" --peers "$n" &&
            echo "peers,$(tail -1 "$work/logs/p2p-peers$n.log")"
        done
      } > "$work/links.body"
      grep -v "^===\|^!!!" "$work/links.body" | grep -E "^(pair|peers)," > "$out/links.csv" || true
      grep -E "^===|^!!!" "$work/links.body" || true
      cat "$out/links.csv" ;;
    calibrate)
      # shellcheck disable=SC2086  # JL_CALIBRATE_ARGS is split on purpose
      step calibrate 150 "$work/logs/calibrate.log" "$bin/joinlab" calibrate --backend cuda --profile "$profile" \
        --base "$profile" --out "$out/$profile.ini" --samples "$work/samples/calibrate-samples.txt" ${JL_CALIBRATE_ARGS:-}
      grep -E "done at|wrote|rror" "$work/logs/calibrate.log" | tail -3 ;;
    shuffle1) run shuffle-1level 90 multi-gpu-shuffle-1level.ini --cluster.transport=peer --sweep.cluster.gpus_per_node="$counts" ;;
    shuffle2)
      per=1; [ "$gpus" -ge 4 ] && per=1,2
      run shuffle-2level 90 multi-gpu-shuffle-2level.ini --cluster.transport=peer --sweep.cluster.gpus_per_node="$per" ;;
    gpj) run gpj 150 multi-gpu-gpj.ini --cluster.transport=peer --sweep.cluster.gpus_per_node="$counts" ;;
    crj) run crj 120 multi-gpu-crj.ini --sweep.cluster.gpus_per_node="$counts" ;;
    localjoin) run local-join 60 multi-gpu-local-join.ini ;;
    *) echo "unknown step '$s' ($usage)"; exit 2 ;;
  esac
done

# Every run's CSV rows into one file (device, date, commit, step first; the union of the columns:
# joinlab validate reads columns by name and ignores the extra ones), then the trace breakdowns.
python3 - "$work/runs" "$out/measured.csv" "$device" "$date" "$commit" <<'EOF'
import csv, glob, os, sys
runs, dst, device, date, commit = sys.argv[1:]
rows, cols = [], ["device", "date", "commit", "run"]
for path in sorted(glob.glob(os.path.join(runs, "*", "*.csv"))):
    for r in csv.DictReader(open(path)):
        # The binary's own commit where its rows have it (the tree copied to a GPU machine may carry an older .git).
        c = r.get("git_commit", "")[:7] or commit
        r = {"device": device, "date": date, "commit": c, "run": os.path.basename(os.path.dirname(path)), **r}
        cols += [c for c in r if c not in cols]
        rows.append(r)
with open(dst, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
# A real run's "verified" says how (closed form, reference join); a wrong result never gets a row.
bad = [r["run"] + " point " + r.get("point", "?") for r in rows
       if not r.get("verified") or r["verified"] in ("no", "false") or r["verified"].startswith("not verified")]
print(f"measured.csv: {len(rows)} run rows" + (f"; NOT verified: {', '.join(bad)}" if bad else ", every one verified"))
EOF
traces=$(find "$work/runs" -name '*.trace.json' | sort)
if [ -n "$traces" ]; then
  mapfile -t all <<< "$traces"
  mapfile -t shuffles < <(grep shuffle <<< "$traces")
  python3 "$root/experiments/multi-gpu/alltoall_trace.py" "${shuffles[@]}" > "$out/alltoall.csv" 2> "$work/logs/alltoall.err"
  python3 "$here/op_breakdown.py" "${all[@]}" > "$out/ops.csv" 2> "$work/logs/ops.err"
fi
(cd "$work" && tar cJf "$out/logs.tar.xz" logs runs && tar cJf "$out/samples.tar.xz" samples) && rm -rf "$work"
echo "run_multi_gpu_validation: done in $SECONDS s; steps that failed or were skipped:"
awk -F, 'NR > 1 && $2 != 0 {print "  " $1 " (" $2 ")"}' "$out/status.csv"
exit 0
