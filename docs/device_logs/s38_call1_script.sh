#!/usr/bin/env bash
# Session 38, call 1: the prompt-chunk route on the tensor cores (branch s38-route-mma) against main
# (c60fbf1's build = main's kernels): its tests, the route probe (both builds), the 20b 8k prefill
# (both builds, alternating), ncu of the new route kernels at the 120b shape.
cd "$(dirname "$0")/../.."
mkdir -p build/tests build/main
xz -d -c .devcarry/s38/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/s38/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
xz -d -c .devcarry/s38/probe.xz > build/probe && chmod +x build/probe
xz -d -c .devcarry/s38/probe_main.xz > build/main/probe && chmod +x build/main/probe
xz -d -c .devcarry/m37/osprey.xz > build/main/osprey && chmod +x build/main/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
echo "== tests"
timeout 200 $T --gtest_filter='*MoeRoute*:CudaFp8Model.*:MoeMxfp4.*' 2>&1 | tee $OUT/tests.log |
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|Which is|tests ran|rror" | head -40
date
echo "== probe: main, this, main, this"
for r in 1 2; do
  build/main/probe route | tee -a $OUT/probe_main.txt
  build/probe route | tee -a $OUT/probe_this.txt
done
date
echo "== 20b 8k prefill"
D=$(synth_dir 20b)
ARGS="bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 --batches 1 --contexts 8192 --steps 8"
for r in 1 2; do
  for b in main this; do
    bin=$B; [ $b = main ] && bin=build/main/osprey
    echo "-- $b"; timeout 120 $bin $ARGS > $OUT/bench20_${b}_$r.txt 2>&1; grep -E "^\| (8192|1 )|rror" $OUT/bench20_${b}_$r.txt
  done
done
date
echo "== ncu route kernels, 120b shape"
timeout 120 ncu --kernel-name regex:"moe_norm|moe_route_mma|moe_scatter" --launch-count 3 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats \
  build/probe route 8192 128 > $OUT/ncu_route_120b.txt 2>&1
grep -E "moe_|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Achieved Occupancy|Registers Per|Warp Cycles Per Issued|Stall" $OUT/ncu_route_120b.txt | head -60
date
