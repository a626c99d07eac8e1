#!/usr/bin/env python3
"""Scale-out plot: join throughput and time against the number of GPUs, with the analytic bound.

    plots/scaleout.py --run [--nodes 1,2,...,128] [--experiment experiments/sim-scaleout.ini]
                      [--rows-per-gpu 500000000] [--csv results/scaleout.csv] [--out results/scaleout]
    plots/scaleout.py --csv results/scaleout.csv [--out results/scaleout]

--run simulates the weak-scaling sweep first: one `joinlab run` per node count, with
cluster.nodes and workload.rows (rows per GPU x GPUs) set on the command line, every point of the
experiment's own sweep (e.g. strategy.levels) included; their CSV rows are gathered into --csv.
Without --run, the CSV (joinlab's result columns: ranks, total_s, bound_s, throughput, swept,
strategy_options) is plotted as it is. Writes OUT.png and OUT.svg.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_sweep(args):
    rows = []
    exe = os.path.join(ROOT, args.build, "joinlab")
    with tempfile.TemporaryDirectory() as tmp:
        for nodes in [int(n) for n in args.nodes.split(",")]:
            gpus = nodes * args.gpus_per_node
            cmd = [exe, "run", args.experiment, "--quiet", "--experiment.output_dir=" + tmp,
                   "--experiment.name=scaleout_%d" % nodes, "--cluster.nodes=%d" % nodes,
                   "--cluster.gpus_per_node=%d" % args.gpus_per_node,
                   "--workload.rows=%d" % (args.rows_per_gpu * gpus)]
            print("plots/scaleout.py: %d GPUs: %s" % (gpus, " ".join(cmd[1:])), file=sys.stderr)
            subprocess.run(cmd, check=True)
            with open(os.path.join(tmp, "scaleout_%d-sim.csv" % nodes)) as f:
                rows.extend(csv.DictReader(f))
    os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    return rows


def series_name(row):
    label = row.get("swept") or row.get("strategy_options") or ""
    return ("%s %s" % (row["strategy"], label.replace("strategy.", ""))).strip()


def plot(rows, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plots/scaleout.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)")
    series = {}
    for r in rows:
        series.setdefault(series_name(r), []).append(r)
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, (name, pts) in enumerate(sorted(series.items())):
        pts.sort(key=lambda r: int(r["ranks"]))
        gpus = [int(r["ranks"]) for r in pts]
        total = [float(r["total_s"]) for r in pts]
        bound = [float(r["bound_s"]) for r in pts]
        tuples = [float(r["throughput_tuples_per_s"]) for r in pts]
        bound_tp = [t * s / b if b > 0 else float("nan") for t, s, b in zip(tuples, total, bound)]
        color = "C%d" % i
        ax_t.plot(gpus, [t / 1e9 for t in tuples], "o-", color=color, label=name + " (" + pts[0]["backend"] + ")")
        ax_t.plot(gpus, [t / 1e9 for t in bound_tp], "--", color=color, alpha=0.7, label=name + " bound")
        ax_s.plot(gpus, total, "o-", color=color, label=name)
        ax_s.plot(gpus, bound, "--", color=color, alpha=0.7, label=name + " bound")
    for ax in (ax_t, ax_s):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("GPUs")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_yscale("log")
    ax_t.set_ylabel("throughput (G input tuples/s)")
    ax_t.set_title("join throughput; dashed: analytic bound")
    ax_s.set_ylabel("join time (s)")
    ax_s.set_title("time (weak scaling); dashed: analytic bound")
    hw = rows[0].get("hardware", "")
    fig.suptitle("scale-out: %s, %s" % (rows[0]["strategy"], hw), fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(out + "." + ext, dpi=130)
        print("plots/scaleout.py: wrote %s.%s" % (out, ext), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="simulate the sweep first")
    ap.add_argument("--experiment", default=os.path.join(ROOT, "experiments", "sim-scaleout.ini"))
    ap.add_argument("--nodes", default="1,2,4,8,16,32,64,128", help="node counts (8 GPUs each: 8..1024 GPUs)")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--rows-per-gpu", type=int, default=500000000)
    ap.add_argument("--build", default="build", help="build folder holding joinlab")
    ap.add_argument("--csv", default=os.path.join(ROOT, "results", "scaleout.csv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "scaleout"))
    args = ap.parse_args()
    if args.run:
        rows = run_sweep(args)
    else:
        with open(args.csv) as f:
            rows = list(csv.DictReader(f))
    if not rows:
        sys.exit("plots/scaleout.py: no rows in " + args.csv)
    plot(rows, args.out)


if __name__ == "__main__":
    main()
