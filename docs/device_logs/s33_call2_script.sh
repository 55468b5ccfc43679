#!/usr/bin/env bash
# Session 33, call 2: the one-wave 4-warp rule against main (MoE GEMMs alone, 20b decode), then
# ncu of a 20b batch-1 step's first two layers launch by launch (a sliding and a full layer), with
# speed-of-light, occupancy and warp stalls.
cd "$(dirname "$0")/.." && source tests/cuda/device_env.sh
set +e
export OUT
BASE=$PWD/.devcarry/base/osprey
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
echo "== tests MoeMxfp4 + persistent"
timeout 120 $T --gtest_filter='*MoeMxfp4*:CudaFp8Model.PersistentDecode*:CudaFp8Model.*Graph*' > $OUT/tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests.log | head
SKIP_TESTS=1 BASE_MOE=$BASE MOE_BATCHES=1,2,4,8 DECODE_ARGS="--prefill-lens 1024 --batches 1,2,4,8 --contexts 8192 --steps 16" \
  WEIGHTS=mxfp4 BASE_BIN=$BASE bash tests/cuda/device_moe_ab.sh 2>&1 | grep -v "^loading\|^osprey: MXFP4"
echo "-- this again"; $B bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens 1024 --batches 1,2,4,8 --contexts 8192 --steps 16 2>&1 | grep -E "^\| [0-9]|rror"
date
echo "== ncu 20b batch 1, two layers launch by launch"
ncu_decode_step 1 22 $OUT/ncu_b1.txt --weights mxfp4 > /dev/null; sed -n '/first layer/,$p' $OUT/ncu_b1.txt
echo "== ncu detail, the first 22 launches of the profiled range"
OSPREY_PROFILE_DECODE=1 ncu --profile-from-start off --clock-control none --launch-count 22 \
  --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats --section SchedulerStats \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
  $B bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens 16 --contexts 8192 --batches 1 --steps 1 > $OUT/ncu_detail.txt 2>&1
python3 - $OUT/ncu_detail.txt <<'PY'
import re, sys
cur = None
for line in open(sys.argv[1]):
    m = re.match(r"\s+(?:void )?(\S.*?)\(.*\) \((\d+), (\d+), (\d+)\)x\((\d+), (\d+), (\d+)\)", line)
    if m:
        name = m.group(1).replace("(anonymous namespace)::", "").replace("<unnamed>::", "")
        print(f"-- {name[:60]} grid ({m.group(2)},{m.group(3)},{m.group(4)}) block {m.group(5)}")
        continue
    l = line.strip()
    if re.match(r"(Duration|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Theoretical Occupancy|Warp Cycles Per Issued|Issued Warp Per Scheduler|Eligible Warps|Dynamic Shared Memory Per Block)\b", l):
        print("   ", re.sub(r"\s{2,}", "  ", l))
    m = re.match(r"smsp__average_warps_issue_stalled_(\w+)_per_issue_active\.ratio\s+\S+\s+([\d.]+)", l)
    if m and float(m.group(2)) >= 0.5:
        print(f"    stall {m.group(1)} {m.group(2)}")
PY
date
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
