#!/usr/bin/env bash
# Prepared in session 45 for the next H200 (none came in sessions 36-45): every target on main,
# then the two W4A8 conversion questions that need the 120b on an H200, in one call (about 6
# minutes on an H100):
#   1. bench/targets.sh on main;
#   2. the 120b 8k prefill: main, then `two` (bench/prepared/s45-conv-two-ahead.patch: a second
#      set of FP8 expert buffers, so each layer's conversion starts two layers ahead; it fits the
#      H200 with the 120b, not the H100), then `noconv` (main with the conversion skipped: wrong
#      outputs, the prefill's time without the conversion).
# Build on the CPU machine at main, then (each a minute or two):
#   python3 bench/variant_build.py - .devcarry/s46/main --no-tests
#   python3 bench/variant_build.py bench/prepared/s45-conv-two-ahead.patch .devcarry/s46/two --no-tests
#   python3 bench/variant_build.py - .devcarry/s46/noconv --no-tests --define model/gpt_oss_cuda_fp8.cu \
#     'cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,' 'if (false) cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,'
# and run with carry .devcarry/lib and .devcarry/s46.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s46 main two noconv
bash bench/targets.sh
D=$(synth_dir 120b)
i=0
for n in main two noconv main; do
  i=$((i + 1)); f=$OUT/prefill_120b_${i}_$n.txt
  echo "-- 120b $n"
  timeout 100 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 \
    --batches "" --steps 1 > $f 2>&1
  grep -E "ahead|KV blocks|^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $f | head -4
done
date
