#!/usr/bin/env bash
# Session 37, call 5: the router kept BF16 on the GPU (branch s37-router-bf16) against main
# c60fbf1: its routing and model tests, the 20b decode step, and (branch s37-router-exp, both
# routers in one process, OSPREY_EXP_ROUTER) the 120b 8k prefill.
cd "$(dirname "$0")/../.."
mkdir -p build/tests
xz -d -c .devcarry/m37/osprey.xz > build/osprey && chmod +x build/osprey
xz -d -c .devcarry/r37/osprey.xz > /tmp/osprey_r16 && chmod +x /tmp/osprey_r16
xz -d -c .devcarry/r37/tests.xz > build/tests/osprey_cuda_tests && chmod +x build/tests/osprey_cuda_tests
xz -d -c .devcarry/x37/osprey.xz > /tmp/osprey_x && chmod +x /tmp/osprey_x
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
timeout 60 $T --gtest_filter='*MoeRoute*:CudaFp8Model.PersistentDecodeEqualsKernelByKernel:CudaFp8Model.EngineSpeculativeEqualsPlain' > $OUT/tests_r16.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_r16.log | head
date
D=$(synth_dir 20b)
for b in main r16 main r16; do
  bin=$B; [ $b = r16 ] && bin=/tmp/osprey_r16
  echo "-- $b"
  timeout 45 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,64 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| 8192 \| [0-9]|rror" $OUT/bench_$b.log | tail -2
  [ $SECONDS -gt 120 ] && break
done
date
D=$(synth_dir 120b)
date
OSPREY_EXP_ROUTER=1 timeout 240 /tmp/osprey_x bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 \
  --prefill-reps 2 --batches 1 --contexts 64 --steps 4 > $OUT/prefill_120b.log 2>&1
grep -E "^router|rror|loaded" $OUT/prefill_120b.log
date
