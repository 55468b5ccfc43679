#!/usr/bin/env bash
# The 120b synthetic checkpoint (written to /dev/shm) under `bench --backend cuda`: --weights mxfp4
# with this build and, with BASE_BIN, another build's osprey (MX_ARGS), then --weights fp8 with this
# build (FP8_ARGS: what fits; SKIP_FP8=1 leaves it out), in this call. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
( time $B synth --preset 120b --seed 1 --out /dev/shm/120b --quiet ) 2>&1 | grep -E "real|error"
run() {  # label binary weights args
  $2 bench --backend cuda --model /dev/shm/120b --weights $3 $4 --json $OUT/bench_120b_$1_$3.json \
    > $OUT/bench_120b_$1_$3.log 2>&1
  echo "-- $1 $3"; grep -E "^\| [0-9]|rror|loaded" $OUT/bench_120b_$1_$3.log
}
MX=${MX_ARGS:---prefill-lens 8192 --prefill-reps 1 --batches 1,8,64,128 --contexts 8192 --steps 16}
run this $B mxfp4 "$MX"
[ -n "${BASE_BIN:-}" ] && run base $BASE_BIN mxfp4 "$MX"
[ -n "${SKIP_FP8:-}" ] || run this $B fp8 "${FP8_ARGS:---prefill-lens 8192 --prefill-reps 1 --batches 1,8,32 --contexts 8192 --steps 16}"
