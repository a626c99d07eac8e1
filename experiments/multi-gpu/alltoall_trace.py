#!/usr/bin/env python3
"""Where an all-to-all phase's time goes, per rank, from joinlab traces (TRACE.json ...): the
phase's length; the lead-in before the rank's first receive starts; the span from the first
receive's start to the last one's end (a receive's span ends when its data is in, whichever side
copied it); the tail after the last transfer until the phase ends; the rate of what the rank
received over that span; and the local copies (round 0) and messages. Phases "shuffle" and
"shuffle_node"; the trace of a run with repeats is its median repeat's."""
import json, sys

from trace_csv import load_trace, print_breakdowns


def breakdown(path):
    names, spans = load_trace(path)
    rows = []
    for ph in spans:
        if names.get((ph["pid"], ph["tid"])) != "phases" or ph["name"] not in ("shuffle", "shuffle_node"):
            continue
        b, end = ph["ts"], ph["ts"] + ph["dur"]
        mine = [e for e in spans if e["pid"] == ph["pid"] and b <= e["ts"] < end
                and e["name"] in ("send", "recv", "copy") and "kernels" not in names.get((e["pid"], e["tid"]), "")]
        recvs = [e for e in mine if e["name"] == "recv"]
        copies = [e for e in mine if e["name"] == "copy"]
        if not recvs:
            continue
        first = min(e["ts"] for e in recvs)
        last = max(e["ts"] + e["dur"] for e in mine)
        got = sum(e.get("args", {}).get("bytes", 0) for e in recvs)
        span = max(e["ts"] + e["dur"] for e in recvs) - first
        rows.append({"phase": ph["name"], "rank": ph["pid"], "phase_ms": ph["dur"] / 1e3,
                     "lead_in_ms": (first - b) / 1e3, "recv_span_ms": span / 1e3, "tail_ms": (end - last) / 1e3,
                     "recv_GB": got / 1e9, "recv_GBps": got / span / 1e3 if span > 0 else float("nan"),
                     "local_copy_ms": sum(e["dur"] for e in copies) / 1e3, "messages": len(recvs)})
    return rows


def main():
    cols = ["phase", "rank", "phase_ms", "lead_in_ms", "recv_span_ms", "tail_ms", "recv_GB", "recv_GBps",
            "local_copy_ms", "messages"]
    return print_breakdowns(breakdown, cols, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
