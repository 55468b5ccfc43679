#!/usr/bin/env bash
# The prefill's routing and W4A8 conversion passes on the GPU machine (bench/probes/prefill_passes.cu):
# the CUDA tests (TEST_FILTER; SKIP_TESTS=1 skips them), then the probe of this build
# (.devcarry/probe_prefill_passes) and, when carried, of a base build
# (.devcarry/probe_prefill_passes_base), in this call: their checksums must agree and their times
# compare. With NCU=1, ncu's warp states and the SASS lines with the most stall samples of the
# routing kernel (NCU_KERNEL, default moe_route_tiled) at T = NCU_T (default 8192), E = NCU_E (default
# 32). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
preamble
P=$PWD/.devcarry/probe_prefill_passes
PB=$PWD/.devcarry/probe_prefill_passes_base
echo "== probe, this build"
$P ${PROBE_PART:-} 2>&1 | tee $OUT/probe_this.md
if [ -x $PB ]; then
  echo "== probe, base build"
  $PB ${PROBE_PART:-} 2>&1 | tee $OUT/probe_base.md
fi
if [ -n "${NCU:-}" ]; then
  K=${NCU_KERNEL:-moe_route_tiled}
  timeout ${NCU_S:-200} ncu --set full --import-source no --kernel-name "regex:$K" --launch-skip 3 --launch-count 1 \
    -f -o /tmp/route ${NCU_BIN:-$P} route ${NCU_T:-8192} ${NCU_E:-32} > $OUT/ncu_run.log 2>&1
  ncu -i /tmp/route.ncu-rep --page details --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section MemoryWorkloadAnalysis 2>&1 | tee $OUT/ncu_details.txt |
    grep -E "Duration|Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Stall|Warp Cycles Per Issued|Shared Memory Configuration Size|Dynamic Shared"
  ncu -i /tmp/route.ncu-rep --page source --csv --print-source sass > $OUT/ncu_source.csv 2>&1
  python3 - "$OUT/ncu_source.csv" <<'EOF' | tee $OUT/ncu_hot.txt
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = next((i for i, r in enumerate(rows) if any('Sampling' in c for c in r)), None)
if hdr is None:
    print('no sampling columns'); print('\n'.join(','.join(r[:6]) for r in rows[:5])); sys.exit()
h = rows[hdr]
col = next(i for i, c in enumerate(h) if 'Warp Stall Sampling (All' in c)
src = next((i for i, c in enumerate(h) if c.strip() == 'Source'), 1)
body = [r for r in rows[hdr + 1:] if len(r) > col and r[col].replace('.', '').isdigit()]
total = sum(float(r[col]) for r in body) or 1
print(f'{len(body)} SASS lines, {total:.0f} samples; the top 40:')
for r in sorted(body, key=lambda r: -float(r[col]))[:40]:
    print(f'{100 * float(r[col]) / total:5.1f}%  {r[src][:110]}')
EOF
fi
