#!/usr/bin/env python3
"""A result column against any swept key of a results CSV, one line per value of the other swept keys.

    plots/sweep.py CSV [--x KEY] [--y COLUMN] [--logx] [--logy] [--out OUT]

CSV is what `joinlab run` writes: every swept key has a column of its own, named by the key
(cluster.nodes, workload.rows_per_rank, strategy.levels, profile.link.nic.bw, ...). --x is one
of them (default: the first swept key) or any other column (ranks, r_rows); --y a column of
results (default total_s; throughput_tuples_per_s, fraction_of_bound, phase_<name>_s, ...). An x
whose values read as numbers (sizes such as 2^24, 16M or 16Mi too) gets a numeric axis, else the
values are placed in sweep order. With --y total_s or throughput_tuples_per_s the analytic bound
(bound_s) is drawn dashed.
Writes OUT.png and OUT.svg (default: the CSV's path without .csv, then -<x>).
"""
import argparse
import csv
import os
import re
import sys

SIZE_SUFFIXES = {"K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}


def number(text):
    """The value of a swept value or cell as joinlab reads it (1e9, 2^24, 16M, 16Mi), or None."""
    text = (text or "").strip()
    power = re.fullmatch(r"(\d+)\^(\d+)", text)
    if power:
        return float(int(power.group(1)) ** int(power.group(2)))
    sized = re.fullmatch(r"([0-9.]+)(Ki|Mi|Gi|Ti|K|M|G|T)", text)
    if sized:
        return float(sized.group(1)) * SIZE_SUFFIXES[sized.group(2)]
    try:
        return float(text)
    except ValueError:
        return None


def read_results(path):
    """The rows of a results CSV and its swept keys, in sweep order; each row holds every key.

    A CSV written before swept keys had columns of their own gets them from its `swept` label
    ("key=value key=value")."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        header = reader.fieldnames or []
    if "swept" in header and "strategy" in header:
        keys = header[header.index("swept") + 1:header.index("strategy")]
        if keys:
            return rows, keys
    keys = []
    for row in rows:
        for item in (row.get("swept") or "").split():
            key, _, value = item.partition("=")
            row[key] = value
            if key not in keys:
                keys.append(key)
    return rows, keys


def series(rows, keys, x):
    """Rows grouped by the values of the swept keys other than x: {"strategy.levels=2": [...]}."""
    others = [k for k in keys if k != x]
    groups = {}
    for row in rows:
        name = " ".join("%s=%s" % (k, row.get(k, "")) for k in others)
        groups.setdefault(name, []).append(row)
    return groups


def short_key(key):
    """strategy.levels -> levels, profile.link.nic.bw -> link.nic.bw, experiment.strategy -> strategy:
    legends stay readable."""
    return key.split(".", 1)[1] if key.split(".", 1)[0] in ("strategy", "profile", "experiment") else key


def x_axis(rows, x):
    """Where each x value goes: its number if every value reads as one, else its order of first
    appearance (the tick labels, returned too; None on a numeric axis)."""
    if all(number(r.get(x)) is not None for r in rows):
        return number, None
    order = []
    for r in rows:
        if r.get(x) not in order:
            order.append(r.get(x))
    return order.index, order


def import_pyplot(script):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("%s: matplotlib is missing (Debian: apt-get install python3-matplotlib)" % script)
    return plt


def save(fig, out, script, formats=("png", "svg")):
    os.makedirs(os.path.dirname(os.path.abspath(out)) or ".", exist_ok=True)
    for ext in formats:
        fig.savefig(out + "." + ext, dpi=130)
        print("%s: wrote %s.%s" % (script, out, ext), file=sys.stderr)


def bound(row, y):
    """The analytic bound in y's terms, or None: bound_s for a time, |R| + |S| over it for a throughput."""
    seconds = number(row.get("bound_s"))
    if not seconds:
        return None
    if y == "total_s":
        return seconds
    if y == "throughput_tuples_per_s":
        return (number(row.get("r_rows")) + number(row.get("s_rows"))) / seconds
    return None


def plot(rows, keys, x, y, out, logx=False, logy=False, title=None, xlabel=None, ylabel=None, factor=1.0,
         note=None, formats=("png", "svg")):
    """One curve per value of the keys other than x, in sweep order, each with its bound dashed
    where y has one (total_s, throughput_tuples_per_s); y and the bound drawn times factor. note,
    if given, labels each point: note(row) -> text or None."""
    plt = import_pyplot("plots/sweep.py")
    fig, ax = plt.subplots(figsize=(7, 4.8))
    position, ticks = x_axis(rows, x)
    drew_bound = False
    for i, (name, pts) in enumerate(series(rows, keys, x).items()):
        pts = sorted(pts, key=lambda p: position(p[x]))
        xs = [position(p[x]) for p in pts]
        label = " ".join(short_key(part) for part in name.split()) or pts[0]["strategy"]
        color = "C%d" % i
        ax.plot(xs, [float(p[y]) * factor for p in pts], "o-", color=color, label=label)
        bounds = [bound(p, y) for p in pts]
        if all(b is not None for b in bounds):
            ax.plot(xs, [b * factor for b in bounds], "--", color=color, alpha=0.7, label=label + " bound")
            drew_bound = True
        for px, p in zip(xs, pts):
            text = note(p) if note else None
            if text:
                ax.annotate(text, (px, float(p[y]) * factor), textcoords="offset points", xytext=(3, 4),
                            fontsize=6, color=color)
    if ticks is not None:
        ax.set_xticks(range(len(ticks)))
        ax.set_xticklabels(ticks)
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or y + ("; dashed: analytic bound" if drew_bound else ""))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title or "%s: %s against %s (%s)" % (rows[0]["experiment"], y, x, rows[0].get("hardware", "")),
                 fontsize=10)
    fig.tight_layout()
    save(fig, out, "plots/sweep.py", formats)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv", help="a results CSV of joinlab run")
    ap.add_argument("--x", help="the x axis: a swept key (default: the first) or any column")
    ap.add_argument("--y", default="total_s", help="a result column (default total_s)")
    ap.add_argument("--logx", action="store_true")
    ap.add_argument("--logy", action="store_true")
    ap.add_argument("--out", help="output path without extension (default: CSV path without .csv, -<x>)")
    args = ap.parse_args()
    rows, keys = read_results(args.csv)
    if not rows:
        sys.exit("plots/sweep.py: no rows in " + args.csv)
    x = args.x or (keys[0] if keys else None)
    if x is None:
        sys.exit("plots/sweep.py: %s has no swept key; name a column with --x" % args.csv)
    for column in (x, args.y):
        if column not in rows[0]:
            sys.exit("plots/sweep.py: %s has no column %s (swept keys: %s)" % (args.csv, column, ", ".join(keys) or "none"))
    out = args.out or re.sub(r"\.csv$", "", args.csv) + "-" + x
    plot(rows, keys, x, args.y, out, args.logx, args.logy)


if __name__ == "__main__":
    main()
