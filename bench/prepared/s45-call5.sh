#!/usr/bin/env bash
# Session 45, fifth device call: what the W4A8 conversion costs the 120b 8k prefill end to end:
# main against main with the conversion skipped (noconv: `python3 bench/variant_build.py -
# .devcarry/s45/noconv --no-tests --define model/gpt_oss_cuda_fp8.cu 'cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,'
# 'if (false) cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,'`; its outputs are wrong, its
# time is the prefill's without the conversion). Carry .devcarry/lib and .devcarry/s45.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s45 main noconv
D=$(synth_dir 120b)
for n in noconv main; do
  echo "-- 120b $n"
  timeout 90 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 8192 --prefill-reps 3 \
    --batches "" --steps 1 > $OUT/prefill_120b_$n.txt 2>&1
  grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $OUT/prefill_120b_$n.txt | head -4
done
date
