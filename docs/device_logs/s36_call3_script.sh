#!/usr/bin/env bash
# Session 36, call 4: MXFP4 row passes (8 rows) at four blocks an SM (three activation chunks,
# 64 registers) against main's three (two chunks): the expert GEMMs alone and the 20b step.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/s36a/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/s36d/osprey.xz > /tmp/osprey_4b && chmod +x /tmp/osprey_4b
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
xz -d -c .devcarry/s36d/tests.xz > /tmp/tests_4b && chmod +x /tmp/tests_4b
timeout 60 /tmp/tests_4b --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_4b.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_4b.log | head
D=$(synth_dir 20b)
date
for b in main 4b main 4b; do
  bin=$B; [ $b = 4b ] && bin=/tmp/osprey_4b
  timeout 40 $bin bench --backend cuda --model $D --prefill-lens "" --batches "" --moe-batches 2,4,8,16,32 --steps 32 >> $OUT/moe_$b.log 2>&1
  echo "-- moe $b"; grep -E "^\| [0-9].*mxfp4" $OUT/moe_$b.log | tail -5
done
date
for b in main 4b main 4b; do
  bin=$B; [ $b = 4b ] && bin=/tmp/osprey_4b
  echo "-- $b"
  timeout 50 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 2,8,32 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| 8192 \| [0-9]|rror" $OUT/bench_$b.log | tail -3
  [ $SECONDS -gt 400 ] && break
done
date
