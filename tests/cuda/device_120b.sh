#!/usr/bin/env bash
# The 120b shape on the GPU machine: its synthetic checkpoint (61 GiB) is written to /dev/shm (the
# disk has 64 GiB), then `bench --backend cuda`. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
df -h /dev/shm | tail -1
( time $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet ) 2>&1 | grep -E "real|error"
$B bench --backend cuda --model /dev/shm/120b --json $OUT/bench_120b.json ${BENCH_ARGS:-} 2>&1 | tee $OUT/bench_120b.log
