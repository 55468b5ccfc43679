#!/usr/bin/env bash
# Prepared in session 46 for the next device call (about 9 minutes on an H100 or an H200): session
# 46's call 2, which no device came to run, in full.
#   - the tests of `swap` (bench/prepared/s46-swap-small-tiles.patch, branch s46-swap-small-tiles:
#     an expert's last row tile of at most 32 rows transposed in the grouped FP8 GEMM, one of 33-64
#     rows with warpgroup 1 idle);
#   - greedy tokens after a 2,000-token prompt (a W4A8 chunk, about 250 rows an expert on the 20b)
#     equal to main's (they may differ only if the tensor cores sum a k32 step of the two shapes in
#     another order);
#   - the 20b 8k and 32k prefill, main and swap alternating; the 120b 8k prefill, main and swap.
# Build on the CPU machine with build/ built at main (scripts/build.sh):
#   mkdir -p .devcarry/s47/main && xz -T2 -c build/osprey > .devcarry/s47/main/osprey.xz
#   python3 bench/variant_build.py bench/prepared/s46-swap-small-tiles.patch .devcarry/s47/swap
# and run with carry .devcarry/lib and .devcarry/s47. (Session 47 built both at 5ce0bbf, main's
# engine code unchanged since session 46; on the same CPU machine they are ready to carry.)
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s47/swap build/swap
builds_preamble .devcarry/s47 main
echo "== tests swap"
timeout 120 build/swap/tests --gtest_filter='CudaFp8.Grouped*:CudaFp8.MoeSwiglu*:MoeMxfp4.*:CudaFp8Model.*' \
  > $OUT/tests_swap.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_swap.log
echo "== memcheck of the grouped GEMM test"
timeout 90 compute-sanitizer --tool memcheck build/swap/tests --gtest_filter='CudaFp8.GroupedWgmma*' \
  > $OUT/memcheck_swap.log 2>&1
echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_swap.log | head -5
D=$(synth_dir 20b)
greedy_equal $D main swap
prefill_builds $D 8192,32768 60 main swap main swap
D=$(synth_dir 120b)
prefill_only $D 8192 150 main swap
date
