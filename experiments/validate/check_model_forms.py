#!/usr/bin/env python3
"""Checks the forms of the cache-aware operator models (models/op_model.*) against H100 measurements,
before a calibration with them exists.

    python3 experiments/validate/check_model_forms.py [MEASURED_CSV]

The validation points (experiments/validate/single-gpu.ini, 1.5 x 2^k rows, S Zipf 0/0.75/1.5) are
measured on the H100 (default: experiments/results/h100/validation-measured.csv); the points at
2^27 rows are the single-GPU benchmark's (experiments/single-gpu, written in below). For each phase the model's
features are computed as op_model.cpp computes them, its coefficients (and cache sizes, on the same
candidate grid) are fitted to a TRAINING subset that stands in for calibrate's points, and the error is
reported on the HELD-OUT points:
  * skew: fit on Zipf 0 and 1.5 (+ the 2^27 points), predict Zipf 0.75 (calibrate fits 0/0.5/1/1.25);
  * size: leave one size out at a time (calibrate fits 2^20..2^28, the validation is at 1.5 x 2^k).
This says whether a model's FORM can describe the measurements; the coefficients a calibration on
the device fits may differ (its operators run as the strategies run them, but at other sizes).
Needs numpy.
"""
import csv
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MEASURED = os.path.join(HERE, "..", "results", "h100", "validation-measured.csv")
H2D_BW, H2D_LAT = 5.53744e10, 1.55645e-05  # models/profiles/h100.ini, link.h2d (2026-11-22)
MI = 1 << 20


# --- the features, as models/op_model.cpp computes them ---------------------------------------------
def groups(z, keys, ratio=1.05):
    """(count, share) groups of a Zipf(z) law over `keys` ranks (key_groups in op_model.cpp)."""
    if z == 0:
        return [(keys, 1.0 / keys)]
    def integral(a, b):
        return math.log(b / a) if abs(z - 1) < 1e-12 else (b ** (1 - z) - a ** (1 - z)) / (1 - z)
    total = integral(0.5, keys + 0.5)
    out, a = [], 1.0
    while a < keys + 1:
        b = min(keys + 1.0, max(a + 1, math.ceil(a * ratio)))
        out.append((b - a, integral(a - 0.5, b - 0.5) / total / (b - a)))
        a = b
    return out


_hits = {}


def hit(z, keys, table_bytes, cache):
    """cache_hit_fraction: a cache of keys * cache / table_bytes keys that evicts at random."""
    if cache >= table_bytes:
        return 1.0
    cap = keys * cache / table_bytes
    if z == 0:
        return min(1.0, cap / keys)
    k = (z, keys, round(cap))
    if k in _hits:
        return _hits[k]
    g = groups(z, keys)
    c = np.array([x for x, _ in g])
    p = np.array([y for _, y in g])
    t = cap
    for _ in range(200):
        f = np.sum(c * p * t / (1 + p * t)) - cap
        d = np.sum(c * p / (1 + p * t) ** 2)
        if f >= -1e-9 * cap or d <= 0:
            break
        t -= f / d
    _hits[k] = float(np.sum(c * p * p * t / (1 + p * t)))
    return _hits[k]


def pow2(x):
    p = 1
    while p < x:
        p *= 2
    return p


def table_bytes(n, tb=8, load=0.5):
    return pow2(n / load) * tb


NEAR = [round(4096 * 2 ** (i / 2)) for i in range(25)]
FAR = [round(MI * 2 ** (i / 2)) for i in range(21)]


# --- fitting ---------------------------------------------------------------------------------------
def nnls_rel(X, y):
    """Non-negative least squares on relative error (fit_piece in op_model.cpp)."""
    X = np.asarray(X, float)
    y = np.asarray(y, float)
    A = X / y[:, None]
    active = [j for j in range(X.shape[1]) if np.any(X[:, j] != 0)]
    while active:
        sol, *_ = np.linalg.lstsq(A[:, active], np.ones(len(y)), rcond=None)
        if np.all(sol >= 0):
            coef = np.zeros(X.shape[1])
            coef[active] = sol
            return coef
        active.pop(int(np.argmin(sol)))
    return np.zeros(X.shape[1])


