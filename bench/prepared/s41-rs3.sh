#!/usr/bin/env bash
# Session 41, third W4A8 register-operand check (the packed tile words decoded as the conversion
# does): its tests and the 20b prefill against main. Builds and carry as docs/device_logs/s41_call1_script.sh (run from bench/prepared/).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main rs; do unpack .devcarry/s41/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
echo "== tests rs (W4A8)"
timeout 60 build/rs/tests --gtest_filter='*Mxfp4*:*Grouped*:*LongChunk*' > $OUT/tests_rs_w4a8.log 2>&1
gtest_summary $OUT/tests_rs_w4a8.log; grep -E "differ|relative" $OUT/tests_rs_w4a8.log | head -12
D=$(synth_dir 20b); prefill_builds $D 2048,8192 50 main rs
date
