#!/usr/bin/env python3
"""Where a measured phase's time goes: the device's operator time vs the host's time around it.

    python3 experiments/validate/phase_gaps.py MEASURED.csv TRACES   (a folder or a .tar.xz)

For every point of a `joinlab run` on the hardware (its CSV and the Chrome traces it wrote) and
every timed phase: the phase's time, the time the device spent in the phase's operators (the
union of their spans), the rest ("gap": launches, result read-backs, synchronizations, the
strategy's host work: allocations, frees, op set-up), and how much of it came before the first
operator ("lead") and after the last ("tail"). The simulator charges a phase its operators'
models only (and allocations), so a gap larger than the one calibrate's samples of the same
operator include (their host time minus device time, `joinlab calibrate --samples`) is a cost
no model holds.
"""
import csv
import io
import json
import os
import re
import sys
import tarfile


def traces(path):
    if os.path.isdir(path):
        for name in os.listdir(path):
            if name.endswith(".trace.json"):
                yield name, json.load(open(os.path.join(path, name)))
        return
    with tarfile.open(path) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".trace.json"):
                yield os.path.basename(m.name), json.load(io.TextIOWrapper(tar.extractfile(m)))


def main():
    rows = {int(r["point"]): r for r in csv.DictReader(open(sys.argv[1]))}
    found = []
    for name, d in traces(sys.argv[2]):
        m = re.search(r"-(\d+)\.trace\.json$", name)
        if m:
            found.append((int(m.group(1)), d))
    print("%3s %-8s %6s %5s %-11s %9s %9s %8s %7s %7s %4s" % ("pt", "strategy", "rows", "zipf", "phase", "phase ms",
                                                               "device", "gap", "lead", "tail", "ops"))
    for pt, d in sorted(found, key=lambda x: x[0]):
        r = rows.get(pt)
        if not r:
            continue
        ev = d["traceEvents"]
        tracks = {e["tid"]: e["args"]["name"] for e in ev if e.get("ph") == "M" and e["name"] == "thread_name"}
        ops = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("op", "transfer")
               and not tracks.get(e["tid"], "").endswith("kernels")]
        for ph in (e for e in ev if e.get("cat") == "phase"):
            if ph["name"] in ("generate", "verify"):
                continue
            b, e = ph["ts"], ph["ts"] + ph["dur"]
            iv = sorted((o["ts"], o["ts"] + o["dur"]) for o in ops if b <= o["ts"] < e)
            busy, cur = 0.0, None
            for s, t in iv:
                if cur is None or s > cur[1]:
                    busy += cur[1] - cur[0] if cur else 0.0
                    cur = [s, t]
                else:
                    cur[1] = max(cur[1], t)
            busy += cur[1] - cur[0] if cur else 0.0
            lead = iv[0][0] - b if iv else 0.0
            tail = e - max(t for _, t in iv) if iv else 0.0
            print("%3d %-8s %5dMi %5s %-11s %9.3f %9.3f %8.3f %7.3f %7.3f %4d" % (
                pt, r["strategy"], int(r["r_rows"]) >> 20, r["s_zipf_z"], ph["name"], ph["dur"] / 1e3, busy / 1e3,
                (ph["dur"] - busy) / 1e3, lead / 1e3, tail / 1e3, len(iv)))


if __name__ == "__main__":
    main()
