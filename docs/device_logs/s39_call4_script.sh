#!/usr/bin/env bash
# Session 39, call 4: branch s39-mxfp4-tile-rows (64-row tiles for the MXFP4 tiled expert GEMM up to
# 64 rows an expert on average) against main (982802d): its whole CUDA suite, memcheck on the MXFP4
# tests, the 20b prefill of 256-1,024-token prompts and the 120b's of 1,024, 2,048 and 8,192.
cd "$(dirname "$0")/../.."
mkdir -p build/main build/b build/tests
un() { xz -d -c $1 > $2 && chmod +x $2; }
un .devcarry/m39/osprey.xz build/main/osprey; un .devcarry/s39/b/osprey.xz build/b/osprey
un .devcarry/s39/b/tests.xz build/tests/osprey_cuda_tests; cp build/b/osprey build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
timeout 120 $T > $OUT/tests.log 2>&1
grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|tests from .* ran" $OUT/tests.log | head -20
timeout 90 compute-sanitizer --tool memcheck $T --gtest_filter='*MoeMxfp4*' > $OUT/memcheck.txt 2>&1
grep -E "ERROR SUMMARY|PASSED|FAILED" $OUT/memcheck.txt | head -4
D=$(synth_dir 20b)
for r in 1 2; do for n in main b; do
  echo "-- 20b $n"; timeout 60 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 256,512,768,1024 \
    --prefill-reps 4 --batches 1 --contexts 2048 --steps 4 > $OUT/bench20_${n}_$r.txt 2>&1; grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror" $OUT/bench20_${n}_$r.txt
done; done
D=$(synth_dir 120b)
for n in main b; do
  echo "-- 120b $n"; timeout 140 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 1024,2048,8192 \
    --prefill-reps 4 --batches 1 --contexts 2048 --steps 4 > $OUT/bench120_$n.txt 2>&1; grep -E "^\| [0-9]+ \| [0-9.]+ \| [0-9]+ \||rror|loaded" $OUT/bench120_$n.txt
done
date
