#!/usr/bin/env bash
# The 120b shape on the GPU machine: its synthetic checkpoint (61 GiB) is written to /dev/shm (the
# disk has 64 GiB), then `bench --backend cuda`. Logs to $OUT.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.devcarry/lib:${LD_LIBRARY_PATH:-}
B=$PWD/build/osprey
OUT=${OUT:-/tmp/out}
mkdir -p $OUT
df -h /dev/shm | tail -1
( time $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet ) 2>&1 | grep -E "real|error"
$B bench --backend cuda --model /dev/shm/120b --json $OUT/bench_120b.json ${BENCH_ARGS:-} 2>&1 | tee $OUT/bench_120b.log
# BASE_BIN (as in device_fp8.sh): batch-1 and -8 decode at 8k with an earlier build, same call.
if [ -n "${BASE_BIN:-}" ]; then
  echo "== 120b decode with the baseline binary $BASE_BIN"
  $BASE_BIN bench --backend cuda --model /dev/shm/120b --prefill-lens 1024 --contexts 8192 --batches 1,8 --steps 16 2>&1 | grep "^| 8192" | tee $OUT/base_bin_120b.log
fi
