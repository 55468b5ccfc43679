#!/usr/bin/env bash
# Session 50, for any card when the budget is short (about 4 minutes): the cold-code probe, the
# branch s49-batch1-fusions' tests, its greedy stream against main's, and the 20b decode step at
# batches 1 and 8 (head both head both; batch 64 takes neither change): s50-call1.sh without the sanitizers and the rope-only
# build. Carry .devcarry/lib, .devcarry/s48, .devcarry/s49, .devcarry/s50.
cd "$(dirname "$0")/../.."
timeout 60 .devcarry/s50/probe_icache_cold_code | tee $OUT/icache_probe.txt
source tests/cuda/device_env.sh
unpack .devcarry/s48/head build/head
builds_preamble .devcarry/s49 both
F='CudaFp8.QkvRope*:CudaFp8.QkvGemmWithRope*:Awkward/Fp8Tokens.QkvGemmWithRope*:Awkward/Fp8Tokens.QkvRopeToCache*'
F="$F:Awkward/Fp8Tokens.SkinnyGemm*:MoeMxfp4.*:CudaFp8.MoeCombine*:Awkward/Fp8Tokens.MoeCombine*"
timeout 200 build/both/tests --gtest_filter="$F:CudaFp8Model.*" > $OUT/tests_both.log 2>&1
echo "tests rc $?"; gtest_summary $OUT/tests_both.log
D=$(synth_dir 20b)
greedy_equal $D head both
decode_builds $D 1,8 60 head both head both
date
