#!/usr/bin/env bash
# Session 40's device calls. Builds in .devcarry/s40 (xz): main (b57f413), fused (branch
# s40-w4a8-fused: the grouped FP8 GEMM decodes the MXFP4 tiles to FP8 in shared memory, no W4A8
# conversion pass), fw32 (fused with W4A8 from 32 rows an expert, osprey only), wg / wgbf / v11
# (session 39's prepared builds, bench/prepared/s39-next-check.sh).
# Carry .devcarry/lib and .devcarry/s40, then
#   bash bench/prepared/s40-check.sh a   # tests, memcheck, MoE tables, 20b prefill (about 8 min)
#   bash bench/prepared/s40-check.sh b   # 120b prefill of 1k, 2k and 8k prompts (about 8 min)
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main fused fw32 v11 wg wgbf; do unpack .devcarry/s40/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
summary() { grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|tests from .* ran" "$1" | head -12; }
prefill() {  # prefill MODEL_DIR LENS TIMEOUT NAMES..
  local d=$1 lens=$2 to=$3 n i=0 f; shift 3
  for n in "$@"; do
    i=$((i + 1)); f=$OUT/prefill_$(basename $d)_${i}_$n.txt
    echo "-- $(basename $d) $n"
    timeout $to build/$n/osprey bench --backend cuda --model $d --weights mxfp4 --prefill-lens $lens --prefill-reps 4 \
      --batches 1 --contexts 2048 --steps 4 > $f 2>&1
    grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror|W4A8|KV" $f | head -12
  done
}
if [ "${1:-a}" = a ]; then
  echo "== tests fused (all)"
  timeout 110 build/fused/tests > $OUT/tests_fused.log 2>&1; summary $OUT/tests_fused.log
  for n in wg v11; do echo "== tests $n"
    timeout 60 build/$n/tests --gtest_filter='*Mxfp4*:CudaFp8Model.*' > $OUT/tests_$n.log 2>&1; summary $OUT/tests_$n.log
  done
  echo "== memcheck fused"
  timeout 70 compute-sanitizer --tool memcheck build/fused/tests --gtest_filter='*OnMxfp4Weights*' > $OUT/memcheck_fused.txt 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_fused.txt | head -4
  echo "== memcheck wg"
  timeout 50 compute-sanitizer --tool memcheck build/wg/tests --gtest_filter='*MoeMxfp4*' > $OUT/memcheck_wg.txt 2>&1
  grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_wg.txt | head -4
  for n in main wg v11; do for m in 120b 20b; do
    b=1024,1536,2048,3072,4096; [ $m = 20b ] && b=256,384,512,768,1000
    echo "-- moe $m $n"
    timeout 40 build/$n/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" --moe-batches $b \
      --steps 32 > $OUT/moe_${m}_${n}.txt 2>&1; grep -E "mxfp4 \||rror" $OUT/moe_${m}_${n}.txt
  done; done
  D=$(synth_dir 20b)
  prefill $D 256,512,768,1024 40 main wg v11 fw32
  prefill $D 1024,2048,8192 40 main fused wg wgbf fused
else
  D=$(synth_dir 120b)
  prefill $D 1024,2048,8192 130 main fused wg wgbf
fi
date
