#!/usr/bin/env bash
# Session 49, for any card (about 6 minutes; then s49-call2.sh, the 120b, about 3): branch
# s49-batch1-fusions against main, two kernel boundaries fewer a decode layer:
#   rope = its first commit: the QKV GEMM with the rope as its epilogue (fp8_gemm_qkv_rope_to_cache)
#          wherever the skinny kernel runs it (decode steps, verify and short prompt chunks);
#   both = the branch: that, and in decode steps of up to 8 rows the MoE combine and next norm as
#          the experts' second GEMM's tail (CombineNormOut: each token by the block that finishes
#          its rows);
#   head = main's engine code (session 48's build).
# The script runs:
#   1. both's tests: the two new kernel tests (bit for bit against the kernels they replace), the
#      rope, skinny GEMM, MXFP4 and model tests (CudaFp8Model.PersistentDecodeEqualsKernelByKernel
#      asks the per-op step, now fused, for the persistent step's bits, which keeps the separate
#      bodies); compute-sanitizer memcheck on the two new tests (the 16-row case of the first),
#      racecheck on the combine tail's (its shared memory is the GEMM's stage, reused);
#   2. 16 greedy tokens after a 2,000-token prompt on the 20b, head then both (the same stream);
#   3. the 20b decode step at batches 1, 8 and 64 (8k context): head rope both head both;
#   LEAN=1 (a short budget, about 4 minutes): no sanitizers, and step 3 at batches 1 and 8 only,
#      head both head both (batch 64 takes neither change);
#   (s49-call2.sh: the 120b decode step at batch 1, head both head both, and where its step goes.)
# Builds, carried as .devcarry/lib, .devcarry/s48/head and .devcarry/s49:
#   .devcarry/s48/head: bench/prepared/s48-h200.sh's header (main's engine code at 9c1c088);
#   build/ at the branch's first commit (7f0f0c9), then at its head:
#   mkdir -p .devcarry/s49/rope && xz -c build/osprey > .devcarry/s49/rope/osprey.xz
#   mkdir -p .devcarry/s49/both && xz -c build/osprey > .devcarry/s49/both/osprey.xz
#   xz -c build/tests/osprey_cuda_tests > .devcarry/s49/both/tests.xz
#   attr: a worktree of main with build/ built there (scripts/setup.sh's data/o200k_base.tiktoken
#   copied in), then in it: python3 bench/variant_build.py bench/prepared/s33-attribution.patch \
#     <this checkout>/.devcarry/s49/attr --no-tests
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s48/head build/head
builds_preamble .devcarry/s49 both rope
F='CudaFp8.QkvRope*:CudaFp8.QkvGemmWithRope*:Awkward/Fp8Tokens.QkvGemmWithRope*:Awkward/Fp8Tokens.QkvRopeToCache*'
F="$F:Awkward/Fp8Tokens.SkinnyGemm*:MoeMxfp4.*:CudaFp8.MoeCombine*:Awkward/Fp8Tokens.MoeCombine*"
timeout 200 build/both/tests --gtest_filter="$F:CudaFp8Model.*" > $OUT/tests_both.log 2>&1
echo "tests rc $?"; gtest_summary $OUT/tests_both.log
sanitize() {  # TOOL FILTER
  timeout 75 compute-sanitizer --tool $1 --print-limit 10 build/both/tests --gtest_filter="$2" > $OUT/$1_both.log 2>&1
  echo "$1 rc $?"; grep -E "^\[  (PASSED|FAILED)|ERROR SUMMARY|RACECHECK SUMMARY" $OUT/$1_both.log | head -4
}
if [ -z "${LEAN:-}" ]; then
  sanitize memcheck 'CudaFp8.QkvGemmWithRopeEpilogueAtTheSixteenRowTile:CudaFp8.QkvRope*:MoeMxfp4.CombineTail*'
  sanitize racecheck 'MoeMxfp4.CombineTail*'
fi
D=$(synth_dir 20b)
greedy_equal $D head both
if [ -z "${LEAN:-}" ]; then decode_builds $D 1,8,64 90 head rope both head both
else decode_builds $D 1,8 60 head both head both; fi
date
