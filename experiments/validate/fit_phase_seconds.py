#!/usr/bin/env python3
"""Fits a profile's per-phase host time ([host] phase_seconds) to strategy runs at
calibrate's sizes (experiments/validate/phases.ini).

    fit_phase_seconds.py VALIDATE.csv PROFILE.ini

VALIDATE.csv is `joinlab validate phases.ini --measured ... --profile PROFILE.ini --out ...`:
measured and simulated time of every timed phase. The simulator charges a phase its operators'
models (and PROFILE's phase_seconds); what a measured phase holds beyond that is the host time
outside its operators (the first launch, the closing synchronization of every stream, the
strategy's work between them), which calibrate's operator samples do not hold. phase_seconds
becomes PROFILE's value + the median of (measured - simulated) over every timed phase (at least
0), written into PROFILE's [host] section with its source. Prints the residuals per phase kind.
"""
import csv
import datetime
import re
import statistics
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    table, profile = sys.argv[1], sys.argv[2]
    rows, seen = [], set()
    for r in csv.DictReader(open(table)):
        key = (r["experiment"], r["point"], r["phase"])
        if r["phase"] == "total" or key in seen:
            continue
        seen.add(key)
        rows.append(r)
    if not rows:
        sys.exit("fit_phase_seconds: %s has no phase rows" % table)
    residual = [float(r["measured_s"]) - float(r["predicted_s"]) for r in rows]
    by_kind = {}
    for r, x in zip(rows, residual):
        by_kind.setdefault("%s %s" % (r["strategy"], r["phase"]), []).append(x)
    for kind, xs in sorted(by_kind.items()):
        print("fit_phase_seconds: %-24s median %+7.1f us over %d runs" % (kind, 1e6 * statistics.median(xs), len(xs)))

    text = open(profile).read()
    m = re.search(r"^\[host\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        sys.exit("fit_phase_seconds: %s has no [host] section" % profile)
    body = m.group(1)
    old = re.search(r"^phase_seconds\s*=\s*([0-9.eE+-]+)", body, re.M)
    before = float(old.group(1)) if old else 0.0
    median = statistics.median(residual)
    value = max(0.0, before + median)
    note = ("median of (measured - simulated) over %d timed phases of npj/phj/smj/chunked at calibrate's sizes "
            "(experiments/validate/phases.ini), added to %.4g, fitted %s" %
            (len(residual), before, datetime.date.today().isoformat()))
    line = "%-39s # %s" % ("phase_seconds = %.4g" % value, note)
    if old:
        body = re.sub(r"^phase_seconds\s*=.*$", line, body, count=1, flags=re.M)
    else:
        body = body.rstrip("\n") + "\n" + line + "\n\n"
    open(profile, "w").write(text[:m.start(1)] + body + text[m.end(1):])
    print("fit_phase_seconds: phase_seconds %.4g -> %.4g s (median residual %+.1f us) in %s" %
          (before, value, 1e6 * median, profile))


if __name__ == "__main__":
    main()
