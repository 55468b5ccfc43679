#!/usr/bin/env python3
# ncu's CSV of two decode steps (the graph's warm-up step and the measured one) -> the measured
# step's kernel times and DRAM bytes summed by kernel, then the first FIRST launches (the first
# layer) and the last 3 (the unembedding and the token selection) one by one.
# Usage: ncu_decode_summary.py NCU_CSV [FIRST]
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; rows = rows[1:]
ii, ki, mi, vi, ui = (h.index(c) for c in ("ID", "Kernel Name", "Metric Name", "Metric Value", "Metric Unit"))
unit = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
        "byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3, "B": 1e-6, "KB": 1e-3, "MB": 1.0, "GB": 1e3}
launches = collections.OrderedDict()
for r in rows:
    k = launches.setdefault(r[ii], {"name": r[ki].split("(")[0].replace("(anonymous namespace)::", "").replace("void ", ""), "us": 0.0, "mb": 0.0})
    v = float(r[vi].replace(",", "")) * unit[r[ui]]
    if r[mi].startswith("gpu__time"): k["us"] = v
    else: k["mb"] = v
L = list(launches.values()); L = L[len(L) // 2:]  # the warm-up step and the measured one: report the second
agg = collections.defaultdict(lambda: [0.0, 0, 0.0])
for k in L:
    a = agg[k["name"]]; a[0] += k["us"]; a[1] += 1; a[2] += k["mb"]
tot = sum(a[0] for a in agg.values())
print(f"{len(L)} kernels, {tot:.0f} us of kernel time in one step (ncu, kernels serialized)")
for n, (t, c, mb) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
    print(f"{t:9.1f} us {c:5d}x {mb:9.1f} MB read {mb / t if t else 0:6.2f} TB/s  {n[:80]}")
first = int(sys.argv[2]) if len(sys.argv) > 2 else 13
print("first layer and the unembedding, launch by launch:")
for k in L[:first] + L[-3:]:
    print(f"{k['us']:8.1f} us {k['mb']:8.1f} MB {k['mb'] / k['us'] if k['us'] else 0:6.2f} TB/s  {k['name'][:80]}")
