#!/usr/bin/env python3
"""Draws the figures of a `joinlab reproduce` run: plots/reproduce.py OUT/index.json

index.json (written by joinlab reproduce) lists each figure's CSV, its PNG and how to draw it:
x, y, their labels, y_factor, the series keys and log scales, from the [figure] section of the
figure's experiment file. Each figure is drawn by plots/sweep.py's plot(): one curve per series
value, its analytic bound dashed beside it, and each point labelled with the resource that its
longest phase keeps busiest (the CSV's busiest_per_phase). Exits 2 if matplotlib is missing, 1 if a
figure could not be drawn (the others are).
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sweep import number, plot, read_results  # noqa: E402


def longest_phase_limit(row):
    """The busiest resource of the point's longest phase ("network"), or None."""
    limits = dict(item.split("=", 1) for item in (row.get("busiest_per_phase") or "").split(";") if "=" in item)
    times = {}
    for column, value in row.items():
        m = re.fullmatch(r"phase_(.+)_s", column or "")
        if m and number(value) is not None:
            times[m.group(1)] = number(value)
    for phase in sorted(times, key=times.get, reverse=True):
        # phase columns have anything but letters and digits as '_': match the names the same way
        for name, limit in limits.items():
            if re.sub(r"[^A-Za-z0-9]", "_", name) == phase:
                return limit.rsplit(" ", 1)[0]
    return None


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: plots/reproduce.py OUT/index.json")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("plots/reproduce.py: matplotlib is missing (Debian: apt-get install python3-matplotlib)", file=sys.stderr)
        sys.exit(2)
    base = os.path.dirname(os.path.abspath(sys.argv[1]))
    with open(sys.argv[1]) as f:
        figures = json.load(f)["figures"]
    failed = 0
    for fig in figures:
        try:
            rows, _ = read_results(os.path.join(base, fig["csv"]))
            plot(rows, fig["series"], fig["x"], fig["y"], re.sub(r"\.png$", "", os.path.join(base, fig["png"])),
                 logx=fig["logx"], logy=fig["logy"], title=fig["title"], xlabel=fig["x_label"], ylabel=fig["y_label"],
                 factor=fig["y_factor"], note=longest_phase_limit, formats=("png",))
        except Exception as e:  # one figure's failure leaves the others drawn
            print("plots/reproduce.py: %s/%s: %s" % (fig["paper"], fig["figure"], e), file=sys.stderr)
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
