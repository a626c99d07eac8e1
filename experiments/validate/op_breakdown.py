#!/usr/bin/env python3
"""Where each phase's time goes, per rank and operator kind, from joinlab traces (TRACE.json ...),
measured or simulated alike: for every phase span of a rank, the operators that start inside it
(histogram, partition, build, probe, send, recv, copy, ...) with their count, the sum of their
durations and their busy time (union of their spans). Comparing a measured trace with the
simulated one of the same point says which operator a phase's prediction error comes from.
Prints CSV (one row per trace, rank, phase and kind)."""
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "multi-gpu"))
from gpj_trace import union  # noqa: E402
from trace_csv import print_breakdowns  # noqa: E402


def breakdown(path):
    d = json.load(open(path))
    events = d["traceEvents"] if isinstance(d, dict) else d
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X"]
    rows = []
    for ph in spans:
        if names.get((ph["pid"], ph["tid"])) != "phases":
            continue
        b, end = ph["ts"], ph["ts"] + ph["dur"]
        kinds = {}
        for e in spans:
            if e["pid"] != ph["pid"] or names.get((e["pid"], e["tid"])) == "phases" or not b <= e["ts"] < end:
                continue
            kinds.setdefault(e["name"], []).append((e["ts"], e["ts"] + e["dur"]))
        for kind, ks in sorted(kinds.items()):
            rows.append({"rank": ph["pid"], "phase": ph["name"], "phase_ms": ph["dur"] / 1e3, "kind": kind,
                         "count": len(ks), "sum_ms": sum(e - s for s, e in ks) / 1e3, "busy_ms": union(ks) / 1e3})
    return rows


def main(paths):
    return print_breakdowns(breakdown, ["rank", "phase", "phase_ms", "kind", "count", "sum_ms", "busy_ms"], paths)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
