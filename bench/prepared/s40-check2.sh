#!/usr/bin/env bash
# Prepared in session 40, not run (no device came for it): the combined tiled MXFP4 prompt GEMM
# (bench/prepared/s40-tiled-combo.patch, branch s40-tiled-combo: 128-row tiles on wgmma, 64-row
# tiles on mma.sync 1 x 8 as main has them) against main. The builds (after scripts/build.sh):
#   mkdir -p .devcarry/s40/main .devcarry/lib && cp /usr/lib/x86_64-linux-gnu/libcpp-httplib.so.0.11 .devcarry/lib/
#   xz -c build/osprey > .devcarry/s40/main/osprey.xz && xz -c build/tests/osprey_cuda_tests > .devcarry/s40/main/tests.xz
#   python3 bench/variant_build.py bench/prepared/s40-tiled-combo.patch .devcarry/s40b/combo
# Carry .devcarry/lib, .devcarry/s40 and .devcarry/s40b, then (SKIP_PREFILL=1: tests, memcheck and
# the MoE tables only, about 3 min; SKIP_120B=1: without the 120b)
#   bash bench/prepared/s40-check2.sh
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
unpack .devcarry/s40/main build/main
unpack .devcarry/s40b/combo build/combo
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
echo "== tests combo (all)"
timeout 100 build/combo/tests > $OUT/tests_combo.log 2>&1; gtest_summary $OUT/tests_combo.log
echo "== memcheck combo"
timeout 60 compute-sanitizer --tool memcheck build/combo/tests --gtest_filter='*MoeMxfp4*' > $OUT/memcheck_combo.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_combo.txt | head -4
for n in main combo; do for m in 120b 20b; do
  b=1024,1536,2048,3072,4096; [ $m = 20b ] && b=256,384,512,768,1000
  echo "-- moe $m $n"
  timeout 40 build/$n/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" --moe-batches $b \
    --steps 32 > $OUT/moe_${m}_${n}.txt 2>&1; grep -E "mxfp4 \||rror" $OUT/moe_${m}_${n}.txt
done; done
[ -z "${SKIP_PREFILL:-}" ] && { D=$(synth_dir 20b); prefill_builds $D 256,512,768,1024 40 main combo; }
if [ -z "${SKIP_120B:-}${SKIP_PREFILL:-}" ]; then  # SKIP_120B=1: without the 120b (its synthesis and loads take about 4 min)
  D=$(synth_dir 120b)
  prefill_builds $D 1024,2048,3072 120 main combo
fi
date
