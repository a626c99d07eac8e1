#!/usr/bin/env python3
"""Whether gpj's join hides in its shuffle, from the runs of run_gpj_overlap.sh (RUNS/NAME/*.csv,
joinlab's result rows): gpj's end-to-end time over max(its shuffle time, its join time), where the
shuffle and the join alone are gpj-b's phases on the same data (same size, options and transport,
from the same call); 1 means the join is hidden entirely (thostrup2023 section 6):
  shuffle    gpj-b's exchange phase (the one-sided shuffle alone);
  shuffle+   gpj-b's histogram + setup + exchange (the whole shuffle, measured like gpj's total,
             which includes gpj's own histogram and setup);
  join       gpj-b's local_partition + local_join (the join alone, in GPU memory).
gpj's end-to-end time is its total (histogram + setup + stream; generate and verify left out, as
for every strategy); crj's total on the same data gives the GPU/CPU ratio.

  gpj_overlap.py --runs RUNS --size NAME:GPJ_RUN:GPJB_RUN:CRJ_RUN [--size ...] [--csv OUT.csv]
Prints one line per size and writes them to OUT.csv."""
import argparse, csv, glob, os, sys


def first_row(runs, name):
    for path in sorted(glob.glob(os.path.join(runs, name, "*.csv"))):
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if rows:
            return rows[0]
    return None


def num(row, key):
    try:
        return float(row.get(key) or "nan") if row else float("nan")
    except ValueError:
        return float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", required=True)
    ap.add_argument("--size", action="append", required=True, help="NAME:GPJ_RUN:GPJB_RUN:CRJ_RUN")
    ap.add_argument("--csv")
    a = ap.parse_args()
    out = []
    for spec in a.size:
        name, gpj_run, gpjb_run, crj_run = spec.split(":")
        gpj, gpjb, crj = (first_row(a.runs, r) for r in (gpj_run, gpjb_run, crj_run))
        total = num(gpj, "total_s")
        shuffle = num(gpjb, "phase_exchange_s")
        shuffle_all = shuffle + num(gpjb, "phase_histogram_s") + num(gpjb, "phase_setup_s")
        join = num(gpjb, "phase_local_partition_s") + num(gpjb, "phase_local_join_s")
        larger = max(shuffle, join)
        larger_all = max(shuffle_all, join)
        crj_total = num(crj, "total_s")
        row = {
            "size": name, "gpj_run": gpj_run, "gpj_b_run": gpjb_run, "crj_run": crj_run,
            "r_rows_per_rank": int(num(gpj, "r_rows") / num(gpj, "ranks")) if gpj else "",
            "strategy_options": gpj.get("strategy_options", "") if gpj else "",
            "gpj_total_s": total, "gpj_repeats_s": gpj.get("repeat_total_s", "") if gpj else "",
            "gpj_histogram_s": num(gpj, "phase_histogram_s"), "gpj_setup_s": num(gpj, "phase_setup_s"),
            "gpj_stream_s": num(gpj, "phase_stream_s"),
            "shuffle_s": shuffle, "shuffle_with_histogram_s": shuffle_all, "join_s": join,
            "gpj_b_total_s": num(gpjb, "total_s"),
            "ratio": total / larger if larger > 0 else float("nan"),
            "ratio_with_histogram": total / larger_all if larger_all > 0 else float("nan"),
            "stream_over_exchange": num(gpj, "phase_stream_s") / larger if larger > 0 else float("nan"),
            "crj_total_s": crj_total, "crj_over_gpj": crj_total / total if total > 0 else float("nan"),
            "verified": " / ".join(r.get("verified", "?") if r else "missing" for r in (gpj, gpjb, crj)),
        }
        out.append(row)
    keys = list(out[0].keys()) if out else []
    fmt = lambda v: f"{v:.4f}" if isinstance(v, float) else str(v)
    print(",".join(keys))
    for r in out:
        print(",".join(fmt(r[k]) for k in keys))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys)
            w.writeheader()
            for r in out:
                w.writerow({k: fmt(v) for k, v in r.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
