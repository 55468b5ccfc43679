#!/usr/bin/env bash
# Session 45, second device call: branch s45-conv-in-gemm (the grouped FP8 GEMM's spare producer
# warps convert the next experts to FP8 while it runs) against main: its tests, memcheck of the new
# test, and the 20b and 120b 8k prefills, alternating. Carry .devcarry/lib and .devcarry/s45
# (build/main from main 708a220, build/conv from the branch; bench/variant_build.py or a plain
# build, xz).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s45 conv main
echo "== tests conv"
timeout 150 build/conv/osprey_cuda_tests --gtest_filter='MoeMxfp4.*:CudaFp8.Grouped*:CudaFp8Model.Mxfp4*:CudaFp8Model.Expert*' \
  > $OUT/tests_conv.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_conv.log
echo "== memcheck"
timeout 120 compute-sanitizer --tool memcheck build/conv/osprey_cuda_tests \
  --gtest_filter='MoeMxfp4.Fp8ConversionJob*' > $OUT/memcheck_conv.log 2>&1
echo "rc $?"; grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_conv.log | head -5
D=$(synth_dir 20b)
echo "== greedy tokens after a 2,000-token prompt (W4A8 chunk), main then conv: must be equal"
for b in main conv; do
  timeout 60 build/$b/osprey generate --backend cuda --model $D --tokens $(seq -s, 1000 2999) --max-tokens 16 \
    --greedy --ignore-eos 2> $OUT/generate_$b.err | tee $OUT/generate_$b.txt
done
cmp -s $OUT/generate_main.txt $OUT/generate_conv.txt && echo "equal" || echo "DIFFERENT"
prefill_builds $D 8192,32768 100 main conv main conv
D=$(synth_dir 120b)
prefill_builds $D 8192 150 main conv
date
