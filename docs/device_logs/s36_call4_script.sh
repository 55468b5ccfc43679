#!/usr/bin/env bash
# Session 36, call 4: the MXFP4 decode kernels without the second multiply's test (branch
# s36-mxfp4-one-multiply) against main: its MXFP4 tests, the expert GEMMs alone, the 20b step.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/s36a/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/s36e/osprey.xz > /tmp/osprey_one && chmod +x /tmp/osprey_one
xz -d -c .devcarry/s36e/tests.xz > /tmp/tests_one && chmod +x /tmp/tests_one
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
timeout 60 /tmp/tests_one --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_one.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_one.log | head
D=$(synth_dir 20b)
date
for b in main one main one; do
  bin=$B; [ $b = one ] && bin=/tmp/osprey_one
  timeout 30 $bin bench --backend cuda --model $D --prefill-lens "" --batches "" --moe-batches 1,8,64 --steps 32 >> $OUT/moe_$b.log 2>&1
  echo "-- moe $b"; grep -E "^\| [0-9].*mxfp4" $OUT/moe_$b.log | tail -3
done
date
for b in main one main one; do
  bin=$B; [ $b = one ] && bin=/tmp/osprey_one
  echo "-- $b"
  timeout 45 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,8,64 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| 8192 \| [0-9]|rror" $OUT/bench_$b.log | tail -3
  [ $SECONDS -gt 170 ] && break
done
date
