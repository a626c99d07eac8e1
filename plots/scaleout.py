#!/usr/bin/env python3
"""Scale-out plot: join throughput and time against the number of GPUs, with the analytic bound.

    plots/scaleout.py --run [--experiment experiments/sim-scaleout.ini] [--nodes 1,2,...,128]
                      [--gpus-per-node 8] [--rows-per-gpu 500000000] [--csv results/scaleout.csv]
                      [--out results/scaleout]
    plots/scaleout.py --csv results/scaleout.csv [--out results/scaleout]

--run simulates the experiment's weak-scaling sweep first, in one `joinlab run`: its [sweep]
over cluster.nodes with workload.rows_per_rank, every other swept key (e.g. strategy.levels)
included; --nodes, --gpus-per-node and --rows-per-gpu replace the file's values. Its CSV is
copied to --csv. Without --run, the CSV (joinlab's result columns: ranks, total_s, bound_s,
throughput and a column per swept key) is plotted as it is; a curve per value of the swept keys
other than cluster.nodes. Writes OUT.png and OUT.svg. plots/sweep.py draws any other swept key.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

from sweep import import_pyplot, read_results, save, series, short_key

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NAME = "scaleout"


def run_sweep(args):
    exe = os.path.join(ROOT, args.build, "joinlab")
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [exe, "run", args.experiment, "--quiet", "--experiment.output_dir=" + tmp, "--experiment.name=" + NAME]
        if args.nodes:
            cmd.append("--sweep.cluster.nodes=" + args.nodes)
        if args.gpus_per_node:
            cmd.append("--cluster.gpus_per_node=%d" % args.gpus_per_node)
        if args.rows_per_gpu:
            cmd.append("--workload.rows_per_rank=%d" % args.rows_per_gpu)
        print("plots/scaleout.py: " + " ".join(cmd[1:]), file=sys.stderr)
        subprocess.run(cmd, check=True)
        os.makedirs(os.path.dirname(os.path.abspath(args.csv)), exist_ok=True)
        shutil.copyfile(os.path.join(tmp, NAME + "-sim.csv"), args.csv)


def series_name(name, pts):
    label = " ".join(short_key(part) for part in name.split())
    return ("%s %s" % (pts[0]["strategy"], label)).strip()


def plot(rows, keys, out):
    plt = import_pyplot("plots/scaleout.py")
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(12, 4.8))
    for i, (key, pts) in enumerate(sorted(series(rows, keys, "cluster.nodes").items())):
        name = series_name(key, pts)
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
    save(fig, out, "plots/scaleout.py")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="simulate the sweep first")
    ap.add_argument("--experiment", default=os.path.join(ROOT, "experiments", "sim-scaleout.ini"))
    ap.add_argument("--nodes", help="node counts, e.g. 1,2,4 (default: the experiment's sweep)")
    ap.add_argument("--gpus-per-node", type=int, help="default: the experiment's")
    ap.add_argument("--rows-per-gpu", type=int, help="rows per table per GPU (default: the experiment's)")
    ap.add_argument("--build", default="build", help="build folder holding joinlab")
    ap.add_argument("--csv", default=os.path.join(ROOT, "results", NAME + ".csv"))
    ap.add_argument("--out", default=os.path.join(ROOT, "results", NAME))
    args = ap.parse_args()
    if args.run:
        run_sweep(args)
    rows, keys = read_results(args.csv)
    if not rows:
        sys.exit("plots/scaleout.py: no rows in " + args.csv)
    plot(rows, keys, args.out)


if __name__ == "__main__":
    main()
