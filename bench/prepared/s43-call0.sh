#!/usr/bin/env bash
# Session 43, the shortest call (about 3 minutes): the branch s43-wgmma-3wg's kernel tests and the
# MoE GEMMs of one layer against main (builds w3n and mid, carried as bench/prepared/s43-call1.sh
# says). Run it when little device time is left; s43-call1.sh runs the rest.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s43/w3n build/w3n
builds_preamble .devcarry/s42 mid
echo "== tests w3n (MXFP4)"
timeout 60 build/w3n/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*' > $OUT/tests_w3n.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_w3n.log; grep -E "row .* column|output|Expected|Which is|tiles of" $OUT/tests_w3n.log | head -8
moe_builds 16 60 mid:20b:256,1024,8192 w3n:20b:256,1024,8192 mid:120b:1024,2048,4096 w3n:120b:1024,2048,4096
date
