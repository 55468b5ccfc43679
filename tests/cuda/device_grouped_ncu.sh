#!/usr/bin/env bash
# ncu of the grouped FP8 GEMM's variants in the probe (PROBE, default .devcarry/probe_grouped_fp8_gemm)
# at SHAPE (default "8192 32"): speed of light, memory (L2) and warp state of one up-GEMM launch
# of each variant in SKIPS ("name:launches to skip"). The probe runs each variant's up GEMM 18
# times (3 warm-ups, 15 timed) then its down GEMM 18 times, in the order it prints them: the
# production tile (256 columns, 4 stages) is the 4th variant (skip 108), pairs sharing rows at 256
# columns the 6th (180), pairs sharing weights the 8th (252). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
P=${PROBE:-.devcarry/probe_grouped_fp8_gemm}
for v in ${SKIPS:-production:108 pairs_rows:180 pairs_weights:252}; do
  name=${v%%:*} skip=${v#*:}
  ncu --clock-control none --kernel-name regex:m_grouped_fp8_wgmma --launch-skip $skip --launch-count 1 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
    --section LaunchStats $P ${SHAPE:-8192 32} > $OUT/ncu_grouped_$name.txt 2>&1
  echo "-- $name"
  grep -E "^  void|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache|Compute \(SM\)|Issued Warp|No Eligible|Warp Cycles Per Issued|Cluster Size|est|stalled" \
    $OUT/ncu_grouped_$name.txt | head -24
done
