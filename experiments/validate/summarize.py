#!/usr/bin/env python3
"""Validation per strategy from a `joinlab validate --out` table.

    python3 experiments/validate/summarize.py TABLE.csv [--total 0.1] [--phase 0.2]

Per strategy: totals within --total (count, median |error|, worst) and, per phase, phases within
--phase. Exit 0 when every total and every phase is within its threshold, 1 otherwise.
"""
import argparse
import csv
import statistics
import sys
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("table")
    ap.add_argument("--total", type=float, default=0.1)
    ap.add_argument("--phase", type=float, default=0.2)
    a = ap.parse_args()
    totals, phases, order = defaultdict(list), defaultdict(lambda: defaultdict(list)), []
    with open(a.table) as f:
        for r in csv.DictReader(f):
            if not r["error"]:
                continue
            s, e = r["strategy"], abs(float(r["error"]))
            if s not in order:
                order.append(s)
            if r["phase"] == "total":
                totals[s].append(e)
            else:
                phases[s][r["phase"]].append(e)
    ok = True
    print("%-8s %-22s %-10s %-8s  %s" % ("strategy", "totals within %d%%" % (100 * a.total), "median", "worst",
                                          "phases within %d%%" % (100 * a.phase)))
    for s in order:
        t = totals[s]
        n = sum(e <= a.total for e in t)
        ph = ", ".join("%s %d/%d" % (p, sum(e <= a.phase for e in v), len(v)) for p, v in phases[s].items())
        print("%-8s %-22s %-10s %-8s  %s" % (s, "%d/%d" % (n, len(t)), "%.1f%%" % (100 * statistics.median(t)),
                                             "%.1f%%" % (100 * max(t)), ph))
        ok = ok and n == len(t) and all(e <= a.phase for v in phases[s].values() for e in v)
    print("all within the thresholds" if ok else "NOT all within the thresholds")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
