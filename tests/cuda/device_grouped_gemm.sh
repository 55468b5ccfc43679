#!/usr/bin/env bash
# The grouped wgmma FP8 GEMM of long prompt chunks (issue 14) on the GPU machine: the CUDA tests
# of this build (TEST_FILTER; SKIP_TESTS=1 skips them) and of each variant build carried in
# .devcarry/var (tests_V.xz and osprey_V.xz for V in VARIANTS: the same tree with another
# kTileShare), compute-sanitizer on SANITIZE, the probe (bench/probes/grouped_fp8_gemm.cu; PROBE=0
# skips it), then `bench --backend cuda` of MODEL (20b or 120b synthetic) for each --weights in
# WEIGHTS with the base build (BASE_BIN), this build and every variant, in this call (BENCH_ARGS;
# BENCH_ARGS_FP8 for the fp8 runs). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
preamble
mkdir -p build/var
for v in ${VARIANTS:-}; do
  for f in osprey tests; do xz -dc .devcarry/var/${f}_$v.xz > build/var/${f}_$v && chmod +x build/var/${f}_$v; done
  if [ -z "${SKIP_TESTS:-}" ]; then
    echo "== tests, variant $v"
    timeout ${TESTS_S:-300} build/var/tests_$v --gtest_filter="${TEST_FILTER:-*}" > $OUT/tests_$v.log 2>&1
    grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_$v.log | head -20
  fi
done
if [ "${PROBE:-1}" != 0 ]; then
  echo "== probe"
  .devcarry/probe_grouped_fp8_gemm > $OUT/probe.md 2>&1
  cat $OUT/probe.md
fi
MODEL=${MODEL:-20b}
[ "$MODEL" = none ] && exit 0
DIR=$(synth_dir $MODEL)
run() {  # label binary weights
  local args=${BENCH_ARGS:---prefill-lens 8192 --batches 1 --contexts 8192 --steps 4}
  [ "$3" = fp8 ] && [ -n "${BENCH_ARGS_FP8:-}" ] && args=$BENCH_ARGS_FP8
  timeout ${BENCH_S:-200} $2 bench --backend cuda --model $DIR --weights $3 $args \
    --json $OUT/bench_${MODEL}_$1_$3.json > $OUT/bench_${MODEL}_$1_$3.log 2>&1
  echo "-- $MODEL $1 $3"; grep -E "^\| [0-9]|rror" $OUT/bench_${MODEL}_$1_$3.log | grep -v "^|--"
}
for wt in ${WEIGHTS:-mxfp4 fp8}; do
  [ -n "${BASE_BIN:-}" ] && run base $BASE_BIN $wt
  run this $B $wt
  for v in ${BENCH_VARIANTS-${VARIANTS:-}}; do run $v build/var/osprey_$v $wt; done
done
true
