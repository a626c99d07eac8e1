#!/usr/bin/env python3
"""The rate of a sort's peer exchange, per rank, from joinlab traces (TRACE.json ...): mgsmj's
all-to-all in its "sort" phase. A send's span is its copy over the peer link (queued by whichever
side comes second, timed on the GPU), so the sent bytes over the sends' busy time (their union:
one send stream) is the rate the link gave; compare it with p2p_bandwidth's bidirectional rate per
direction, since every GPU sends while it receives. The trace of a run with repeats is its median
repeat's."""
import json, sys

from trace_csv import load_trace, print_breakdowns, union


def breakdown(path):
    names, spans = load_trace(path)
    rows = []
    for ph in spans:
        if names.get((ph["pid"], ph["tid"])) != "phases" or ph["name"] != "sort":
            continue
        b, end = ph["ts"], ph["ts"] + ph["dur"]
        sends = [e for e in spans if e["pid"] == ph["pid"] and b <= e["ts"] < end and e["name"] == "send"
                 and "kernels" not in names.get((e["pid"], e["tid"]), "")]
        if not sends:
            continue
        sent = sum(e.get("args", {}).get("bytes", 0) for e in sends)
        busy = union([(e["ts"], e["ts"] + e["dur"]) for e in sends])
        rows.append({"phase": ph["name"], "rank": ph["pid"], "phase_ms": ph["dur"] / 1e3, "sends": len(sends),
                     "sent_GB": sent / 1e9, "send_busy_ms": busy / 1e3,
                     "send_GBps": sent / busy / 1e3 if busy > 0 else float("nan")})
    return rows


def main():
    cols = ["phase", "rank", "phase_ms", "sends", "sent_GB", "send_busy_ms", "send_GBps"]
    return print_breakdowns(breakdown, cols, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
