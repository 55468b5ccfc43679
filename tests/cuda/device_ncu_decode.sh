#!/usr/bin/env bash
# ncu kernel times of one 20b decode step at 8k context (after the graph's warm-up step), summed by
# kernel, for each WEIGHTS format and batch in NCU (default "1 64"). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for wt in ${WEIGHTS:-mxfp4 fp8}; do for nb in ${NCU:-1 64}; do
  echo "== ncu: decode step kernels, 20b, --weights $wt, batch $nb, context 8192"
  OSPREY_PROFILE_DECODE=1 ncu --profile-from-start off --clock-control none \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv \
    $B bench --backend cuda --model $M/20b --weights $wt --prefill-lens 16 --contexts 8192 --batches $nb --steps 1 2>/dev/null > /tmp/ncu_$nb.csv
  python3 - /tmp/ncu_$nb.csv <<'PY' | tee $OUT/ncu_decode_${wt}_b$nb.txt
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
L = list(launches.values()); L = L[len(L) // 2:]
agg = collections.defaultdict(lambda: [0.0, 0, 0.0])
for k in L:
    a = agg[k["name"]]; a[0] += k["us"]; a[1] += 1; a[2] += k["mb"]
tot = sum(a[0] for a in agg.values())
print(f"{len(L)} kernels, {tot:.0f} us of kernel time in one step (ncu, kernels serialized)")
for n, (t, c, mb) in sorted(agg.items(), key=lambda kv: -kv[1][0]):
    print(f"{t:9.1f} us {c:5d}x {mb:9.1f} MB read {mb / t if t else 0:6.2f} TB/s  {n[:80]}")
print("first layer, launch by launch:")
for k in L[:14]:
    print(f"{k['us']:8.1f} us {k['mb']:8.1f} MB {k['mb'] / k['us'] if k['us'] else 0:6.2f} TB/s  {k['name'][:80]}")
PY
done; done
