#!/usr/bin/env python3
# ncu's CSV (gpu__time_duration) of one `bench --backend cuda` run -> kernel time summed by kernel
# name, largest first, with each name's share (the prefill is most of the run; decode steps of a
# short context add a few hundred small launches).
# Usage: ncu_prefill_summary.py NCU_CSV
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; rows = rows[1:]
ki, mi, vi, ui = (h.index(c) for c in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
unit = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}
agg = collections.defaultdict(lambda: [0.0, 0])
for r in rows:
    if not r[mi].startswith("gpu__time"): continue
    name = r[ki].split("(")[0].replace("(anonymous namespace)::", "").replace("void ", "")
    a = agg[name]; a[0] += float(r[vi].replace(",", "")) * unit[r[ui]]; a[1] += 1
tot = sum(a[0] for a in agg.values())
print(f"{sum(a[1] for a in agg.values())} kernels, {tot / 1e3:.1f} ms of kernel time (ncu, kernels serialized)")
for n, (t, c) in sorted(agg.items(), key=lambda kv: -kv[1][0])[:25]:
    print(f"{t / 1e3:9.2f} ms {100 * t / tot:5.1f}% {c:6d}x  {n[:90]}")
