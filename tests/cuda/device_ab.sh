#!/usr/bin/env bash
# A/B of decode configurations in one call on the GPU machine (machines differ by several percent
# from one call to the next, so only runs of the same call compare): the 20b synthetic checkpoint
# (and with B120=1 the 120b), decode at 8k context for each configuration in CONFIGS
# ("name:VAR=value VAR2=value;name2:..."; an empty environment is the defaults) and, with BASE_BIN
# (an osprey built from an earlier commit), the same with that build. Kernel tests first unless
# SKIP_KERNEL_TESTS (TEST_FILTER: a gtest filter). BIN and TESTS_BIN: the osprey and kernel-test
# binaries under test (default build/). Needs build/ from this machine's build and .devcarry/lib. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
B=${BIN:-$B}
TESTS=${TESTS_BIN:-$T}
BATCHES=${BATCHES:-1,8,64}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
if [ -z "${SKIP_KERNEL_TESTS:-}" ]; then
  echo "== kernel tests"
  $TESTS ${TEST_FILTER:+--gtest_filter=$TEST_FILTER} 2>&1 | tee $OUT/kernel_tests.log | grep -E "^\[  (PASSED|FAILED)|Failure" | head -20
fi
base() {
  echo "== base ($BASE_BIN)"
  $BASE_BIN bench --backend cuda --model $1 --prefill-lens 1024 --contexts 8192 --batches $BATCHES --steps 16 2>&1 | grep "^| 8192"
}
ab() {  # model, configurations; BASE_LAST=1 runs the base build again last (order effects)
  local model=$1 configs=$2
  [ -n "${BASE_BIN:-}" ] && base $model
  IFS=';' read -ra cs <<< "$configs"
  for c in "${cs[@]}"; do
    echo "== ${c%%:*} (${c#*:})"
    env ${c#*:} $B bench --backend cuda --model $model --prefill-lens 1024 --contexts 8192 --batches $BATCHES --steps 16 2>&1 | grep "^| 8192"
  done
  [ -n "${BASE_BIN:-}" ] && [ -n "${BASE_LAST:-}" ] && base $model
}
[ -d $M/20b ] || $PWD/build/osprey synth --preset 20b --seed 1 --out $M/20b --quiet
ab $M/20b "$CONFIGS" | tee $OUT/ab_20b.log
rm -rf $M/20b
if [ -n "${B120:-}" ]; then
  $PWD/build/osprey synth --preset 120b --seed 1 --out /dev/shm/120b --quiet
  BATCHES=${BATCHES_120:-1,8} ab /dev/shm/120b "${CONFIGS_120:-$CONFIGS}" | tee $OUT/ab_120b.log
fi
