#!/usr/bin/env bash
# Session 48, first device call (about 9.5 minutes): bench/prepared/s47-call1.sh (the transposed
# small expert tiles of branch s46-swap-small-tiles: tests, memcheck, greedy tokens against main,
# the 20b 8k/32k prefill alternating with main, the 120b 8k prefill) with the 120b's `twostaged`
# (bench/prepared/s46-h200a.sh: two FP8 expert buffer sets plus the staged conversion) beside it
# when the card has the memory for it. Carry .devcarry/lib, .devcarry/s47 and .devcarry/s46/twostaged.
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
