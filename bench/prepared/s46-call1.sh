#!/usr/bin/env bash
# Session 46, call 1 (about 8 minutes on an H100): branch s46-idle-warpgroup (`idle`: the grouped
# FP8 GEMM's warpgroup 1 skips an expert's last row tile of at most 64 rows) against main.
#   - idle's grouped-GEMM, SwiGLU and model tests; greedy tokens after a 2,000-token prompt equal
#     to main's;
#   - the 20b 8k and 32k prefill, main and idle alternating;
#   - the 120b 8k prefill, main, idle, noconv (main with the W4A8 conversion skipped: wrong outputs,
#     the prefill without the conversion's cost).
# Builds: .devcarry/s46/{main,noconv} (s46-h200a.sh's header), .devcarry/s46b/idle
# (`python3 bench/variant_build.py branch:s46-idle-warpgroup .devcarry/s46b/idle`). Carry
# .devcarry/lib, .devcarry/s46, .devcarry/s46b.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s46b/idle build/idle
builds_preamble .devcarry/s46 main noconv
echo "== tests idle"
timeout 150 build/idle/tests --gtest_filter='CudaFp8.Grouped*:CudaFp8.MoeSwiglu*:MoeMxfp4.*:CudaFp8Model.*' \
  > $OUT/tests_idle.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_idle.log
D=$(synth_dir 20b)
echo "== greedy tokens after a 2,000-token prompt (W4A8 chunk), main then idle: must be equal"
for b in main idle; do
  timeout 60 build/$b/osprey generate --backend cuda --model $D --tokens $(seq -s, 1000 2999) --max-tokens 16 \
    --greedy --ignore-eos 2> $OUT/generate_$b.err | tee $OUT/generate_$b.txt
done
cmp -s $OUT/generate_main.txt $OUT/generate_idle.txt && echo "equal" || echo "DIFFERENT"
prefill_builds $D 8192,32768 100 main idle main idle
D=$(synth_dir 120b)
prefill_only $D 8192 150 main idle noconv
date
