#!/usr/bin/env bash
# Multi-GPU validation, the half that needs SimGrid (no GPU): simulate every run that
# run_multi_gpu_validation.sh measured and print the bar (total within 10%, every phase within 20%).
#   experiments/validate/fit_and_validate_multi.sh OUT_DIR [--profile P] [--markdown]
# OUT_DIR: what run_multi_gpu_validation.sh brought back (measured.csv, and h100.ini or h200.ini when
# its calibrate step ran). The profile: --profile P (a name or a path), else OUT_DIR's calibrated
# profile, else the installed profile of the GPU named in measured.csv (h100 / h200). The tables go
# to OUT_DIR/validate (a temporary folder if OUT_DIR is read-only, as a folder copied back from a GPU machine may be).
# The stored multi-GPU results under experiments/results are validated by validate_multi_gpu.sh.
# JOINLAB: a joinlab built with SimGrid (default build-cpu/joinlab, then build-models/joinlab).
# Exit 0 when the bar is met, 1 when it is not, 2 on bad input.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
here=$root/experiments/validate
usage="usage: fit_and_validate_multi.sh OUT_DIR [--profile P] [--markdown]"
src=${1:?$usage}
shift
profile="" table_args=()
while [ $# -gt 0 ]; do
  case $1 in
    --profile) profile=${2:?$usage}; shift 2 ;;
    --markdown) table_args+=(--markdown); shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done
joinlab=${JOINLAB:-}
for j in "$root/build-cpu/joinlab" "$root/build-models/joinlab" "$root/build/joinlab"; do
  [ -z "$joinlab" ] && [ -x "$j" ] && joinlab=$j
done
[ -x "$joinlab" ] || { echo "fit_and_validate_multi.sh: no joinlab built with SimGrid (set JOINLAB)" >&2; exit 2; }

# Each validation: LABEL|INI|CSV|FILTER (column=value or -)|overrides...
jobs=()
{
  dir=$(cd "$src" && pwd) || exit 2
  [ -f "$dir/measured.csv" ] || { echo "fit_and_validate_multi.sh: $dir/measured.csv missing" >&2; exit 2; }
  if [ -z "$profile" ]; then
    for p in h100 h200; do [ -f "$dir/$p.ini" ] && profile=$dir/$p.ini; done
  fi
  if [ -z "$profile" ]; then
    case "$(sed -n 2p "$dir/measured.csv")" in *H200*) profile=h200 ;; *) profile=h100 ;; esac
  fi
  # A 2-GPU host ran only the 2-GPU points (run_multi_gpu_validation.sh's sweep overrides): plan
  # the same points, so that the rows' point numbers are the plan's.
  most=$(python3 -c 'import csv,sys; print(max(int(r["ranks"]) for r in csv.DictReader(open(sys.argv[1]))))' "$dir/measured.csv")
  for ini in shuffle-1level shuffle-2level gpj crj local-join; do
    sweep=()
    if [ "$most" -le 2 ]; then
      case $ini in
        shuffle-2level) sweep=("--sweep.cluster.gpus_per_node=1") ;;
        local-join) ;;
        *) sweep=("--sweep.cluster.gpus_per_node=2") ;;
      esac
    fi
    jobs+=("$ini|experiments/validate/multi-gpu-$ini.ini|$dir/measured.csv|-${sweep[*]:+|${sweep[*]}}")
  done
  out=$dir/validate
  mkdir -p "$out" 2> /dev/null && [ -w "$out" ] || out=$(mktemp -d /tmp/jl-multi-validate.XXXXXX)
}
echo "profile: $profile; tables in $out"
tables=()
for j in "${jobs[@]}"; do
  IFS='|' read -r -a f <<< "$j"
  label=${f[0]} ini=$root/${f[1]#"$root/"} csv=${f[2]} filter=${f[3]}
  [ "${csv#/}" = "$csv" ] && csv=$root/$csv
  name=$(tr -c 'A-Za-z0-9\n-' '_' <<< "$label")
  measured=$csv
  if [ "$filter" != - ]; then  # only the rows whose column has that value
    measured=$out/$name-measured.csv
    python3 - "$csv" "$measured" "$filter" <<'PY'
import csv, sys
src, dst, flt = sys.argv[1:]
col, val = flt.split("=", 1)
rows = list(csv.DictReader(open(src)))
with open(dst, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(r for r in rows if r.get(col) == val)
PY
  fi
  "$joinlab" validate "$ini" --measured "$measured" --profile "$profile" --out "$out/$name-validate.csv" \
    --max-error 0.1 --max-phase-error 0.2 "${f[@]:4}" > "$out/$name-validate.log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then  # 3: the bar missed, the table written
    echo "!!! $label: validate exited $rc:"; grep -v skipped "$out/$name-validate.log" | tail -3
    continue
  fi
  tables+=("$label=$out/$name-validate.csv")
done
python3 "$here/multi_gpu_table.py" "${table_args[@]}" "${tables[@]}"
