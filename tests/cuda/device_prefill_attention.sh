#!/usr/bin/env bash
# Prefill on the GPU machine (issue 14): the attention, routing and MXFP4 kernel tests (all CUDA
# tests with TEST_FILTER=*), then `bench --backend cuda` on a synthetic checkpoint (PRESET 20b, or
# 120b written to /dev/shm) with --attention-lens (one layer's prefill attention alone) and the
# prefill of PREFILL_LENS prompts and decode at BATCHES, for each --weights in WEIGHTS, for this
# build and for each binary in VARIANTS (name:path, space-separated; a binary without
# --attention-lens, like an earlier build, runs the rest), every one in this call. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== tests"
  $T --gtest_filter="${TEST_FILTER:-CudaFp8.Flash*:CudaFp8.PagedAttention*:CudaFp8.MoeRoute*:MoeMxfp4.*:CudaFp8Model.*}" 2>&1 |
    tee $OUT/tests.log | grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|tests ran|OK \]" | head -60
fi
P=${PRESET:-20b}; D=$M/$P; [ "$P" = 120b ] && D=/dev/shm/120b
[ -d $D ] || $B synth --preset $P --seed 1 --out $D --quiet
for v in "this:$B" ${VARIANTS:-}; do
  name=${v%%:*} bin=${v#*:}
  for wt in ${WEIGHTS:-fp8 mxfp4}; do
    att=""; $bin bench --help 2>&1 | grep -q attention-lens && att="--attention-lens ${ATT_LENS:-8192,32768}"
    $bin bench --backend cuda --model $D --weights $wt --prefill-lens ${PREFILL_LENS:-8192,32768} \
      --batches ${BATCHES:-1} --contexts 8192 --steps ${STEPS:-8} $att --json $OUT/bench_${P}_${name}_$wt.json \
      > $OUT/bench_${P}_${name}_$wt.log 2>&1
    echo "-- $P $name $wt"; grep -E "^\| [0-9]|rror|loaded" $OUT/bench_${P}_${name}_$wt.log
  done
done
