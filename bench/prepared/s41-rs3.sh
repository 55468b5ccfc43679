#!/usr/bin/env bash
# Session 41, third W4A8 register-operand check (the packed tile words decoded as the conversion
# does): its tests and the 20b prefill against main. Not run (the device budget was spent). The
# builds, with build/ at main's HEAD (scripts/build.sh):
#   mkdir -p .devcarry/s41/main .devcarry/lib && cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .devcarry/lib/
#   xz -c build/osprey > .devcarry/s41/main/osprey.xz && xz -c build/tests/osprey_cuda_tests > .devcarry/s41/main/tests.xz
#   python3 bench/variant_build.py branch:s41-w4a8-rs .devcarry/s41/rs
# Carry .devcarry/lib and .devcarry/s41, then: bash bench/prepared/s41-rs3.sh
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s41 main rs
echo "== tests rs (W4A8)"
timeout 60 build/rs/tests --gtest_filter='*Mxfp4*:*Grouped*:*LongChunk*' > $OUT/tests_rs_w4a8.log 2>&1
gtest_summary $OUT/tests_rs_w4a8.log; grep -E "differ|relative" $OUT/tests_rs_w4a8.log | head -12
D=$(synth_dir 20b); prefill_builds $D 2048,8192 50 main rs
date
