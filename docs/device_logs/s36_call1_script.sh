#!/usr/bin/env bash
# Session 36: the L2 prefetches of decode steps of few rows (branch s36-l2-prefetch), one binary:
# tests, then the 20b decode with --l2-prefetch-rows 0 (off) and 8 (on), alternating, and ncu's
# stall sections of the MXFP4 decode GEMMs at batch 64.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/s36b/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/s36b/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
echo "== tests"
timeout 120 $T --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.L2Prefetch*:CudaFp8Model.Persistent*:CudaFp8.PagedAttention*' > $OUT/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests.log | head
D=$(synth_dir 20b)
date
echo "== A/B"
xz -d -c .devcarry/s36c/osprey.xz > /tmp/osprey_self && chmod +x /tmp/osprey_self
for run in A0 B8 A8 B0 A0 B8 A8 B0; do
  bin=$B; [ ${run:0:1} = B ] && bin=/tmp/osprey_self
  r=${run:1}
  echo "-- $run"
  timeout 60 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,2,8,64 --contexts 8192 --steps 16 \
    --l2-prefetch-rows $r >> $OUT/bench_$run.log 2>&1; grep -E "^\| 8192 \| [0-9]|rror" $OUT/bench_$run.log | tail -4
  [ $SECONDS -gt 480 ] && break
done
date
date
