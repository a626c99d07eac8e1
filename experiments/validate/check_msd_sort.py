#!/usr/bin/env python3
"""Checks the form of the MSD radix sort's model (models/op_model.cpp msd_work, sort.radix) against
smj's sort phase on the H100 (R uniform + S Zipf, kernels/cuda/sort.cu), before a calibration with it
exists: the features are computed as op_model.cpp computes them, the coefficients fitted to a training
subset, the error reported on the held-out points (as check_model_forms.py does):
  * skew: fit on Zipf 0 and 1.5, predict Zipf 0.75;   * size: leave one size out at a time.
    python3 experiments/validate/check_msd_sort.py [MEASURED_CSV]
Default: experiments/results/validate/h100-2026-11-22-s4-measured.csv (the MSD sort's first run).
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_model_forms import groups, load, nnls_rel  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MEASURED = os.path.join(HERE, "..", "results", "validate", "h100-2026-11-22-s4-measured.csv")
LOCAL_CAP, LOCAL_TARGET, DEVICE_WIDE, LOCAL_BITS = 5120, 4096, 1 << 20, 13


def msd_work(rows, z):
    """(cub_rows, cub_sorts, segment_max_rows) of an MSD sort of `rows` keys, Zipf(z) over `rows` keys."""
    if z == 0:
        return 0.0, 0.0, 0.0
    rng = float(rows)
    low = 0
    while low < LOCAL_BITS and rows * 2.0 ** (low + 1) / rng <= LOCAL_TARGET:
        low += 1
    kpp = min(rng, 2.0 ** low)
    base = rows * (kpp - 1) / rng
    cub = sorts = seg_max = 0.0
    segmented = False
    for count, share in groups(z, rows):
        part = share * rows + base
        if part <= LOCAL_CAP:
            continue
        n = min(count, rng / kpp)
        cub += n * part
        if part >= DEVICE_WIDE:
            sorts += n
        else:
            segmented = True
            seg_max = max(seg_max, part)
    return min(cub, rows), sorts + (1 if segmented else 0), seg_max


def features(p, full=True, tb=8):
    n = p["n"]
    cub, sorts, seg = msd_work(n, p["z"])
    x = [2.0, 2.0 * n * tb]  # R's and S's sorts: two constants, both inputs' bytes
    return x + ([cub * tb, sorts, seg * tb] if full else [])


def run(points, full, held_out_of):
    """Held-out predictions: for each split, fit on the rest."""
    pred = {}
    for split in held_out_of:
        tr = [p for p in points if not split(p)]
        coef = nnls_rel([features(p, full) for p in tr], [p["t"] for p in tr])
        for i, p in enumerate(points):
            if split(p):
                pred[i] = float(np.dot(features(p, full), coef))
    return pred


MJ = {}  # (rows, zipf) -> merge join predicted with the s4 profile


def load_mj(path):
    import csv
    for r in csv.DictReader(open(path), fieldnames=["experiment", "point", "swept", "strategy", "ranks", "r_rows",
                                                    "s_rows", "phase", "measured_s", "predicted_s", "error"]):
        if r["strategy"] == "smj" and r["phase"] == "merge_join":
            z = float(r["swept"].split("zipf_z=")[1].split()[0])
            MJ[(int(r["r_rows"]), z)] = float(r["predicted_s"])


def main():
    validate = os.path.join(HERE, "..", "results", "validate", "h100-2026-11-22-s4-validate.csv")
    if os.path.exists(validate):
        load_mj(validate)
    rows = [r for r in load(sys.argv[1] if len(sys.argv) > 1 else MEASURED) if r["strategy"] == "smj"]
    points = [dict(n=r["n"], z=r["z"], t=r["sort"], total=r["total"], mj=r.get("merge_join", 0)) for r in rows]
    sizes = sorted({p["n"] for p in points})
    splits = {
        "skew (fit Zipf 0 and 1.5, predict 0.75)": [lambda p: p["z"] == 0.75],
        "size (leave one size out)": [lambda p, s=s: p["n"] == s for s in sizes],
    }
    for full in (False, True):
        print("\n== sort.radix %s" % ("with the MSD features (cub_bytes, cub_sorts, segment_max_bytes)"
                                      if full else "as calibrated on s4 (bytes_in only)"))
        for name, split in splits.items():
            pred = run(points, full, split)
            errs = []
            print("  %s" % name)
            for i, p in enumerate(points):
                if i not in pred:
                    continue
                e = (pred[i] - p["t"]) / p["t"]
                errs.append(abs(e))
                # The total with the s4 profile's merge join (validate's table) and the phases' gaps as measured.
                mj = MJ.get((p["n"], p["z"]))
                tot = "" if mj is None else "   total %+6.1f%%" % (100 * (pred[i] + mj - p["t"] - p["mj"]) / p["total"])
                print("    %4dMi z=%-4g measured %7.3f ms predicted %7.3f ms %+6.1f%%%s" %
                      (p["n"] >> 20, p["z"], p["t"] * 1e3, pred[i] * 1e3, 100 * e, tot))
            print("    held out: median |error| %.1f%%, max %.1f%%, within 20%%: %d/%d" %
                  (100 * np.median(errs), 100 * max(errs), sum(e <= 0.2 for e in errs), len(errs)))


if __name__ == "__main__":
    main()
