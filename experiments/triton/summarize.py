#!/usr/bin/env python3
"""The Triton join's benchmark table (bench.sh): per size, each run's throughput ((|R| + |S|) /
time), the throughput its analytic bound allows (for triton the link: inputs once, spilled
partitions written and read back, over the measured link bandwidth), the fraction of the bound
reached, and its throughput over the best triton run's at that size.

    experiments/triton/summarize.py RESULTS.csv
"""
import csv
import sys


def label(row):
    opts = dict(kv.split("=", 1) for kv in row.get("strategy_options", "").split(";") if "=" in kv)
    name = row["strategy"]
    if name == "triton":
        write = opts.get("spill_write", "copy")
        if write == "kernel":
            write += " " + opts.get("partitioner", "hierarchical")
        name += " write %s, read %s" % (write, opts.get("spill_read", "kernel"))
        if opts.get("prefix_sum", "gpu") == "cpu":
            name += ", CPU prefix sum"
    elif name == "npj" and opts.get("table_space") == "pinned":
        name += " (table in host memory)"
    if row.get("backend") == "cpu":
        name += " (CPU)"
    return name


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    with open(sys.argv[1]) as f:
        rows = [r for r in csv.DictReader(f) if r.get("total_s")]
    sizes = sorted({int(r["r_rows"]) for r in rows})
    print("%-12s %-40s %14s %14s %9s %9s" % ("|R| = |S|", "run", "G tuples/s", "bound G/s", "fraction", "vs triton"))
    for n in sizes:
        at = [r for r in rows if int(r["r_rows"]) == n]
        triton = [float(r["throughput_tuples_per_s"]) for r in at if r["strategy"] == "triton"]
        best = max(triton) if triton else 0.0
        for r in sorted(at, key=lambda r: (r["strategy"] != "triton", label(r))):
            tput = float(r["throughput_tuples_per_s"])
            bound_s = float(r["bound_s"] or 0)
            bound = (int(r["r_rows"]) + int(r["s_rows"])) / bound_s if bound_s > 0 else 0.0
            fraction = r.get("fraction_of_bound") or ""
            ratio = "%.2f" % (tput / best) if best > 0 else "-"
            print("%-12s %-40s %14.3f %14.3f %9s %9s" % ("2^%d" % (n.bit_length() - 1), label(r), tput / 1e9,
                                                          bound / 1e9, fraction, ratio))
        if at:
            print("%-12s %s" % ("", "bound: " + next((r["bound_resource"] for r in at if r["strategy"] == "triton"),
                                                     at[0]["bound_resource"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
