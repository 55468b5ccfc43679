#!/usr/bin/env bash
# Session 42, first call: the prompt chunks' MXFP4 wgmma path (weights decoded in registers, y^T
# tiles; m_grouped_mxfp4_gemm_bf16_wgmma_contiguous) checked against the tiled path bit for bit,
# its MoE GEMMs timed beside the tiled MXFP4 path and the FP8 GEMM (`bench --moe-batches`), then
# every target of issues 14 and 16 (bench/targets.sh). Carry .devcarry/lib and .devcarry/s42 (this
# build's osprey and osprey_cuda_tests, xz).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 main
echo "== tests (MXFP4)"
timeout 150 build/main/osprey_cuda_tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_mxfp4.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mxfp4.log; grep -E "row .* column|Expected|Which is" $OUT/tests_mxfp4.log | head -8
for m in 120b:1024,2048,4096,8192 20b:512,1024,2048,8192; do
  echo "== moe ${m%%:*}"
  timeout 120 $B bench --backend cuda --model bench/shapes/${m%%:*} --prefill-lens "" --batches "" \
    --moe-batches ${m#*:} --steps 32 > $OUT/moe_${m%%:*}.txt 2>&1
  grep -E "^\| [0-9]|rror" $OUT/moe_${m%%:*}.txt
done
date
[ -z "${NO_TARGETS:-}" ] && timeout 400 bash bench/targets.sh
date
