#!/usr/bin/env bash
# Where a 20b prefill of an 8k prompt goes: ncu kernel times (serialized) summed by kernel, for
# each --weights in WEIGHTS, the prompt as one chunk (--prefill-chunk 8192, fewer launches to
# profile). Logs to $OUT.
source "$(dirname "$0")/device_env.sh"
[ -d $M/20b ] || $B synth --preset 20b --seed 1 --out $M/20b --quiet
for wt in ${WEIGHTS:-fp8 mxfp4}; do
  ncu --clock-control none --metrics gpu__time_duration.sum --csv $B bench --backend cuda --model $M/20b --weights $wt \
    --prefill-lens 8192 --prefill-reps 1 --prefill-chunk 8192 --batches 1 --contexts 64 --steps 1 2>/dev/null > /tmp/ncu_prefill_$wt.csv
  echo "-- ncu prefill 8k, $wt experts"
  python3 "$(dirname "$0")/ncu_prefill_summary.py" /tmp/ncu_prefill_$wt.csv | tee $OUT/ncu_prefill_$wt.txt
done
