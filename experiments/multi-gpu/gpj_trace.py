#!/usr/bin/env python3
"""Where the one-sided exchange's time goes, per rank, from joinlab traces (TRACE.json ...) of gpj,
gpj-b, gpj-h or crj: for the phases histogram, stream (gpj) or exchange (the blocking joins), the
phase's length and, inside it, the busy time (union of spans) of the senders' host CPU work
(histogram, partition, pack_chunks), of the data puts (count, bytes, rate over their busy time,
source memory), how much of the puts ran while the CPUs worked (the pipeline's overlap), the
credit puts (flag only), the consumer (stream_consume), and the lead-in / tail of the phase.
Prints CSV (one row per trace, rank and phase)."""
import json, sys

from trace_csv import load_trace, print_breakdowns, union


def overlap(a, b):
    """Length of union(a) intersected with union(b)."""
    return union(a) + union(b) - union(a + b)


def breakdown(path):
    names, spans = load_trace(path)
    # The cuda backend marks what its host CPUs ran ("host CPUs"); on the cpu backend every op is.
    marked = any("host CPUs" in e.get("args", {}).get("detail", "") for e in spans)
    on_host = lambda e: not marked or "host CPUs" in e.get("args", {}).get("detail", "")
    rows = []
    for ph in spans:
        if names.get((ph["pid"], ph["tid"])) != "phases" or ph["name"] not in ("histogram", "stream", "exchange"):
            continue
        b, end = ph["ts"], ph["ts"] + ph["dur"]
        mine = [e for e in spans if e["pid"] == ph["pid"] and b <= e["ts"] < end
                and "kernels" not in names.get((e["pid"], e["tid"]), "") and e.get("cat") != "phase"]
        iv = lambda es: [(e["ts"], e["ts"] + e["dur"]) for e in es]
        cpu = [e for e in mine if e["name"] in ("histogram", "partition", "pack_chunks") and on_host(e)]
        part = [e for e in cpu if e["name"] == "partition"]
        pack = [e for e in cpu if e["name"] == "pack_chunks"]
        hist = [e for e in cpu if e["name"] == "histogram"]
        puts = [e for e in mine if e["name"] == "put" and e.get("args", {}).get("bytes", 0) > 0]
        credits = [e for e in mine if e["name"] == "put" and not e.get("args", {}).get("bytes", 0)]
        consume = [e for e in mine if e["name"] == "stream_consume"]
        put_bytes = sum(e["args"]["bytes"] for e in puts)
        put_busy = union(iv(puts))
        srcs = sorted({e["args"].get("mem_src", "?") for e in puts})
        active = iv(cpu) + iv(puts)
        rows.append({
            "phase": ph["name"], "rank": ph["pid"], "phase_ms": ph["dur"] / 1e3,
            "histogram_ms": union(iv(hist)) / 1e3, "histogram_ops": len(hist),
            "partition_ms": union(iv(part)) / 1e3, "partitions": len(part),
            "pack_ms": union(iv(pack)) / 1e3, "packs": len(pack),
            "cpu_busy_ms": union(iv(cpu)) / 1e3,
            "puts": len(puts), "put_GB": put_bytes / 1e9, "put_busy_ms": put_busy / 1e3,
            "put_GBps": put_bytes / put_busy / 1e3 if put_busy > 0 else float("nan"),
            "put_src": "/".join(srcs), "put_overlapped_ms": overlap(iv(puts), iv(cpu)) / 1e3,
            "credit_puts": len(credits), "consume_ms": union(iv(consume)) / 1e3,
            "lead_in_ms": (min(s for s, _ in active) - b) / 1e3 if active else float("nan"),
            "tail_ms": (end - max(e for _, e in active)) / 1e3 if active else float("nan"),
        })
    return rows


COLS = ["phase", "rank", "phase_ms", "histogram_ms", "histogram_ops", "partition_ms", "partitions", "pack_ms", "packs",
        "cpu_busy_ms", "puts", "put_GB", "put_busy_ms", "put_GBps", "put_src", "put_overlapped_ms", "credit_puts",
        "consume_ms", "lead_in_ms", "tail_ms"]


def main():
    return print_breakdowns(breakdown, COLS, sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
