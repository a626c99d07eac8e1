#!/usr/bin/env python3
"""Merges the benchmark CSVs of bench.sh into one results CSV (device, date, commit first)
and writes, from each run's Chrome trace, where the time goes: per phase and operator, the
summed span time and its share of the timed region (the generate and verify phases left out, as
the runner's total leaves them out)."""
import argparse, csv, glob, json, os, sys
from collections import defaultdict

UNTIMED = ("generate", "verify")  # kGeneratePhase, kVerifyPhase (core/strategies/strategy.hpp)

def by_phase(events, phases, args):
    """Count and summed duration of the events per (timed phase they start in, name, *args)."""
    agg = defaultdict(lambda: [0, 0.0])
    for e in events:
        ph = next((p["name"] for p in phases if p["ts"] <= e["ts"] <= p["ts"] + p["dur"] + 1), "?")
        if ph in UNTIMED:
            continue
        key = (ph, e["name"]) + tuple(str(e.get("args", {}).get(a, "")) for a in args)
        agg[key][0] += 1
        agg[key][1] += e["dur"]
    return agg

def main():
    ap = argparse.ArgumentParser()
    for a in ("--device", "--date", "--commit", "--runs", "--csv", "--breakdown"):
        ap.add_argument(a, required=True)
    a = ap.parse_args()
    rows, header = [], None
    for path in sorted(glob.glob(os.path.join(a.runs, "*.csv"))):
        with open(path) as f:
            r = list(csv.DictReader(f))
        for row in r:
            # The binary's own commit where its rows have it (a tree copied to a GPU machine may carry an older .git).
            row = {"device": a.device, "date": a.date, "commit": row.get("git_commit", "")[:7] or a.commit, **row}
            rows.append(row)
    if not rows:
        print("no result CSVs in", a.runs, file=sys.stderr)
        return 1
    keys = []
    for r in rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(a.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)
    out = []
    for path in sorted(glob.glob(os.path.join(a.runs, "*.trace.json"))):
        with open(path) as f:
            t = json.load(f)
        ev = t["traceEvents"] if isinstance(t, dict) else t
        phases = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "phase"]
        tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev
                  if e.get("ph") == "M" and e.get("name") == "thread_name"}
        spans = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("op", "transfer")]
        # Operator spans ("stream N") and, separately, the kernels inside them ("stream N kernels").
        ops = [e for e in spans if not tracks.get((e["pid"], e["tid"]), "").endswith("kernels")]
        kernels = [e for e in spans if tracks.get((e["pid"], e["tid"]), "").endswith("kernels")]
        timed = [p for p in phases if p["name"] not in UNTIMED]
        total = (max(p["ts"] + p["dur"] for p in timed) - min(p["ts"] for p in timed)) if timed else 0
        out.append(f"== {os.path.basename(path)}: timed region {total/1000:.3f} ms")
        for p in phases:
            out.append(f"  phase {p['name']:<12} {p['dur']/1000:9.3f} ms")
        agg = by_phase(ops, phases, ("detail", "fanout"))
        for (ph, name, detail, fanout), (n, dur) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
            share = 100 * dur / total if total else 0
            out.append(f"    {ph:<12} {name:<18} {detail:<16} fanout {fanout:<6} x{n:<5} {dur/1000:9.3f} ms {share:5.1f}%")
        kagg = by_phase(kernels, phases, ("detail",))
        out.append("  kernels:")
        for (ph, name, detail), (n, dur) in sorted(kagg.items(), key=lambda kv: -kv[1][1]):
            share = 100 * dur / total if total else 0
            out.append(f"    {ph:<12} {name:<18} {detail:<34} x{n:<5} {dur/1000:9.3f} ms {share:5.1f}%")
    with open(a.breakdown, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))
    print()
    fmt = "{:<14} {:<10} {:>10} {:>10} {:>9}"
    print(fmt.format("experiment", "strategy", "total ms", "bound ms", "fraction"))
    for r in rows:
        name = r.get("experiment", r.get("name", "?"))
        total = float(r.get("total_s", 0) or 0)
        bound = float(r.get("bound_s", 0) or 0)
        frac = r.get("fraction_of_bound", "")
        print(fmt.format(name[:14], r.get("strategy", "?"), f"{total*1e3:.3f}", f"{bound*1e3:.3f}", frac))
    return 0

if __name__ == "__main__":
    sys.exit(main())