def fit_predict(points, features, train, grids):
    """Best cache sizes on the grids (each combination a linear fit), then predictions for all."""
    best = None
    for caches in grids:
        X = [features(p, caches) for p in points]
        tr = [i for i, p in enumerate(points) if train(p)]
        coef = nnls_rel([X[i] for i in tr], [points[i]["t"] for i in tr])
        pred = np.array(X) @ coef
        rms = math.sqrt(np.mean([((pred[i] - points[i]["t"]) / points[i]["t"]) ** 2 for i in tr]))
        if best is None or rms < best[0]:
            best = (rms, caches, coef, pred)
    return best


def grid(*levels):
    out = [()]
    for lv in levels:
        out = [c + (x,) for c in out for x in lv if not c or c[-1] < x]
    return out


# --- the data --------------------------------------------------------------------------------------
def load(path):
    rows = []
    for r in csv.DictReader(open(path)):
        d = dict(strategy=r["strategy"], n=int(r["r_rows"]), z=float(r["s_zipf_z"]), total=float(r["total_s"]))
        for k, v in r.items():
            if k.startswith("phase_") and v:
                d[k[6:-2]] = float(v)
        rows.append(d)
    return rows


PREDICTED = {}  # (strategy phase label) -> held-out prediction, for the totals


def report(name, points, pred, held_out, extra=""):
    errs = []
    for p, q in zip(points, pred):
        if p.get("show", True):
            PREDICTED[(name.split(":")[0], p["label"].split(" ", 1)[1])] = q
    print("\n%s%s" % (name, extra))
    for p, q in zip(points, pred):
        if not p.get("show", True):
            continue
        e = (q - p["t"]) / p["t"]
        tag = "held out" if held_out(p) else "fitted"
        if held_out(p):
            errs.append(abs(e))
        print("  %-22s measured %8.3f ms  predicted %8.3f ms  %+6.1f%%  (%s)" % (p["label"], p["t"] * 1e3, q * 1e3, 100 * e, tag))
    if errs:
        print("  held out: median |error| %.1f%%, max %.1f%%" % (100 * np.median(errs), 100 * max(errs)))
    return errs


