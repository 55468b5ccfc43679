#!/usr/bin/env bash
# Session 33, call 3: the branch's CUDA tests (all) and racecheck on the sort and route tests, then
# 20b decode at 8k context in two rounds: main (base), the 4-warp MXFP4 blocks alone (warps), and
# the branch (this: + the merge's loads together and the sort's scan).
cd "$(dirname "$0")/.." && source tests/cuda/device_env.sh
set +e
export OUT
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
for b in base warps; do xz -d -k -f .devcarry/$b/osprey.xz && chmod +x .devcarry/$b/osprey; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date; echo "== tests (this build)"
timeout 170 $T > $OUT/tests.log 2>&1; grep -E "^\[  (PASSED|FAILED)|Failure|tests ran" $OUT/tests.log | head -20
date; echo "== racecheck, sort and route"
timeout 60 compute-sanitizer --tool racecheck --print-limit 10 $T --gtest_filter='CudaFp8.MoeSort*:CudaFp8.MoeRouteChooses*' > $OUT/racecheck.log 2>&1
grep -E "^\[  (PASSED|FAILED)|RACECHECK SUMMARY|ERROR SUMMARY|Hazard" $OUT/racecheck.log | head
date
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for round in 1 2; do
  for b in base warps this; do
    bin=$PWD/.devcarry/$b/osprey; [ $b = this ] && bin=$B
    [ $round = 2 ] && [ $b = warps ] && continue
    echo "-- $b (round $round)"
    timeout 60 $bin bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens "" --batches 1,2,8 --contexts 8192 --steps 16 \
      > $OUT/bench_${b}_$round.log 2>&1; grep -E "^\| [0-9]|rror" $OUT/bench_${b}_$round.log
  done
done
date
