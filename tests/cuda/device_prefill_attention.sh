#!/usr/bin/env bash
# Prefill attention on the GPU machine: the attention kernel tests, then on the 20b synthetic
# checkpoint `bench --backend cuda` with --attention-lens (one layer's prefill attention alone) and
# the prefill of 8k and 32k prompts, for this build and for each binary in VARIANTS (name:path,
# space-separated; a binary without --attention-lens, like the previous build, runs the prefill
# only), every one in this call. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
echo "== tests"
$T --gtest_filter="${TEST_FILTER:-CudaFp8.Flash*:CudaFp8.PagedAttention*:CudaFp8Model.*}" 2>&1 | tee $OUT/tests.log |
  grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|rel|tests ran|OK \]" | head -60
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for v in "this:$B" ${VARIANTS:-}; do
  name=${v%%:*} bin=${v#*:}
  for wt in ${WEIGHTS:-fp8}; do
    att=""; $bin bench --help 2>&1 | grep -q attention-lens && att="--attention-lens ${ATT_LENS:-8192,32768}"
    $bin bench --backend cuda --model $M/20b --weights $wt --prefill-lens ${PREFILL_LENS:-8192,32768} --batches 1 \
      --contexts 8192 --steps 8 $att --json $OUT/bench_${name}_$wt.json > $OUT/bench_${name}_$wt.log 2>&1
    echo "-- $name $wt"; grep -E "^\| [0-9]|rror" $OUT/bench_${name}_$wt.log
  done
done
