#!/usr/bin/env bash
# How fast the simulator runs gao2021's shuffle at scale, one command (any machine with a SimGrid
# build; no GPU):
#   experiments/run_sim_scale.sh [JOINLAB_BINARY] [RESULTS_DIR]
# runs sim-shuffle-64.ini (64 GPUs, levels 1 and 2 in one process) and sim-shuffle-1024.ini
# (1024 GPUs, levels 1 and 2 one process each) under /usr/bin/time and writes
#   RESULTS_DIR/sim-scale.csv        per run: GPUs, levels, simulated total, wall seconds, peak RSS,
#                                    the load average before it started, date, commit
#   RESULTS_DIR/sim-scale-runs.csv   joinlab's result rows (phases, bound, simulated times)
# RESULTS_DIR defaults to experiments/results/<machine> (experiments/machine.sh). Wall time
# depends on what else the machine runs: the load average is recorded next to it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=machine.sh
. "$here/machine.sh"
bin=${1:-build/joinlab}
results=${2:-$here/results/$(machine_name)}
work=$(mktemp -d)
commit=${JOINLAB_COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo unknown)}
mkdir -p "$results"
echo "gpus,levels,simulated_total_s,wall_s,peak_rss_mib,load_1min,date,commit" > "$work/scale.csv"
run() {  # run NAME INI [overrides...]
  local name=$1 ini=$2 load
  shift 2
  load=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %M" -o "$work/$name.time" "$bin" run "$here/$ini" --quiet \
    --experiment.output_dir="$work/$name" "$@" > "$work/$name.log"
  read -r wall rss < "$work/$name.time"
  python3 - "$work/$name" "$wall" "$rss" "$load" "$commit" >> "$work/scale.csv" <<'PY'
import csv, glob, sys, datetime
folder, wall, rss, load, commit = sys.argv[1:]
date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
for path in sorted(glob.glob(folder + "/*.csv")):
    for r in csv.DictReader(open(path)):
        levels = dict(kv.split("=") for kv in r["strategy_options"].split(";") if "=" in kv).get("levels", "")
        print(f'{r["ranks"]},{levels},{r["total_s"]},{wall},{int(rss) / 1024:.0f},{load},{date},{commit}')
PY
  echo "$name: $wall s, $((rss / 1024)) MiB"
}
run shuffle-64 sim-shuffle-64.ini
run shuffle-1024-l1 sim-shuffle-1024.ini --strategy.levels=1
run shuffle-1024-l2 sim-shuffle-1024.ini --strategy.levels=2
cp "$work/scale.csv" "$results/sim-scale.csv"
python3 - "$work" "$results/sim-scale-runs.csv" <<'PY'
import csv, glob, sys
rows = [r for p in sorted(glob.glob(sys.argv[1] + "/*/*.csv")) for r in csv.DictReader(open(p))]
keys = []
for r in rows:
    keys += [k for k in r if k not in keys]
with open(sys.argv[2], "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
PY
column -t -s, "$results/sim-scale.csv"
