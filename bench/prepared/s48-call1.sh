#!/usr/bin/env bash
# Session 48, first device call (ran on an H100 in 5.5 minutes; docs/PERF.md "Session 48"): session
# 46's call 2 (prepared as s47-call1.sh in session 47, which no device came to run; this replaces it)
# with the 120b's `twostaged` beside it when the card has the memory for it.
#   - the tests of `swap` (bench/prepared/s46-swap-small-tiles.patch: an expert's last row tile of
#     at most 32 rows transposed in the grouped FP8 GEMM) and memcheck of its grouped GEMM test;
#   - greedy tokens after a 2,000-token prompt equal to main's;
#   - the 20b 8k and 32k prefill, main and swap alternating; the 120b 8k prefill, main, swap and
#     twostaged (bench/prepared/s46-h200a.sh: two FP8 expert buffer sets plus the staged conversion).
# Build on the CPU machine with build/ built at main (scripts/build.sh):
#   mkdir -p .devcarry/s47/main && xz -T2 -c build/osprey > .devcarry/s47/main/osprey.xz
#   python3 bench/variant_build.py bench/prepared/s46-swap-small-tiles.patch .devcarry/s47/swap
#   (twostaged: as in s48-h200.sh's header, into .devcarry/s46/twostaged)
# and run with carry .devcarry/lib, .devcarry/s47 and .devcarry/s46/twostaged.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s47/swap build/swap
unpack .devcarry/s46/twostaged build/twostaged
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
date
D=$(synth_dir 120b)
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then prefill_only $D 8192 150 main swap twostaged
else prefill_only $D 8192 150 main swap; fi
date
