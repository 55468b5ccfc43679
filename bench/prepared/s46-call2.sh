#!/usr/bin/env bash
# NOT RUN: no device came after call 1 in session 46. bench/prepared/s47-call1.sh is its full form.
# Session 46, call 2 (about 7 minutes on an H100): branch s46-swap-small-tiles (`swap`: in the grouped
# FP8 GEMM an expert's last row tile of at most 32 rows runs transposed, the weights as wgmma's A
# operand and the rows as n32; one of 33-64 rows leaves warpgroup 1 idle) against main.
#   - swap's grouped-GEMM, SwiGLU, MXFP4 and model tests (the greedy-token comparison was cut to fit
#     the device time left);
#   - the 20b 8k and 32k prefill, main then swap;
#   - the 120b 8k prefill of swap (main: call 1, the same kind of card; the device time left allowed one load).
# Builds: .devcarry/s46/main (xz of build/osprey at main), .devcarry/s46b/swap
# (`python3 bench/variant_build.py branch:s46-swap-small-tiles .devcarry/s46b/swap`). Carry
# .devcarry/lib, .devcarry/s46/main, .devcarry/s46b/swap.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s46b/swap build/swap
builds_preamble .devcarry/s46 main
echo "== tests swap"
timeout 120 build/swap/tests --gtest_filter='CudaFp8.Grouped*:CudaFp8.MoeSwiglu*:MoeMxfp4.*:CudaFp8Model.Mxfp4*:CudaFp8Model.Expert*' \
  > $OUT/tests_swap.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_swap.log
D=$(synth_dir 20b)
prefill_builds $D 8192,32768 60 main swap
D=$(synth_dir 120b)
prefill_only $D 8192 150 swap
date
