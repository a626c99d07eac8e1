#!/usr/bin/env bash
# Calibration and validation measurements on one GPU, one device call: calibrate a candidate profile (models/calibrate.hpp
# says how a sample is timed: cold caches, closing synchronization), then measure the validation
# points (experiments/validate/single-gpu.ini: 1.5 x 2^k rows, Zipf 0/0.75/1.5, none of which
# calibrate measures), each step under a time limit. Re-calibrating after a kernel change is this
# one command, then fit_and_validate.sh where SimGrid is.
#   experiments/validate/run_calibrate_device.sh BIN_DIR OUT_DIR [calibrate|warm|probe6|measure ...]
# BIN_DIR holds joinlab from a device build (-DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF
# -DJOINLAB_STATIC_BOOST=ON). Steps (default: calibrate phases measure):
#   calibrate  joinlab calibrate --backend cuda --samples -> OUT_DIR/h100.ini (the candidate profile),
#              OUT_DIR/calibrate.log, OUT_DIR/samples/calibrate-samples.txt (every timed run: refit
#              with `joinlab calibrate --fit FILE` without a GPU)
#   warm       the same with --warm (caches left warm between runs: the protocol of the profiles
#              before 2026-11-23), 2^20..2^24 rows only -> OUT_DIR/samples/warm-samples.txt; for
#              comparison, never fitted
#   probe6     DIAGNOSTIC ONLY, never fitted: calibrate's operators at 6Mi and 12Mi rows (validation
#              sizes), cold and warm -> OUT_DIR/samples/diagnostic-6Mi-{cold,warm}-samples.txt, to
#              compare calibrate's timing of an operator with the same operator inside a real run
#   phases     joinlab run phases.ini (npj/phj/smj/chunked at calibrate's sizes 2^20..2^22) ->
#              OUT_DIR/phases/phases-cuda.csv: what fit_and_validate.sh fits [host] phase_seconds to
#   measure    joinlab run single-gpu.ini -> OUT_DIR/validate/single-gpu-cuda.csv (+ its log), the
#              Chrome traces of every point packed in OUT_DIR/traces.tar.xz
# OUT_DIR/status.txt: one line per step (exit code, seconds); OUT_DIR/samples is packed into
# OUT_DIR/samples.tar.xz at the end (a GPU machine's results come back as at most 8 files).
# Environment: JL_CALIBRATE_S (300), JL_MEASURE_S (300), JL_CALIBRATE_ARGS (extra calibrate
# options, e.g. "--repeat 2" or "--max-rows 2^27" to fit a shorter limit), JL_MEASURE_ARGS,
# JL_PROFILE (h100: the profile calibrated, OUT_DIR/JL_PROFILE.ini; h200 on an H200).
# Time on an H100 (2026-11-22): calibrate about 43 s, phases 2 s, measure (48 points x 15 runs) 75 s.
# Then, where SimGrid is:  experiments/validate/fit_and_validate.sh OUT_DIR
set -uo pipefail
bin=$(cd "${1:?usage: run_calibrate_device.sh BIN_DIR OUT_DIR [steps]}" && pwd)
mkdir -p "${2:?usage: run_calibrate_device.sh BIN_DIR OUT_DIR [steps]}/validate" "$2/samples"
out=$(cd "$2" && pwd)
shift 2
steps=${*:-calibrate phases measure}
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi > "$out/samples/nvidia-smi.txt" 2>&1
step() {  # step NAME LIMIT_S LOG command...
  local name=$1 limit=$2 log=$3; shift 3
  local t0 rc secs
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$name exit $rc ${secs}s" | tee -a "$out/status.txt"
  return $rc
}
profile=${JL_PROFILE:-h100}  # the profile calibrated (and the base of what it does not measure)
cal=("$bin/joinlab" calibrate --backend cuda --profile "$profile" --base "$profile")
for s in $steps; do
  case $s in
    calibrate)
      # shellcheck disable=SC2086  # JL_CALIBRATE_ARGS is split on purpose
      step calibrate "${JL_CALIBRATE_S:-300}" "$out/calibrate.log" \
        "${cal[@]}" --out "$out/$profile.ini" --samples "$out/samples/calibrate-samples.txt" ${JL_CALIBRATE_ARGS:-}
      grep -E "done at|wrote|rror" "$out/calibrate.log" | tail -4
      ;;
    warm)
      step warm 120 "$out/samples/warm.log" "${cal[@]}" --warm --max-rows 16777216 --out "$out/samples/warm.ini" \
        --samples "$out/samples/warm-samples.txt"
      ;;
    probe6)
      for mode in cold warm; do
        flag=""; [ $mode = warm ] && flag=--warm
        # shellcheck disable=SC2086
        step "probe6 $mode" 120 "$out/samples/diagnostic-6Mi-$mode.log" "${cal[@]}" $flag --min-rows 6291456 \
          --max-rows 12582912 --out "$out/samples/diagnostic-6Mi-$mode.ini" \
          --samples "$out/samples/diagnostic-6Mi-$mode-samples.txt"
      done
      ;;
    measure)
      # shellcheck disable=SC2086
      step measure "${JL_MEASURE_S:-300}" "$out/validate/single-gpu.log" \
        "$bin/joinlab" run "$here/single-gpu.ini" --experiment.output_dir="$out/validate" --quiet ${JL_MEASURE_ARGS:-}
      tail -3 "$out/validate/single-gpu.log"
      (cd "$out/validate" && ls ./*.trace.json > /dev/null 2>&1 && tar cJf "$out/traces.tar.xz" ./*.trace.json &&
        rm -f ./*.trace.json)
      ;;
    phases)
      # shellcheck disable=SC2086
      mkdir -p "$out/phases"
      step phases "${JL_MEASURE_S:-300}" "$out/phases/phases.log" \
        "$bin/joinlab" run "$here/phases.ini" --experiment.output_dir="$out/phases" --quiet ${JL_MEASURE_ARGS:-}
      tail -3 "$out/phases/phases.log"
      (cd "$out/phases" && ls ./*.trace.json > /dev/null 2>&1 && tar cJf "$out/phases-traces.tar.xz" ./*.trace.json &&
        rm -f ./*.trace.json)
      ;;
    *) echo "unknown step '$s' (calibrate, warm, probe6, phases, measure)"; exit 2 ;;
  esac
done
(cd "$out" && tar cJf samples.tar.xz samples && rm -rf samples)
cat "$out/status.txt"
