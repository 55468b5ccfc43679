#!/usr/bin/env bash
# Session 34, call 1: (a) where a 20b per-op decode step's time goes inside the graph (the
# attribution build, bench/prepared/s33-attribution.patch), batch 1 and 8; (b) main against the
# batch-1 route's warp sort (s33-route-warp-sort.patch), the merge's loads issued together
# (s33-merge-loads.patch) and the dense GEMMs' K-splits by shape alone
# (s34-dense-shape-splits.patch) and the sliding layers' decode attention in one split
# (s34-sliding-one-split.patch), 20b at 8k, batches 1, 2, 8, main first and last; (c) the route
# tests on the warp-sort build.
cd "$(dirname "$0")/../.." && source tests/cuda/device_env.sh
set +e
export OUT
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
V=/tmp/v34; mkdir -p $V
for f in .devcarry/v34/*.xz; do b=$(basename $f .xz); xz -d -c $f > $V/$b && chmod +x $V/$b; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
D=$(synth_dir 20b)
echo "== attribution"
OSPREY_SKIP_LIST="none;qkv;rope;attn;o;up;down;combine;unembed;rope,attn;up,down;qkv,o,up,down,unembed;none" \
  timeout 130 $V/attr bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,8,64 \
  --contexts 8192 --steps 32 > $OUT/attribution.log 2>&1
grep -E "^\| (left out|8192)|rror" $OUT/attribution.log | head -60
date
echo "== A/B"
for b in main route-warp-sort merge-loads shape-splits slide1 skinny127 main; do
  bin=$V/$b; [ $b = main ] && bin=$B
  echo "-- $b"
  timeout 40 $bin bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024 --batches 1,2,8,64 --contexts 8192 --steps 16 \
    >> $OUT/bench_$b.log 2>&1; grep -E "^\| [0-9]|rror" $OUT/bench_$b.log | tail -4
done
date
echo "== route tests"
timeout 40 $V/route-warp-sort-tests --gtest_filter='CudaFp8.MoeRoute*:CudaFp8.MoeSort*:*Persistent*:MoeMxfp4.*' > $OUT/tests_rws.log 2>&1
grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests_rws.log | head
date
