#!/usr/bin/env bash
# Session 46, call 2 (about 8.5 minutes; asked of an H200, where the 120b takes two FP8 buffer sets):
#   - the tests of `idle` (branch s46-idle-warpgroup, the half loop bounded instead of broken out
#     of: call 1's form spilled the accumulators) and of `staged` (s45-conv-staged.patch);
#   - the 20b 8k and 32k prefill, main and idle alternating;
#   - the 120b 8k prefill on main, twostaged (two buffer sets where they fit, the staged
#     conversion) and idle.
# Builds as s46-call1.sh (idle rebuilt); carry .devcarry/lib, .devcarry/s46, .devcarry/s46b.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s46b/idle build/idle
unpack .devcarry/s46/staged build/staged
builds_preamble .devcarry/s46 main twostaged
echo "== tests idle"
timeout 100 build/idle/tests --gtest_filter='CudaFp8.Grouped*:CudaFp8.MoeSwiglu*:MoeMxfp4.W4a8*:CudaFp8Model.Mxfp4*' \
  > $OUT/tests_idle.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_idle.log
echo "== tests staged"
timeout 60 build/staged/tests --gtest_filter='MoeMxfp4.StagedFp8*:MoeMxfp4.Fp8Conv*' > $OUT/tests_staged.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_staged.log
D=$(synth_dir 20b)
prefill_builds $D 8192,32768 60 main idle main idle
D=$(synth_dir 120b)
prefill_only $D 8192 150 main twostaged idle
date
