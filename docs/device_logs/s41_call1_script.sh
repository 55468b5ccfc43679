#!/usr/bin/env bash
# Session 41: W4A8 with the MXFP4 weights as wgmma's register operand (branch s41-w4a8-rs: no
# conversion pass, no converted copy) against main (conversion on a side stream, then the grouped
# FP8 GEMM). The builds (after scripts/build.sh):
#   mkdir -p .devcarry/s41/main .devcarry/lib && cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .devcarry/lib/
#   xz -c build/osprey > .devcarry/s41/main/osprey.xz && xz -c build/tests/osprey_cuda_tests > .devcarry/s41/main/tests.xz
#   git diff main..s41-w4a8-rs > /tmp/rs.patch && python3 bench/variant_build.py /tmp/rs.patch .devcarry/s41/rs
# Carry .devcarry/lib and .devcarry/s41 (main, rs), then: bash bench/prepared/s41-rs.sh
# (SKIP_120B=1: without the 120b, whose synthesis and two loads take about 3 min)
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main rs; do unpack .devcarry/s41/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
echo "== tests rs (W4A8 and grouped GEMM tests)"
timeout 60 build/rs/tests --gtest_filter='*Mxfp4*:*GroupedFp8*:*Grouped*' > $OUT/tests_rs_w4a8.log 2>&1
gtest_summary $OUT/tests_rs_w4a8.log; grep -E "differ|relative" $OUT/tests_rs_w4a8.log | head -12
D=$(synth_dir 20b); prefill_builds $D 1024,2048,4096,8192 60 main rs
echo "== tests rs (all)"
timeout 100 build/rs/tests > $OUT/tests_rs.log 2>&1; gtest_summary $OUT/tests_rs.log
echo "== memcheck rs"
timeout 80 compute-sanitizer --tool memcheck build/rs/tests --gtest_filter='*GroupedFp8GemmOnMxfp4*' > $OUT/memcheck_rs.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_rs.txt | head -4
if [ -z "${SKIP_120B:-}" ]; then
  D=$(synth_dir 120b); prefill_builds $D 4096,8192 150 main rs
fi
date
