#!/usr/bin/env bash
# Session 42, first device call: the prompt chunks' MXFP4 wgmma path (branch s42-wgmma: weights
# decoded in registers, y^T tiles, m_grouped_mxfp4_gemm_bf16_wgmma_contiguous; long chunks take it
# instead of W4A8). Builds (carry .devcarry/lib and .devcarry/s42): wg (the branch), wgt (wg with the
# tiled kernels' grid swapped, bench/prepared/s42-tiled-grid-swap.patch), main (ccfc13e), the last
# two by bench/variant_build.py.
# - tests of wg (the MXFP4 kernels against the tiled path bit for bit, the model's long chunk) and
#   of wgt's MXFP4 kernels; the whole CUDA suite of wg;
# - the MoE GEMMs of one layer (`bench --moe-batches`): wg's tiled MXFP4 path, its wgmma path and
#   the FP8 GEMM; wgt's tiled path at the tiled kernels' sizes;
# - the 20b prefill, main against wg and wgt.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 wg wgt main
echo "== tests wg (MXFP4, the model's long chunk)"
timeout 120 build/wg/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' > $OUT/tests_mxfp4_wg.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mxfp4_wg.log; grep -E "row .* column|output|Expected|Which is|against the CPU" $OUT/tests_mxfp4_wg.log | head -8
echo "== tests wgt (MXFP4)"
timeout 60 build/wgt/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_mxfp4_wgt.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mxfp4_wgt.log
for bm in wg:120b:1024,2048,4096,8192 wg:20b:512,1024,2048,8192 wgt:120b:1024,2048,4096 wgt:20b:512,1024; do
  b=${bm%%:*}; r=${bm#*:}; m=${r%%:*}
  echo "== moe $b $m"
  timeout 90 build/$b/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" \
    --moe-batches ${r#*:} --steps 32 > $OUT/moe_${b}_$m.txt 2>&1
  grep -E "^\| [0-9]|rror" $OUT/moe_${b}_$m.txt
done
D=$(synth_dir 20b); prefill_builds $D 1024,2048,8192 60 main wg wgt
echo "== tests wg (all)"; timeout 150 build/wg/tests > $OUT/tests_all_wg.log 2>&1; echo "rc $?"; gtest_summary $OUT/tests_all_wg.log
date
