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
