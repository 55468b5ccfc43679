#!/usr/bin/env bash
# Session 41, second W4A8 register-operand check (the sign fix), with ncu of its kernels and of
# main's grouped FP8 GEMM in a 20b 8k prefill. Builds and carry as bench/prepared/s41-rs.sh.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main rs; do unpack .devcarry/s41/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
echo "== tests rs (W4A8)"
timeout 60 build/rs/tests --gtest_filter='*Mxfp4*:*Grouped*' > $OUT/tests_rs_w4a8.log 2>&1
gtest_summary $OUT/tests_rs_w4a8.log; grep -E "differ|relative" $OUT/tests_rs_w4a8.log | head -12
D=$(synth_dir 20b); prefill_builds $D 2048,8192 60 main rs
for n in rs main; do
  echo "== ncu $n"
  k='regex:w4a8|grouped_fp8_wgmma'
  timeout 150 ncu --kernel-name "$k" --launch-count 2 --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis_Tables --section LaunchStats \
    build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 1 --batches 1 \
    --contexts 64 --steps 1 > $OUT/ncu_$n.txt 2>&1
  grep -E "grouped|Duration|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Active Warps Per|Eligible Warps|Stall|Bank|Registers Per|Local" $OUT/ncu_$n.txt | head -40
done
date
