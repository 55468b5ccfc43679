#!/usr/bin/env bash
# Session 42, first device call: the prompt chunks' MXFP4 wgmma path (branch s42-wgmma: weights
# decoded in registers, y^T tiles, m_grouped_mxfp4_gemm_bf16_wgmma_contiguous; long chunks take it
# instead of W4A8). Tests of the branch's build (the MXFP4 kernels against the tiled path bit for
# bit, then the whole CUDA suite), its MoE GEMMs beside the tiled MXFP4 path and the FP8 GEMM
# (`bench --moe-batches`), and the prefill of main against the branch (20b and 120b). ALL_TESTS=1: the whole CUDA suite too.
# Carry .devcarry/lib and .devcarry/s42 (wg: the branch, main: ccfc13e by bench/variant_build.py).
# TARGETS=1 also runs bench/targets.sh with the branch's build.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 wg main
echo "== tests wg (MXFP4)"
timeout 120 build/wg/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' \
  > $OUT/tests_mxfp4.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mxfp4.log; grep -E "row .* column|output|Expected|Which is" $OUT/tests_mxfp4.log | head -8
for m in 120b:1024,2048,4096,8192 20b:512,1024,2048,8192; do
  echo "== moe ${m%%:*}"
  timeout 90 build/wg/osprey bench --backend cuda --model bench/shapes/${m%%:*} --prefill-lens "" --batches "" \
    --moe-batches ${m#*:} --steps 32 > $OUT/moe_${m%%:*}.txt 2>&1
  grep -E "^\| [0-9]|rror" $OUT/moe_${m%%:*}.txt
done
[ -n "${ALL_TESTS:-}" ] && { echo "== tests wg (all)"; timeout 150 build/wg/tests > $OUT/tests_all.log 2>&1
  echo "rc $?"; gtest_summary $OUT/tests_all.log; }
D=$(synth_dir 20b); prefill_builds $D 1024,2048,8192 60 main wg
date
if [ -n "${TARGETS:-}" ]; then timeout 400 bash bench/targets.sh; else
  D=$(synth_dir 120b); prefill_builds $D 4096,8192 150 main wg; fi
date
