#!/usr/bin/env bash
# Session 44, call 1: what holds the wgmma MXFP4 prompt GEMM (session 43: the tensor pipe idles
# 60%, neither memory nor issue bound). Builds carried under .devcarry/ (bench/variant_build.py):
# mid = main (6ae0c7f's build, as session 43's mid); nodec = main with the weights not decoded
# (raw words as fragments: the time without the decode); nomma = main with no wgmma issued (the
# time of the data path and the decode alone); lastarr = branch s44-lastarr (the warp that frees a
# stage last refills it, so no warp waits on an empty barrier); ring = branch s44-ring (the
# warpgroups issue their MMAs in turn, through named barriers); ringla = both (s44-ringla). Then ncu's source counters of
# main's up GEMM (20b shape, 8,192 tokens): the stall samples per SASS instruction.
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 mid
for b in nodec nomma lastarr ring ringla; do unpack .devcarry/s44/$b build/$b; done
for b in lastarr ring ringla; do
  echo "== tests $b"
  timeout 60 build/$b/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' > $OUT/tests_$b.log 2>&1
  echo "rc $?"; gtest_summary $OUT/tests_$b.log
done
moe_builds 16 60 mid:20b:1024,8192 lastarr:20b:1024,8192 nodec:20b:1024,8192 nomma:20b:1024,8192 ring:20b:1024,8192 ringla:20b:1024,8192 mid:120b:4096 lastarr:120b:4096 ring:120b:4096 ringla:120b:4096
echo "== ncu source counters (mid)"
timeout 150 ncu --clock-control none --kernel-name regex:mxfp4_wgmma_yt --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o $OUT/ncu_src_mid \
  build/mid/osprey bench --backend cuda --model bench/shapes/20b --prefill-lens "" --batches "" --moe-batches 8192 \
  --steps 2 > $OUT/ncu_src_mid.log 2>&1
echo "rc $?"
ncu -i $OUT/ncu_src_mid.ncu-rep --page source --csv --print-source sass > $OUT/sass_mid.csv 2>&1; echo "rc $?"
ncu -i $OUT/ncu_src_mid.ncu-rep --page details --print-details all > $OUT/details_mid.txt 2>&1
ncu -i $OUT/ncu_src_mid.ncu-rep --page raw --csv > $OUT/raw_mid.csv 2>&1
ls -la $OUT; date
