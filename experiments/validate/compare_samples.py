#!/usr/bin/env python3
"""Two `joinlab calibrate --samples` files of the same sizes, side by side, per model: the median
over the samples both measured of B's time / A's time (a sample's time: the median run's time plus
its closing synchronization), and the host's share of A's time outside the device's operator time.

    python3 experiments/validate/compare_samples.py A.txt B.txt

Made for issue 4's question whether calibrate's timing is too warm (A: --warm, B: cold, at the
same sizes; experiments/results/validate/h100-2026-11-22-s5-diagnostic-samples.tar.xz).
"""
import statistics
import sys
from collections import defaultdict


def load(path):
    runs = defaultdict(list)
    for line in open(path):
        if line.startswith("#") or not line.strip():
            continue
        a = line.split(None, 3)
        runs[a[3].strip()].append((float(a[0]) + float(a[1]), float(a[2])))
    return {k: (statistics.median(t for t, _ in v), statistics.median(d for _, d in v)) for k, v in runs.items()}


def main():
    a, b = load(sys.argv[1]), load(sys.argv[2])
    by_model = defaultdict(list)
    for k in a.keys() & b.keys():
        by_model[k.split()[1]].append((b[k][0] / a[k][0], a[k][0], a[k][1]))
    print("%-26s %8s %12s %14s" % ("model", "samples", "B/A median", "A host - dev"))
    for m in sorted(by_model):
        v = by_model[m]
        host = [t - d for _, t, d in v if d > 0]
        print("%-26s %8d %12.3f %14s" % (m, len(v), statistics.median(r for r, _, _ in v),
                                        "%.1f us" % (1e6 * statistics.median(host)) if host else "-"))


if __name__ == "__main__":
    main()
