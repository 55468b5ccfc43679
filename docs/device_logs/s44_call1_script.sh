#!/usr/bin/env bash
# Session 44, the short form of s44-call1.sh (little device time left): the wide kernel's tests and
# the MoE GEMMs of one layer, main (mid) against wide, wide128 and the two diagnostic builds.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 mid
for b in wide wide128 nodec nomma; do unpack .devcarry/s44/$b build/$b; done
echo "== tests wide"
timeout 40 build/wide/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' > $OUT/tests_wide.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_wide.log
moe_builds 16 30 mid:20b:1024,8192 wide:20b:1024,8192 mid:120b:4096,8192 wide:120b:4096,8192 wide128:20b:1024,8192 \
  nodec:20b:8192 nomma:20b:8192
date
