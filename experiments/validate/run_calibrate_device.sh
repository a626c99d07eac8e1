#!/usr/bin/env bash
# Issue 4 item 4 on the H100, one device call: calibrate a candidate h100 profile with the
# cache-aware operator models (models/op_model.hpp), then measure the validation points
# (experiments/validate/h100-single.ini: 1.5 x 2^k rows, Zipf 0/0.75/1.5, none of which calibrate
# measures), each step under a time limit.
#   experiments/validate/run_calibrate_device.sh BIN_DIR OUT_DIR [calibrate|measure ...]
# BIN_DIR holds joinlab from a device build (-DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF
# -DJOINLAB_STATIC_BOOST=ON). Steps (default: both):
#   calibrate  joinlab calibrate --backend cuda -> OUT_DIR/h100.ini (the candidate profile) and
#              OUT_DIR/calibrate.log (progress with wall times, the fit's rms error per model)
#   measure    joinlab run h100-single.ini -> OUT_DIR/validate/h100-single.csv (+ its log)
# OUT_DIR/status.txt: one line per step (exit code, seconds). Environment: JL_CALIBRATE_S (300),
# JL_MEASURE_S (260), JL_CALIBRATE_ARGS (extra calibrate options, e.g. "--repeat 2" or
# "--max-rows 2^27" to fit a shorter limit), JL_MEASURE_ARGS (extra run options).
# Both steps fit one device call (10 minutes): calibrate's operators take about 31 s of device
# time (simulated with the 2026-11-22 profile; the older, smaller calibrate took 20 s in all),
# measuring the 48 points about 2-3 minutes. If a step runs out of time, run them as two calls:
#   experiments/validate/run_calibrate_device.sh BIN_DIR $OUT calibrate   (then ... measure)
# Then, where SimGrid is:
#   joinlab validate experiments/validate/h100-single.ini --measured OUT/validate/h100-single.csv \
#       --profile OUT/h100.ini --out OUT/validate/h100-single-validate.csv --max-error 0.1 --max-phase-error 0.2
# and, if it meets the bar, copy OUT/h100.ini to models/profiles/h100.ini and re-derive the
# other profiles (python3 models/derive_profiles.py).
set -uo pipefail
bin=$(cd "${1:?usage: run_calibrate_device.sh BIN_DIR OUT_DIR [calibrate|measure ...]}" && pwd)
mkdir -p "${2:?usage: run_calibrate_device.sh BIN_DIR OUT_DIR [calibrate|measure ...]}/validate"
out=$(cd "$2" && pwd)
shift 2
steps=${*:-calibrate measure}
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
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
for s in $steps; do
  case $s in
    calibrate)
      # shellcheck disable=SC2086  # JL_CALIBRATE_ARGS is split on purpose
      step calibrate "${JL_CALIBRATE_S:-300}" "$out/calibrate.log" \
        "$bin/joinlab" calibrate --backend cuda --profile h100 --base h100 --out "$out/h100.ini" ${JL_CALIBRATE_ARGS:-}
      grep -E "done at|wrote|rror" "$out/calibrate.log" | tail -6
      grep -E "^(cache|seg) " "$out/h100.ini" 2>/dev/null | grep -oE "rms error [0-9.]+%, max [0-9.]+%" | sort | uniq -c | head -20
      ;;
    measure)
      # shellcheck disable=SC2086
      step measure "${JL_MEASURE_S:-260}" "$out/validate/h100-single.log" \
        "$bin/joinlab" run "$here/h100-single.ini" --experiment.output_dir="$out/validate" --quiet ${JL_MEASURE_ARGS:-}
      tail -3 "$out/validate/h100-single.log"
      ;;
    *) echo "unknown step '$s' (calibrate, measure)"; exit 2 ;;
  esac
done
cat "$out/status.txt"
