#!/usr/bin/env bash
# Prefill A/B on the GPU machine (issue 14): the CUDA tests (TEST_FILTER; SKIP_TESTS=1 skips them),
# then `bench --backend cuda` on the 20b synthetic checkpoint (written first if missing) for each --weights in
# WEIGHTS (default fp8 mxfp4; empty: no bench), this build and, with BASE_BIN, another build's osprey, in this call
# (machines differ by several percent from one call to the next); BASE_LAST=1 runs the base again
# last. BENCH_ARGS overrides the bench's shape. With NCU=W (a --weights value), ncu kernel times of
# one 8k prefill with this build, summed by kernel (ncu_prefill_summary.py); with DETAIL (a kernel
# name regex), ncu's speed-of-light, occupancy and warp-state sections of the first 12 launches
# of those kernels in that prefill. Both with a pool of 2,048 KV blocks: ncu's replays save and
# restore device memory, and with the default pool (108 GB) one pass took minutes. NCU_PRESET
# (default 20b; 120b: the checkpoint in /dev/shm, written first if missing) picks the model of
# both. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
cuda_tests
ARGS=${BENCH_ARGS:---prefill-lens 8192 --batches 1,64 --contexts 8192 --steps 16}
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
run() {  # label binary weights
  $2 bench --backend cuda --model $M/20b --weights $3 $ARGS --json $OUT/bench_$1_$3.json > $OUT/bench_$1_$3.log 2>&1
  echo "-- $1 $3"; grep -E "^\| [0-9]|rror" $OUT/bench_$1_$3.log
}
for wt in ${WEIGHTS-fp8 mxfp4}; do
  run this $B $wt
  [ -n "${BASE_BIN:-}" ] && run base $BASE_BIN $wt
done
if [ -n "${BASE_BIN:-}" ] && [ -n "${BASE_LAST:-}" ]; then
  for wt in ${WEIGHTS-fp8 mxfp4}; do run base_again $BASE_BIN $wt; done
fi
[ -n "${NCU:-}${DETAIL:-}" ] && NM=$(synth_dir ${NCU_PRESET:-20b})
if [ -n "${NCU:-}" ]; then
  ncu --clock-control none --metrics gpu__time_duration.sum --csv $B bench --backend cuda --model $NM --weights $NCU \
    --prefill-lens 8192 --prefill-reps 1 --prefill-chunk 8192 --batches 1 --contexts 64 --steps 1 --kv-blocks 2048 \
    2>/dev/null > /tmp/ncu_prefill.csv
  echo "-- ncu prefill 8k, ${NCU_PRESET:-20b}, $NCU experts"
  python3 "$(dirname "$0")/ncu_prefill_summary.py" /tmp/ncu_prefill.csv | tee $OUT/ncu_prefill_$NCU.txt
fi
if [ -n "${DETAIL:-}" ]; then
  ncu --clock-control none --kernel-name "regex:$DETAIL" --launch-count 12 --section SpeedOfLight --section Occupancy \
    --section LaunchStats --section WarpStateStats --section MemoryWorkloadAnalysis $B bench --backend cuda \
    --model $NM --weights ${NCU:-fp8} --prefill-lens 8192 --prefill-reps 1 --prefill-chunk 8192 --batches 1 \
    --contexts 64 --steps 1 --kv-blocks 2048 > $OUT/ncu_detail.txt 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Block Size|Grid Size|Stall|Warp Cycles Per Issued" $OUT/ncu_detail.txt | head -150
fi
