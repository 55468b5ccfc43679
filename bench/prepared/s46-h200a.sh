#!/usr/bin/env bash
# Prepared in session 45 for the next H200 (none came in sessions 36-45): the W4A8 conversion
# questions that need the 120b on an H200, first call (about 6 minutes; s46-h200b.sh is the second).
#   - the staged conversion's tests (bench/prepared/s45-conv-staged.patch: tiles through shared
#     memory by bulk copies, so that two conversion blocks fit beside a full-attention block);
#   - the 120b 8k prefill on main, on `twostaged` (s45-conv-two-ahead.patch, a second set of FP8
#     expert buffers so each conversion starts two layers ahead, plus the staged conversion), and on
#     `noconv` (main with the conversion skipped: wrong outputs; the prefill without the
#     conversion, the most any schedule of it can win).
# Build on the CPU machine, with build/ built at main (scripts/build.sh), each a minute or two:
#   python3 bench/variant_build.py - .devcarry/s46/main --no-tests      (or xz build/osprey there)
#   S='cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,'
#   python3 bench/variant_build.py bench/prepared/s45-conv-two-ahead.patch .devcarry/s46/two --no-tests
#   python3 bench/variant_build.py bench/prepared/s45-conv-staged.patch .devcarry/s46/staged \
#     --define model/gpt_oss_cuda_fp8.cu "$S" "${S/mxfp4_experts_to_fp8/mxfp4_experts_to_fp8_staged}"
#   cat bench/prepared/s45-conv-two-ahead.patch bench/prepared/s45-conv-staged.patch > /tmp/twostaged.patch
#   python3 bench/variant_build.py /tmp/twostaged.patch .devcarry/s46/twostaged --no-tests \
#     --define model/gpt_oss_cuda_fp8.cu "$S" "${S/mxfp4_experts_to_fp8/mxfp4_experts_to_fp8_staged}"
#   python3 bench/variant_build.py - .devcarry/s46/noconv --no-tests --define model/gpt_oss_cuda_fp8.cu "$S" "if (false) $S"
# and run with carry .devcarry/lib and .devcarry/s46.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s46 main twostaged noconv
unpack .devcarry/s46/staged build/staged
echo "== tests staged"
timeout 90 build/staged/tests --gtest_filter='MoeMxfp4.StagedFp8*:MoeMxfp4.Fp8Conv*:CudaFp8Model.Mxfp4*' \
  > $OUT/tests_staged.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_staged.log
D=$(synth_dir 120b)
prefill_only $D 8192 150 main twostaged noconv
date
