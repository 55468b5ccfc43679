#!/usr/bin/env bash
# Decode-step profile on the GPU machine (issue 14's MXFP4 decode path): optionally the CUDA tests
# (TEST_FILTER; SKIP_TESTS=1 skips them) and compute-sanitizer on SANITIZE (a gtest filter), then
# for each batch in BATCHES (default 64 128) ncu kernel times and DRAM bytes of one 20b decode
# step at 8k context with --weights WEIGHTS (default mxfp4), summed by kernel; with DETAIL (a
# kernel name regex), ncu's speed-of-light, occupancy, warp-state, pipe and memory sections of
# the first launches of those kernels in a decode step at DETAIL_BATCH (a pool of 2,048 KV blocks
# and a 64-token context: ncu's replays save and restore device memory); with SASS (a regex),
# the SASS of the matching kernels in build/osprey and their instruction mix. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
cuda_tests
[ -n "${SANITIZE:-}" ] && sanitize_tests "$SANITIZE"  # memcheck and racecheck on these tests
W=${WEIGHTS:-mxfp4}
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for nb in ${BATCHES:-64 128}; do
  echo "== ncu decode step, batch $nb, $W experts"
  ncu_decode_step $nb 14 $OUT/ncu_decode_${W}_b$nb.txt --weights $W | head -24
done
if [ -n "${DETAIL:-}" ]; then
  echo "== ncu detail: $DETAIL, batch ${DETAIL_BATCH:-64}"
  OSPREY_PROFILE_DECODE=1 ncu --profile-from-start off --clock-control none --kernel-name "regex:$DETAIL" \
    --launch-count ${DETAIL_COUNT:-4} --section SpeedOfLight --section Occupancy --section LaunchStats \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats $B bench --backend cuda --model $M/20b --weights $W \
    --prefill-lens 16 --batches ${DETAIL_BATCH:-64} --contexts 64 --steps 1 --kv-blocks 2048 > $OUT/ncu_detail.txt 2>&1
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|L2 Hit|L1/TEX Hit|Compute \(SM\)|Achieved Occupancy|Registers Per|Issue Slots Busy|Issued Warp|Eligible Warps|Active Warps|No Eligible|Warp Cycles Per Issued|Executed Ipc|Shared Memory|Dynamic Shared|Block Limit|Theoretical Occ" $OUT/ncu_detail.txt | head -120
fi
if [ -n "${SASS:-}" ]; then
  echo "== SASS of /$SASS/"
  if command -v cuobjdump > /dev/null; then
    cuobjdump -sass $B > /tmp/all.sass 2>/dev/null
    python3 - "$SASS" /tmp/all.sass $OUT/sass.txt << 'EOF'
import re, sys, collections
pat, src, dst = re.compile(sys.argv[1]), sys.argv[2], sys.argv[3]
out, cur, keep = [], None, False
for line in open(src, errors="replace"):
    m = re.match(r"\s*Function : (\S+)", line)
    if m:
        cur = m.group(1); keep = bool(pat.search(cur))
        if keep: out.append(line)
        continue
    if keep: out.append(line)
open(dst, "w").writelines(out)
funcs = collections.OrderedDict()
for line in out:
    m = re.match(r"\s*Function : (\S+)", line)
    if m: name = m.group(1); funcs[name] = collections.Counter(); continue
    m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
    if m: funcs[name][m.group(2)] += 1
for name, c in funcs.items():
    print(name, sum(c.values()), "instructions:", ", ".join(f"{k} {v}" for k, v in c.most_common(24)))
EOF
  else
    echo "no cuobjdump on this machine"
  fi
fi
