#!/usr/bin/env bash
# Session 38, call 4: where moe_route_mma_kernel<4> stalls (120b shape, T 8192): stall reasons and
# the SASS lines with the most warp samples.
cd "$(dirname "$0")/../.."
mkdir -p build
xz -d -c .devcarry/s38/probe.xz > build/probe && chmod +x build/probe
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
timeout 100 ncu --kernel-name regex:"moe_route_mma" --launch-count 1 \
  --metrics regex:"smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio",smsp__inst_executed.sum,smsp__inst_executed_pipe_tensor.sum,sm__cycles_elapsed.avg \
  build/probe route 8192 128 > $OUT/stalls.txt 2>&1
grep -E "stalled|inst_executed|cycles" $OUT/stalls.txt | awk '$NF+0 > 0.05 || /inst|cycles/' | sort -k3 -n -r | head -30
timeout 150 ncu --kernel-name regex:"moe_route_mma" --launch-count 1 --section SourceCounters --section InstructionStats \
  --page source --print-source sass --csv build/probe route 8192 128 > $OUT/source.csv 2>&1
python3 - $OUT/source.csv << 'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace"))]
hi = next(i for i, r in enumerate(rows) if "Source" in r and any("Sampling" in c for c in r))
hdr = rows[hi]; data = rows[hi + 1:]
si = hdr.index("Source"); wi = next(i for i, c in enumerate(hdr) if c.startswith("Warp Stall Sampling (All"))
ei = next((i for i, c in enumerate(hdr) if c.startswith("Instructions Executed")), None)
def f(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
tot = sum(f(r[wi]) for r in data if len(r) > wi)
print("lines", len(data), "samples", tot)
for r in sorted([r for r in data if len(r) > wi], key=lambda r: -f(r[wi]))[:45]:
    print(f"{f(r[wi])/tot*100:5.1f}%  {r[si][:90]}  {r[ei] if ei else ''}")
ops = {}
for r in data:
    if len(r) <= wi: continue
    op = r[si].strip().split()[0] if r[si].strip() else "?"
    if op.startswith("@"): op = r[si].strip().split()[1]
    op = op.split(".")[0]
    ops[op] = ops.get(op, 0) + (f(r[ei]) if ei else 0)
print(sorted(ops.items(), key=lambda kv: -kv[1])[:25])
PY
