#!/usr/bin/env bash
# Session 44, call 1: the wgmma MXFP4 prompt GEMM (session 43: the tensor pipe idles 60%, neither
# memory nor issue bound). Builds carried under .devcarry/ (bench/variant_build.py):
# - mid = main (6ae0c7f's build, as session 43's mid);
# - wide = branch s44-wide (128 weight rows x 256 tokens: two warpgroups of m64n256 MMAs, two
#   fragment sets, three stages refilled by the last warp to free one); wideL = wide with
#   kMxfp4LtRowsPerExpert = 100000 (every prompt chunk's experts on it, none on W4A8); wide128 =
#   the same kernel on 128 weight rows x 128 tokens (m64n128, four stages);
# - ring = branch s44-ring (main's kernel; the warpgroups issue their MMAs in turn);
# - nodec = main with the weights not decoded (raw words as fragments: the time without the
#   decode); nomma = main with no wgmma issued (the data path and the decode alone).
# Then ncu's source counters of main's up GEMM (20b shape, 8,192 tokens).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
builds_preamble .devcarry/s42 mid
for b in wide wide128 wideL nodec nomma ring; do unpack .devcarry/s44/$b build/$b; done
for b in wide wide128 ring; do
  echo "== tests $b"
  timeout 60 build/$b/tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:CudaFp8Model.Mxfp4*' > $OUT/tests_$b.log 2>&1
  echo "rc $?"; gtest_summary $OUT/tests_$b.log
done
moe_builds 16 60 mid:20b:1024,8192 wide:20b:1024,8192 wide128:20b:1024,8192 mid:120b:4096,8192 wide:120b:4096,8192
echo "== 20b prefill: mid (W4A8 past 128 rows an expert) against wideL (every chunk on the wide kernel)"
D=$(synth_dir 20b); prefill_builds $D 2048,8192 60 mid wideL
moe_builds 16 60 ring:20b:1024,8192 nodec:20b:1024,8192 nomma:20b:1024,8192
echo "== ncu source counters (mid)"
timeout 150 ncu --clock-control none --kernel-name regex:mxfp4_wgmma_yt --launch-skip 2 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o $OUT/ncu_src_mid \
  build/mid/osprey bench --backend cuda --model bench/shapes/20b --prefill-lens "" --batches "" --moe-batches 8192 \
  --steps 2 > $OUT/ncu_src_mid.log 2>&1
echo "rc $?"
ncu -i $OUT/ncu_src_mid.ncu-rep --page source --csv --print-source sass > $OUT/sass_mid.csv 2>&1; echo "rc $?"
ncu -i $OUT/ncu_src_mid.ncu-rep --page details --print-details all > $OUT/details_mid.txt 2>&1
python3 bench/ncu_sass_hot.py $OUT/sass_mid.csv 30
ls -la $OUT; date
