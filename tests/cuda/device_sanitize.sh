#!/usr/bin/env bash
# compute-sanitizer on the GPU machine: memcheck, then racecheck, over the CUDA tests that
# TEST_FILTER selects (a gtest filter; default every test, which takes long under the sanitizer).
# Logs to $OUT/sanitize_memcheck.log and $OUT/sanitize_racecheck.log.
source "$(dirname "$0")/device_env.sh"
for tool in ${TOOLS:-memcheck racecheck}; do
  echo "== compute-sanitizer $tool"
  compute-sanitizer --tool $tool --print-limit 10 $T --gtest_filter="${TEST_FILTER:-*}" > $OUT/sanitize_$tool.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|tests ran|ERROR SUMMARY|RACECHECK SUMMARY|Error|Hazard" $OUT/sanitize_$tool.log | head -20
done
