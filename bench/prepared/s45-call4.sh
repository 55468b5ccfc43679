#!/usr/bin/env bash
# Session 45, fourth device call: branch s45-conv-two-ahead (a second set of FP8 expert buffers,
# so each layer's W4A8 conversion starts two layers ahead) against main on the 20b (the 120b on an
# 80 GB card keeps one set). Carry .devcarry/lib and .devcarry/s45 (build/main, build/two).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s45 two main
echo "== tests two"
timeout 100 build/two/osprey_cuda_tests --gtest_filter='CudaFp8Model.Mxfp4*:CudaFp8Model.Expert*:CudaFp8Model.AllLogits*' \
  > $OUT/tests_two.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_two.log
D=$(synth_dir 20b)
echo "== greedy tokens after a 2,000-token prompt (W4A8 chunk), main then two: must be equal"
for b in main two; do
  timeout 60 build/$b/osprey generate --backend cuda --model $D --tokens $(seq -s, 1000 2999) --max-tokens 16 \
    --greedy --ignore-eos 2> $OUT/generate_$b.err | tee $OUT/generate_$b.txt
done
cmp -s $OUT/generate_main.txt $OUT/generate_two.txt && echo "equal" || echo "DIFFERENT"
grep -h "layers\? ahead" $OUT/generate_two.err | head -1
prefill_builds $D 2048,8192,32768 100 main two main two main two
date
