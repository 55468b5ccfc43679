#!/usr/bin/env bash
# Session 38, call 6: the final build of branch s38-route-mma against main (c60fbf1's build = main's
# kernels), one call: the whole CUDA suite, the route probe, the 20b and 120b 8k prefill (alternating),
# compute-sanitizer memcheck on the route tests.
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
echo "== tests (all)"
timeout 150 $T 2>&1 | tee $OUT/tests.log | grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|tests ran|rror" | head -30
date
echo "== probe: main, this, main, this"
for r in 1 2; do
  build/main/probe route | tee -a $OUT/probe_main.txt | cut -c1-40
  build/probe route | tee -a $OUT/probe_this.txt | cut -c1-40
done
timeout 60 ncu --kernel-name regex:"moe_route_mma|moe_norm" --launch-count 2 --section SpeedOfLight --section WarpStateStats \
  --metrics smsp__inst_executed.sum build/probe route 8192 128 > $OUT/ncu_route_128.txt 2>&1
grep -E "moe_|Duration|Warp Cycles Per Issued|inst_executed" $OUT/ncu_route_128.txt | cut -c1-100
date
echo "== 20b 8k prefill"
D=$(synth_dir 20b)
ARGS="--backend cuda --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 --batches 1 --contexts 8192 --steps 8"
for r in 1 2; do
  for b in main this; do
    bin=$B; [ $b = main ] && bin=build/main/osprey
    echo "-- $b"; timeout 120 $bin bench --model $D $ARGS > $OUT/bench20_${b}_$r.txt 2>&1; grep -E "^\| (8192|1 )|rror" $OUT/bench20_${b}_$r.txt
  done
done
date
echo "== 120b 8k prefill"
D=$(synth_dir 120b)
date
for b in main this; do
  bin=$B; [ $b = main ] && bin=build/main/osprey
  echo "-- $b"; timeout 150 $bin bench --model $D --backend cuda --weights mxfp4 --prefill-lens 8192 --prefill-reps 4 --batches 1 --contexts 8192 --steps 8 > $OUT/bench120_${b}.txt 2>&1
  grep -E "^\| (8192|1 )|rror|loaded" $OUT/bench120_${b}.txt; date
done
echo "== memcheck, route tests"
timeout 100 compute-sanitizer --tool memcheck $T --gtest_filter='CudaFp8.MoeRoute*' > $OUT/memcheck.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.txt | head
date
