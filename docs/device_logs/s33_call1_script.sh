#!/usr/bin/env bash
# Session 33, call 1: main's tests and sanitizer on the GPU (ad0ac10 was never run there), the
# 4-warp MXFP4 decode blocks (branch mxfp4-block-warps) against main: MoE GEMMs alone and 20b decode,
# and ncu's per-kernel table of a 20b batch-1 step (this build).
cd "$(dirname "$0")/.." && source tests/cuda/device_env.sh
set +e
export OUT
BASE=$PWD/.devcarry/base/osprey
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
echo "== tests (this build)"; date
timeout 240 $T 2>&1 > $OUT/tests.log; grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests.log | head -30
echo "== sanitizer"; date
SANITIZE_S=100 sanitize_tests "CudaFp8Model.PersistentDecode*:CudaFp8.MoeRoute*:Awkward/MoeMxfp4.GroupedGemmEqualsCpuTwin/0:MoeMxfp4.SwigluEpilogue*"
date
SKIP_TESTS=1 BASE_MOE=$BASE MOE_BATCHES=1,2,4,8,16,64 DECODE_ARGS="--prefill-lens 1024 --batches 1,2,4,8,64 --contexts 8192 --steps 16" \
  WEIGHTS=mxfp4 BASE_BIN=$BASE bash tests/cuda/device_moe_ab.sh
echo "-- base again"; $BASE bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens 1024 --batches 1,2,4,8,64 --contexts 8192 --steps 16 2>&1 | grep -E "^\| [0-9]|rror"
date
echo "== ncu 20b batch 1 step (this build)"
ncu_decode_step 1 10 $OUT/ncu_b1.txt --weights mxfp4 > /dev/null; cat $OUT/ncu_b1.txt | head -40
date
cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
