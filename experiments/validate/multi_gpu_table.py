#!/usr/bin/env python3
"""The multi-GPU bar from `joinlab validate --out` tables: one line per validated run (strategy,
ranks, point) with its total's error and every phase's, and the misses marked (* beyond --total in
total, beyond --phase in a phase). Phases whose measured and predicted times are both under
--floor-ms (default 0.5 ms: setup, an empty histogram) are shown but not held to the bar.

    python3 experiments/validate/multi_gpu_table.py [--total 0.1] [--phase 0.2] [--markdown] LABEL=TABLE.csv ...

Exit 0 when every total and every phase meets its bar, 1 otherwise."""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tables", nargs="+", help="LABEL=TABLE.csv")
    ap.add_argument("--total", type=float, default=0.1)
    ap.add_argument("--phase", type=float, default=0.2)
    ap.add_argument("--floor-ms", type=float, default=0.5)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    lines, totals_ok, phases_ok, n_tot, n_ph = [], 0, 0, 0, 0
    for spec in a.tables:
        label, _, path = spec.partition("=")
        runs = {}
        with open(path) as f:
            for r in csv.DictReader(f):
                if not r["error"]:
                    continue
                runs.setdefault((r["experiment"], r["point"], r["swept"], r["strategy"], r["ranks"]), []).append(r)
        for (exp, point, swept, strategy, ranks), rows in runs.items():
            # several measured rows of one point (transports, repeated calls) follow each other: cut at each total
            group = []
            for r in rows:
                group.append(r)
                if r["phase"] != "total":
                    continue
                parts = []
                for g in group:
                    e = float(g["error"])
                    small = max(float(g["measured_s"]), float(g["predicted_s"])) * 1e3 < a.floor_ms
                    bar = a.total if g["phase"] == "total" else a.phase
                    miss = abs(e) > bar and not small
                    if g["phase"] == "total":
                        n_tot += 1
                        totals_ok += not miss
                    elif not small:
                        n_ph += 1
                        phases_ok += not miss
                    parts.append("%s %+.1f%%%s" % (g["phase"], 100 * e, "*" if miss else ""))
                lines.append((label, strategy, ranks, exp, point, swept, "%.1f" % (1e3 * float(group[-1]["measured_s"])),
                              ", ".join(parts)))
                group = []
    head = ("set", "strategy", "ranks", "experiment", "point", "swept", "measured ms", "errors (* = miss)")
    if a.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for l in lines:
            print("| " + " | ".join(l) + " |")
    else:
        for l in [head] + lines:
            print("  ".join(l))
    ok = totals_ok == n_tot and phases_ok == n_ph
    print("\ntotals within %d%%: %d/%d; phases within %d%%: %d/%d; bar %s" %
          (100 * a.total, totals_ok, n_tot, 100 * a.phase, phases_ok, n_ph, "met" if ok else "NOT met"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
