#!/usr/bin/env bash
# Session 39's prepared device calls (not run: the session's device time was spent). Builds in
# .devcarry/s40 (xz): main (main's kernels at f3e29b2: the MXFP4 tiled GEMM's warps 2 x 4), v11 (branch
# s39-tiled-one-decode: warps 1 x 8 at both tile heights, each weight decoded once a tile), v12
# (that branch with 1 x 8 for 64-row tiles only), w32 (main with W4A8 from 32 rows an expert on
# average, kMxfp4LtRowsPerExpert = 32, osprey only), wg (branch s39-mxfp4-wgmma-tiled: the tiled
# GEMM on wgmma, each K block's weights decoded once into shared memory), wgbf (wg with W4A8 off:
# kMxfp4LtRowsPerExpert = 2^20, so every prompt chunk's experts run BF16 on the wgmma tiles, exact).
# Carry .devcarry/lib and .devcarry/s40, then run
#   bash bench/prepared/s39-next-check.sh a   # tests, memcheck, MoE tables, 20b prefill (about 5 min)
#   bash bench/prepared/s39-next-check.sh b   # 120b prefill of 1k, 2k and 8k prompts (about 7-9 min)
# and land wg, v11 or v12 if its tests pass and its MoE table and prefill beat main's (wg's tiled
# sums may differ from the decode path's in the last bits: then its bit-equality test fails while
# the CPU-twin bound holds, and landing it means giving up that batch invariance); lower the W4A8
# threshold only with the fidelity table of the shorter W4A8 chunks (docs/FIDELITY.md).
cd "$(dirname "$0")/../.."
source tests/cuda/device_env.sh
for n in main v11 v12 w32 wg wgbf; do unpack .devcarry/s40/$n build/$n; done
cp build/main/osprey build/osprey
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
prefill() {  # prefill MODEL_DIR LENS TIMEOUT NAMES..
  local d=$1 lens=$2 to=$3 n i=0 f; shift 3
  for n in "$@"; do
    i=$((i + 1)); f=$OUT/prefill_$(basename $d)_${i}_$n.txt
    echo "-- $(basename $d) $n"
    timeout $to build/$n/osprey bench --backend cuda --model $d --weights mxfp4 --prefill-lens $lens --prefill-reps 4 \
      --batches 1 --contexts 2048 --steps 4 > $f 2>&1
    grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror|loaded" $f
  done
}
if [ "${1:-a}" = a ]; then
  echo "== tests main (all)"
  timeout 120 build/main/tests > $OUT/tests_main.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|tests from .* ran" $OUT/tests_main.log | head -12
  for n in wg v11 v12; do echo "== tests $n"
    timeout 100 build/$n/tests --gtest_filter='*Mxfp4*:CudaFp8Model.*' > $OUT/tests_$n.log 2>&1
    grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|tests from .* ran" $OUT/tests_$n.log | head -12
  done
  for n in wg v11; do
    timeout 90 compute-sanitizer --tool memcheck build/$n/tests --gtest_filter='*MoeMxfp4*' > $OUT/memcheck_$n.txt 2>&1
    grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck_$n.txt | head -4
  done
  for r in 1 2; do for n in main wg v11 v12; do for m in 120b 20b; do
    b=1024,1536,2048,3072,4096; [ $m = 20b ] && b=256,384,512,768,1000
    echo "-- moe $m $n"
    timeout 60 build/$n/osprey bench --backend cuda --model bench/shapes/$m --prefill-lens "" --batches "" --moe-batches $b \
      --steps 32 > $OUT/moe_${m}_${n}_$r.txt 2>&1; grep -E "mxfp4 \||rror" $OUT/moe_${m}_${n}_$r.txt
  done; done; done
  D=$(synth_dir 20b)
  prefill $D 256,384,512,768,1024 40 main wg v11 w32 main wg
  prefill $D 2048,4096,8192 40 wg wgbf wg wgbf
else
  D=$(synth_dir 120b)
  prefill $D 1024,2048,8192 120 main wg w32 wgbf
fi
date
