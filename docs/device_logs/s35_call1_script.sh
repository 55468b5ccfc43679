#!/usr/bin/env bash
# Session 35, call 1 (20b synthetic, MXFP4 experts, FP8 dense, BF16 cache, 8k context):
# (a) the attribution inside the graph (bench/prepared/s33-attribution.patch) at batches 1, 8, 64;
# (b) the variants against main, main first and last, batches 1, 2, 8, 64:
#     route-warp-sort (s33), slide1 (s34),
#     skinny127 (s35-dense-skinny-to-127), rows16 (s35-mxfp4-16-row-passes);
# (c) the expert GEMMs alone (--moe-batches) for rows16 against main;
# (d) the MXFP4 tests on the rows16 build, the route tests on the warp-sort build.
cd "$(dirname "$0")/../.." && source tests/cuda/device_env.sh
set +e
export OUT
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
V=/tmp/v34; mkdir -p $V
for f in .devcarry/v34/*.xz; do b=$(basename $f .xz); xz -d -c $f > $V/$b && chmod +x $V/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
D=$(synth_dir 20b)
date
echo "== rows16 tests"
timeout 45 $V/rows16-tests --gtest_filter='MoeMxfp4.*:Awkward/MoeMxfp4.*:*Mxfp4*' > $OUT/tests_rows16.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_rows16.log | head
echo "== moe alone"
for b in main rows16 main rows16; do
  bin=$V/$b; [ $b = main ] && bin=$B
  timeout 30 $bin bench --backend cuda --model $D --prefill-lens "" --batches "" --moe-batches 8,32,48,64 --steps 32 \
    >> $OUT/moe_$b.log 2>&1
  echo "-- $b"; grep -E "^\| [0-9].*mxfp4|rror" $OUT/moe_$b.log | tail -4
done
date
echo "== A/B"
for b in main rows16 skinny127 route-warp-sort slide1 main; do
  bin=$V/$b; [ $b = main ] && bin=$B
  echo "-- $b"
  timeout 40 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,2,8,64 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| [0-9]|rror" $OUT/bench_$b.log | tail -4
done
date
echo "== attribution"
OSPREY_SKIP_LIST="none;qkv;rope;attn;o;up;down;combine;unembed;rope,attn;up,down;qkv,o,up,down,unembed;none" \
  timeout 110 $V/attr bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,8,64 \
  --contexts 8192 --steps 32 > $OUT/attribution.log 2>&1
grep -E "^\| (left out|8192)|rror" $OUT/attribution.log | head -60
date
echo "== route tests"
timeout 30 $V/route-warp-sort-tests --gtest_filter='CudaFp8.MoeRoute*:CudaFp8.MoeSort*:*Persistent*' > $OUT/tests_rws.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_rws.log | head
date
