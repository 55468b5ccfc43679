#!/usr/bin/env bash
# Session 42, second device call: the wgmma MXFP4 path for prompt chunks between the decode paths
# and the long chunks (W4A8), as merged: build mid (branch s42-wgmma) against main (ccfc13e).
# - tests of mid: the MXFP4 kernels and the model tests (CudaFp8Model.*);
# - the MoE GEMMs at the lower crossover (20b 256 and 384 tokens, 120b 1,536);
# - the prefill at the lengths whose experts change path (20b 256-1,024 tokens, 120b 1,024-4,096),
#   main and mid.
# Carry .devcarry/lib and .devcarry/s42 (mid, main). RUN_120B=1: the 120b prefill too (about 4 minutes).
# The builds, if .devcarry is gone: mid is main at the merge of s42-wgmma (build/osprey and
# build/tests/osprey_cuda_tests xz-compressed to .devcarry/s42/mid/osprey.xz and tests.xz); main is
# ccfc13e: `git diff HEAD ccfc13e -- src tests > /tmp/p && python3 bench/variant_build.py /tmp/p .devcarry/s42/main`.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 mid main
echo "== tests mid (MXFP4, the model)"
timeout 150 build/mid/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.*' > $OUT/tests_mid.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mid.log; grep -E "row .* column|output|Expected|Which is|against the CPU" $OUT/tests_mid.log | head -8
for r in 20b:256,384 120b:1536; do
  m=${r%%:*}; echo "== moe $m"
  timeout 60 build/mid/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" \
    --moe-batches ${r#*:} --steps 32 > $OUT/moe_$m.txt 2>&1
  grep -E "^\| [0-9]|rror" $OUT/moe_$m.txt
done
D=$(synth_dir 20b); prefill_builds $D 256,384,512,768,1024 60 main mid
[ -n "${RUN_120B:-}" ] && { D=$(synth_dir 120b); prefill_builds $D 1024,2048,3072,4096 170 main mid; }
date
