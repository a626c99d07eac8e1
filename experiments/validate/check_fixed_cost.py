#!/usr/bin/env python3
"""Would a fixed per-operator cost fix the 6Mi under-prediction of the H100 validation (issue 4)?

    python3 experiments/validate/check_fixed_cost.py [JOINLAB] [PROFILE] [MEASURED_CSV]

At 6Mi rows every phase is under-predicted (experiments/results/validate/h100-2026-11-22-s4b-*),
while 24Mi..192Mi are mostly within a few %. If the cause were a fixed host-side cost per operator
run (launches, uploads, syncs) that the fitted models lack, the same absolute residual would show at
every size. A fixed cost per operator run is exactly the constant coefficient of the models
(op_model.hpp: x[0] = 1), so adding F seconds to the constant of every piece of an operator's model
in the profile is what a measured fixed cost would do. For each F this script writes such a profile,
re-runs `joinlab validate` on the measured rows (simulation only, no GPU) and prints the phase errors
by size, plus the residual per size (measured - predicted, ms) of the unchanged profile.
Needs a joinlab built with SimGrid (default: build-models/joinlab).

Result on the s4b files (2026-11-22): NOT a fixed cost. The residual is not constant over size or
skew: smj sort +0.52 ms at 6Mi, +0.38 at 24Mi, -0.88 at 96Mi, -1.38 at 192Mi; npj probe at 6Mi
+0.20 ms with S uniform but +0.03 with Zipf 1.5. One F for every operator: the worst total goes
35.5% (F=0) -> 29.8% (25 us) -> 24.0% (50 us) -> 26.4% (100 us), and 24Mi starts to over-predict
(phj partition +17% at 50 us). Per operator, with only that model shifted: partition+histogram
25 us and merge_join 50 us bring their phases within ~12% at every size, partitioned_join needs
~100 us for 6Mi (then 24Mi +12%; its 192Mi -35% is another error), sort.radix needs ~200 us per
run for 6Mi but then over-predicts 24Mi/96Mi by 17-19%, npj probe cannot be fixed by a constant.
The fitted constants (20-100 us) already are the measured fixed cost: calibrate times each run
as the strategies run it (launch + host work + sync, models/calibrate.cpp timed()), and at its
smallest size (2^20 rows) the relative-error fit is dominated by the constant, so it is not
swamped by the large sizes (tests/test_models.cpp FixedCostIsRecovered...).

Follow-up (s5, 2026-11-22, experiments/results/validate/h100-2026-11-22-s5-*): calibrate's samples
were not too warm. Timed cold (a device copy of twice the L2 before each run) instead of warm, the
operators at 1Mi..16Mi and 6Mi/12Mi rows took 0.94-1.07x as long (histogram 1.1-1.25x):
experiments/validate/compare_samples.py on the s5 diagnostic samples. What a real phase pays and
a sample did not: the stream synchronization that ends every phase (10-25 us; samples now include
it), and host work of the strategy around its operators (phase_gaps.py: 45 us per npj phase, 100-340
us per phj join phase, where calibrate's sample of the same operator has 25-130 us).
"""
import csv
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
RES = os.path.join(ROOT, "experiments", "results", "validate")
JOINLAB = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build-models", "joinlab")
PROFILE = sys.argv[2] if len(sys.argv) > 2 else os.path.join(RES, "h100-2026-11-22-s4b-calibrated.ini")
MEASURED = sys.argv[3] if len(sys.argv) > 3 else os.path.join(RES, "h100-2026-11-22-s4b-measured.csv")
INI = os.path.join(HERE, "h100-single.ini")
# The operators of the validated phases (not the links, allocations or generate).
OPS = ("histogram", "partition", "build.linear", "build.chained", "probe.linear", "probe.chained",
       "partitioned_join.linear", "partitioned_join.chained", "sort.radix", "sort.merge",
       "merge_join", "gather", "checksum", "scan")
FIXED_US = (0, 25, 50, 100, 200)


def with_fixed(text, seconds):
    """The profile with `seconds` added to the constant of every piece of the OPS models."""
    out, section = [], ""
    for line in text.splitlines():
        m = re.match(r"\s*\[op\.([^\]]+)\]", line)
        if line.lstrip().startswith("["):
            section = m.group(1) if m else ""
        s = re.match(r"(\s*seg\s*=\s*)(\S+)\s+(\S+)(.*)", line)
        if s and section in OPS:
            line = "%s%s %.6g%s" % (s.group(1), s.group(2), float(s.group(3)) + seconds, s.group(4))
        out.append(line)
    return "\n".join(out) + "\n"


def validate(profile_text):
    with tempfile.TemporaryDirectory() as tmp:
        prof, table = os.path.join(tmp, "h100.ini"), os.path.join(tmp, "v.csv")
        with open(prof, "w") as f:
            f.write(profile_text)
        # Exit status 1 only means the bar was missed: the table is written either way.
        subprocess.run([JOINLAB, "validate", INI, "--measured", MEASURED, "--profile", prof,
                        "--out", table], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(table) as f:
            return list(csv.DictReader(f))


def by_size(rows, value):
    """{(strategy, phase): {size Mi: [value of each skew]}}."""
    t = defaultdict(lambda: defaultdict(list))
    for r in rows:
        t[(r["strategy"], r["phase"])][int(r["r_rows"]) >> 20].append(value(r))
    return t


def main():
    base_text = open(PROFILE).read()
    base = validate(base_text)
    sizes = sorted({int(r["r_rows"]) >> 20 for r in base})
    print("residual measured - predicted (ms), unchanged profile; max over the 3 skews:")
    res = by_size(base, lambda r: (float(r["measured_s"]) - float(r["predicted_s"])) * 1e3)
    print("%-22s" % "phase" + "".join("%10s" % ("%dMi" % s) for s in sizes))
    for key in sorted(res):
        print("%-22s" % " ".join(key) + "".join("%+10.3f" % max(res[key][s], key=abs) for s in sizes))
    print("\nworst |error| over the 3 skews, per size, with F us added to each operator's constant:")
    for f_us in FIXED_US:
        rows = validate(with_fixed(base_text, f_us * 1e-6))
        err = by_size(rows, lambda r: float(r["error"]))
        worst_total = max(abs(float(r["error"])) for r in rows if r["phase"] == "total")
        worst_phase = max(abs(float(r["error"])) for r in rows if r["phase"] != "total")
        print("F = %d us: worst total %.1f%%, worst phase %.1f%%" % (f_us, 100 * worst_total, 100 * worst_phase))
        for key in sorted(err):
            print("  %-20s" % " ".join(key) +
                  "".join("%+9.1f%%" % (100 * max(err[key][s], key=abs)) for s in sizes))


if __name__ == "__main__":
    main()
