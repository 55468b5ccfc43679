#!/usr/bin/env bash
# Issue 14 on the GPU machine: the MXFP4 kernel and model tests (compute-sanitizer memcheck and
# racecheck on the kernel tests), greedy and sampled streams of the CUDA path against its CPU
# emulation for both expert formats, then `bench --backend cuda` on the 20b synthetic checkpoint
# with --weights mxfp4 and --weights fp8 in the same call. Logs to $OUT. BENCH_ONLY=1 skips to the
# bench; BENCH_ARGS replaces its shape arguments.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -z "${BENCH_ONLY:-}" ]; then
echo "== tests"
$T --gtest_filter="${TEST_FILTER:-*MoeMxfp4*:CudaFp8Model.*:CudaFp8.*}" 2>&1 | tee $OUT/tests.log |
  grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|rel|tests ran|OK \]" | head -60
F='Awkward/MoeMxfp4.GroupedGemmEqualsCpuTwin/0:Awkward/MoeMxfp4.GroupedGemmEqualsCpuTwin/3:MoeMxfp4.*'
echo "== compute-sanitizer (MXFP4 kernel tests)"
compute-sanitizer --tool memcheck --print-limit 5 $T --gtest_filter="$F" > $OUT/memcheck.log 2>&1; tail -2 $OUT/memcheck.log
compute-sanitizer --tool racecheck --print-limit 20 $T --gtest_filter="$F" > $OUT/racecheck.log 2>&1
grep -E "RACECHECK SUMMARY|Race reported|PASSED|FAILED" $OUT/racecheck.log | head -4
echo "== greedy and sampled: CUDA against its CPU emulation (mxfp4, then fp8 experts)"
cuda_vs_cpu "parity-a parity-b tiny" "--greedy;--temperature 0.8 --top-p 0.9" 1 5,6,7,8,9,10,11,12
CPU_PREC=fp8 cuda_vs_cpu "parity-a parity-b tiny" "--greedy" 1 5,6,7,8,9,10,11,12
fi
echo "== bench 20b: --weights mxfp4 and fp8"
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for wt in mxfp4 fp8; do
  $B bench --backend cuda --model $M/20b --weights $wt ${BENCH_ARGS:---prefill-lens 8192,32768 --batches 1,8,64,128 --contexts 8192} \
    --json $OUT/bench_20b_$wt.json > $OUT/bench_20b_$wt.log 2>&1
  echo "-- $wt"; grep -vE "^\s*$" $OUT/bench_20b_$wt.log | tail -28
done
