#!/usr/bin/env bash
# Session 39, call 3: the MXFP4 tiled expert GEMM (prompt chunks past 24 rows an expert on average)
# with its row tile as a template: main (128 rows), t2 (64 rows always), t1 (32 rows always).
# The MXFP4 and model tests of t1 and t2 (the tiled path's bits must not depend on the tile); the
# MoE GEMM table (`bench --moe-batches`, config only) at the 20b and 120b shapes; the 20b prefill.
cd "$(dirname "$0")/../.."
mkdir -p build/main build/t1 build/t2
un() { xz -d -c $1 > $2 && chmod +x $2; }
un .devcarry/m39/osprey.xz build/main/osprey
for n in t1 t2; do un .devcarry/s39/$n/osprey.xz build/$n/osprey; un .devcarry/s39/$n/tests.xz build/$n/tests; done
cp build/main/osprey build/osprey
source tests/cuda/device_env.sh
set +e
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader; date
for n in t1 t2; do echo "== tests $n"
  timeout 100 build/$n/tests --gtest_filter='*Mxfp4*:CudaFp8Model.*:*MoeRoute*' > $OUT/tests_$n.log 2>&1
  grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|Failure|Expected|tests from .* ran" $OUT/tests_$n.log | head -12
done
for r in 1 2; do for n in main t2 t1; do echo "-- moe 120b $n"
  timeout 60 build/$n/osprey bench --backend cuda --model .devcarry/s39/cfg120 --prefill-lens "" --batches "" \
    --moe-batches 1024,1536,2048,3072,4096 --steps 32 > $OUT/moe120_${n}_$r.txt 2>&1; grep -E "mxfp4|rror" $OUT/moe120_${n}_$r.txt
  echo "-- moe 20b $n"
  timeout 60 build/$n/osprey bench --backend cuda --model .devcarry/s39/cfg20 --prefill-lens "" --batches "" \
    --moe-batches 256,384,512,768,1000 --steps 32 > $OUT/moe20_${n}_$r.txt 2>&1; grep -E "mxfp4|rror" $OUT/moe20_${n}_$r.txt
done; done
grep -E "fp8" $OUT/moe120_main_1.txt $OUT/moe20_main_1.txt
D=$(synth_dir 20b)
for n in main t2 t1; do
  echo "-- 20b $n"; timeout 60 build/$n/osprey bench --backend cuda --model $D --weights mxfp4 --prefill-lens 256,512,768 --prefill-reps 4 \
    --batches "" > $OUT/bench20_$n.txt 2>&1; grep -E "^\| [0-9]+ \||rror" $OUT/bench20_$n.txt
done
date
