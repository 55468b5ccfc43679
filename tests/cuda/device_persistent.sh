#!/usr/bin/env bash
# The persistent decode kernel on the GPU machine (issue 16): the CUDA tests (TEST_FILTER, default
# all), then `bench --backend cuda` on a synthetic checkpoint (PRESET 20b, or 120b written to
# /dev/shm) with MXFP4 experts at BATCHES and CONTEXTS, for each decode kernel in KERNELS
# ("persistent" = persistent with 1 block per SM, "per-op", "persistent2" = 2 blocks per SM, the
# default), all in this call, and
# one step's per-SM timeline (batch 1, 8k) drawn by bench/timeline_png.py. Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
if [ -z "${SKIP_TESTS:-}" ]; then
  echo "== tests"
  $T --gtest_filter="${TEST_FILTER:-*}" 2>&1 | tee $OUT/tests.log |
    grep -E "^\[  (PASSED|FAILED)|Failure|Expected|Which is|tests ran|OK \]|rror" | grep -v "OK \]" | head -60
fi
P=${PRESET:-20b}; D=$M/$P; [ "$P" = 120b ] && D=/dev/shm/120b
[ -d $D ] || $B synth --preset $P --seed 1 --out $D --quiet
# KERNELS entries: persistent, persistent2, per-op, or NAME=PATH:KERNEL (another build's osprey,
# carried, with that decode kernel, persistent2 included).
for k in ${KERNELS:-persistent per-op}; do
  bin=$B extra=""
  case $k in
    *=*) bin=${k#*=}; bin=${bin%%:*}; extra="--decode-kernel ${k##*:}"
         [ "${k##*:}" = persistent ] && extra="--decode-kernel persistent --persistent-blocks 1"
         [ "${k##*:}" = persistent2 ] && extra="--decode-kernel persistent --persistent-blocks 2" ;;
    persistent2) extra="--decode-kernel persistent --persistent-blocks 2" ;;
    persistent) extra="--decode-kernel persistent --persistent-blocks 1" ;;
    *) extra="--decode-kernel $k" ;;
  esac
  k=${k%%=*}
  tl=""; [ "$k" = persistent ] && tl="--timeline $OUT/timeline_${P}.json"
  $bin bench --backend cuda --model $D --weights ${WEIGHTS:-mxfp4} --prefill-lens 16 --batches ${BATCHES:-1,2,4,8} \
    --contexts ${CONTEXTS:-8192} --steps ${STEPS:-32} $extra $tl --json $OUT/bench_${P}_$k.json > $OUT/bench_${P}_$k.log 2>&1
  echo "-- $P $k"; grep -E "^\| [0-9]|rror|loaded" $OUT/bench_${P}_$k.log | grep -v "^| 16 |"
done
[ -f $OUT/timeline_${P}.json ] && python3 bench/timeline_png.py $OUT/timeline_${P}.json $OUT/timeline_${P}.png | tee $OUT/timeline_${P}.txt
