"""What the per-rank trace breakdowns share (alltoall_trace.py, gpj_trace.py, peer_exchange_trace.py):
reading a joinlab trace, the union of intervals, and the CSV output."""
import json
import sys


def load_trace(path):
    """A Chrome trace's thread names by (pid, tid) and its complete spans ("X" events)."""
    d = json.load(open(path))
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in d["traceEvents"]
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    return names, [e for e in d["traceEvents"] if e.get("ph") == "X"]


def union(spans):
    """Total length of the union of [b, e) intervals."""
    total, end = 0.0, None
    for b, e in sorted(spans):
        if end is None or b > end:
            total += e - b
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def print_breakdowns(breakdown, cols, paths):
    """Prints the header, then one row per dict that breakdown(path) returns for each path (a
    trace that cannot be read gets a row saying why); floats with 3 decimals."""
    print("trace," + ",".join(cols))
    for path in paths:
        try:
            rows = breakdown(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"{path},unreadable: {e}")
            continue
        for r in rows:
            print(path + "," + ",".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    return 0
