#!/usr/bin/env bash
# W4A8 prefill of MXFP4 experts (issue 14) on the GPU machine: the CUDA tests (TEST_FILTER;
# SKIP_TESTS=1 skips them), compute-sanitizer on SANITIZE (a gtest filter), then `bench --backend
# cuda` of MODEL (20b or 120b synthetic; the 120b in /dev/shm) for each --weights in WEIGHTS
# (default mxfp4 fp8), this build and, with BASE_BIN, another build's osprey, in this call
# (BENCH_ARGS). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
[ -z "${SKIP_TESTS:-}" ] && timeout ${TESTS_S:-300} bash -c "source $(dirname "$0")/device_env.sh; cuda_tests"
[ -n "${SANITIZE:-}" ] && sanitize_tests "$SANITIZE"
MODEL=${MODEL:-20b}
[ "$MODEL" = none ] && exit 0
DIR=$M/$MODEL; [ "$MODEL" = 120b ] && DIR=/dev/shm/120b
[ -d $DIR ] || ( time $B synth --preset $MODEL --seed 1 --out $DIR --quiet ) 2>&1 | grep -E "real|rror"
run() {  # label binary weights
  timeout ${BENCH_S:-200} $2 bench --backend cuda --model $DIR --weights $3 \
    ${BENCH_ARGS:---prefill-lens 8192 --batches 1,64 --contexts 8192 --steps 16} \
    --json $OUT/bench_${MODEL}_$1_$3.json > $OUT/bench_${MODEL}_$1_$3.log 2>&1
  echo "-- $MODEL $1 $3"; grep -E "^\| [0-9]|W4A8|KV blocks|rror" $OUT/bench_${MODEL}_$1_$3.log | grep -v "^|--"
}
for wt in ${WEIGHTS:-mxfp4 fp8}; do
  run this $B $wt
  [ -n "${BASE_BIN:-}" ] && run base $BASE_BIN $wt
done
true