def main():
    rows = load(sys.argv[1] if len(sys.argv) > 1 else MEASURED)
    sizes = sorted({r["n"] for r in rows})
    summary = {}

    # npj (and chunked) build: bytes, collisions at the table's load, far misses (uniform R keys).
    def build_features(p, caches):
        n, tb = p["n"], 8
        T = table_bytes(n)
        a = n / (T / tb)
        return [1.0, n * tb, n * tb * 0.5 * a / (1 - a), n * (1 - hit(0, n, T, caches[0]))]
    pts = [dict(n=r["n"], t=r["build"], label="npj %dMi" % (r["n"] // MI)) for r in rows if r["strategy"] == "npj" and r["z"] == 0]
    pts += [dict(n=1 << 27, t=28.4e-3, label="npj 2^27", show=False), dict(n=1 << 20, t=0.139e-3, label="npj 2^20", show=False)]
    pred = np.zeros(len(pts))
    for held in sizes:  # leave one size out
        best = fit_predict(pts, build_features, lambda p: p["n"] != held, grid(FAR))
        for i, p in enumerate(pts):
            if p["n"] == held:
                pred[i] = best[3][i]
    summary["npj build"] = report("npj build: 1, bytes_in, collision_bytes, far_misses (each size predicted from the others)", pts, pred, lambda p: p.get("show", True))

    # npj probe: bytes (in + out, one pass: direct output), near and far misses of Zipf S over R.
    def probe_features(p, caches):
        n, s = p["n"], p.get("s", p["n"])
        T = table_bytes(n)
        return [1.0, s * 20.0, s * (1 - hit(p["z"], n, T, caches[0])), s * (1 - hit(p["z"], n, T, caches[1]))]
    pts = [dict(n=r["n"], z=r["z"], t=r["probe"], label="npj %dMi z=%.2f" % (r["n"] // MI, r["z"])) for r in rows if r["strategy"] == "npj"]
    pts += [dict(n=1 << 27, z=0.0, t=14.7e-3, label="npj 2^27", show=False),
            dict(n=1 << 20, s=1 << 27, z=0.0, t=4.78e-3, label="npj 2^20 x 2^27", show=False)]
    best = fit_predict(pts, probe_features, lambda p: p["z"] != 0.75, grid(NEAR, FAR))
    summary["npj probe"] = report("npj probe: 1, bytes, near_misses, far_misses (Zipf 0.75 predicted from 0 and 1.5)",
                                  pts, best[3], lambda p: p["z"] == 0.75,
                                  "; caches near %.0f KB, far %.1f MB" % (best[1][0] / 1e3, best[1][1] / 1e6))
    probe_best = best

    # chunked probe: chunks of 4Mi S rows copied one after the other (two columns each), each probed
    # on its stream while the next copies; the probe model from above, on a chunk.
    cpts = [r for r in rows if r["strategy"] == "chunked"]
    pts, pred = [], []
    for r in cpts:
        n = r["n"]
        chunks = [min(4 * MI, n - i) for i in range(0, n, 4 * MI)]
        copy = [2 * H2D_LAT + c * 8 / H2D_BW for c in chunks]
        probe = [float(np.dot(probe_features(dict(n=n, s=c, z=r["z"]), probe_best[1]), probe_best[2])) for c in chunks]
        t = copy[0]
        for i in range(len(chunks)):  # chunk i+1 copies while chunk i is probed
            nxt = copy[i + 1] if i + 1 < len(chunks) else 0
            t += max(probe[i], nxt) if nxt else probe[i]
        pts.append(dict(n=n, z=r["z"], t=r["probe"], label="chunked %dMi z=%.2f" % (n // MI, r["z"])))
        pred.append(t)
    summary["chunked probe"] = report("chunked probe: H2D copies (link.h2d of the 2026-11-22 profile) overlapped with "
                                      "the probe model above (host.mem_bw no longer below the link)", pts, pred, lambda p: True)

    # phj join: work items of partitioned_join.cu (R 3072-row partitions at the 32 KB budget, S
    # partitions from the Zipf law), bytes, output.
    rng = np.random.default_rng(1)

    def harmonic(z, n):
        s = sum(k ** -z for k in range(1, 100001))
        if n > 100000:
            a, b = 100000.5, n + 0.5
            s += math.log(b / a) if abs(z - 1) < 1e-9 else (b ** (1 - z) - a ** (1 - z)) / (1 - z)
        return s

    def join_work(n, z, tb=8, chunk=4096, budget=32768):
        bits = 0
        while bits < 24 and 2 ** bits < n * tb / budget:
            bits += 1
        F = 2 ** bits
        nr = np.full(F, n / F)
        if z == 0:
            ns = rng.poisson(n / F, F).astype(float)
        else:
            top = 200000
            heavy = np.floor(np.arange(1, top + 1) ** -z / harmonic(z, n) * n)
            ns = np.bincount(rng.integers(0, F, top), weights=heavy, minlength=F) + rng.poisson((n - heavy.sum()) / F, F)
        slice_rows = max(8 * 2048, math.ceil(n / (132 * 32) / 2048) * 2048)
        chunks, slices = np.ceil(nr / chunk), np.maximum(1, np.ceil(ns / slice_rows))
        last_c, last_s = nr - (chunks - 1) * chunk, ns - (slices - 1) * slice_rows
        build = (chunks - 1) * math.ceil(chunk / 2048) + np.ceil(last_c / 2048)
        probe = (slices - 1) * math.ceil(slice_rows / 2048) + np.ceil(np.maximum(last_s, 1) / 2048)
        return [1.0, 2 * n * tb, n * 12.0, float(np.sum(chunks * slices)), float(np.sum(build * slices + probe * chunks)),
                float(np.sum(nr * (slices - 1))) * tb, float(np.sum(ns * (chunks - 1))) * tb]
    jpts = [dict(n=r["n"], z=r["z"], t=r["join"], label="phj %dMi z=%.2f" % (r["n"] // MI, r["z"]),
                 x=join_work(r["n"], r["z"])) for r in rows if r["strategy"] == "phj"]
    jpts += [dict(n=1 << 27, z=0.0, t=2.47e-3, label="phj 2^27", show=False, x=join_work(1 << 27, 0)),
             dict(n=1 << 27, z=1.0, t=2.835e-3, label="phj 2^27 z=1", show=False, x=join_work(1 << 27, 1.0))]
    pred = np.zeros(len(jpts))
    for held in sizes:
        best = fit_predict(jpts, lambda p, c: p["x"], lambda p: p["n"] != held, [()])
        for i, p in enumerate(jpts):
            if p["n"] == held:
                pred[i] = best[3][i]
    summary["phj join"] = report("phj join: 1, bytes_in, bytes_out, items, rounds, r_reload_bytes, s_reload_bytes (each size "
                                 "predicted from the others)", jpts, pred, lambda p: p.get("show", True))

    # smj merge join: bytes, near misses of S's runs over sorted R.
    def mj_features(p, caches):
        n = p["n"]
        return [1.0, n * 28.0, n * (1 - hit(p["z"], n, n * 8, caches[0]))]
    pts = [dict(n=r["n"], z=r["z"], t=r["merge_join"], label="smj %dMi z=%.2f" % (r["n"] // MI, r["z"])) for r in rows if r["strategy"] == "smj"]
    pts += [dict(n=1 << 27, z=0.0, t=2.586e-3, label="smj 2^27", show=False)]
    best = fit_predict(pts, mj_features, lambda p: p["z"] != 0.75, grid(NEAR))
    summary["smj merge_join"] = report("smj merge_join: 1, bytes, near_misses (Zipf 0.75 predicted from 0 and 1.5)",
                                       pts, best[3], lambda p: p["z"] == 0.75, "; near cache %.0f KB" % (best[1][0] / 1e3))

    # Totals: the phases above, the others (phj's partitioning, smj's sort: kernels being replaced,
    # calibrated by the device run) taken as measured, i.e. assumed predicted exactly.
    print("\ntotals from the held-out phases (phj partition and smj sort taken as measured):")
    tot = {}
    for r in rows:
        key = "%dMi z=%.2f" % (r["n"] // MI, r["z"])
        s_, phases = r["strategy"], []
        if s_ == "npj":
            phases = [PREDICTED.get(("npj build", "%dMi" % (r["n"] // MI))), PREDICTED.get(("npj probe", key))]
        elif s_ == "chunked":
            phases = [PREDICTED.get(("npj build", "%dMi" % (r["n"] // MI))), PREDICTED.get(("chunked probe", key))]
        elif s_ == "phj":
            phases = [r["partition"], PREDICTED.get(("phj join", key))]
        elif s_ == "smj":
            phases = [r["sort"], PREDICTED.get(("smj merge_join", key))]
        if any(p is None for p in phases):
            continue
        e = (sum(phases) - r["total"]) / r["total"]
        tot.setdefault(s_, []).append(abs(e))
        print("  %-8s %-14s measured %8.3f ms  predicted %8.3f ms  %+6.1f%%" % (s_, key, r["total"] * 1e3, sum(phases) * 1e3, 100 * e))
    for k, v in tot.items():
        print("  %-8s median %5.1f%%  max %5.1f%%  within 10%%: %d of %d" % (k, 100 * np.median(v), 100 * max(v), sum(e <= 0.1 for e in v), len(v)))

    print("\nheld-out |error| per phase (the bar: 20% per phase):")
    for k, v in summary.items():
        if v:
            print("  %-16s median %5.1f%%  max %5.1f%%  within 20%%: %d of %d" %
                  (k, 100 * np.median(v), 100 * max(v), sum(e <= 0.2 for e in v), len(v)))


if __name__ == "__main__":
    main()
