#!/usr/bin/env python3
"""Merges the runs of run_multi.sh into one CSV (device, date, commit, run, mode, transport first)
and writes a summary: for each shuffle run, the all-to-all phase's throughput (bytes one rank
ships to the other GPUs / the phase's time) next to the measured GPU0->GPU1 bandwidth and its
fraction of it; for gpj, end-to-end time over max(its shuffle, its join) (the shuffle and join
alone come from gpj-b / shuffle runs of the same data)."""
import argparse, csv, glob, os, sys

def read_csv(path):
    try:
        with open(path) as f:
            return list(csv.DictReader(f))
    except OSError:
        return []

def num(row, key):
    try:
        return float(row.get(key) or "nan")
    except ValueError:
        return float("nan")

def write_csv(path, rows):
    """Every row, the columns in order of first appearance; returns the columns."""
    keys = []
    for r in rows:
        keys += [k for k in r if k not in keys]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys or ["run"])
        w.writeheader()
        w.writerows(rows)
    return keys

def main():
    ap = argparse.ArgumentParser()
    for a in ("--runs", "--status", "--nvlink", "--device", "--date", "--commit", "--csv", "--summary"):
        ap.add_argument(a, required=True)
    a = ap.parse_args()
    status = {r["name"]: r for r in read_csv(a.status)}
    nv = read_csv(a.nvlink)
    uni = num(nv[0], "unidirectional_GBps") * 1e9 if nv else float("nan")
    bi = num(nv[0], "bidirectional_per_direction_GBps") * 1e9 if nv else float("nan")
    rows = []
    for run_dir in sorted(glob.glob(os.path.join(a.runs, "*"))):
        name = os.path.basename(run_dir)
        st = status.get(name, {})
        for path in sorted(glob.glob(os.path.join(run_dir, "*.csv"))):
            for r in read_csv(path):
                rows.append({"device": a.device, "date": a.date, "commit": a.commit, "run": name,
                             "mode": st.get("mode", ""), "transport": st.get("transport", ""), **r})
    write_csv(a.csv, rows)
    out = []
    for r in rows:
        if r.get("strategy") != "shuffle":
            continue
        ranks = num(r, "ranks")
        tuple_bytes = num(r, "key_bytes") + num(r, "r_payload_bytes")
        per_rank = (num(r, "r_rows") + num(r, "s_rows")) / ranks * tuple_bytes
        shipped = per_rank * (ranks - 1) / ranks  # 2 ranks: half of each rank's tuples
        phase = max((num(r, k) for k in ("phase_shuffle_s", "phase_shuffle_node_s") if r.get(k)), default=float("nan"))
        rate = shipped / phase if phase > 0 else float("nan")
        out.append({"run": r["run"], "mode": r["mode"], "transport": r["transport"],
                    "shape": f'{r.get("nodes")}x{r.get("ranks_per_node")}',
                    "strategy_options": r.get("strategy_options", ""), "verified": r.get("verified", ""),
                    "alltoall_s": f"{phase:.4f}", "shipped_GB_per_rank": f"{shipped / 1e9:.3f}",
                    "alltoall_GBps": f"{rate / 1e9:.1f}", "nvlink_GBps": f"{uni / 1e9:.1f}",
                    "nvlink_bidir_GBps": f"{bi / 1e9:.1f}", "fraction_of_nvlink": f"{rate / uni:.3f}",
                    "total_s": r.get("total_s", "")})
    for r in rows:
        if r.get("strategy") in ("gpj", "crj"):
            out.append({"run": r["run"], "mode": r["mode"], "transport": r["transport"],
                        "shape": f'{r.get("nodes")}x{r.get("ranks_per_node")}',
                        "strategy_options": r.get("strategy_options", ""), "verified": r.get("verified", ""),
                        "total_s": r.get("total_s", "")})
    keys = write_csv(a.summary, out)
    for r in out:
        print(",".join(str(r.get(k, "")) for k in keys))
    failed = [n for n, s in status.items() if s.get("exit") not in ("0", None)]
    if failed:
        print("failed runs:", " ".join(failed), file=sys.stderr)
    return 0

if __name__ == "__main__":
    sys.exit(main())
