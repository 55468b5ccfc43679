#!/usr/bin/env bash
# The grouped FP8 GEMM's code and speed against BASE_BIN (main's build) on the GPU machine: the K
# loop of each instantiation in both binaries' SASS (cuobjdump, tests/cuda/sass_k_loops.py), the
# tests (TEST_FILTER; SKIP_TESTS=1 skips them), ncu kernel times of one 20b 8k prefill with MXFP4
# experts for both (kernels serialized), then the prefill of both on the 20b (WEIGHTS, default
# mxfp4), the base first and again last. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
for v in this:$B ${BASE_BIN:+base:$BASE_BIN}; do
  cuobjdump -sass ${v#*:} > /tmp/sass_${v%%:*}.txt
  echo "-- sass ${v%%:*}"; python3 "$(dirname "$0")/sass_k_loops.py" /tmp/sass_${v%%:*}.txt | tee $OUT/sass_${v%%:*}.txt
done
[ -z "${SKIP_TESTS:-}" ] && TEST_FILTER=${TEST_FILTER:-'CudaFp8.GroupedWgmma*:CudaFp8Model.*:MoeMxfp4.*'} \
  timeout 200 bash -c "source $(dirname "$0")/device_env.sh; cuda_tests"
NM=$(synth_dir 20b)
for v in this:$B ${BASE_BIN:+base:$BASE_BIN}; do
  ncu --clock-control none --metrics gpu__time_duration.sum --csv ${v#*:} bench --backend cuda --model $NM --weights mxfp4 \
    --prefill-lens 8192 --prefill-reps 1 --prefill-chunk 8192 --batches 1 --contexts 64 --steps 1 --kv-blocks 2048 \
    2>/dev/null > /tmp/ncu_${v%%:*}.csv
  python3 "$(dirname "$0")/ncu_prefill_summary.py" /tmp/ncu_${v%%:*}.csv > $OUT/ncu_${v%%:*}.txt
  echo "-- ncu ${v%%:*}"; head -8 $OUT/ncu_${v%%:*}.txt
done
OUT=/tmp/bench_out VARIANTS="${BASE_BIN:+base:$BASE_BIN} this:$B" REPEAT_FIRST=${BASE_BIN:+1} WEIGHTS=${WEIGHTS:-mxfp4} \
  BENCH_ARGS=${BENCH_ARGS:-"--prefill-lens 8192,32768 --batches 1 --contexts 8192 --steps 4"} \
  bash "$(dirname "$0")/device_prefill_variants.sh" 2>&1 | tee $OUT/bench_summary.txt
cat /tmp/bench_out/*.log > $OUT/bench_logs.txt
