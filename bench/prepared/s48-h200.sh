#!/usr/bin/env bash
# Session 48, for an H200 (about 7 minutes; no H200 came in session 48): bench/targets.sh on main
# (every speed target of issues 14 and 16; no H200 figures since session 35), then the 120b 8k
# prefill on the W4A8 conversion variants that need the H200's memory for the 120b (one load each,
# about 6 s a load since session 48), main first and last:
#   twostaged = s45-conv-two-ahead.patch + s45-conv-staged.patch (two FP8 expert buffer sets, each
#               conversion two layers ahead, the staged conversion);
#   two       = the two sets alone;  staged = the staged conversion alone (on one set: 2.4% slower
#               than main on the H100, session 48).
# Builds (on the CPU machine, build/ built at main by scripts/build.sh), carried as .devcarry/lib
# and .devcarry/s48:
#   mkdir -p .devcarry/s48/head && xz -c build/osprey > .devcarry/s48/head/osprey.xz
#   xz -c build/tests/osprey_cuda_tests > .devcarry/s48/head/tests.xz
#   S='cuda::mxfp4_experts_to_fp8(M.view(nullptr), nullptr,'; R="${S/mxfp4_experts_to_fp8/mxfp4_experts_to_fp8_staged}"
#   cat bench/prepared/s45-conv-two-ahead.patch bench/prepared/s45-conv-staged.patch > /tmp/twostaged.patch
#   python3 bench/variant_build.py /tmp/twostaged.patch .devcarry/s48/twostaged --no-tests --define model/gpt_oss_cuda_fp8.cu "$S" "$R"
#   python3 bench/variant_build.py bench/prepared/s45-conv-two-ahead.patch .devcarry/s48/two --no-tests
#   python3 bench/variant_build.py bench/prepared/s45-conv-staged.patch .devcarry/s48/staged --no-tests --define model/gpt_oss_cuda_fp8.cu "$S" "$R"
# (session 48 built all four at 9c1c088.)
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s48 head twostaged two staged
timeout 60 build/head/tests --gtest_filter='CudaFp8Model.*:MoeMxfp4.*' > $OUT/tests_head.log 2>&1
echo "tests rc $?"; gtest_summary $OUT/tests_head.log
bash bench/targets.sh
date
mem=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
if [ "$mem" -gt 100000 ]; then prefill_only $(synth_dir 120b) 8192 90 head twostaged two staged head
else prefill_only $(synth_dir 120b) 8192 90 head staged head; fi
date
