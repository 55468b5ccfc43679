#!/usr/bin/env bash
# Session 43, first device call. Builds (carry .devcarry/lib, .devcarry/s42 and .devcarry/s43):
# - mid: main e365b2c (session 42's wgmma MXFP4 path for the mid-size prompt chunks);
# - main: ccfc13e, before it (bench/variant_build.py, as bench/prepared/s42-call2.sh says);
# - w3: branch s43-wgmma-3wg (the wgmma kernel on three warpgroups of 192-row tiles with two
#   fragment sets, one MMA group in flight while the next K block decodes; not run alone: w3L is
#   built from it);
# - w3n: w3 and an expert's last tile of at most 32 or 64 tokens on m64n32 / m64n64 MMAs (the
#   branch's second commit);
# - w3L: w3 with every prompt chunk's experts on the wgmma path
#   (kMxfp4LtRowsPerExpert = 100000: no W4A8).
# Runs: the tests of mid (MXFP4 kernels, model; they passed in session 43's call 3)
# and of w3n (MXFP4 kernels, the model's MXFP4 tests); the MoE GEMMs of one layer, mid / w3n;
# ncu of w3n's kernel at the 20b's 8,192 tokens; the 20b prefill at 256-1,024 tokens (main, mid,
# w3n) and at 2,048 and 8,192 (mid with W4A8, w3L).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s43/w3n build/w3n; unpack .devcarry/s43/w3L build/w3L
builds_preamble .devcarry/s42 mid main
echo "== tests w3n (MXFP4, the model's MXFP4 tests)"
timeout 100 build/w3n/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' > $OUT/tests_w3n.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_w3n.log; grep -E "row .* column|output|Expected|Which is|against the CPU|widths|tiles of" $OUT/tests_w3n.log | head -8
moe_builds 32 90 mid:20b:128,256,512,1024,8192 w3n:20b:128,256,512,1024,8192 mid:120b:768,1024,1536,2048,4096,8192 w3n:120b:768,1024,1536,2048,4096,8192
echo "== tests mid (MXFP4, the model)"
timeout 150 build/mid/tests --gtest_filter='MoeMxfp4.Wgmma*:MoeMxfp4.RowsToWgmma*:CudaFp8Model.Mxfp4*' > $OUT/tests_mid.log 2>&1
echo "rc $?"; gtest_summary $OUT/tests_mid.log; grep -E "row .* column|output|Expected|Which is|against the CPU" $OUT/tests_mid.log | head -8
D=$(synth_dir 20b)
prefill_builds $D 256,512,1024 60 main mid w3n
prefill_builds $D 2048,8192 60 mid w3L
echo "== ncu of w3n's wgmma MXFP4 GEMM (20b shape, 8,192 tokens: one up and one down launch)"
timeout 120 ncu --clock-control none --kernel-name regex:mxfp4_wgmma_yt --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section WarpStateStats \
  --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
  build/w3n/osprey bench --backend cuda --model bench/shapes/20b --prefill-lens "" --batches "" --moe-batches 8192 \
  --steps 2 > $OUT/ncu_w3n_20b_8k.txt 2>&1
echo "rc $?"; grep -E "Duration|Throughput|Issued Warp|No Eligible|Warp Cycles Per Issued|Registers|Stall" $OUT/ncu_w3n_20b_8k.txt | head -30
date
