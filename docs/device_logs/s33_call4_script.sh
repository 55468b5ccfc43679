#!/usr/bin/env bash
# Session 33, call 4: 20b decode at 8k context in two rounds: main (base), the 4-warp MXFP4 blocks
# alone (warps), and the branch (this: + the merge's loads together and the sort's scan); then the
# 120b at batch 1, base and this (time allowing).
cd "$(dirname "$0")/.." && source tests/cuda/device_env.sh
set +e
export OUT
trap 'cd $OUT && tar czf /tmp/all.tgz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/' EXIT
for b in base warps; do xz -d -k -f .devcarry/$b/osprey.xz && chmod +x .devcarry/$b/osprey; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
date
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for round in 1 2; do
  for b in base warps this; do
    bin=$PWD/.devcarry/$b/osprey; [ $b = this ] && bin=$B
    [ $round = 2 ] && [ $b = warps ] && continue
    echo "-- $b (round $round)"
    timeout 60 $bin bench --backend cuda --model $M/20b --weights mxfp4 --prefill-lens 1024 --batches 1,2,8 --contexts 8192 --steps 16 \
      > $OUT/bench_${b}_$round.log 2>&1; grep -E "^\| [0-9]|rror" $OUT/bench_${b}_$round.log
  done
done
date
rm -rf $M/20b
[ $SECONDS -lt 230 ] || { echo "no time for the 120b"; exit 0; }
timeout 90 $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet || { echo "no 120b"; exit 0; }
date
for b in base this; do
  bin=$PWD/.devcarry/$b/osprey; [ $b = this ] && bin=$B
  echo "-- 120b $b"
  timeout 75 $bin bench --backend cuda --model /dev/shm/120b --weights mxfp4 --prefill-lens 1024 --batches 1 --contexts 8192 --steps 16 \
    >> $OUT/bench_120b_$b.log 2>&1; grep -E "^\| 8192|rror" $OUT/bench_120b_$b.log | tail -1
done
date
