#!/usr/bin/env bash
# Calibration and validation runs on the device machine, one command: calibrate the GPU's profile, then run the validation
# experiments (their measurements), every step under a time limit (about 6 minutes in all on an H100).
#   experiments/validate/run_device.sh BIN_DIR OUT_DIR
# BIN_DIR holds joinlab from a device build (-DJOINLAB_CUDA=ON -DJOINLAB_SIMGRID=OFF
# -DJOINLAB_STATIC_BOOST=ON); the device machine has no SimGrid, so the comparison with the
# simulation runs afterwards where SimGrid is (validate --measured). Writes to OUT_DIR:
#   <profile>.ini            the calibrated profile (copy it to models/profiles/<profile>.ini)
#   calibrate.log            calibrate's progress, its wall time at the end
#   validate/<name>.csv      `joinlab run` rows of each validation experiment (phases, totals)
#   validate/<name>.log      its table and errors
#   status.txt               one line per step: name, exit code, seconds
# Environment: JL_PROFILE (default h100, or h200 when GPU 0 is an H200), JL_CALIBRATE_S (240),
# JL_VALIDATE_S (150 per experiment), JL_VALIDATE (experiment names; default by profile:
# single-gpu on h100; shuffle-2gpu gpj-2gpu on h200 with 2 GPUs), JL_CALIBRATE_ARGS (extra
# calibrate options, e.g. --repeat 5).
# Then, where SimGrid is (e.g. the CI machine), for each experiment:
#   joinlab validate experiments/validate/single-gpu.ini --measured OUT_DIR/validate/single-gpu-cuda.csv \
#       --profile OUT_DIR/h100.ini --out OUT_DIR/validate/single-gpu-validate.csv --max-error 0.1
set -uo pipefail
bin=$(cd "${1:?usage: run_device.sh BIN_DIR OUT_DIR}" && pwd)
mkdir -p "${2:?usage: run_device.sh BIN_DIR OUT_DIR}/validate"
out=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | wc -l)
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
case "$gpu" in *H200*) default_profile=h200 ;; *) default_profile=h100 ;; esac
profile=${JL_PROFILE:-$default_profile}
if [ "$profile" = h200 ]; then
  default_runs="shuffle-2gpu gpj-2gpu"
  [ "$gpus" -lt 2 ] && default_runs=""
else
  default_runs="single-gpu"
fi
: > "$out/status.txt"
step() {  # step NAME LIMIT_S LOG command...
  local name=$1 limit=$2 log=$3; shift 3
  local t0 rc
  t0=$(date +%s.%N)
  timeout --kill-after=10 "$limit" "$@" > "$log" 2>&1
  rc=$?
  local secs
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  echo "$name exit $rc ${secs}s" | tee -a "$out/status.txt"
  return $rc
}
echo "device: $gpu ($gpus GPU(s)); profile $profile" | tee -a "$out/status.txt"
# shellcheck disable=SC2086  # JL_CALIBRATE_ARGS is split on purpose
step calibrate "${JL_CALIBRATE_S:-240}" "$out/calibrate.log" \
  "$bin/joinlab" calibrate --backend cuda --profile "$profile" --out "$out/$profile.ini" ${JL_CALIBRATE_ARGS:-}
tail -3 "$out/calibrate.log"
for name in ${JL_VALIDATE:-$default_runs}; do
  step "run $name" "${JL_VALIDATE_S:-150}" "$out/validate/$name.log" \
    "$bin/joinlab" run "$here/$name.ini" --experiment.output_dir="$out/validate" --quiet
  tail -2 "$out/validate/$name.log"
done
cat "$out/status.txt"
