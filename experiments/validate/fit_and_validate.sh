#!/usr/bin/env bash
# The half of a calibration that needs SimGrid (no GPU): after run_calibrate_device.sh brought back
# OUT_DIR (h100.ini, samples.tar.xz, validate/single-gpu-cuda.csv), simulate every measured point with
# the calibrated profile, print the errors per strategy, and with --install make it the repository's
# profile (h100: re-derive the profiles scaled from it) and its results the current ones:
# experiments/results/<profile>/ calibration.ini, calibration-samples.tar.xz, calibration.log,
# validation.csv (the table), validation-measured.csv, validation-phases.csv,
# validation-phases-measured.csv, validation-traces.tar.xz.
#   experiments/validate/fit_and_validate.sh OUT_DIR [--install] [--refit]
# --refit fits the profile again from OUT_DIR's samples file (joinlab calibrate --fit: after a
# change of the fit or of a model form, no GPU needed) into OUT_DIR/h100-refit.ini and validates
# that one. Where OUT_DIR/phases holds the strategy runs at calibrate's sizes (step phases), the
# profile's [host] phase_seconds is fitted to them first (fit_phase_seconds.py). The validation
# points (1.5 x 2^k rows, Zipf 0/0.75/1.5) are never among calibrate's samples (2^k rows, Zipf
# 0/0.5/1/1.25/2) nor the phase runs (2^20..2^22 rows): nothing here fits anything to them.
# JOINLAB: a joinlab built with SimGrid (default build-models/joinlab). JL_PROFILE: the profile
# (h100; h200 for a calibration on an H200: OUT_DIR/h200.ini, installed without re-deriving).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=$(cd "${1:?usage: fit_and_validate.sh OUT_DIR [--install] [--refit]}" && pwd)
shift
install=0 refit=0
for a in "$@"; do
  case $a in --install) install=1 ;; --refit) refit=1 ;; *) echo "unknown option $a"; exit 2 ;; esac
done
joinlab=${JOINLAB:-$root/build-models/joinlab}
# Folders copied back from a GPU machine may be read-only: work on a copy.
if [ ! -w "$out" ] || [ ! -w "$out/validate" ]; then
  echo "fit_and_validate.sh: $out is not writable (copy it first: cp -r $out /tmp/cal && chmod -R u+w /tmp/cal)" >&2
  exit 2
fi
name=${JL_PROFILE:-h100}
profile=$out/$name.ini
if [ $refit = 1 ]; then
  samples=$out/samples/calibrate-samples.txt
  [ -f "$samples" ] || (cd "$out" && tar xJf samples.tar.xz)
  "$joinlab" calibrate --fit "$samples" --profile "$name" --base "$name" --out "$out/$name-refit.ini"
  profile=$out/$name-refit.ini
fi
# joinlab run names its CSV <name>-<backend>.csv; output folders of older builds hold <name>.csv.
measured() { if [ -f "$1-cuda.csv" ]; then echo "$1-cuda.csv"; else echo "$1.csv"; fi; }
# The per-phase host time ([host] phase_seconds) from the strategy runs at calibrate's sizes
# (run_calibrate_device.sh step phases), where there are some.
phases_csv=$(measured "$out/phases/phases")
if [ -f "$phases_csv" ]; then
  phases_table=$out/phases/phases-validate.csv
  "$joinlab" validate "$root/experiments/validate/phases.ini" --measured "$phases_csv" \
    --profile "$profile" --out "$phases_table" > "$out/phases/phases-validate.log" 2>&1 || [ $? = 3 ]
  python3 "$root/experiments/validate/fit_phase_seconds.py" "$phases_table" "$profile"
fi
table=$out/validate/single-gpu-validate.csv
# Exit 3 is the bar missed: the table is written either way.
"$joinlab" validate "$root/experiments/validate/single-gpu.ini" --measured "$(measured "$out/validate/single-gpu")" \
  --profile "$profile" --out "$table" --max-error 0.1 --max-phase-error 0.2 > "$out/validate/single-gpu-validate.log" 2>&1 ||
  [ $? = 3 ]
tail -3 "$out/validate/single-gpu-validate.log"
python3 "$root/experiments/validate/summarize.py" "$table" || true
if [ $install = 1 ]; then
  cp "$profile" "$root/models/profiles/$name.ini"
  if [ "$name" = h100 ]; then python3 "$root/models/derive_profiles.py"; fi  # the derived profiles scale the H100's
  results=$root/experiments/results/$name
  mkdir -p "$results"
  cp "$profile" "$results/calibration.ini"
  cp "$table" "$results/validation.csv"
  cp "$(measured "$out/validate/single-gpu")" "$results/validation-measured.csv"
  [ -f "$out/samples.tar.xz" ] && cp "$out/samples.tar.xz" "$results/calibration-samples.tar.xz"
  [ -f "$out/calibrate.log" ] && cp "$out/calibrate.log" "$results/calibration.log"
  [ -f "$out/traces.tar.xz" ] && cp "$out/traces.tar.xz" "$results/validation-traces.tar.xz"
  if [ -n "${phases_table:-}" ]; then
    cp "$phases_table" "$results/validation-phases.csv"
    cp "$phases_csv" "$results/validation-phases-measured.csv"
  fi
  echo "installed models/profiles/$name.ini; results in $results"
fi
