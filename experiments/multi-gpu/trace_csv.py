"""CSV output shared by the per-rank trace breakdowns (alltoall_trace.py, gpj_trace.py)."""
import sys


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
